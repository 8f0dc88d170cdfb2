// Versioned JSON artifacts ("schema": "rtx.<kind>.v<N>"): read with schema check, write
// atomically, and a small declarative validator that names the first bad field by JSON pointer.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rtx::io {

/// "rtx.<kind>.v<version>", e.g. schema_id("bench", 1) == "rtx.bench.v1".
std::string schema_id(const std::string& kind, int version);

/// The parts of a schema id.
struct SchemaId {
  std::string kind;  ///< "bench"
  int version = 0;   ///< 1
};
/// Parse "rtx.<kind>.v<N>" (kind: [a-z0-9_-]+, N >= 1); nullopt if malformed.
std::optional<SchemaId> parse_schema_id(const std::string& text);

/// Parse JSON text. On a syntax error throws rtx::Error(Input) naming `source` (file name or
/// "<stdin>"), line, column and byte offset: "pack.json: invalid JSON at line 3, column 7
/// (byte 41): ...".
nlohmann::json parse_json(const std::string& text, const std::string& source);

/// Check doc["schema"] is "rtx.<kind>.v<N>" with N in `supported_versions`; returns N.
/// Throws rtx::Error(Input) naming `source` and field 'schema': missing / not a string /
/// "<file>: field 'schema': expected rtx.bench.v1, got rtx.bench.v7 (written by a newer rtx?)".
int check_artifact_schema(const nlohmann::json& doc, const std::string& source, const std::string& kind,
                          const std::vector<int>& supported_versions);

/// Read `path_or_dash` ("-" = stdin), parse it and check its schema (check_artifact_schema).
/// Errors: rtx::Error(Input) for missing file, invalid JSON, wrong/missing schema.
nlohmann::json read_artifact(const std::string& path_or_dash, const std::string& kind,
                             const std::vector<int>& supported_versions);

/// Serialize `doc` (indented 2, trailing newline) to stdout for "-", else atomically to the
/// file (atomic_write_file). Does not add or check "schema": the caller sets it.
void write_artifact(const std::string& path_or_dash, const nlohmann::json& doc);

/// A float for a JSON document: the double nearest to the shortest decimal that reads back as
/// the same float (1e-3f -> 0.001, not 0.0010000000474974513, which is what widening the float
/// to double prints). Parsing the output and narrowing to float gives `f` back bit for bit.
/// Non-finite values are returned widened (the JSON writer turns them into null).
double json_float(float f);

/// JSON value types the validator checks. Integer: a number with a zero fractional part
/// (json_is_integer); Number: any number; Any: present with any type (presence check only).
enum class JsonType { Null, Boolean, Integer, Number, String, Array, Object, Any };

/// JSON Schema's "integer" (draft 6 and later; 2020-12 Validation section 6.1.1): any number
/// whose fractional part is zero, so 1.0 is an integer and 1.5 is not. The one type rule of the
/// artifact validator and the MCP argument checker.
bool json_is_integer(const nlohmann::json& v) noexcept;
/// Whether `v` is of type `t` (JSON Schema's "type" keyword; Integer as json_is_integer, Any: true).
bool json_type_matches(const nlohmann::json& v, JsonType t) noexcept;
/// The JsonType a JSON Schema type name names ("null", "boolean", "integer", "number",
/// "string", "array", "object"); nullopt for any other name ("any" included).
std::optional<JsonType> json_schema_type(std::string_view name) noexcept;

/// "null", "boolean", "integer", "number", "string", "array", "object", "any".
const char* json_type_name(JsonType t) noexcept;
/// Type name of a value, same vocabulary ("integer" for integers, "number" for floats).
const char* json_type_name(const nlohmann::json& v) noexcept;

/// One validator rule: the value at JSON pointer `pointer` (RFC 6901) must have `type`.
/// A `*` segment means every element of an array (or every member of an object) there, so
/// "/cases/*/shape" checks each case in order. An absent optional field passes; an absent
/// parent of a required field fails at the first missing level.
struct FieldRule {
  std::string pointer;  ///< "/cases/*/shape"
  JsonType type;
  bool required = true;
};

/// Check one rule. Throws rtx::Error(Input) for the first failing concrete pointer:
/// "pack.json: field '/cases/2/shape': expected object, got string" or
/// "pack.json: field '/cases/2/shape': missing (expected object)".
/// `source` names the document (file name, "<stdin>"). A malformed pointer (not starting
/// with '/') throws rtx::Error(Internal).
void require(const nlohmann::json& doc, const std::string& source, const std::string& pointer,
             JsonType type, bool required = true);

/// Check `rules` in order; stops at the first failure (see require()).
void validate(const nlohmann::json& doc, const std::string& source, const std::vector<FieldRule>& rules);

}  // namespace rtx::io
