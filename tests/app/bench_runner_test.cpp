// rtx-bench runner, artifact and compare logic on the synthetic op (known distributions):
// stop rules, noisy marking, seeded interleave, A/A "same", 20% slowdown "slower",
// checksums stable per seed (also on the real registry), roofline classification.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"

using namespace rtx;
using namespace rtx::app::bench;
using kernels::Backend;

kernels::Registry synth_registry();  // bench_synth.cpp
extern int g_synth_flushes;         // bench_synth.cpp

namespace {

/// Artifact context for synthetic runs: no peaks, no hardware profile.
ArtifactMeta synth_meta() {
  ArtifactMeta m;
  m.pack_name = "synth";
  return m;
}

BenchCase spin_case(const std::string& name, int64_t us, int64_t noise_permille, int64_t slow_pct = 0, int64_t bad = 0) {
  BenchCase c;
  c.name = name;
  c.op = "synth_spin";
  c.variant = "cpu.spin";
  c.shape = {{"US", us}, {"NOISE", noise_permille}, {"SLOW", slow_pct}};
  if (bad) c.shape["BAD"] = 1;
  c.id = name + "/cpu.spin/" + kernels::shape_to_string(c.shape) + "/f32";
  return c;
}

}  // namespace

TEST_CASE("a quiet case stops as soon as the median CI reaches the target", "[cpu]") {
  const auto reg = synth_registry();
  RunnerOptions o;
  o.max_rel_ci = 0.02;
  o.min_samples = 10;
  o.max_time = 5;
  const RunResult r = run_cases({spin_case("quiet", 100, 5)}, reg, o);
  REQUIRE(r.cases.size() == 1);
  const CaseResult& c = r.cases[0];
  CHECK(c.status == "ok");
  CHECK(c.stop_reason == "converged");
  CHECK_FALSE(c.noisy);
  CHECK(c.samples.size() >= 10);
  CHECK(c.samples.size() < 30);  // 0.5% noise: the CI is tight almost at once
  CHECK(c.rel_ci <= 0.02);
  CHECK(c.median == Approx(100e-6).epsilon(0.01));
  CHECK(c.ci.lo <= c.median);
  CHECK(c.ci.hi >= c.median);
  CHECK(c.p10 <= c.median);
  CHECK(c.p90 >= c.median);
  CHECK(c.flops_per_s == Approx(1e8 / c.median));  // work 1e6 * US FLOP
  // stopping exactly at the first n where converged() holds
  std::vector<double> prefix(c.samples.begin(), c.samples.end() - 1);
  CHECK_FALSE(converged(prefix, 0.02, 10));
  CHECK(converged(c.samples, 0.02, 10));
}

TEST_CASE("a noisy case ends at max-time and is marked noisy", "[cpu]") {
  const auto reg = synth_registry();
  RunnerOptions o;
  o.max_rel_ci = 0.001;  // unreachable with 50% noise
  o.max_time = 0.05;
  o.max_samples = 100000;
  const RunResult r = run_cases({spin_case("noisy", 100, 500)}, reg, o);
  const CaseResult& c = r.cases[0];
  CHECK(c.status == "ok");
  CHECK(c.stop_reason == "max_time");
  CHECK(c.noisy);
  CHECK(c.sampling_s >= 0.05);
  CHECK(c.sampling_s < 1.0);
  CHECK(c.rel_ci > 0.001);
  // max_samples bounds it too
  o.max_time = 60;
  o.max_samples = 25;
  const RunResult r2 = run_cases({spin_case("noisy", 100, 500)}, reg, o);
  CHECK(r2.cases[0].stop_reason == "max_samples");
  CHECK(r2.cases[0].samples.size() == 25);
  CHECK(r2.cases[0].noisy);
}

TEST_CASE("max_time 0 takes one sample and never hangs", "[cpu]") {
  const auto reg = synth_registry();
  RunnerOptions o;
  o.max_time = 0;
  const RunResult r = run_cases({spin_case("z", 10, 500)}, reg, o);
  CHECK(r.cases[0].samples.size() == 1);
  CHECK(r.cases[0].noisy);
}

