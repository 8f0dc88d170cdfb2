// Artifact tests: schema-id parsing, JSON parse errors with line/column, schema checks that
// name the field, write/read round trip, and the validator naming the first bad pointer.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/atomic_file.hpp"
#include "test_util.hpp"

using rtx::Error;
using rtx::ErrorCategory;
using nlohmann::json;
using namespace rtx::io;

namespace {
// The full message of the rtx::Error `f` throws (fails the test if none / other category).
template <class F>
std::string error_text(F&& f, ErrorCategory cat = ErrorCategory::Input) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.category() == cat);
    return e.what();
  }
  FAIL("expected rtx::Error");
  return {};
}
}  // namespace

TEST_CASE("schema ids format and parse", "[cpu]") {
  CHECK(schema_id("bench", 1) == "rtx.bench.v1");
  CHECK(schema_id("doctor", 12) == "rtx.doctor.v12");
  auto id = parse_schema_id("rtx.profile.v3");
  REQUIRE(id);
  CHECK(id->kind == "profile");
  CHECK(id->version == 3);
  CHECK(parse_schema_id("rtx.my_kind-2.v10")->kind == "my_kind-2");
  for (const char* bad : {"", "rtx.", "rtx.bench", "rtx.bench.v", "rtx.bench.v0", "rtx.bench.v01", "rtx.bench.vx",
                          "xyz.bench.v1", "rtx..v1", "rtx.Bench.v1", "rtx.bench.v1 ", "rtx.bench.v9999999"})
    CHECK_FALSE(parse_schema_id(bad));
}

TEST_CASE("parse_json names source, line, column and byte", "[cpu]") {
  CHECK(parse_json("{\"a\": [1, 2]}", "x.json")["a"][1] == 2);
  const std::string text = "{\n  \"a\": 1,\n  \"b\": ]\n}";
  const std::string msg = error_text([&] { parse_json(text, "pack.json"); });
  CHECK(msg.rfind("pack.json: invalid JSON at line 3, column 8 (byte 20): ", 0) == 0);
  const std::string msg2 = error_text([&] { parse_json("", "<stdin>"); });
  CHECK(msg2.rfind("<stdin>: invalid JSON at line 1, column 1", 0) == 0);
  const std::string msg3 = error_text([&] { parse_json("{\"a\": 1}\nx", "f.json"); });
  CHECK(msg3.rfind("f.json: invalid JSON at line 2, column 1", 0) == 0);
}

TEST_CASE("read_artifact checks the schema field", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  auto put = [&](const std::string& name, const std::string& text) {
    atomic_write_file(dir + "/" + name, text);
    return dir + "/" + name;
  };
  const std::string ok = put("ok.json", R"({"schema": "rtx.bench.v1", "cases": []})");
  json doc = read_artifact(ok, "bench", {1});
  CHECK(doc["cases"].is_array());
  CHECK(check_artifact_schema(doc, ok, "bench", {1, 2}) == 1);

  const std::string v7 = put("v7.json", R"({"schema": "rtx.bench.v7"})");
  CHECK(error_text([&] { read_artifact(v7, "bench", {1}); }) ==
        v7 + ": field 'schema': expected rtx.bench.v1, got rtx.bench.v7 (written by a newer rtx?)");
  CHECK(error_text([&] { read_artifact(v7, "bench", {8, 9}); }) ==
        v7 + ": field 'schema': expected rtx.bench.v8 or rtx.bench.v9, got rtx.bench.v7 "
             "(written by an older rtx; no longer supported)");
  const std::string other = put("other.json", R"({"schema": "rtx.profile.v1"})");
  CHECK(error_text([&] { read_artifact(other, "bench", {1}); }) ==
        other + ": field 'schema': expected rtx.bench.v1, got rtx.profile.v1 (a profile artifact, not a bench artifact)");
  const std::string none = put("none.json", R"({"cases": []})");
  CHECK(error_text([&] { read_artifact(none, "bench", {1}); })
            .rfind(none + ": field 'schema': missing (expected \"rtx.bench.v1\")", 0) == 0);
  const std::string num = put("num.json", R"({"schema": 1})");
  CHECK(error_text([&] { read_artifact(num, "bench", {1}); }) == num + ": field 'schema': expected string, got integer");
  const std::string arr = put("arr.json", "[1, 2]");
  CHECK(error_text([&] { read_artifact(arr, "bench", {1}); }).find("field 'schema': missing") != std::string::npos);
  const std::string junk = put("junk.json", R"({"schema": "bench-1"})");
  CHECK(error_text([&] { read_artifact(junk, "bench", {1}); }).find("got bench-1") != std::string::npos);
  const std::string broken = put("broken.json", "{\"schema\": ");
  CHECK(error_text([&] { read_artifact(broken, "bench", {1}); }).rfind(broken + ": invalid JSON at line 1", 0) == 0);
  CHECK(error_text([&] { read_artifact(dir + "/missing.json", "bench", {1}); }).find(dir + "/missing.json") !=
        std::string::npos);
}

