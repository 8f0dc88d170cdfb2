// rtx-bench compare on the default path (one process per side), with injected timings: a
// common-mode shift (every case of a pair moved by the process's speed) is unconfirmed, never
// slower/faster, and exits 0; a shift of one case among steady ones is still found (exit 1);
// round-median verdicts are not touched. Also: errors in-band under machine formats, the
// change notation in every format, and an empty pack.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"

using namespace rtx;
using namespace rtx::app::bench;
using nlohmann::json;

kernels::Registry synth_registry();  // bench_synth.cpp

namespace {

/// One ok case `id` of 40 log-normal samples (1% noise) around `center` s.
json bench_case(const std::string& id, double center, Philox& rng) {
  std::vector<double> s(40);
  for (auto& x : s) x = center * std::exp(0.01 * rng.next_normal());
  return {{"id", id}, {"status", "ok"}, {"samples_s", s}};
}

/// A single-process artifact of nine cases (smoke.json's count) at centers 5 us .. 90 us, case k
/// scaled by factor[k].
json artifact(const std::vector<double>& factor, uint64_t seed) {
  Philox rng(seed);
  json cases = json::array();
  for (size_t k = 0; k < factor.size(); ++k)
    cases.push_back(bench_case("case" + std::to_string(k), (5 + 10 * static_cast<double>(k)) * 1e-6 * factor[k], rng));
  return {{"schema", "rtx.bench.v1"}, {"seed", 0}, {"cases", cases}};
}

/// Issue 36's pair 2 on an idle VM, same binary: six of nine cases "slower" by +14..+29%, the
/// other three within noise.
std::vector<double> issue_pair2() { return {1.14, 1.29, 1.18, 1.0, 1.22, 1.0, 1.16, 1.0, 1.25}; }

struct TempFiles {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rtx-bench-compare-" + std::to_string(::getpid()));
  TempFiles() { std::filesystem::create_directories(dir); }
  ~TempFiles() { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const json& doc) const {
    const std::string p = (dir / name).string();
    std::ofstream(p) << doc.dump();
    return p;
  }
};

}  // namespace

TEST_CASE("compare: a common-mode shift of one process per side is unconfirmed, not slower", "[cpu][bench]") {
  stats::CompareOptions o;
  const json base = artifact(std::vector<double>(9, 1.0), 1), fresh = artifact(issue_pair2(), 2);
  const CompareReport rep = compare_artifacts(base, fresh, o, "a.json", "b.json");
  REQUIRE(rep.rows.size() == 9);
  size_t measured_slower = 0;
  for (const auto& row : rep.rows) {
    measured_slower += row.cmp.verdict == stats::Verdict::Slower;
    // What the statistics alone say stays recorded; a shifted case is no longer counted.
    if (row.cmp.verdict == stats::Verdict::Slower) CHECK_FALSE(row.unconfirmed.empty());
    else CHECK(row.unconfirmed.empty());
  }
  CHECK(measured_slower == 6);  // the statistics alone: six significant regressions
  CHECK(rep.common_mode.detected);
  CHECK(rep.common_mode.direction == stats::Verdict::Slower);
  CHECK(rep.common_mode.shifted == 6);
  CHECK(rep.common_mode.of == 9);
  CHECK(rep.common_mode.median_ratio == Approx(1.16).epsilon(0.01));  // the fifth of the nine factors
  const std::string median = stats::format_time_ratio(rep.common_mode.median_ratio);
  CHECK(rep.slower == 0);
  CHECK(rep.unconfirmed == 6);
  CHECK(rep.same == 3);
  CHECK(rep.rows[1].unconfirmed ==
        "6 of 9 cases judged on one process per side moved slower together (median time new/base " + median + "): the whole "
        "process ran at another speed, which one process per side cannot separate from the code");

  const json j = json::parse(format_compare(rep, "json"));
  CHECK(j["summary"]["slower"] == 0);
  CHECK(j["summary"]["unconfirmed"] == 6);
  CHECK(j["common_mode"]["detected"] == true);
  CHECK(j["common_mode"]["direction"] == "slower");
  CHECK(j["cases"][1]["verdict"] == "unconfirmed");
  CHECK(j["cases"][1]["measured_verdict"] == "slower");
  CHECK(j["cases"][3]["verdict"] == "same");
  const std::string table = format_compare(rep, "table");
  CHECK(table.find("unconfirmed (process shift)") != std::string::npos);
  CHECK(table.find("6 UNCONFIRMED: one process per side, not counted") != std::string::npos);
  CHECK(table.find("most cases moved together") != std::string::npos);
  CHECK(table.find("--baseline-exe") != std::string::npos);  // says what to run
  CHECK(format_compare(rep, "csv").find(",samples,unconfirmed,\"6 of 9 cases") != std::string::npos);

  // Faster together (issue 36's pair 3: five of nine -18..-38%): unconfirmed too.
  const CompareReport f = compare_artifacts(base, artifact({0.82, 0.62, 0.7, 1.0, 0.75, 1.0, 0.8, 1.0, 1.0}, 3), o);
  CHECK(f.faster == 0);
  CHECK(f.unconfirmed == 5);
  CHECK(f.common_mode.direction == stats::Verdict::Faster);
}

