// rtx-bench run --rounds R (R fresh processes merged into one artifact) and compare's
// rounds basis: merge_rounds known answers, the CLI end to end, and bad --rounds values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/stats/stats.hpp"
#include "test_util.hpp"

using nlohmann::json;
using rtx::test::run;
namespace bench = rtx::app::bench;

namespace {

std::string tool() { return rtx::test::tool_path("rtx-bench"); }

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

json read(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

/// A two-case pack of cheap ops (gelu, layernorm), plus extra `defaults` fields.
std::string tiny_pack(const std::string& dir, const std::string& extra_defaults = "") {
  const std::string p = dir + "/tiny.json";
  write(p, R"({"schema": "rtx.benchpack.v1", "name": "tiny", "defaults": {"dtype": "f32")" + extra_defaults +
               R"(}, "cases": [{"name": "gelu", "op": "gelu_forward", "shape": "N=1000"},
                  {"name": "ln", "op": "layernorm_forward", "shape": {"N": 7, "C": 127}}]})");
  return p;
}

/// A round artifact with one ok case of the given samples.
json round_doc(const std::vector<double>& s) {
  return {{"schema", "rtx.bench.v1"},
          {"cases",
           {{{"id", "k/cpu.x/N=1/f32"}, {"name", "k"}, {"op", "gelu_forward"}, {"variant", "cpu.x"}, {"backend", "cpu"},
             {"shape", {{"N", 1}}}, {"dtype", "f32"}, {"params", json::object()}, {"status", "ok"},
             {"stop_reason", "converged"}, {"n", s.size()}, {"samples_s", s}, {"noisy", false}, {"checksum", "0x00000000000000ff"},
             {"work", {{"flops", 100.0}, {"bytes", 400.0}}}}}}};
}

/// An artifact whose case has the given samples and round medians.
json with_rounds(const std::vector<double>& s, const std::vector<double>& rm) {
  json d = round_doc(s);
  d["cases"][0]["round_medians_s"] = rm;
  return d;
}

}  // namespace

TEST_CASE("merge_rounds concatenates samples, records round medians, recomputes stats", "[cpu][bench]") {
  const std::vector<double> a{3, 1, 2}, b{10, 20, 30, 40, 50, 60, 70}, c{5};
  const auto r = bench::merge_rounds({round_doc(a), round_doc(b), round_doc(c)});
  REQUIRE(r.cases.size() == 1);
  const auto& x = r.cases[0];
  CHECK(x.samples.size() == a.size() + b.size() + c.size());
  CHECK(x.samples == std::vector<double>{3, 1, 2, 10, 20, 30, 40, 50, 60, 70, 5});
  CHECK(x.round_medians == std::vector<double>{2, 40, 5});
  CHECK(x.median == 20);  // sorted: 1 2 3 5 10 [20] 30 ...
  CHECK(x.flops_per_s == Approx(100.0 / 20));
  CHECK(x.checksum == 0xff);
  CHECK(x.status == "ok");
  // A round with another case list is an input error naming the round.
  json other = round_doc(a);
  other["cases"][0]["id"] = "other";
  CHECK_THROWS_WITH(bench::merge_rounds({round_doc(a), other}), Catch::Contains("round 2"));
  CHECK_THROWS_AS(bench::merge_rounds({}), rtx::Error);
  // The merged artifact carries round_medians_s; a single-process run does not.
  bench::ArtifactMeta meta;
  meta.rounds = 3;
  const json doc = bench::to_json(r, meta);
  CHECK(doc["cases"][0]["round_medians_s"] == json({2, 40, 5}));
  CHECK(doc["options"]["rounds"] == 3);
  CHECK_NOTHROW(bench::check_bench_artifact(doc, "merged"));
  bench::RunResult one;
  one.cases.push_back(x);
  one.cases[0].round_medians.clear();
  meta.rounds = 1;
  const json single = bench::to_json(one, meta);
  CHECK_FALSE(single["cases"][0].contains("round_medians_s"));
  CHECK_FALSE(single["options"].contains("rounds"));
  json bad = doc;
  bad["cases"][0]["round_medians_s"][1] = -1;
  CHECK_THROWS_WITH(bench::check_bench_artifact(bad, "bad"), Catch::Contains("round_medians_s/1"));
}

