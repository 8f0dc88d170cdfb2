// Versioned JSON artifacts: parse with line/column errors, schema-id check, atomic write,
// and the JSON-pointer field validator.
#include "rtx/io/artifact.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"

namespace rtx::io {

using nlohmann::json;

std::string schema_id(const std::string& kind, int version) { return "rtx." + kind + ".v" + std::to_string(version); }

std::optional<SchemaId> parse_schema_id(const std::string& text) {
  if (text.rfind("rtx.", 0) != 0) return std::nullopt;
  const auto dot = text.rfind(".v");
  if (dot == std::string::npos || dot <= 4) return std::nullopt;
  SchemaId id;
  id.kind = text.substr(4, dot - 4);
  for (char ch : id.kind)
    if (!(std::islower(static_cast<unsigned char>(ch)) || std::isdigit(static_cast<unsigned char>(ch)) || ch == '_' ||
          ch == '-'))
      return std::nullopt;
  const std::string num = text.substr(dot + 2);
  if (num.empty() || num.size() > 6 || num[0] == '0') return std::nullopt;
  for (char ch : num)
    if (!std::isdigit(static_cast<unsigned char>(ch))) return std::nullopt;
  id.version = std::stoi(num);
  return id;
}

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based: the position of the offending character.
    const size_t byte = std::min(e.byte, text.size() + 1);
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    // nlohmann's text: "[json.exception.parse_error.101] parse error at line 1, column 2: <detail>".
    std::string detail = e.what();
    const auto colpos = detail.find("column ");
    const auto sep = colpos == std::string::npos ? detail.find("] ") : detail.find(": ", colpos);
    if (sep != std::string::npos) detail = detail.substr(sep + 2);
    throw Error(ErrorCategory::Input,
                "invalid JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + " (byte " +
                    std::to_string(byte) + "): " + detail,
                source);
  } catch (const json::exception& e) {  // out_of_range: a number past double's range (1e400)
    std::string detail = e.what();
    const auto sep = detail.find("] ");
    if (sep != std::string::npos) detail = detail.substr(sep + 2);
    throw Error(ErrorCategory::Input, "invalid JSON: " + detail, source);
  }
}

static std::string expected_list(const std::string& kind, const std::vector<int>& versions) {
  std::string s;
  for (size_t i = 0; i < versions.size(); ++i) {
    if (i) s += (i + 1 == versions.size()) ? " or " : ", ";
    s += schema_id(kind, versions[i]);
  }
  return s;
}

int check_artifact_schema(const json& doc, const std::string& source, const std::string& kind,
                          const std::vector<int>& supported_versions) {
  RTX_CHECK(!supported_versions.empty(), "check_artifact_schema needs at least one supported version");
  const std::string expected = expected_list(kind, supported_versions);
  if (!doc.is_object())
    throw Error(ErrorCategory::Input,
                std::string("field 'schema': missing (the document is a ") + json_type_name(doc) +
                    ", expected an object with \"schema\": \"" + expected + "\")",
                source);
  const auto it = doc.find("schema");
  if (it == doc.end())
    throw Error(ErrorCategory::Input, "field 'schema': missing (expected \"" + expected + "\")", source,
                "is this an rtx " + kind + " artifact?");
  if (!it->is_string())
    throw Error(ErrorCategory::Input, std::string("field 'schema': expected string, got ") + json_type_name(*it),
                source);
  const std::string got = it->get<std::string>();
  const auto id = parse_schema_id(got);
  const std::string head = "field 'schema': expected " + expected + ", got " + got;
  if (!id) throw Error(ErrorCategory::Input, head, source, "not an rtx artifact schema id");
  if (id->kind != kind)
    throw Error(ErrorCategory::Input, head, source, "a " + id->kind + " artifact, not a " + kind + " artifact");
  if (std::find(supported_versions.begin(), supported_versions.end(), id->version) == supported_versions.end()) {
    const int newest = *std::max_element(supported_versions.begin(), supported_versions.end());
    throw Error(ErrorCategory::Input, head, source,
                id->version > newest ? "written by a newer rtx?" : "written by an older rtx; no longer supported");
  }
  return id->version;
}

json read_artifact(const std::string& path_or_dash, const std::string& kind, const std::vector<int>& supported_versions) {
  const std::string source = path_or_dash == "-" ? "<stdin>" : path_or_dash;
  json doc = parse_json(read_text_file(path_or_dash), source);
  check_artifact_schema(doc, source, kind, supported_versions);
  return doc;
}

void write_artifact(const std::string& path_or_dash, const json& doc) {
  write_text_output(path_or_dash, doc.dump(2) + "\n");
}

double json_float(float f) {
  if (!std::isfinite(f)) return f;
  // 9 significant digits always round-trip a float (IEEE 754 binary32: FLT_DECIMAL_DIG).
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(f));
    const double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == f) return d;
  }
  return f;
}