TEST_CASE("compare: one process per side never counts a verdict, even one case among steady ones", "[cpu][bench]") {
  stats::CompareOptions o;
  std::vector<double> one(9, 1.0);
  one[7] = 1.10;  // a planted 10% slowdown in one kernel
  const json base = artifact(std::vector<double>(9, 1.0), 1), fresh = artifact(one, 2);
  const CompareReport rep = compare_artifacts(base, fresh, o);
  CHECK_FALSE(rep.common_mode.detected);
  CHECK(rep.common_mode.shifted == 1);
  // The statistics see it; one process per side cannot tell it from the process's speed.
  CHECK(rep.rows[7].cmp.verdict == stats::Verdict::Slower);
  CHECK(rep.rows[7].cmp.ratio == Approx(1.10).epsilon(0.01));
  CHECK(rep.rows[7].unconfirmed ==
        "judged on one process per side: a process-wide speed change (core placement, clock, neighbours) cannot be told "
        "from the code");
  CHECK(rep.slower == 0);
  CHECK(rep.unconfirmed == 1);
  CHECK(rep.same == 8);
  // Four of nine, two of two, one of one: all unconfirmed, whatever the common-mode test says.
  CHECK(compare_artifacts(base, artifact({1.2, 1.2, 1.2, 1.2, 1, 1, 1, 1, 1}, 2), o).unconfirmed == 4);
  CHECK(compare_artifacts(artifact({1, 1}, 1), artifact({1.2, 1.2}, 2), o).unconfirmed == 2);
  CHECK(compare_artifacts(artifact({1}, 1), artifact({1.2}, 2), o).slower == 0);

  TempFiles t;
  CompareCommand c;
  c.base = t.write("a.json", base);
  c.fresh = t.write("b.json", fresh);
  std::ostringstream out, err;
  CHECK(run_compare(c, out, err) == 0);
  CHECK(err.str().find("1 slower/faster verdict(s) unconfirmed") != std::string::npos);
}

