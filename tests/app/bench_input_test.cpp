// rtx-bench against bad input (QA findings): shapes the op cannot take are skipped (or,
// with strict, Input errors naming pack/case/field), integers beyond int64, wrong types,
// names with control characters, runner option ranges, --seed and --filter limits, warm-up
// bounded by time, inconsistent artifacts, unreadable packs, markdown escaping.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <limits>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"

using namespace rtx;
using namespace rtx::app::bench;
using nlohmann::json;

kernels::Registry synth_registry();  // bench_synth.cpp
extern long g_synth_runs;           // bench_synth.cpp

namespace {

json pack_with(json cases) { return {{"schema", "rtx.benchpack.v1"}, {"name", "t"}, {"cases", cases}}; }

json spin(const std::string& name, json shape = {{"US", 1}, {"NOISE", 1}}) {
  return {{"name", name}, {"op", "synth_spin"}, {"shape", shape}};
}

/// The Error `f` throws (category and what()); fails the test when none is thrown.
template <class F>
std::pair<ErrorCategory, std::string> error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.category(), e.what()};
  }
  FAIL("expected an rtx::Error");
  return {ErrorCategory::Internal, ""};
}

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("shapes an op cannot take are skipped with the reason, or errors with strict", "[cpu]") {
  const auto reg = synth_registry();
  ExpandOptions o;
  o.max_bytes = 1e6;  // synth_spin's working set is 1e3 * US bytes
  const json cases = {spin("good"),
                      spin("zero", {{"US", 0}, {"NOISE", 1}}),
                      spin("missing", {{"US", 1}}),
                      spin("unknown", {{"US", 1}, {"NOISE", 1}, {"WIDTH", 3}}),
                      spin("huge", {{"US", 4294967296LL}, {"NOISE", 1}}),
                      spin("big", {{"US", 2000}, {"NOISE", 1}}),
                      spin("strzero", "0x1")};
  const Pack p = parse_pack(pack_with(cases), "p.json");
  const auto x = expand_pack(p, reg, o);
  REQUIRE(x.size() == 7);
  CHECK(x[0].skip_reason.empty());
  CHECK(x[1].skip_reason.find("dim US = 0 must be >= 1") != std::string::npos);
  CHECK(x[2].skip_reason.find("no dim NOISE") != std::string::npos);
  CHECK(x[3].skip_reason.find("WIDTH is not a dim") != std::string::npos);
  CHECK(x[4].skip_reason.find("exceeds 2^31-1") != std::string::npos);
  CHECK(x[5].skip_reason.find("working set") != std::string::npos);
  CHECK(x[6].skip_reason.find("dim US = 0") != std::string::npos);
  for (size_t i = 1; i < x.size(); ++i) CHECK(x[i].id.rfind(x[i].name + "/cpu.spin/", 0) == 0);
  // the default limit is a quarter of this machine's memory: 2^31-1 us x 1e3 B is beyond it
  // only on hosts under 8.6 TB, so check the default is applied with a shape far over it
  const auto d = expand_pack(parse_pack(pack_with({spin("g", {{"US", 2147483647}, {"NOISE", 1}})}), "p.json"), reg, {});
  CHECK(d[0].skip_reason.find("working set") != std::string::npos);

  // strict: the first bad shape is an Input error naming pack, case and field, once
  o.strict = true;
  const auto [cat, msg] = error_of([&] { expand_pack(p, reg, o); });
  CHECK(cat == ErrorCategory::Input);
  CHECK(msg.find("p.json: case 'zero': field 'shapes[0]': dim US = 0 must be >= 1") != std::string::npos);
  CHECK(count(msg, "p.json") == 1);

  // the runner carries the skipped ones and runs the good one (a mixed pack)
  o.strict = false;
  RunnerOptions ro;
  ro.max_time = 0.02;
  const RunResult r = run_cases(x, reg, ro);
  CHECK(r.cases[0].status == "ok");
  for (size_t i = 1; i < r.cases.size(); ++i) CHECK(r.cases[i].status == "skipped");
  ArtifactMeta meta;
  meta.pack_name = "t";
  const json doc = to_json(r, meta);
  CHECK(doc["cases"][4]["skip_reason"].get<std::string>().find("exceeds 2^31-1") != std::string::npos);
}