TEST_CASE("interleave order is seeded and deterministic", "[cpu]") {
  for (size_t n : {1, 2, 7}) {
    auto a = interleave_order(n, 42, 3), b = interleave_order(n, 42, 3);
    CHECK(a == b);
    std::vector<size_t> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    std::vector<size_t> iota(n);
    std::iota(iota.begin(), iota.end(), 0);
    CHECK(sorted == iota);  // a permutation
  }
  CHECK(interleave_order(7, 42, 0) != interleave_order(7, 43, 0));
  CHECK(interleave_order(7, 42, 0) != interleave_order(7, 42, 1));

  const auto reg = synth_registry();
  RunnerOptions o;
  o.interleave = true;
  o.batch = 3;
  o.seed = 9;
  o.max_samples = 12;
  o.max_rel_ci = 1e-9;  // run to max_samples so the schedule length is fixed
  o.max_time = 60;
  const std::vector<BenchCase> cases{spin_case("a", 10, 10), spin_case("b", 11, 10), spin_case("c", 12, 10)};
  const RunResult r1 = run_cases(cases, reg, o), r2 = run_cases(cases, reg, o);
  CHECK(r1.schedule == r2.schedule);
  CHECK(r1.schedule.size() == 12);  // 3 cases x 12 samples / batch 3
  // each round visits every live case once, in the seeded order
  for (size_t round = 0; round < 4; ++round) {
    const auto order = interleave_order(3, 9, round);
    for (size_t k = 0; k < 3; ++k) CHECK(r1.schedule[round * 3 + k] == order[k]);
  }
  for (const auto& c : r1.cases) CHECK(c.samples.size() == 12);
  // same seed -> the same samples (the synthetic noise stream is seeded per instance)
  CHECK(r1.cases[1].samples == r2.cases[1].samples);
  o.seed = 10;
  CHECK(run_cases(cases, reg, o).schedule != r1.schedule);
}

TEST_CASE("failed checks and skipped cases are carried, not timed", "[cpu]") {
  const auto reg = synth_registry();
  BenchCase skip = spin_case("s", 10, 10);
  skip.skip_reason = "because";
  RunnerOptions o;
  o.max_time = 0.05;
  const RunResult r = run_cases({spin_case("bad", 10, 10, 0, 1), skip, spin_case("ok", 10, 10)}, reg, o);
  CHECK(r.cases[0].status == "failed");
  CHECK(r.cases[0].samples.empty());
  CHECK(r.cases[0].stop_reason.find("correctness check failed") != std::string::npos);
  CHECK(r.cases[1].status == "skipped");
  CHECK(r.cases[1].stop_reason == "because");
  CHECK(r.cases[2].status == "ok");
  const auto doc = to_json(r, synth_meta());
  CHECK(doc["summary"]["failed"] == 1);
  CHECK(doc["summary"]["skipped"] == 1);
  CHECK(doc["cases"][1]["skip_reason"] == "because");
  CHECK_NOTHROW(check_bench_artifact(doc, "mem"));
  // an instance that cannot be made names the case
  BenchCase broken = spin_case("broken", 10, 10);
  broken.shape.erase("NOISE");
  try {
    run_cases({broken}, reg, o);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("broken/") != std::string::npos);
    CHECK(e.category() == ErrorCategory::Input);
  }
}

TEST_CASE("cold mode flushes before every sample, warm mode never", "[cpu]") {
  const auto reg = synth_registry();
  RunnerOptions o;
  o.cold = true;
  o.max_time = 5;
  g_synth_flushes = 0;
  const RunResult r = run_cases({spin_case("cold", 50, 5)}, reg, o);
  CHECK(r.cases[0].stop_reason == "converged");
  CHECK(g_synth_flushes == static_cast<int>(r.cases[0].samples.size()));
  o.cold = false;
  g_synth_flushes = 0;
  run_cases({spin_case("warm", 50, 5)}, reg, o);
  CHECK(g_synth_flushes == 0);
}

static nlohmann::json synth_artifact(const kernels::Registry& reg, int64_t slow_pct, uint64_t seed, int64_t noise = 30) {
  RunnerOptions o;
  o.seed = seed;
  o.min_samples = 30;
  o.max_samples = 30;
  o.max_rel_ci = 1e-9;
  o.max_time = 60;
  const RunResult r = run_cases({spin_case("k1", 20, noise, slow_pct), spin_case("k2", 40, noise, 0)}, reg, o);
  // ids must match across base and new: strip SLOW from the id
  nlohmann::json doc = to_json(r, synth_meta());
  doc["cases"][0]["id"] = "k1";
  doc["cases"][1]["id"] = "k2";
  // The statistics are under test here, not this host's contention (bench_contention_test): a
  // loaded CI host (ctest -j) would otherwise turn these verdicts undecided. Artifacts without
  // host evidence compare as before.
  doc.erase("host");
  for (auto& c : doc["cases"]) c.erase("host");
  if (doc.contains("summary")) doc["summary"].erase("contended");
  return doc;
}