namespace {

/// A multi-round artifact as `run` writes it by default: nine cases (centers 5..85 us), `rounds`
/// fresh processes each at its own speed (log-normal, `process_sd`, and one of them `outlier`
/// times slower: the between-process variance of issue 36), 1% noise within a process, case k
/// scaled by factor[k]; round ids kept.
json rounds_artifact(const std::vector<double>& factor, size_t rounds, double process_sd, uint64_t seed, bool ids = true,
                     double outlier = 1.0) {
  Philox rng(seed);
  std::vector<double> speed(rounds);
  for (auto& x : speed) x = std::exp(process_sd * rng.next_normal());
  speed[seed % rounds] *= outlier;  // one process of the run at another speed (as seen on the VM)
  json cases = json::array();
  for (size_t k = 0; k < factor.size(); ++k) {
    const double center = (5 + 10 * static_cast<double>(k)) * 1e-6 * factor[k];
    std::vector<double> all, medians;
    std::vector<uint64_t> round_ids;
    for (size_t r = 0; r < rounds; ++r) {
      std::vector<double> s(10);
      for (auto& x : s) x = center * speed[r] * std::exp(0.01 * rng.next_normal());
      all.insert(all.end(), s.begin(), s.end());
      std::vector<double> sorted = s;
      std::sort(sorted.begin(), sorted.end());
      medians.push_back((sorted[4] + sorted[5]) / 2);
      round_ids.push_back(r + 1);
    }
    json c = {{"id", "case" + std::to_string(k)}, {"status", "ok"}, {"samples_s", all}, {"round_medians_s", medians}};
    if (ids) c["round_ids"] = round_ids;
    cases.push_back(c);
  }
  return {{"schema", "rtx.bench.v1"}, {"seed", 0}, {"cases", cases}};
}

}  // namespace

TEST_CASE("compare: default rounds are corrected for each process's speed", "[cpu][bench]") {
  stats::CompareOptions o;
  // A/A: processes 3% apart and one process per run 30% slower: nothing counted, over many pairs.
  size_t false_alarms = 0;
  double width_norm = 0, width_raw = 0;
  for (uint64_t pair = 0; pair < 50; ++pair) {
    const CompareReport aa =
        compare_artifacts(rounds_artifact(std::vector<double>(9, 1.0), 5, 0.03, 10 + 2 * pair, true, 1.3),
                          rounds_artifact(std::vector<double>(9, 1.0), 5, 0.03, 11 + 2 * pair, true, 1.3), o);
    false_alarms += aa.slower + aa.faster;
    REQUIRE(aa.process_shift);
    CHECK(aa.rows[0].basis == "rounds/process");
    for (const auto& row : aa.rows) {
      width_norm += row.cmp.hi - row.cmp.lo;
      width_raw += row.raw->hi - row.raw->lo;
    }
  }
  CHECK(false_alarms == 0);
  // The correction is what makes a 10% change visible: the CIs shrink from the process spread
  // to the within-process noise (1%).
  CHECK(width_norm < 0.5 * width_raw);

  // A planted 10% slowdown of one kernel among nine is found in >= 95% of 40 pairs (issue 36's
  // bar); the others are unconfirmed when the run's process factors happen to differ by > 5%.
  std::vector<double> planted(9, 1.0);
  planted[7] = 1.10;
  size_t found = 0;
  for (uint64_t pair = 0; pair < 40; ++pair) {
    const CompareReport p = compare_artifacts(rounds_artifact(std::vector<double>(9, 1.0), 5, 0.03, 500 + 2 * pair, true, 1.3),
                                              rounds_artifact(planted, 5, 0.03, 501 + 2 * pair, true, 1.3), o);
    found += p.slower == 1 && p.rows[7].cmp.verdict == stats::Verdict::Slower;
    CHECK(p.rows[7].cmp.ratio == Approx(1.10).epsilon(0.02));
    CHECK(p.faster == 0);
    CHECK(p.slower + p.unconfirmed >= 1);  // never a verdict of "same" on it
  }
  CHECK(found >= 38);

  // Every case 30% slower (a slower machine, or a slower build): the process shift says so; no
  // case counts, since two separate runs cannot tell the machine's shift from the code's.
  const CompareReport all = compare_artifacts(rounds_artifact(std::vector<double>(9, 1.0), 5, 0.01, 7),
                                              rounds_artifact(std::vector<double>(9, 1.3), 5, 0.01, 8), o);
  REQUIRE(all.process_shift);
  CHECK(all.process_shift->verdict == stats::Verdict::Slower);
  CHECK(all.process_shift->ratio == Approx(1.3).epsilon(0.02));
  CHECK(all.machine_shift);
  CHECK(all.slower == 0);
  CHECK(all.rows[0].raw->verdict == stats::Verdict::Slower);  // the raw verdict stays on record
  const json j = json::parse(format_compare(all, "json"));
  CHECK(j["process_shift"]["verdict"] == "slower");
  CHECK(j["process_shift"]["counted"] == false);
  CHECK(j["process_shift"]["beyond_threshold"] == true);
  CHECK(j["process_shift"]["cases"] == 9);
  CHECK(j["cases"][0]["basis"] == "rounds/process");
  CHECK(j["cases"][0]["raw_verdict"] == "slower");
  CHECK(format_compare(all, "table").find("for the whole process between the runs (9 cases, 5 and 5 rounds)") != std::string::npos);

  // The VM's other state (issue 36, measured: a whole run 1.2-1.6x slower, each case by its own
  // amount): the corrected verdicts would split into slower and faster; all are unconfirmed.
  const CompareReport state = compare_artifacts(rounds_artifact(std::vector<double>(9, 1.0), 5, 0.01, 7),
                                                rounds_artifact({1.47, 1.3, 1.0, 2.2, 1.47, 1.6, 1.3, 1.0, 1.66}, 5, 0.01, 8), o);
  CHECK(state.machine_shift);
  CHECK(state.slower + state.faster == 0);
  CHECK(state.unconfirmed >= 4);
  TempFiles t;
  CompareCommand c;
  c.base = t.write("base.json", rounds_artifact(std::vector<double>(9, 1.0), 5, 0.01, 7));
  c.fresh = t.write("state.json", rounds_artifact({1.47, 1.3, 1.0, 2.2, 1.47, 1.6, 1.3, 1.0, 1.66}, 5, 0.01, 8));
  std::ostringstream out, err;
  CHECK(run_compare(c, out, err) == 0);
  CHECK(out.str().find("the machine's speed changed between the runs") != std::string::npos);
  CHECK(out.str().find("--baseline-exe") != std::string::npos);

  // Fewer than kMinNormalizeCases cases: the raw round medians decide, as before.
  const json b2 = rounds_artifact({1, 1}, 5, 0.01, 7), n2 = rounds_artifact({1, 1.3}, 5, 0.01, 8);
  const CompareReport two = compare_artifacts(b2, n2, o);
  CHECK_FALSE(two.process_shift);
  CHECK(two.rows[1].basis == "rounds");
  CHECK(two.slower == 1);
}