TEST_CASE("integers beyond int64 are rejected naming the field, never wrapped to -1", "[cpu]") {
  json c = spin("u");
  c["shape"]["US"] = std::numeric_limits<uint64_t>::max();
  const auto [cat, msg] = error_of([&] { parse_pack(pack_with({c}), "p.json"); });
  CHECK(cat == ErrorCategory::Input);
  CHECK(msg.find("case 'u': field 'shape'") != std::string::npos);
  CHECK(msg.find("18446744073709551615") != std::string::npos);
  CHECK(msg.find("64-bit") != std::string::npos);
  c = spin("u");
  c["params"] = {{"P", 9223372036854775808ULL}};
  CHECK(error_of([&] { parse_pack(pack_with({c}), "p.json"); }).second.find("field 'params.P'") != std::string::npos);
  c = spin("n");
  c["shape"]["US"] = -1;
  CHECK(error_of([&] { parse_pack(pack_with({c}), "p.json"); }).second.find("is -1, must be >= 0") != std::string::npos);
  // INT64_MAX itself parses (and is then skipped as a shape: > 2^31-1)
  c = spin("m");
  c["shape"]["US"] = std::numeric_limits<int64_t>::max();
  const auto x = expand_pack(parse_pack(pack_with({c}), "p.json"), synth_registry(), {});
  CHECK(x[0].skip_reason.find("exceeds 2^31-1") != std::string::npos);
}

TEST_CASE("wrong types, empty or duplicate names and control characters are Input errors", "[cpu]") {
  auto msg = [](json doc) {
    const auto [cat, m] = error_of([&] { parse_pack(doc, "x.json"); });
    CHECK(cat == ErrorCategory::Input);
    CHECK(count(m, "x.json") == 1);  // the location is printed once, not repeated
    return m;
  };
  json d = pack_with({spin("a")});
  d["name"] = 7;
  CHECK(msg(d).find("x.json: field 'name': expected a string, got integer") != std::string::npos);
  d["name"] = "";
  CHECK(msg(d).find("field 'name': empty pack name") != std::string::npos);
  d = pack_with({spin("a")});
  d["description"] = json::object();
  CHECK(msg(d).find("field 'description'") != std::string::npos);
  d["description"] = "ok";
  d["defaults"] = {{"backend", 7}};
  CHECK(msg(d).find("field 'defaults/backend'") != std::string::npos);
  d["defaults"] = {{"backend", "tpu"}};
  CHECK(msg(d).find("field 'defaults/backend'") != std::string::npos);
  d["defaults"] = {{"dtype", "f32"}, {"dtypes", {"bf16"}}};
  CHECK(msg(d).find("field 'defaults/dtypes'") != std::string::npos);
  d = pack_with({{{"name", 7}, {"op", "synth_spin"}, {"shape", "1x1"}}});
  CHECK(msg(d).find("field 'cases[0].name': expected a string") != std::string::npos);
  d = pack_with({{{"name", ""}, {"op", "synth_spin"}, {"shape", "1x1"}}});
  CHECK(msg(d).find("field 'cases[0].name': empty case name") != std::string::npos);
  json c = spin("a");
  c["dtype"] = "f32";
  c["dtypes"] = {"bf16"};
  CHECK(msg(pack_with({c})).find("case 'a': field 'dtypes': give either") != std::string::npos);
  c = spin("a");
  c["doc"] = 3;
  CHECK(msg(pack_with({c})).find("case 'a': field 'doc'") != std::string::npos);
  c = spin("a");
  c["op"] = 3;
  CHECK(msg(pack_with({c})).find("case 'a': field 'op'") != std::string::npos);
  const std::string dup = msg(pack_with({spin("a"), spin("b"), spin("a")}));
  CHECK(dup.find("cases[0] and cases[2]") != std::string::npos);
  CHECK(msg({{"schema", 3}, {"cases", json::array()}}).find("x.json: field 'schema': expected") != std::string::npos);
  // control characters in names (they end up in ids, tables and terminals)
  for (const char* bad : {"g\x1b[31mRED", "a\nb", "tab\there", "del\x7f"}) {
    INFO(bad);
    const std::string m = msg(pack_with({spin(bad)}));
    CHECK(m.find("field 'cases[0].name': contains a control character") != std::string::npos);
  }
  c = spin("ok");
  c["variant"] = "cpu.\x01";
  CHECK(msg(pack_with({c})).find("case 'ok': field 'variant': contains a control character") != std::string::npos);
  c = spin("ok", {{"US\n", 1}});
  CHECK(msg(pack_with({c})).find("control character") != std::string::npos);
  // printable punctuation is fine
  CHECK(parse_pack(pack_with({spin("a,\"b|c")}), "x.json").cases[0].name == "a,\"b|c");
}