TEST_CASE("compare judges on round medians when both sides have >= 3 rounds", "[cpu][bench]") {
  // The raw samples are identical (samples basis: same), but every round of `new` is 30%
  // slower than every round of `base`: between-process shift the samples cannot show.
  std::vector<double> s;
  for (int i = 0; i < 40; ++i) s.push_back(1e-3 * (1 + 0.001 * (i % 7)));
  const std::vector<double> rb{1.00e-3, 1.01e-3, 0.99e-3, 1.00e-3, 1.02e-3};
  const std::vector<double> rn{1.30e-3, 1.31e-3, 1.29e-3, 1.32e-3, 1.30e-3};
  bench::CompareReport rep = bench::compare_artifacts(with_rounds(s, rb), with_rounds(s, rn), {});
  REQUIRE(rep.rows.size() == 1);
  CHECK(rep.rows[0].basis == "rounds");
  CHECK(rep.rows[0].cmp.verdict == rtx::stats::Verdict::Slower);
  CHECK(rep.rows[0].cmp.ratio == Approx(1.30).epsilon(0.02));
  CHECK(rep.rows[0].cmp.n_base == 5);
  CHECK(rep.rows[0].base_median == Approx(1.00e-3));  // median of the round medians
  CHECK(rep.rows[0].new_median == Approx(1.30e-3));
  CHECK(rep.slower == 1);
  // Two rounds on one side: back to the samples.
  rep = bench::compare_artifacts(with_rounds(s, {1e-3, 1.01e-3}), with_rounds(s, rn), {});
  CHECK(rep.rows[0].basis == "samples");
  CHECK(rep.rows[0].cmp.verdict == rtx::stats::Verdict::Same);
  rep = bench::compare_artifacts(round_doc(s), round_doc(s), {});
  CHECK(rep.rows[0].basis == "samples");
  const std::string j = bench::format_compare(bench::compare_artifacts(with_rounds(s, rb), with_rounds(s, rn), {}), "json");
  CHECK(json::parse(j)["cases"][0]["basis"] == "rounds");
  CHECK_FALSE(json::parse(j).contains("note"));  // a rounds-basis verdict carries no single-process note
  CHECK(bench::format_compare(rep, "table").find("basis") != std::string::npos);
}

TEST_CASE("rtx-bench run --rounds 3 merges three processes; compare uses the rounds basis", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string pack = tiny_pack(d);
  for (const char* name : {"a", "b"}) {
    auto p = run(tool() + " run " + pack + " --rounds 3 --max-time 0.05 --threads 1 --no-store -q -o " + d + "/" + name + ".json");
    INFO(p.err);
    REQUIRE(p.exit_code == 0);
  }
  const json a = read(d + "/a.json");
  CHECK(a["options"]["rounds"] == 3);
  size_t ok = 0;
  for (const auto& c : a["cases"]) {
    INFO(c["id"]);
    REQUIRE(c["status"] == "ok");
    ++ok;
    const auto s = c["samples_s"].get<std::vector<double>>();
    const auto rm = c["round_medians_s"].get<std::vector<double>>();
    CHECK(rm.size() == 3);
    CHECK(c["n"].get<size_t>() == s.size());
    CHECK(s.size() >= 3 * 10);  // each round takes at least min_samples (10)
    CHECK(c["time"]["median_s"].get<double>() == Approx(rtx::stats::median(s)));
    for (double m : rm) {
      CHECK(m >= *std::min_element(s.begin(), s.end()));
      CHECK(m <= *std::max_element(s.begin(), s.end()));
    }
  }
  CHECK(ok == 2);
  auto p = run(tool() + " compare " + d + "/a.json " + d + "/b.json --format json");
  INFO(p.err);
  REQUIRE(p.exit_code <= 1);
  const json cmp = json::parse(p.out);
  for (const auto& c : cmp["cases"]) CHECK(c["basis"] == "rounds");
  // --rounds 1 writes no round fields (the artifact as before).
  p = run(tool() + " run " + pack + " --rounds 1 --max-time 0.05 --threads 1 --no-store -q -o " + d + "/one.json");
  REQUIRE(p.exit_code == 0);
  const json one = read(d + "/one.json");
  CHECK_FALSE(one["options"].contains("rounds"));
  for (const auto& c : one["cases"]) CHECK_FALSE(c.contains("round_medians_s"));
  // The pack's default applies when the flag is absent.
  p = run(tool() + " run " + tiny_pack(d, R"(, "rounds": 2)") + " --max-time 0.05 --threads 1 --no-store -q -o " + d + "/two.json");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const json two = read(d + "/two.json");  // keep the document alive while iterating it
  for (const auto& c : two["cases"]) CHECK(c["round_medians_s"].size() == 2);
}

TEST_CASE("bad --rounds values are usage errors (exit 2)", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string pack = tiny_pack(d);
  for (const char* v : {"0", "201", "2.5", "-1", "x", "1e9"}) {
    INFO(v);
    const auto p = run(tool() + " run " + pack + " --no-store -q --rounds " + v);
    CHECK(p.exit_code == 2);
    CHECK(p.err.find("rounds") != std::string::npos);
  }
  auto p = run(tool() + " run " + tiny_pack(d, R"(, "rounds": 0)") + " --no-store -q");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("defaults/rounds") != std::string::npos);
  p = run(tool() + " run - --rounds 3 --no-store -q < " + pack);
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("stdin") != std::string::npos);
}