TEST_CASE("synthetic A/A is judged same; a 20% slowdown slower", "[cpu]") {
  const auto reg = synth_registry();
  stats::CompareOptions o;  // 5% threshold
  int same = 0, slower = 0;
  const int trials = 20;
  for (int t = 0; t < trials; ++t) {
    const auto base = synth_artifact(reg, 0, 1000 + t), fresh = synth_artifact(reg, 0, 2000 + t);
    const CompareReport rep = compare_artifacts(base, fresh, o);
    same += static_cast<int>(rep.same);
    slower += static_cast<int>(rep.slower);
  }
  CHECK(same >= 2 * trials - 2);  // >= 95% of 40 comparisons
  CHECK(slower == 0);

  const auto base = synth_artifact(reg, 0, 1), fresh = synth_artifact(reg, 20, 2);
  const CompareReport rep = compare_artifacts(base, fresh, o, "b.json", "n.json");
  REQUIRE(rep.rows.size() == 2);
  CHECK(rep.rows[0].cmp.verdict == stats::Verdict::Slower);
  CHECK(rep.rows[0].cmp.ratio == Approx(1.2).epsilon(0.03));
  CHECK(rep.rows[1].cmp.verdict == stats::Verdict::Same);
  // The slower verdict rests on one process per side: reported, unconfirmed, not counted.
  CHECK(rep.slower == 0);
  CHECK(rep.unconfirmed == 1);
  // printers
  const std::string md = format_compare(rep, "md"), csv = format_compare(rep, "csv"), js = format_compare(rep, "json");
  CHECK(md.find("unconfirmed") != std::string::npos);
  CHECK(csv.rfind("case,base_median_s", 0) == 0);
  CHECK(csv.find(",unconfirmed,\"judged on one process per side") != std::string::npos);
  CHECK(nlohmann::json::parse(js)["summary"]["unconfirmed"] == 1);
  CHECK(nlohmann::json::parse(js)["cases"][0]["measured_verdict"] == "slower");
  CHECK(format_compare(rep, "table").find("note: 1 verdict(s) unconfirmed") != std::string::npos);
  CHECK(md.find("--baseline-exe") != std::string::npos);
  CHECK(nlohmann::json::parse(js)["notes"][0].get<std::string>().find("one process per side") != std::string::npos);
  CHECK_THROWS_AS(format_compare(rep, "xml"), Error);
}

TEST_CASE("compare lists cases present in one file without judging them", "[cpu]") {
  const auto reg = synth_registry();
  auto base = synth_artifact(reg, 0, 1), fresh = synth_artifact(reg, 0, 2);
  fresh["cases"][1]["id"] = "k3";
  fresh["cases"][0]["status"] = "failed";
  const CompareReport rep = compare_artifacts(base, fresh, {});
  REQUIRE(rep.rows.size() == 3);
  CHECK(rep.rows[0].presence == "not judged");
  CHECK(rep.rows[1].presence == "base only");
  CHECK(rep.rows[2].presence == "new only");
  CHECK(rep.unmatched == 3);
  CHECK(rep.slower + rep.same + rep.faster + rep.ambiguous == 0);
}

TEST_CASE("artifact reader names the file and field", "[cpu]") {
  const auto reg = synth_registry();
  auto doc = synth_artifact(reg, 0, 1);
  CHECK_NOTHROW(check_bench_artifact(doc, "x.json"));
  auto bad = doc;
  bad["cases"][1]["samples_s"] = "fast";
  try {
    check_bench_artifact(bad, "x.json");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("x.json") != std::string::npos);
    CHECK(std::string(e.what()).find("/cases/1/samples_s") != std::string::npos);
  }
  bad = doc;
  bad["cases"][0]["samples_s"][3] = -1.0;
  CHECK_THROWS_WITH(check_bench_artifact(bad, "x.json"), Catch::Contains("/cases/0/samples_s/3"));
  bad = doc;
  bad["schema"] = "rtx.doctor.v1";
  CHECK_THROWS_WITH(check_bench_artifact(bad, "x.json"), Catch::Contains("schema"));
  bad = doc;
  bad["schema"] = "rtx.bench.v9";
  CHECK_THROWS_AS(check_bench_artifact(bad, "x.json"), Error);
}