TEST_CASE("runner option ranges are shared by flags and pack defaults", "[cpu]") {
  struct Row {
    const char* key;
    double v;
    bool ok;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const Row& r : std::vector<Row>{{"warmup", 0, true},        {"warmup", 1e6, true},     {"warmup", -1, false},
                                      {"warmup", 1e6 + 1, false},  {"warmup", 2.5, false},    {"min_samples", 1, true},
                                      {"min_samples", 0, false},   {"min_samples", 1e7, true}, {"min_samples", 1e7 + 1, false},
                                      {"max_samples", 1e9, true},  {"max_samples", 0, false}, {"max_samples", 4e9, false},
                                      {"max_time", 0.001, true},   {"max_time", 86400, true}, {"max_time", 0, false},
                                      {"max_time", 86401, false},  {"max_time", nan, false},  {"max_time", inf, false},
                                      {"max_rel_ci", 1, true},     {"max_rel_ci", 0, false},  {"max_rel_ci", 1.5, false},
                                      {"max_rel_ci", nan, false},  {"threads", 0, true},      {"threads", 1, true},
                                      {"threads", -1, false},      {"threads", 1e5, false}}) {
    INFO(r.key << " = " << r.v);
    CHECK(runner_option_problem(r.key, r.v).empty() == r.ok);
  }
  CHECK_THROWS_AS(runner_option_problem("bogus", 1), Error);
  CHECK_THROWS_AS(configure_threads(-1, false), Error);
  CHECK_THROWS_AS(configure_threads(100000, false), Error);
  // the same rule in a pack's defaults, naming the field
  for (const auto& [k, v] : std::vector<std::pair<const char*, json>>{
           {"warmup", -1}, {"warmup", 1e9}, {"min_samples", 0}, {"min_samples", 2.5}, {"max_time", 1e308}, {"max_rel_ci", 2}}) {
    json d = pack_with({spin("a")});
    d["defaults"] = {{k, v}};
    const auto [cat, m] = error_of([&] { parse_pack(d, "x.json"); });
    CHECK(m.find(std::string("x.json: field 'defaults/") + k + "'") != std::string::npos);
  }
  json d = pack_with({spin("a")});
  d["defaults"] = {{"min_samples", 50}, {"max_samples", 10}};
  CHECK(error_of([&] { parse_pack(d, "x.json"); }).second.find("defaults/max_samples") != std::string::npos);
  d["defaults"] = {{"min_samples", 5}, {"max_samples", 10}, {"warmup", 0}};
  const Pack p = parse_pack(d, "x.json");
  CHECK(*p.run.max_samples == 10);
  CHECK(*p.run.warmup == 0);
}

TEST_CASE("--seed is a decimal integer in [0, 2^64-1]", "[cpu]") {
  CHECK(parse_seed("0") == 0);
  CHECK(parse_seed("18446744073709551615") == std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"-1", "18446744073709551616", "99999999999999999999999", "", "1e3", "+5", " 5", "0x10", "abc"}) {
    INFO(bad);
    const auto [cat, m] = error_of([&] { parse_seed(bad); });
    CHECK(cat == ErrorCategory::Usage);
    CHECK(m.find("--seed") != std::string::npos);
  }
}

TEST_CASE("--filter: bad or over-long regexes are Usage errors", "[cpu]") {
  const auto reg = synth_registry();
  const Pack p = parse_pack(pack_with({spin("a")}), "p.json");
  ExpandOptions o;
  o.filter = "([";
  CHECK(error_of([&] { expand_pack(p, reg, o); }).first == ErrorCategory::Usage);
  // tens of thousands of nested groups would overflow std::regex's recursion
  o.filter = std::string(50000, '(') + std::string(50000, ')');
  const auto [cat, m] = error_of([&] { expand_pack(p, reg, o); });
  CHECK(cat == ErrorCategory::Usage);
  CHECK(m.find("--filter") != std::string::npos);
  // matching is polynomial: "(a*)*b" against 40 a's would backtrack for hours
  const Pack aa = parse_pack(pack_with({spin(std::string(40, 'a'))}), "p.json");
  o.filter = "(a*)*b";
  CHECK(expand_pack(aa, reg, o).empty());
  o.filter = "^(a*)*/cpu";
  CHECK(expand_pack(aa, reg, o).size() == 1);
  o.filter = "(a)\\1";  // back-references need backtracking: refused
  CHECK(error_of([&] { expand_pack(aa, reg, o); }).first == ErrorCategory::Usage);
  // the longest accepted pattern compiles and matches without trouble
  o.filter = std::string(kMaxFilterLength / 2, '(') + std::string(kMaxFilterLength / 2, ')');
  CHECK(expand_pack(p, reg, o).size() == 1);
}