TEST_CASE("compare: verdicts on round medians are not subject to the common-mode rule", "[cpu][bench]") {
  // Rounds are fresh processes: their medians carry the between-process variance, so a shift of
  // every case judged on them is the code's (run --rounds / --baseline-exe stay as they were).
  stats::CompareOptions o;
  auto rounds_doc = [](double factor, uint64_t seed) {
    json d = artifact(std::vector<double>(3, factor), seed);
    Philox rng(seed + 100);
    for (auto& c : d["cases"]) {
      std::vector<double> m(5);
      const double center = c["samples_s"][0].get<double>();
      for (auto& x : m) x = center * std::exp(0.01 * rng.next_normal());
      c["round_medians_s"] = m;
    }
    return d;
  };
  // Without round ids (artifacts written before them) no process correction: the raw round medians.
  const CompareReport rep = compare_artifacts(rounds_doc(1.0, 1), rounds_doc(1.3, 2), o);
  CHECK_FALSE(rep.process_shift);
  CHECK(rep.rows[0].basis == "rounds");
  CHECK(rep.common_mode.of == 0);
  CHECK(rep.slower == 3);
  CHECK(rep.unconfirmed == 0);
}

TEST_CASE("compare: the change is written as a time ratio new/base with its CI in every format", "[cpu][bench]") {
  stats::CompareOptions o;
  const CompareReport rep = compare_artifacts(artifact({1}, 1), artifact({1.2}, 2), o);
  const auto& cmp = rep.rows[0].cmp;
  const std::string change = stats::format_change(cmp);
  CHECK(change == stats::format_time_ratio(cmp.ratio) + " [" + stats::format_time_ratio(cmp.lo) + ", " +
                      stats::format_time_ratio(cmp.hi) + "]");
  CHECK(cmp.ratio == Approx(1.2).epsilon(0.01));
  const json j = json::parse(format_compare(rep, "json"));
  CHECK(j["cases"][0]["change"] == change);
  CHECK(j["cases"][0]["time_ratio"].get<double>() == cmp.ratio);
  CHECK(j["cases"][0]["time_ratio_ci"][0].get<double>() == cmp.lo);
  CHECK(j["cases"][0]["ratio"].get<double>() == cmp.ratio);  // the old field stays readable
  CHECK(j["notation"] == "time new/base [95% CI]");
  const std::string table = format_compare(rep, "table");
  CHECK(table.find("time new/base [95% CI]") != std::string::npos);
  CHECK(table.find(change) != std::string::npos);
  CHECK(format_compare(rep, "md").find("| " + change + " |") != std::string::npos);
  CHECK(cmp.reason.find("time new/base " + change + " above 1.050") == 0);
}