TEST_CASE("thresholds and time formatting", "[cpu]") {
  CHECK(parse_threshold("5%") == Approx(0.05));
  CHECK(parse_threshold("0.05") == Approx(0.05));
  CHECK(parse_threshold(" 12.5 % ") == Approx(0.125));
  CHECK_THROWS_AS(parse_threshold("abc"), Error);
  CHECK_THROWS_AS(parse_threshold("150%"), Error);
  CHECK(format_seconds(1.5e-3) == "1.5 ms");
  CHECK(format_seconds(2.0) == "2 s");
  CHECK(format_seconds(12.3e-9) == "12.3 ns");
  // A subnormal time (a hand-edited artifact) prints; std::stod threw out_of_range on it (exit 4).
  CHECK(format_seconds(1e-318) == "1e-309 ns");
  CHECK(format_seconds(5e-324) == "4.94e-315 ns");
  // The unit is picked after rounding: [999.5 us, 1 ms) printed "1e+03 us".
  CHECK(format_seconds(999.7e-6) == "1 ms");
  CHECK(format_seconds(999.5e-6).find("e+") == std::string::npos);  // "0.999 ms" (999.5 us in binary is just under)
  CHECK(format_seconds(999.5e-6).find(" ms") != std::string::npos);
  CHECK(format_seconds(999.4e-6) == "999 us");
  CHECK(format_seconds(0.9996) == "1 s");
  CHECK(format_seconds(999.6e-9) == "1 us");
  CHECK(format_seconds(456e-6) == "456 us");
}

TEST_CASE("roofline: compute- vs memory-bound by machine balance", "[cpu]") {
  CaseResult r;
  r.status = "ok";
  r.median = 1e-3;
  Peaks p{1e11, 1e10, "test"};  // balance 10 FLOP/B
  r.work = {1e8, 1e6};          // intensity 100: compute-bound
  r.flops_per_s = r.work.flops / r.median;
  r.bytes_per_s = r.work.bytes / r.median;
  annotate_roofline(r, p);
  CHECK(r.bound == "compute");
  REQUIRE(r.peak_fraction);
  CHECK(*r.peak_fraction == Approx(1e11 / 1e11));
  r.work = {1e6, 1e7};  // intensity 0.1: memory-bound; 1e7 B in 1 ms = 1e10 B/s
  r.flops_per_s = r.work.flops / r.median;
  r.bytes_per_s = r.work.bytes / r.median;
  annotate_roofline(r, p);
  CHECK(r.bound == "memory");
  CHECK(*r.peak_fraction == Approx(1.0));
  annotate_roofline(r, Peaks{});
  CHECK_FALSE(r.peak_fraction);
}

TEST_CASE("real registry: the same seed gives the same checksum", "[cpu]") {
  const auto& reg = rtx::app::bench::registry();
  std::vector<BenchCase> cases;
  for (const auto& op : reg.ops()) {
    if (op.test_shapes.empty()) continue;
    for (const auto& v : op.variants) {
      if (v.backend != Backend::CPU || v.dtypes.empty()) continue;
      BenchCase c;
      c.op = op.name;
      c.variant = v.name;
      c.shape = op.test_shapes.back();
      c.dtype = v.dtypes.front();
      c.params = kernels::resolve_params(op, v, c.shape, c.dtype);
      if (v.validate && !v.validate(c.shape, c.params).empty()) continue;
      c.id = op.name + "/" + v.name;
      cases.push_back(c);
      break;
    }
    if (cases.size() >= 4) break;
  }
  if (cases.empty()) {  // Catch2 v2 has no SKIP(): say why and leave
    WARN("SKIPPED: no CPU ops registered in this build yet");
    return;
  }
  RunnerOptions o;
  o.seed = 1234;
  o.max_time = 0.01;
  o.min_samples = 3;
  const RunResult a = run_cases(cases, reg, o), b = run_cases(cases, reg, o);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].id);
    CHECK(a.cases[i].status == "ok");
    CHECK(a.cases[i].checksum == b.cases[i].checksum);
    CHECK(a.cases[i].checksum != 0);
  }
  o.seed = 4321;
  const RunResult c = run_cases(cases, reg, o);
  size_t differs = 0;
  for (size_t i = 0; i < cases.size(); ++i) differs += c.cases[i].checksum != a.cases[i].checksum;
  CHECK(differs > 0);  // other inputs, other outputs
}