TEST_CASE("warm-up stops once it has used max_time", "[cpu]") {
  const auto reg = synth_registry();
  BenchCase c;
  c.name = "w";
  c.op = "synth_spin";
  c.variant = "cpu.spin";
  c.shape = {{"US", 10}, {"NOISE", 1}};
  c.id = "w/cpu.spin/NOISE=1,US=10/f32";
  RunnerOptions o;
  o.warmup = 1000000;  // 1e6 x 20 us = 20 s unbounded
  o.max_time = 0.05;
  const long before = g_synth_runs;
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = run_cases({c}, reg, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.cases[0].status == "ok");
  const long warm = g_synth_runs - before;
  CHECK(warm >= 1);
  CHECK(warm < 100000);  // about 0.05 s / 20 us = 2500 runs
  CHECK(s < 5);
}

TEST_CASE("inconsistent artifacts are Input errors naming file and field", "[cpu]") {
  std::vector<double> s{1e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3};
  auto one = [&](const std::string& id) {
    return json{{"id", id}, {"status", "ok"}, {"n", s.size()}, {"samples_s", s}, {"time", {{"median_s", 1e-3}}}};
  };
  const json good = {{"schema", "rtx.bench.v1"}, {"cases", {one("a"), one("b")}}};
  CHECK_NOTHROW(check_bench_artifact(good, "x.json"));
  auto msg = [](const json& doc) {
    const auto [cat, m] = error_of([&] { check_bench_artifact(doc, "x.json"); });
    CHECK(cat == ErrorCategory::Input);
    CHECK(count(m, "x.json") == 1);
    return m;
  };
  json bad = good;
  bad["cases"][1]["samples_s"] = json::array();
  bad["cases"][1].erase("n");
  bad["cases"][1].erase("time");
  CHECK(msg(bad).find("field '/cases/1/samples_s': an ok case has no samples") != std::string::npos);
  bad = good;
  bad["cases"][0]["samples_s"][2] = std::numeric_limits<double>::infinity();
  CHECK(msg(bad).find("field '/cases/0/samples_s/2'") != std::string::npos);
  bad = good;
  bad["cases"][0]["samples_s"][2] = 0.0;
  CHECK(msg(bad).find("field '/cases/0/samples_s/2'") != std::string::npos);
  bad = good;
  bad["cases"][1]["id"] = "a";
  CHECK(msg(bad).find("field '/cases/1/id': duplicate case id \"a\" (also /cases/0)") != std::string::npos);
  bad = good;
  bad["cases"][0]["status"] = "great";
  CHECK(msg(bad).find("field '/cases/0/status'") != std::string::npos);
  bad = good;
  bad["cases"][0]["time"]["median_s"] = 5e-3;  // edited: disagrees with the samples
  CHECK(msg(bad).find("field '/cases/0/time/median_s'") != std::string::npos);
  bad = good;
  bad["cases"][0]["n"] = 42;
  CHECK(msg(bad).find("field '/cases/0/n'") != std::string::npos);
  // a skipped case may have no samples
  json skipped = good;
  skipped["cases"][1] = {{"id", "b"}, {"status", "skipped"}, {"samples_s", json::array()}};
  CHECK_NOTHROW(check_bench_artifact(skipped, "x.json"));
  // compare shows the samples' median; without time.median_s it is still right
  json nt = good;
  nt["cases"][0].erase("time");
  const CompareReport rep = compare_artifacts(nt, good, {});
  CHECK(rep.rows[0].base_median == Approx(1e-3));
  CHECK(rep.rows[0].new_median == Approx(1e-3));
}

TEST_CASE("compare --format md escapes '|' and control characters in cells", "[cpu]") {
  CompareReport r;
  CompareRow row;
  row.id = "a|b\nc";
  row.presence = "base only";
  r.rows.push_back(row);
  const std::string md = format_compare(r, "md");
  CHECK(md.find("`a\\|b\\x0Ac`") != std::string::npos);
  // every table line still has exactly the header's number of unescaped separators
  CHECK(md.find("a|b") == std::string::npos);
  // The table format shows the id's control bytes as \xHH too (a raw ESC would reach the terminal).
  r.rows[0].id = "x\x1b[2Jy";
  const std::string table = format_compare(r, "table");
  CHECK(table.find('\x1b') == std::string::npos);
  CHECK(table.find("x\\x1B[2Jy") != std::string::npos);
}

TEST_CASE("an unreadable pack is an Input error; a missing one too", "[cpu]") {
  // /proc/self/mem opens but read(2) at offset 0 fails (EIO): a read error, not ENOENT
  const auto [cat, m] = error_of([] { load_pack("/proc/self/mem"); });
  CHECK(cat == ErrorCategory::Input);
  CHECK(m.find("/proc/self/mem") != std::string::npos);
  CHECK(error_of([] { load_pack("/nonexistent/p.json"); }).first == ErrorCategory::Input);
  CHECK(error_of([] { read_bench_artifact("/proc/self/mem"); }).first == ErrorCategory::Input);
}