TEST_CASE("write_artifact then read_artifact round-trips", "[cpu]") {
  const std::string path = rtx::test::temp_dir() + "/a.json";
  json doc = {{"schema", schema_id("profile", 2)}, {"x", 1.5}, {"name", "matmul"}, {"list", {1, 2, 3}}};
  write_artifact(path, doc);
  const std::string text = read_text_file(path);
  CHECK(text.back() == '\n');
  CHECK(read_artifact(path, "profile", {1, 2}) == doc);
}

TEST_CASE("validator reports the first bad field by JSON pointer", "[cpu]") {
  const json pack = json::parse(R"({
    "schema": "rtx.bench.v1",
    "name": "smoke",
    "repeat": 3,
    "tolerance": 0.5,
    "cases": [
      {"op": "matmul", "shape": {"M": 1}, "dtype": "f32"},
      {"op": "matmul", "shape": {"M": 7}},
      {"op": "softmax", "shape": "127x127", "dtype": "f32"}
    ],
    "a/b": {"~k": true}
  })");
  // Passing rules, including optional absent fields, escaped keys and integer as number.
  validate(pack, "pack.json",
           {{"/schema", JsonType::String},
            {"/name", JsonType::String},
            {"/repeat", JsonType::Integer},
            {"/repeat", JsonType::Number},
            {"/tolerance", JsonType::Number},
            {"/cases", JsonType::Array},
            {"/cases/*/op", JsonType::String},
            {"/cases/0/shape/M", JsonType::Integer},
            {"/cases/*/warmup", JsonType::Integer, false},
            {"/missing/deeper", JsonType::Object, false},
            {"/a~1b/~0k", JsonType::Boolean},
            {"/cases/*", JsonType::Object},
            {"", JsonType::Object}});

  CHECK(error_text([&] { require(pack, "pack.json", "/cases/*/shape", JsonType::Object); }) ==
        "pack.json: field '/cases/2/shape': expected object, got string");
  // First failing rule in order wins, even though a later rule fails too.
  CHECK(error_text([&] {
          validate(pack, "pack.json",
                   {{"/name", JsonType::String}, {"/cases/*/dtype", JsonType::String}, {"/cases/*/shape", JsonType::Object}});
        }) == "pack.json: field '/cases/1/dtype': missing (expected string)");
  CHECK(error_text([&] { require(pack, "p", "/tolerance", JsonType::Integer); }) ==
        "p: field '/tolerance': expected integer, got number");
  CHECK(error_text([&] { require(pack, "p", "/cases/3/op", JsonType::String); }) ==
        "p: field '/cases/3': missing (needed for '/cases/3/op')");
  CHECK(error_text([&] { require(pack, "p", "/nope/x", JsonType::String); }) ==
        "p: field '/nope': missing (needed for '/nope/x')");
  CHECK(error_text([&] { require(pack, "p", "/name/x", JsonType::String, false); }) ==
        "p: field '/name': expected object or array, got string");
  CHECK(error_text([&] { require(pack, "p", "/name/*", JsonType::String); }) ==
        "p: field '/name': expected array or object, got string");
  CHECK(error_text([&] { require(pack, "p", "/cases/x", JsonType::String); }) ==
        "p: field '/cases': expected object, got array");
  CHECK(error_text([&] { require(pack, "p", "", JsonType::Array); }) == "p: field '/': expected array, got object");
  CHECK_NOTHROW(require(json::parse("[null]"), "p", "/0", JsonType::Any));
  CHECK_NOTHROW(require(json::parse("[null]"), "p", "/0", JsonType::Null));
  CHECK(error_text([&] { require(json::parse("[null]"), "p", "/1", JsonType::Any); }) ==
        "p: field '/1': missing (expected any)");
  CHECK(error_text([&] { require(pack, "p", "cases", JsonType::Array); }, ErrorCategory::Internal)
            .find("malformed JSON pointer") != std::string::npos);
  CHECK(std::string(json_type_name(json(nullptr))) == "null");
  CHECK(std::string(json_type_name(json(true))) == "boolean");
  CHECK(std::string(json_type_name(json(3u))) == "integer");
  CHECK(std::string(json_type_name(json(-3))) == "integer");
  CHECK(std::string(json_type_name(json(3.0))) == "number");
}