TEST_CASE("compare: machine formats report errors in-band on stdout", "[cpu][bench]") {
  TempFiles t;
  CompareCommand c;
  c.base = (t.dir / "missing.json").string();
  c.fresh = t.write("b.json", artifact({1}, 1));
  std::ostringstream err;
  {
    c.format = "json";
    std::ostringstream out;
    CHECK_THROWS_AS(run_compare(c, out, err), Error);
    const json j = json::parse(out.str());
    CHECK(j["error"]["category"] == "input");
    CHECK(j["error"]["exit_code"] == 2);
    CHECK(j["error"]["where"] == c.base);
    CHECK(j["error"]["message"].get<std::string>().find("no such file") != std::string::npos);
  }
  {
    c.format = "csv";
    std::ostringstream out;
    CHECK_THROWS_AS(run_compare(c, out, err), Error);
    CHECK(out.str().rfind("error,category,message,where,hint,exit_code\nerror,input,", 0) == 0);
    CHECK(out.str().find("," + c.base + ",") != std::string::npos);
    CHECK(out.str().back() == '\n');
    CHECK(out.str().substr(out.str().size() - 3) == ",2\n");
  }
  {
    // --json: the tool's error path (cli::run_tool) prints the object; run_compare adds none.
    c.format = "table";
    c.json = true;
    std::ostringstream out;
    CHECK_THROWS_AS(run_compare(c, out, err), Error);
    CHECK(out.str().empty());
    c.json = false;
  }
  {
    // A bad threshold under --format json: in-band too.
    c.format = "json";
    c.base = c.fresh;
    c.threshold = "lots";
    std::ostringstream out;
    CHECK_THROWS_AS(run_compare(c, out, err), Error);
    CHECK(json::parse(out.str())["error"]["category"] == "usage");
  }
  {
    // A person's format: stderr only.
    c.format = "table";
    std::ostringstream out;
    CHECK_THROWS_AS(run_compare(c, out, err), Error);
    CHECK(out.str().empty());
  }
}

TEST_CASE("run: an empty pack is an input error (exit 2), not '0 ok'", "[cpu][bench]") {
  TempFiles t;
  RunCommand c;
  c.pack = t.write("empty.json", json{{"schema", "rtx.benchpack.v1"}, {"name", "empty"}, {"cases", json::array()}});
  c.no_store = true;
  c.quiet = true;
  c.out = (t.dir / "out.json").string();
  std::ostringstream out, err;
  try {
    run_run(c, synth_registry(), out, err);
    FAIL("an empty pack ran");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(e.exit_code() == 2);
    CHECK(std::string(e.what()).find("pack 'empty' has no cases: nothing to run") != std::string::npos);
    CHECK(e.where() == c.pack);
  }
  CHECK_FALSE(std::filesystem::exists(c.out));  // nothing written
}