// ---- validator ----------------------------------------------------------------------------

const char* json_type_name(JsonType t) noexcept {
  switch (t) {
    case JsonType::Null: return "null";
    case JsonType::Boolean: return "boolean";
    case JsonType::Integer: return "integer";
    case JsonType::Number: return "number";
    case JsonType::String: return "string";
    case JsonType::Array: return "array";
    case JsonType::Object: return "object";
    case JsonType::Any: return "any";
  }
  return "any";
}

const char* json_type_name(const json& v) noexcept {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "discarded";
  }
  return "unknown";
}

bool json_is_integer(const json& v) noexcept {
  if (v.is_number_integer()) return true;  // signed or unsigned
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::trunc(d) == d;
}

bool json_type_matches(const json& v, JsonType t) noexcept {
  switch (t) {
    case JsonType::Null: return v.is_null();
    case JsonType::Boolean: return v.is_boolean();
    case JsonType::Integer: return json_is_integer(v);
    case JsonType::Number: return v.is_number();
    case JsonType::String: return v.is_string();
    case JsonType::Array: return v.is_array();
    case JsonType::Object: return v.is_object();
    case JsonType::Any: return true;
  }
  return false;
}

std::optional<JsonType> json_schema_type(std::string_view name) noexcept {
  for (JsonType t : {JsonType::Null, JsonType::Boolean, JsonType::Integer, JsonType::Number, JsonType::String,
                     JsonType::Array, JsonType::Object})
    if (name == json_type_name(t)) return t;
  return std::nullopt;
}

namespace {

// RFC 6901: "~1" -> "/", "~0" -> "~".
std::string unescape_token(const std::string& t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '~' && i + 1 < t.size() && (t[i + 1] == '0' || t[i + 1] == '1')) {
      out += t[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += t[i];
    }
  }
  return out;
}

std::string escape_token(const std::string& t) {
  std::string out;
  for (char ch : t) {
    if (ch == '~') out += "~0";
    else if (ch == '/') out += "~1";
    else out += ch;
  }
  return out;
}

struct Walk {
  const std::string& source;
  const std::string& pattern;
  const std::vector<std::string>& tokens;  // raw (escaped) tokens
  JsonType type;
  bool required;

  [[noreturn]] void fail(const std::string& at, const std::string& what) const {
    throw Error(ErrorCategory::Input, "field '" + at + "': " + what, source);
  }

  void visit(const json& node, size_t i, const std::string& at) const {
    if (i == tokens.size()) {
      if (!json_type_matches(node, type))
        fail(at.empty() ? "/" : at, std::string("expected ") + json_type_name(type) + ", got " + json_type_name(node));
      return;
    }
    const std::string& raw = tokens[i];
    if (raw == "*") {
      if (node.is_array()) {
        for (size_t k = 0; k < node.size(); ++k) visit(node[k], i + 1, at + "/" + std::to_string(k));
      } else if (node.is_object()) {
        for (auto it = node.begin(); it != node.end(); ++it) visit(it.value(), i + 1, at + "/" + escape_token(it.key()));
      } else {
        fail(at.empty() ? "/" : at, std::string("expected array or object, got ") + json_type_name(node));
      }
      return;
    }
    const std::string key = unescape_token(raw);
    const std::string here = at + "/" + raw;
    const bool last = i + 1 == tokens.size();
    const json* child = nullptr;
    if (node.is_object()) {
      const auto it = node.find(key);
      if (it != node.end()) child = &*it;
    } else if (node.is_array()) {
      const bool index = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                         (key.size() == 1 || key[0] != '0') && key.size() < 10;
      if (!index) fail(at.empty() ? "/" : at, "expected object, got array");
      const size_t k = std::stoul(key);
      if (k < node.size()) child = &node[k];
    } else {
      fail(at.empty() ? "/" : at, std::string("expected object or array, got ") + json_type_name(node));
    }
    if (!child) {
      if (!required) return;
      if (last) fail(here, std::string("missing (expected ") + json_type_name(type) + ")");
      fail(here, "missing (needed for '" + pattern + "')");
    }
    visit(*child, i + 1, here);
  }
};

}  // namespace

void require(const json& doc, const std::string& source, const std::string& pointer, JsonType type, bool required) {
  if (!pointer.empty() && pointer[0] != '/')
    throw_internal("malformed JSON pointer '" + pointer + "' (must be empty or start with '/')");
  std::vector<std::string> tokens;
  if (!pointer.empty()) {
    size_t start = 1;
    for (;;) {
      const auto slash = pointer.find('/', start);
      tokens.push_back(pointer.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
  }
  Walk{source, pointer, tokens, type, required}.visit(doc, 0, "");
}

void validate(const json& doc, const std::string& source, const std::vector<FieldRule>& rules) {
  for (const auto& r : rules) require(doc, source, r.pointer, r.type, r.required);
}

}  // namespace rtx::io