TEST_CASE("JSON Schema integers: a number with a zero fractional part (draft 6+), in the validator too", "[cpu]") {
  // JSON-Schema-Test-Suite draft2020-12/type.json "integer type matches integers": 1 and 1.0
  // are integers; 1.1, "foo", "1", {}, [], true, null are not. 1e2 is 100.0.
  for (const char* text : {"1", "1.0", "-0.0", "1e2", "-9007199254740993", "18446744073709551615"}) {
    INFO(text);
    CHECK(json_is_integer(json::parse(text)));
    CHECK(json_type_matches(json::parse(text), JsonType::Integer));
    CHECK(json_type_matches(json::parse(text), JsonType::Number));
  }
  for (const char* text : {"1.1", "-0.5", "1e-2", "\"foo\"", "\"1\"", "{}", "[]", "true", "null"}) {
    INFO(text);
    CHECK_FALSE(json_is_integer(json::parse(text)));
  }
  CHECK(json_schema_type("integer") == JsonType::Integer);
  CHECK(json_schema_type("object") == JsonType::Object);
  CHECK_FALSE(json_schema_type("any"));
  CHECK_FALSE(json_schema_type("int"));
  const json doc = json::parse(R"({"n": 3.0, "x": 2.5})");
  CHECK_NOTHROW(require(doc, "d", "/n", JsonType::Integer));
  CHECK(error_text([&] { require(doc, "d", "/x", JsonType::Integer); }) == "d: field '/x': expected integer, got number");
}

TEST_CASE("json_float writes a float as its shortest round-trip decimal") {
  // Expected texts: the shortest decimals that read back as each binary32 value (as numpy's
  // float32 repr prints them); a widened float prints as e.g. 0.0010000000474974513.
  const std::vector<std::pair<float, std::string>> cases = {
      {1e-3f, "0.001"},          {1e-4f, "0.0001"},       {0.9f, "0.9"},
      {0.95f, "0.95"},           {0.999f, "0.999"},       {1e-8f, "1e-08"},
      {25.0f, "25.0"},           {0.1f, "0.1"},           {-2.5f, "-2.5"},
      {0.0f, "0.0"},             {3.4028235e38f, "3.4028235e+38"},
      {1.4e-45f, "1e-45"},       {16777217.0f, "16777216.0"}, {0.3333333432674408f, "0.33333334"}};
  for (const auto& [f, text] : cases) {
    INFO(text);
    CHECK(json(rtx::io::json_float(f)).dump() == text);
    CHECK(json::parse(json(rtx::io::json_float(f)).dump()).get<float>() == f);
  }
  CHECK(json(rtx::io::json_float(std::numeric_limits<float>::infinity())).dump() == "null");
  CHECK(json(rtx::io::json_float(std::nanf(""))).dump() == "null");
  // Every float read back bit for bit: a sweep of bit patterns across all exponents.
  for (uint32_t bits = 0; bits < 0x7f800000u; bits += 0x00012345u) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    const float back = json::parse(json(rtx::io::json_float(f)).dump()).get<float>();
    uint32_t got;
    std::memcpy(&got, &back, sizeof got);
    REQUIRE(got == bits);
  }
}
