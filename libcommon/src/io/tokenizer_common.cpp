// Tokenizer plumbing shared by both kinds: strict UTF-8 decoding (RFC 3629) and
// tokenizer_from_json, which rebuilds a tokenizer from Tokenizer::to_json() output.
#include <cstdio>

#include "rtx/core/error.hpp"
#include "rtx/io/tokenizer.hpp"
#include "tokenizer_internal.hpp"

namespace rtx::io {
namespace detail {

namespace {
// Length of the valid UTF-8 sequence at p[0..n) and its code point; 0 when invalid.
inline int utf8_step(const unsigned char* p, size_t n, uint32_t& cp) {
  const unsigned c = p[0];
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  auto cont = [&](size_t k) { return k < n && (p[k] & 0xC0u) == 0x80u; };
  if (c >= 0xC2 && c <= 0xDF) {
    if (!cont(1)) return 0;
    cp = ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;  // overlong or surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    cp = ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    if (cp < 0x10000 || cp > 0x10FFFF) return 0;  // overlong or beyond Unicode
    return 4;
  }
  return 0;  // continuation byte, 0xC0/0xC1 (overlong) or 0xF5..0xFF
}
}  // namespace

std::vector<CodePoint> decode_utf8(std::string_view text, const std::string& where) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    uint32_t cp = 0;
    const int len = utf8_step(p + i, n - i, cp);
    if (len == 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(p[i]));
      throw Error(ErrorCategory::Input, "invalid UTF-8 at byte " + std::to_string(i) + " (byte " + hex + ")", where,
                  "convert the text to UTF-8 first (e.g. iconv -t UTF-8)");
    }
    out.push_back(CodePoint{cp, static_cast<uint32_t>(i)});
    i += static_cast<size_t>(len);
  }
  return out;
}

size_t find_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const int len = utf8_step(p + i, text.size() - i, cp);
    if (len == 0) return i;
    i += static_cast<size_t>(len);
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string describe_code_point(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  std::string s = buf;
  const bool control = cp < 0x20 || (cp >= 0x7F && cp < 0xA0);
  if (!control) {
    s += " '";
    append_utf8(s, cp);
    s += "'";
  }
  return s;
}

}  // namespace detail

std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j, const std::string& where_in) {
  const std::string where = where_in.empty() ? std::string("tokenizer") : where_in;
  if (!j.is_object() || !j.contains("kind") || !j.at("kind").is_string())
    throw Error(ErrorCategory::Input, "tokenizer document: field 'kind' missing or not a string", where,
                "expected {\"kind\":\"char\"|\"gpt2\", ...} as written by rtx-train prepare");
  const std::string kind = j.at("kind").get<std::string>();
  if (kind == "char") {
    if (!j.contains("chars") || !j.at("chars").is_array())
      throw Error(ErrorCategory::Input, "char tokenizer: field 'chars' missing or not an array", where);
    std::vector<uint32_t> cps;
    const auto& chars = j.at("chars");
    cps.reserve(chars.size());
    for (size_t i = 0; i < chars.size(); ++i) {
      const std::string field = "chars/" + std::to_string(i);
      if (!chars[i].is_string())
        throw Error(ErrorCategory::Input, "char tokenizer: field '" + field + "' is not a string", where);
      const std::string s = chars[i].get<std::string>();
      const auto d = detail::decode_utf8(s, where + ": field '" + field + "'");
      if (d.size() != 1)
        throw Error(ErrorCategory::Input,
                    "char tokenizer: field '" + field + "' must hold exactly one character, got " +
                        std::to_string(d.size()),
                    where);
      cps.push_back(d[0].cp);
    }
    return detail::make_char_tokenizer(std::move(cps), where);
  }
  if (kind == "gpt2") {
    if (!j.contains("encoder") || !j.at("encoder").is_object())
      throw Error(ErrorCategory::Input, "gpt2 tokenizer: field 'encoder' missing or not an object", where);
    if (!j.contains("merges") || !j.at("merges").is_array())
      throw Error(ErrorCategory::Input, "gpt2 tokenizer: field 'merges' missing or not an array", where);
    std::vector<std::string> merges;
    const auto& m = j.at("merges");
    merges.reserve(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      if (!m[i].is_string())
        throw Error(ErrorCategory::Input, "gpt2 tokenizer: field 'merges/" + std::to_string(i) + "' is not a string",
                    where);
      merges.push_back(m[i].get<std::string>());
    }
    return detail::make_gpt2_tokenizer(j.at("encoder"), merges, where + ": field 'encoder'",
                                       where + ": field 'merges'", 0);
  }
  throw Error(ErrorCategory::Input, "unknown tokenizer kind '" + kind + "'", where, "expected \"char\" or \"gpt2\"");
}

}  // namespace rtx::io
