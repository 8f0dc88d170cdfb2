// rtx-bench host-contention evidence with injected readings: the evidence arithmetic and
// thresholds, PSI parsing, the runner's windows (sequential and interleaved), the artifact's
// "host" object round trip and merge over rounds, malformed fields, and compare's undecided rule.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"

using namespace rtx;
using namespace rtx::app::bench;
using kernels::Backend;
using nlohmann::json;

kernels::Registry synth_registry();  // bench_synth.cpp

namespace {

/// A reading at wall time `wall` s with the given cumulative counters.
HostSample reading(double wall, double thread_cpu, double process_cpu, int64_t nivcsw, bool psi, uint64_t psi_us,
                   double avg10 = 0, double load1 = 0) {
  HostSample s;
  s.wall_s = wall;
  s.thread_cpu_s = thread_cpu;
  s.process_cpu_s = process_cpu;
  s.involuntary_switches = nivcsw;
  s.psi_valid = psi;
  s.psi_some_total_us = psi_us;
  s.psi_some_avg10 = avg10;
  s.load1 = load1;
  return s;
}

/// Runner options for the synthetic cases: short windows, `max_samples` samples at most, and
/// host readings from `sampler` instead of the machine's.
RunnerOptions injected(double max_time, size_t max_samples, std::function<HostSample()> sampler) {
  RunnerOptions o;
  o.max_time = max_time;
  o.min_samples = 5;
  o.max_samples = max_samples;
  o.host_sampler = std::move(sampler);
  return o;
}

/// check_bench_artifact(doc, "b.json") must throw an Input error whose text has each of `says`.
void expect_artifact_error(const json& doc, const std::vector<std::string>& says) {
  try {
    check_bench_artifact(doc, "b.json");
    FAIL("expected an error naming " << says.back());
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.category() == ErrorCategory::Input);
    for (const auto& w : says) CHECK(std::string(e.what()).find(w) != std::string::npos);
  }
}

BenchCase spin_case(const std::string& name, int64_t us) {
  BenchCase c;
  c.name = name;
  c.op = "synth_spin";
  c.variant = "cpu.spin";
  c.shape = {{"US", us}, {"NOISE", 5}};
  c.id = name;
  return c;
}

/// An artifact with one ok case "k" of log-normal samples around `center` s, with an
/// optional host object.
json artifact(double center, uint64_t seed, const json& host = nullptr) {
  Philox rng(seed);
  std::vector<double> s(40);
  for (auto& x : s) x = center * std::exp(0.01 * rng.next_normal());
  json c = {{"id", "k"}, {"status", "ok"}, {"samples_s", s}};
  if (!host.is_null()) c["host"] = host;
  return {{"schema", "rtx.bench.v1"}, {"seed", 0}, {"cases", json::array({c})}};
}

json busy_host(const std::string& reason = "measuring thread ran 43% of the window (< 80%)") {
  return {{"window_s", 1.0}, {"thread_cpu_s", 0.43}, {"threads", 1}, {"involuntary_switches", 300}, {"contended", true},
          {"reason", reason}};
}

json quiet_host() {
  return {{"window_s", 1.0}, {"thread_cpu_s", 0.99}, {"threads", 1}, {"involuntary_switches", 2}, {"contended", false},
          {"reason", ""}};
}

}  // namespace

TEST_CASE("contention evidence from injected readings: an idle window is not contended", "[cpu][bench]") {
  const HostSample a = reading(10.0, 5.0, 9.0, 100, true, 1'000'000, 0.0, 0.3);
  const HostSample b = reading(11.0, 5.99, 10.98, 103, true, 1'010'000, 0.5, 0.4);  // 1 s window
  const HostEvidence e = contention_evidence(a, b, 2, Backend::CPU);
  CHECK(e.measured);
  CHECK(e.window_s == Approx(1.0));
  CHECK(e.cpu_share() == Approx(0.99));
  CHECK(e.process_cpu_per_thread() == Approx(0.99));  // 1.98 s over 1 s x 2 threads
  CHECK(e.involuntary_switches == 3);
  CHECK(e.involuntary_per_s() == Approx(3.0));
  CHECK(e.psi_valid);
  CHECK(e.psi_stall_s == Approx(0.01));
  CHECK(e.psi_share() == Approx(0.01));
  CHECK(e.psi_avg10_max == Approx(0.5));
  CHECK(e.load1_start == Approx(0.3));
  CHECK(e.load1_end == Approx(0.4));
  CHECK_FALSE(e.contended);
  CHECK(e.reason.empty());
}

TEST_CASE("contention evidence: each threshold alone flags the window and is named", "[cpu][bench]") {
  const HostSample a = reading(0, 0, 0, 0, true, 0);
  SECTION("measuring thread preempted: 43% CPU share") {
    const HostEvidence e = contention_evidence(a, reading(2.0, 0.86, 0.86, 10, true, 20'000), 1, Backend::CPU);
    CHECK(e.cpu_share() == Approx(0.43));
    CHECK(e.contended);
    CHECK(e.reason == "measuring thread ran 43% of the window (< 80%)");
    // The CPU-share rule is not applied to CUDA cases (the thread may block in a sync).
    CHECK_FALSE(contention_evidence(a, reading(2.0, 0.86, 0.86, 10, true, 20'000), 1, Backend::CUDA).contended);
  }
  SECTION("PSI cpu some stall 38% of the window, on any backend") {
    const HostEvidence e = contention_evidence(a, reading(1.0, 0.97, 0.97, 5, true, 380'000, 37.0), 1, Backend::CUDA);
    CHECK(e.psi_share() == Approx(0.38));
    CHECK(e.contended);
    CHECK(e.reason == "PSI cpu stall 38% of the window (> 10%)");
  }
  SECTION("just below / above the PSI threshold") {
    CHECK_FALSE(contention_evidence(a, reading(1.0, 1.0, 1.0, 0, true, 99'000), 1, Backend::CPU).contended);
    CHECK(contention_evidence(a, reading(1.0, 1.0, 1.0, 0, true, 101'000), 1, Backend::CPU).contended);
  }
  SECTION("involuntary switches: 250/s") {
    const HostEvidence e = contention_evidence(a, reading(2.0, 1.96, 1.96, 500, false, 0), 1, Backend::CPU);
    CHECK(e.involuntary_per_s() == Approx(250));
    CHECK_FALSE(e.psi_valid);
    CHECK(e.contended);
    CHECK(e.reason == "250 involuntary context switches/s (> 100)");
    // 80/s (a busy-ish but idle CI runner reads up to ~30/s) is below the rate.
    CHECK_FALSE(contention_evidence(a, reading(2.0, 1.98, 1.98, 160, false, 0), 1, Backend::CPU).contended);
  }
  SECTION("all three, in a fixed order") {
    const HostEvidence e = contention_evidence(a, reading(1.0, 0.5, 0.5, 400, true, 450'000), 1, Backend::CPU);
    CHECK(e.reason ==
          "measuring thread ran 50% of the window (< 80%), PSI cpu stall 45% of the window (> 10%), "
          "400 involuntary context switches/s (> 100)");
  }
  SECTION("the process's own threads on (nearly) all its CPUs: oversubscribed, not contended") {
    // 1 s on 2 CPUs: the process used 1.94 CPU-s (97%), its measuring thread 0.55 s, PSI 32%,
    // 1400 switches/s: what the cpu.blas backward cases read with OpenBLAS beside libgomp.
    HostSample b = a, x = reading(1.0, 0.55, 1.94, 1400, true, 320'000);
    b.cpus = x.cpus = 2;
    const HostEvidence e = contention_evidence(b, x, 2, Backend::CPU);
    CHECK(e.machine_share() == Approx(0.97));
    CHECK_FALSE(e.contended);
    CHECK(e.reason.empty());
    CHECK(e.oversubscribed);
    CHECK(e.oversubscription ==
          "measuring thread ran 55% of the window (< 80%), PSI cpu stall 32% of the window (> 10%), 1400 involuntary "
          "context switches/s (> 100); the process itself used 97% of its 2 CPUs (its threads outnumbered them)");
    // A CPU-bound neighbour leaves 2 threads 2/3 of 2 CPUs (1.33 CPU-s): contended as before.
    x = reading(1.0, 0.55, 1.33, 1400, true, 320'000);
    x.cpus = 2;
    const HostEvidence n = contention_evidence(b, x, 2, Backend::CPU);
    CHECK(n.machine_share() == Approx(0.665));
    CHECK(n.contended);
    CHECK_FALSE(n.oversubscribed);
    // Just below / at kSelfSaturatedShare; unknown CPUs (0) never exempts.
    x = reading(1.0, 0.55, 1.79, 1400, true, 320'000);
    x.cpus = 2;
    CHECK(contention_evidence(b, x, 2, Backend::CPU).contended);
    x = reading(1.0, 0.55, 1.80, 1400, true, 320'000);
    x.cpus = 2;
    CHECK_FALSE(contention_evidence(b, x, 2, Backend::CPU).contended);
    CHECK(contention_evidence(a, reading(1.0, 0.55, 1.94, 1400, true, 320'000), 2, Backend::CPU).contended);
    // A quiet window is neither.
    x = reading(1.0, 0.99, 1.98, 20, true, 5'000);
    x.cpus = 2;
    CHECK_FALSE(contention_evidence(b, x, 2, Backend::CPU).oversubscribed);
    // The artifact records it and reads it back; bad types are input errors naming the field.
    const json j = to_json(e);
    CHECK(j["cpus"] == 2);
    CHECK(j["machine_share"].get<double>() == Approx(0.97));
    CHECK(j["oversubscribed"] == true);
    CHECK(j["oversubscription"] == e.oversubscription);
    const HostEvidence back = host_evidence_from_json(j, "a.json", "/cases/0/host");
    CHECK(back.cpus == 2);
    CHECK(back.oversubscribed);
    CHECK(back.oversubscription == e.oversubscription);
    auto bad = [&](const char* key, const json& v, const std::string& what) {
      json k = j;
      k[key] = v;
      CHECK_THROWS_WITH(host_evidence_from_json(k, "a.json", "/cases/0/host"),
                        Catch::Contains(std::string("a.json: field '/cases/0/host/") + key + "'") && Catch::Contains(what));
    };
    bad("cpus", 0, "expected an integer in [1, 65536]");
    bad("cpus", "2", "expected an integer in [1, 65536]");
    bad("oversubscribed", 1, "expected boolean");
    bad("oversubscription", 7, "expected string");
    bad("machine_share", -1, "finite number >= 0");
  }
  SECTION("a window shorter than kMinJudgedWindow is recorded, not judged; it takes the run's verdict") {
    HostEvidence e = contention_evidence(a, reading(0.02, 0.001, 0.001, 10, true, 19'000), 1, Backend::CPU);
    CHECK(e.window_s == Approx(0.02));
    CHECK(e.cpu_share() == Approx(0.05));
    CHECK_FALSE(e.contended);
    CHECK(e.judged_on.empty());
    const HostEvidence short_run = contention_evidence(a, reading(0.03, 0.0, 0.0, 0, true, 0), 1, Backend::CPU);
    HostEvidence no_psi = contention_evidence(a, reading(0.02, 0.001, 0.001, 10, false, 0), 1, Backend::CPU);
    inherit_run_contention(no_psi, short_run);  // the run too short as well, no PSI: not judged
    CHECK(no_psi.judged_on.empty());
    CHECK_FALSE(no_psi.contended);
    // ... with PSI as well: avg10 (mostly the 10 s before the run) is recorded, not a verdict.
    HostEvidence e34 = contention_evidence(a, reading(0.02, 0.02, 0.02, 0, true, 0, 34.0), 1, Backend::CPU);
    inherit_run_contention(e34, short_run);
    CHECK(e34.judged_on.empty());
    CHECK_FALSE(e34.contended);
    CHECK(e34.reason.empty());
    CHECK(e34.psi_avg10_max == Approx(34.0));
    CHECK(to_json(e34)["judged_on"] == "none");
    CHECK(to_json(e34)["psi_cpu_some_avg10_pct"].get<double>() == Approx(34.0));
    const HostEvidence quiet_run = contention_evidence(a, reading(2.0, 1.98, 1.98, 4, true, 10'000), 1, Backend::CPU);
    HostEvidence e2 = e;
    inherit_run_contention(e2, quiet_run);
    CHECK(e2.judged_on == "run");
    CHECK_FALSE(e2.contended);
    const HostEvidence busy_run = contention_evidence(a, reading(2.0, 0.7, 0.7, 4, true, 10'000), 1, Backend::CPU);
    inherit_run_contention(e, busy_run);
    CHECK(e.judged_on == "run");
    CHECK(e.contended);
    CHECK(e.reason == "whole run (2 s; this case's window is too short to judge alone): measuring thread ran 35% of the window (< 80%)");
    // A case judged on its own window keeps its verdict.
    HostEvidence own = contention_evidence(a, reading(1.0, 0.99, 0.99, 0, true, 0), 1, Backend::CPU);
    inherit_run_contention(own, busy_run);
    CHECK(own.judged_on == "case");
    CHECK_FALSE(own.contended);
  }
  SECTION("a reason never shows a value equal to its threshold") {
    // 100 switches in 0.996 s: 100.4/s, which "%.0f" printed as "100 ... (> 100)".
    HostEvidence e = contention_evidence(a, reading(0.996, 0.996, 0.996, 100, false, 0), 1, Backend::CPU);
    CHECK(e.reason == "100.4 involuntary context switches/s (> 100)");
    // CPU share 0.7996 ("80%" before) and PSI 10.04% ("10%" before).
    e = contention_evidence(a, reading(1.0, 0.7996, 0.7996, 0, true, 100'400), 1, Backend::CPU);
    CHECK(e.reason == "measuring thread ran 79.96% of the window (< 80%), PSI cpu stall 10.04% of the window (> 10%)");
    // Far from the threshold, no decimals.
    e = contention_evidence(a, reading(1.0, 0.5, 0.5, 250, false, 0), 1, Backend::CPU);
    CHECK(e.reason == "measuring thread ran 50% of the window (< 80%), 250 involuntary context switches/s (> 100)");
  }
  SECTION("a PSI delta above the window (read skew) is clamped: the share cannot exceed 1") {
    const HostEvidence e = contention_evidence(a, reading(1.0, 1.0, 1.0, 0, true, 1'045'000), 1, Backend::CPU);
    CHECK(e.psi_stall_s == Approx(1.0));
    CHECK(e.psi_share() == Approx(1.0));
    HostEvidence read;
    read.window_s = 1.0;
    read.psi_stall_s = 1.045;  // as written by a build without the clamp
    CHECK(read.psi_share() == 1.0);
  }
  SECTION("involuntary switches need a count floor as well as the rate") {
    // 9 switches in 0.06 s is 150/s but below kMinInvoluntarySwitches: ordinary preemptions.
    CHECK_FALSE(contention_evidence(a, reading(0.06, 0.06, 0.06, 9, false, 0), 1, Backend::CPU).contended);
    CHECK(contention_evidence(a, reading(0.06, 0.06, 0.06, 10, false, 0), 1, Backend::CPU).contended);
  }
  SECTION("PSI missing on either side of a window: not used") {
    const HostEvidence e = contention_evidence(a, reading(1.0, 1.0, 1.0, 0, false, 900'000), 1, Backend::CPU);
    CHECK_FALSE(e.psi_valid);
    CHECK_FALSE(e.contended);
  }
}

TEST_CASE("PSI text parsing", "[cpu][bench]") {
  const auto p = telemetry::parse_cpu_pressure(
      "some avg10=4.19 avg60=2.30 avg300=0.71 total=6130136070\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  CHECK(p.valid);
  CHECK(p.some_avg10 == Approx(4.19));
  CHECK(p.some_avg60 == Approx(2.30));
  CHECK(p.some_total_us == 6130136070ull);
  CHECK_FALSE(telemetry::parse_cpu_pressure("").valid);
  CHECK_FALSE(telemetry::parse_cpu_pressure("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").valid);
  CHECK_FALSE(telemetry::parse_cpu_pressure("some avg10=x avg60=0.00 avg300=0.00 total=0\n").valid);
  CHECK_FALSE(telemetry::read_cpu_pressure("/nonexistent/pressure/cpu").valid);
}

TEST_CASE("the runner records one window per sampling visit through the injected reader", "[cpu][bench]") {
  const auto reg = synth_registry();
  // Each reading advances 0.25 s of wall time and 0.1 s of thread CPU: every window (before,
  // after) is 0.25 s wall with 40% CPU share.
  int calls = 0;
  RunnerOptions o = injected(0.05, 20, [&calls] {
    ++calls;
    return reading(0.25 * calls, 0.1 * calls, 0.1 * calls, calls, true, static_cast<uint64_t>(50'000) * calls);
  });
  SECTION("sequential: one window per case") {
    const RunResult r = run_cases({spin_case("a", 30), spin_case("b", 30)}, reg, o);
    CHECK(calls == 6);  // the whole run's first and last reading, and two per case
    CHECK(r.host.window_s == Approx(1.25));  // readings 1 and 6
    CHECK(r.host.contended);
    for (const CaseResult& c : r.cases) {
      CHECK(c.host.judged_on == "case");
      CHECK(c.host.measured);
      CHECK(c.host.window_s == Approx(0.25));
      CHECK(c.host.cpu_share() == Approx(0.4));
      CHECK(c.host.psi_share() == Approx(0.2));
      CHECK(c.host.involuntary_switches == 1);
      CHECK(c.host.contended);
      CHECK(c.host.reason.find("measuring thread ran 40% of the window") != std::string::npos);
      CHECK(c.host.reason.find("PSI cpu stall 20%") != std::string::npos);
    }
  }
  SECTION("interleaved: windows summed over the batches") {
    o.interleave = true;
    o.batch = 2;
    const RunResult r = run_cases({spin_case("a", 30), spin_case("b", 30)}, reg, o);
    size_t visits_a = 0;
    for (size_t i : r.schedule) visits_a += i == 0;
    REQUIRE(visits_a >= 2);
    CHECK(r.cases[0].host.window_s == Approx(0.25 * static_cast<double>(visits_a)));
    CHECK(r.cases[0].host.cpu_share() == Approx(0.4));
    CHECK(r.cases[0].host.contended);
    CHECK(static_cast<size_t>(calls) == 2 * r.schedule.size() + 2);
  }
}

TEST_CASE("the artifact's host object round-trips; merged rounds keep per-round verdicts", "[cpu][bench]") {
  const auto reg = synth_registry();
  int calls = 0;
  double share = 0.99;  // thread CPU per 1 s of wall
  RunnerOptions o = injected(0.05, 20, [&] {
    ++calls;
    return reading(1.0 * calls, share * calls, share * calls, 0, true, 1000u * static_cast<uint64_t>(calls), 0.1 * calls, 0.5);
  });
  ArtifactMeta m;
  m.pack_name = "synth";
  m.load1_start = 0.25;
  m.load1_end = 1.5;
  const json quiet = to_json(run_cases({spin_case("k", 30)}, reg, o), m);
  calls = 0;
  share = 0.3;
  const json busy = to_json(run_cases({spin_case("k", 30)}, reg, o), m);

  const json q = check_bench_artifact(quiet, "q.json");
  REQUIRE(q["cases"][0].contains("host"));
  const json& h = q["cases"][0]["host"];
  CHECK(h["window_s"].get<double>() == Approx(1.0));
  CHECK(h["cpu_share"].get<double>() == Approx(0.99));
  CHECK(h["psi_cpu_some_share"].get<double>() == Approx(0.001));
  CHECK(h["contended"] == false);
  CHECK(h["judged_on"] == "case");
  CHECK(q["host"]["run"]["window_s"].get<double>() == Approx(3.0));  // readings 1 and 4 of the run
  CHECK(q["host"]["load1_start"].get<double>() == Approx(0.25));
  CHECK(q["host"]["load1_end"].get<double>() == Approx(1.5));
  CHECK(q["host"]["thresholds"]["cpu_share_min"].get<double>() == Approx(kMinCpuShare));
  CHECK(q["summary"]["contended"] == 0);
  const HostEvidence back = host_evidence_from_json(h, "q.json", "/cases/0/host");
  CHECK(back.thread_cpu_s == Approx(0.99));
  CHECK(back.psi_stall_s == Approx(0.001));
  CHECK(back.psi_valid);
  CHECK_FALSE(back.contended);
  CHECK(back.judged_on == "case");
  CHECK(busy["cases"][0]["host"]["contended"] == true);
  CHECK(busy["summary"]["contended"] == 1);
  CHECK(format_table(busy).find("busy-host") != std::string::npos);
  CHECK(format_table(busy).find("1 measured on a busy host") != std::string::npos);
  CHECK(format_table(quiet).find("busy") == std::string::npos);

  // Three rounds, the second busy: windows summed, that round named, the case contended.
  const RunResult merged = merge_rounds({quiet, busy, quiet});
  const HostEvidence& mh = merged.cases[0].host;
  CHECK(mh.rounds == 3);
  CHECK(mh.rounds_contended == 1);
  CHECK(mh.window_s == Approx(3.0));
  CHECK(mh.thread_cpu_s == Approx(0.99 + 0.3 + 0.99));
  CHECK(mh.contended);
  CHECK(mh.reason.rfind("round 2/3: measuring thread ran 30% of the window", 0) == 0);
  const json mj = to_json(merged, m);
  CHECK(mj["cases"][0]["host"]["rounds_contended"] == 1);
  CHECK_NOTHROW(check_bench_artifact(mj, "merged.json"));
  CHECK_FALSE(merge_rounds({quiet, quiet}).cases[0].host.contended);
  // A round from a build without host evidence contributes nothing (and does not throw).
  json old = quiet;
  old["cases"][0].erase("host");
  const RunResult mixed = merge_rounds({old, quiet});
  CHECK(mixed.cases[0].host.rounds == 1);
  CHECK(mixed.cases[0].host.window_s == Approx(1.0));
}

TEST_CASE("a malformed host field is an input error naming the file and field", "[cpu][bench]") {
  auto expect = [](const json& doc, const std::string& field) { expect_artifact_error(doc, {"b.json", field}); };
  json h = busy_host();
  h["contended"] = "yes";
  expect(artifact(1e-3, 1, h), "/cases/0/host/contended");
  h = busy_host();
  h.erase("contended");
  expect(artifact(1e-3, 1, h), "/cases/0/host/contended");
  h = busy_host();
  h["window_s"] = -1.0;
  expect(artifact(1e-3, 1, h), "/cases/0/host/window_s");
  h = busy_host();
  h["involuntary_switches"] = 2.5;
  expect(artifact(1e-3, 1, h), "/cases/0/host/involuntary_switches");
  h = busy_host();
  h["reason"] = 7;
  expect(artifact(1e-3, 1, h), "/cases/0/host/reason");
  h = busy_host();
  h["threads"] = -1;
  expect(artifact(1e-3, 1, h), "/cases/0/host/threads");
  h = busy_host();
  h["judged_on"] = "vibes";
  expect(artifact(1e-3, 1, h), "/cases/0/host/judged_on");
  json with_run = artifact(1e-3, 1);
  with_run["host"] = {{"run", {{"window_s", "long"}, {"contended", false}}}};
  expect(with_run, "/host/run/window_s");
  expect(artifact(1e-3, 1, json("busy")), "/cases/0/host");
  json doc = artifact(1e-3, 1);
  doc["host"] = 3;
  expect(doc, "/host");
}

TEST_CASE("compare: a case measured on a busy host is undecided, not slower", "[cpu][bench]") {
  stats::CompareOptions o;
  // The new side is 94x slower (the A/A of the trial read +9315%) and was measured busy.
  const json base = artifact(1e-3, 1, quiet_host()), fresh = artifact(94e-3, 2, busy_host());
  CompareReport rep = compare_artifacts(base, fresh, o, "b.json", "n.json");
  REQUIRE(rep.rows.size() == 1);
  CHECK(rep.rows[0].cmp.verdict == stats::Verdict::Slower);  // what the statistics alone say
  CHECK(rep.rows[0].busy == "host busy during new: measuring thread ran 43% of the window (< 80%)");
  CHECK(rep.undecided == 1);
  CHECK(rep.slower == 0);
  CHECK(rep.same + rep.faster + rep.ambiguous == 0);
  const json j = json::parse(format_compare(rep, "json"));
  CHECK(j["cases"][0]["verdict"] == "undecided");
  CHECK(j["cases"][0]["measured_verdict"] == "slower");
  CHECK(j["cases"][0]["reason"].get<std::string>().find("host busy during new") != std::string::npos);
  CHECK(j["summary"]["undecided"] == 1);
  CHECK(j["summary"]["slower"] == 0);
  CHECK_FALSE(j.contains("note"));  // no single-process slower verdict was given
  const std::string table = format_compare(rep, "table");
  CHECK(table.find("undecided (busy host)") != std::string::npos);
  CHECK(table.find("undecided (busy host): host busy during new: measuring thread ran 43%") != std::string::npos);
  CHECK(table.find("1 UNDECIDED: measured on a busy host") != std::string::npos);
  CHECK(format_compare(rep, "md").find("**undecided** (busy host)") != std::string::npos);
  CHECK(format_compare(rep, "csv").find(",undecided,host busy during new: measuring thread ran 43% of the window (< 80%),slower") !=
        std::string::npos);

  // Busy baseline, busy both: named per side.
  rep = compare_artifacts(artifact(1e-3, 1, busy_host("PSI cpu stall 43% of the window (> 10%)")), artifact(1e-3, 2), o);
  CHECK(rep.rows[0].busy == "host busy during base: PSI cpu stall 43% of the window (> 10%)");
  CHECK(rep.undecided == 1);
  CHECK(rep.same == 0);  // even an A/A that looks the same is not vouched for
  rep = compare_artifacts(artifact(1e-3, 1, busy_host("a")), artifact(1e-3, 2, busy_host("b")), o);
  CHECK(rep.rows[0].busy == "host busy during base: a; host busy during new: b");

  // Old artifacts (no host objects) and quiet ones are judged as before: on one process per
  // side, slower but unconfirmed (not counted).
  rep = compare_artifacts(artifact(1e-3, 1), artifact(1.3e-3, 2), o);
  CHECK(rep.rows[0].cmp.verdict == stats::Verdict::Slower);
  CHECK(rep.unconfirmed == 1);
  CHECK(rep.undecided == 0);
  rep = compare_artifacts(artifact(1e-3, 1), artifact(1.3e-3, 2, quiet_host()), o);
  CHECK(rep.unconfirmed == 1);
  CHECK(rep.rows[0].busy.empty());
}

TEST_CASE("run_compare exits 0 for an undecided case and says why on stderr", "[cpu][bench]") {
  const auto dir = std::filesystem::temp_directory_path() / ("rtx-contention-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string b = (dir / "b.json").string(), n = (dir / "n.json").string();
  std::ofstream(b) << artifact(1e-3, 1).dump();
  std::ofstream(n) << artifact(94e-3, 2, busy_host()).dump();
  CompareCommand c;
  c.base = b;
  c.fresh = n;
  std::ostringstream out, err;
  CHECK(run_compare(c, out, err) == 0);
  CHECK(out.str().find("undecided (busy host): host busy during new") != std::string::npos);
  CHECK(err.str().find("1 case(s) undecided: the host was busy") != std::string::npos);
  // The same pair without the evidence, measured in rounds, is a regression: exit 1 (one
  // process per side would be unconfirmed: bench_compare_test).
  auto with_rounds = [](json d, double center) {
    d["cases"][0]["round_medians_s"] = {center, center * 1.001, center * 0.999, center * 1.002, center * 0.998};
    return d;
  };
  std::ofstream(b) << with_rounds(artifact(1e-3, 1), 1e-3).dump();
  std::ofstream(n) << with_rounds(artifact(94e-3, 2), 94e-3).dump();
  std::ostringstream out2, err2;
  CHECK(run_compare(c, out2, err2) == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a run shorter than kMinJudgedWindow leaves its cases unjudged; host.run and summary agree", "[cpu][bench]") {
  const auto reg = synth_registry();
  // Every reading advances 1 ms; PSI avg10 reads 18% (a busy period 15 s before an idle run)
  // and the stall share 90%: the whole run is 5 ms, too short to judge anything on.
  int calls = 0;
  const RunnerOptions o = injected(0.05, 5, [&calls] {
    ++calls;
    return reading(0.001 * calls, 0.001 * calls, 0.001 * calls, calls, true, 900u * static_cast<uint64_t>(calls), 18.0);
  });
  const RunResult r = run_cases({spin_case("a", 30), spin_case("b", 30)}, reg, o);
  CHECK(r.host.window_s == Approx(0.005));
  CHECK(r.host.judged_on.empty());
  CHECK_FALSE(r.host.contended);
  for (const CaseResult& c : r.cases) {
    CHECK(c.host.judged_on.empty());
    CHECK_FALSE(c.host.contended);
    CHECK(c.host.psi_avg10_max == Approx(18.0));  // recorded
  }
  const json doc = to_json(r, ArtifactMeta{});
  CHECK(doc["host"]["run"]["judged_on"] == "none");
  CHECK(doc["host"]["run"]["contended"] == false);
  CHECK(doc["summary"]["contended"] == 0);
  CHECK(doc["host"]["contended_cases"] == 0);
  CHECK(doc["host"]["unjudged_cases"] == 2);
  CHECK(doc["cases"][0]["host"]["psi_cpu_some_avg10_pct"].get<double>() == Approx(18.0));
  CHECK_THAT(format_table(doc), Catch::Contains("2 not judged for contention (the measured span, " + format_seconds(0.005) +
                                                " of warm-ups and samples, is under " + format_seconds(0.05) +
                                                ": too short to judge; --min-samples measures longer)"));
  CHECK(format_table(doc).find("busy") == std::string::npos);
}

TEST_CASE("the run window spans the warm-ups, not only the sampling windows", "[cpu][bench]") {
  const auto reg = synth_registry();
  // Real wall clock, idle counters: the run window must include the 5000 warm-up runs of
  // 20 us (synth_spin's run(): >= 100 ms) that lie outside the case's sampling window.
  RunnerOptions o = injected(0.5, 5, [] {
    HostSample s = sample_host();
    s.thread_cpu_s = s.process_cpu_s = s.wall_s;  // never preempted as far as the rule sees
    s.involuntary_switches = 0;
    s.psi_valid = false;
    s.cpu_busy.valid = false;  // no /proc/stat: the shared CI host's neighbours must not decide here
    return s;
  });
  o.warmup = 5000;
  const RunResult r = run_cases({spin_case("a", 30)}, reg, o);
  REQUIRE(r.cases[0].status == "ok");
  CHECK(r.cases[0].host.window_s < r.host.window_s - 0.09);
  CHECK(r.host.window_s >= 0.05);
  CHECK(r.host.judged_on == "case");
  CHECK_FALSE(r.host.contended);
}

TEST_CASE("merged rounds carry a merged host.run; a merged PSI share cannot exceed 1", "[cpu][bench]") {
  auto round = [](bool busy, double stall) {
    json h = busy ? busy_host("PSI cpu stall 90% of the window (> 10%)") : quiet_host();
    h["psi_cpu_some_stall_s"] = stall;  // window_s is 1.0: 1.045 was written by a build without the clamp
    json doc = artifact(1e-3, 1, h);
    json run = h;
    run["window_s"] = 2.0;
    doc["host"] = {{"run", run}};
    return doc;
  };
  const RunResult m = merge_rounds({round(false, 1.045), round(true, 1.045), round(false, 0.5)});
  const HostEvidence& c = m.cases[0].host;
  CHECK(c.window_s == Approx(3.0));
  CHECK(c.psi_stall_s == Approx(2.5));  // 1 + 1 + 0.5: each round clamped to its window
  CHECK(c.psi_share() <= 1.0);
  REQUIRE(m.host.measured);
  CHECK(m.host.rounds == 3);
  CHECK(m.host.rounds_contended == 1);
  CHECK(m.host.window_s == Approx(6.0));
  CHECK(m.host.contended);
  CHECK(m.host.reason == "round 2/3: PSI cpu stall 90% of the window (> 10%)");
  const json doc = to_json(m, ArtifactMeta{});
  REQUIRE(doc["host"].contains("run"));
  CHECK(doc["host"]["run"]["rounds"] == 3);
  CHECK(doc["host"]["run"]["rounds_contended"] == 1);
  CHECK(doc["cases"][0]["host"]["psi_cpu_some_share"].get<double>() == Approx(2.5 / 3.0));
  CHECK_NOTHROW(check_bench_artifact(doc, "merged.json"));
}

TEST_CASE("malformed counts and host fields: threads, rounds_contended, avg10, thresholds, summary", "[cpu][bench]") {
  auto expect = [](const json& doc, const std::string& field) {
    expect_artifact_error(doc, {"b.json: field '" + field + "'"});
  };
  json h = busy_host();
  h["threads"] = int64_t{1} << 40;
  expect(artifact(1e-3, 1, h), "/cases/0/host/threads");
  h["threads"] = 0;
  expect(artifact(1e-3, 1, h), "/cases/0/host/threads");
  h["threads"] = 65536;
  CHECK_NOTHROW(check_bench_artifact(artifact(1e-3, 1, h), "b.json"));
  h = busy_host();
  h["rounds"] = 3;
  h["rounds_contended"] = 4;
  expect(artifact(1e-3, 1, h), "/cases/0/host/rounds_contended");
  h["rounds_contended"] = 3;
  CHECK_NOTHROW(check_bench_artifact(artifact(1e-3, 1, h), "b.json"));
  h = busy_host();
  h["psi_cpu_some_avg10_pct"] = "hot";  // no psi_cpu_some_stall_s: checked all the same
  expect(artifact(1e-3, 1, h), "/cases/0/host/psi_cpu_some_avg10_pct");
  h = busy_host();
  h["psi_cpu_some_share"] = "x";
  expect(artifact(1e-3, 1, h), "/cases/0/host/psi_cpu_some_share");
  json doc = artifact(1e-3, 1);
  doc["host"] = {{"thresholds", "x"}};
  expect(doc, "/host/thresholds");
  doc["host"] = {{"contended_cases", -1}};
  expect(doc, "/host/contended_cases");
  doc["host"] = {{"load1_start", "high"}};
  expect(doc, "/host/load1_start");
  doc = artifact(1e-3, 1);
  for (const json& v : {json("x"), json(2.5), json(-3)}) {
    doc["summary"] = {{"contended", v}};
    expect(doc, "/summary/contended");
  }
  doc["summary"] = {{"ok", "x"}};
  expect(doc, "/summary/ok");
  doc["summary"] = {{"ok", 1}, {"contended", 2}};
  CHECK(format_table(check_bench_artifact(doc, "b.json")).find("2 measured on a busy host") != std::string::npos);
}

namespace {

/// An artifact of `rounds` rounds: case "k" with 5 samples per round around `center`,
/// round_medians_s, and a host object with rounds / rounds_contended; `pair` as ab.pair_id.
json rounds_artifact(double center, uint64_t seed, size_t rounds, size_t busy_rounds, const std::string& role,
                     const std::string& pair) {
  Philox rng(seed);
  std::vector<double> s, med;
  for (size_t r = 0; r < rounds; ++r) {
    std::vector<double> x(5);
    for (auto& v : x) v = center * std::exp(0.01 * rng.next_normal());
    med.push_back(stats::median(x));
    s.insert(s.end(), x.begin(), x.end());
  }
  json h = busy_rounds ? busy_host("round 1/" + std::to_string(rounds) + ": PSI cpu stall 60% of the window (> 10%)") : quiet_host();
  h["rounds"] = rounds;
  h["rounds_contended"] = busy_rounds;
  json c = {{"id", "k"}, {"status", "ok"}, {"samples_s", s}, {"round_medians_s", med}, {"host", h}};
  json c2 = c;
  c2["id"] = "k2";
  json doc = {{"schema", "rtx.bench.v1"}, {"seed", 0}, {"cases", json::array({c, c2})}};
  if (!pair.empty()) doc["ab"] = {{"role", role}, {"pair_id", pair}, {"order", "ABBA rounds"}};
  return doc;
}

}  // namespace

TEST_CASE("compare: the two sides of one interleaved ABBA run are judged despite a busy host", "[cpu][bench]") {
  stats::CompareOptions o;
  o.threshold = 0.10;
  // New 30% slower, busy in 7 of its 20 rounds and 5 of the baseline's.
  const json base = rounds_artifact(1e-3, 1, 20, 5, "baseline", "p1"), fresh = rounds_artifact(1.3e-3, 2, 20, 7, "new", "p1");
  CompareReport rep = compare_artifacts(base, fresh, o);
  REQUIRE(rep.rows.size() == 2);
  CHECK(rep.rows[0].basis == "rounds");
  CHECK(rep.rows[0].busy.empty());
  CHECK(rep.rows[0].balanced == "host busy in 12/40 rounds; interleaved ABBA rounds balance it");
  CHECK(rep.slower == 2);
  CHECK(rep.undecided == 0);
  CHECK(rep.balanced == 2);
  const json j = json::parse(format_compare(rep, "json"));
  CHECK(j["cases"][0]["verdict"] == "slower");
  CHECK(j["cases"][0]["host_note"] == "host busy in 12/40 rounds; interleaved ABBA rounds balance it");
  CHECK(j["summary"]["balanced"] == 2);
  const std::string table = format_compare(rep, "table");
  CHECK(table.find("slower (busy host, ABBA)") != std::string::npos);
  CHECK(table.find("2 judged despite a busy host (interleaved ABBA rounds)") != std::string::npos);

  // Separate runs (different or no pair ids), or an ABBA pair compared with itself: undecided.
  for (const auto& [b, n] : {std::pair<json, json>{base, rounds_artifact(1.3e-3, 2, 20, 7, "new", "p2")},
                             std::pair<json, json>{rounds_artifact(1e-3, 1, 20, 5, "", ""), rounds_artifact(1.3e-3, 2, 20, 7, "", "")},
                             std::pair<json, json>{fresh, fresh}}) {
    rep = compare_artifacts(b, n, o);
    CHECK(rep.undecided == 2);
    CHECK(rep.slower == 0);
    CHECK(rep.balanced == 0);
  }
  // The same pair but too few rounds to judge on round medians: today's rule.
  rep = compare_artifacts(rounds_artifact(1e-3, 1, 2, 1, "baseline", "p3"), rounds_artifact(1.3e-3, 2, 2, 1, "new", "p3"), o);
  CHECK(rep.rows[0].basis == "samples");
  CHECK(rep.undecided == 2);
}

TEST_CASE("compare output: a short verdict cell, each reason once below, csv reason and measured_verdict", "[cpu][bench]") {
  stats::CompareOptions o;
  const json base = rounds_artifact(1e-3, 1, 1, 0, "", ""), fresh = rounds_artifact(1.3e-3, 2, 1, 1, "", "");
  const CompareReport rep = compare_artifacts(base, fresh, o);
  REQUIRE(rep.undecided == 2);
  const std::string reason = "host busy during new: round 1/1: PSI cpu stall 60% of the window (> 10%)";
  auto occurrences = [](const std::string& s, const std::string& x) {
    size_t n = 0;
    for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + 1)) ++n;
    return n;
  };
  for (const char* f : {"table", "md"}) {
    const std::string t = format_compare(rep, f);
    INFO(t);
    CHECK(occurrences(t, reason) == 1);
    CHECK(occurrences(t, "undecided (busy host)") == (std::string(f) == "table" ? 3u : 1u));  // 2 cells + the list
    CHECK(t.find("cases: k, k2") != std::string::npos);
  }
  CHECK(occurrences(format_compare(rep, "md"), "**undecided** (busy host)") == 2);
  std::istringstream csv(format_compare(rep, "csv"));
  std::string head, row;
  std::getline(csv, head);
  std::getline(csv, row);
  CHECK(head == "case,base_median_s,new_median_s,ratio,ratio_lo,ratio_hi,p,basis,verdict,reason,measured_verdict");
  CHECK(row.rfind("k,", 0) == 0);
  CHECK(row.find(",samples,undecided," + reason + ",slower") != std::string::npos);
}

TEST_CASE("the start-time busy-host look judges PSI stall as a case window does, not the load average", "[cpu][bench]") {
  auto psi = [](uint64_t total_us, bool valid = true) {
    telemetry::CpuPressure p;
    p.valid = valid;
    p.some_total_us = total_us;
    return p;
  };
  // 50 ms of stall in a 0.2 s look: 25% > 10%.
  const std::string busy = telemetry::busy_host_verdict(psi(1'000'000), psi(1'050'000), 0.2, 0.3, 2);
  CHECK(busy == "PSI cpu stall 25.0% of a 0.20 s look (> 10%; 1-minute load average 0.30 on 2 CPUs): "
                "other work competes with measurements");
  // 10 ms of 0.2 s (5%): quiet now, even though a build that just ended left the load at 5.
  CHECK(telemetry::busy_host_verdict(psi(1'000'000), psi(1'010'000), 0.2, 5.0, 2).empty());
  // The same threshold as rtx-bench's cases.
  CHECK(app::bench::kMaxPsiStallShare == telemetry::kBusyPsiStallShare);
  CHECK(telemetry::busy_host_verdict(psi(0), psi(20'000), 0.2, 0, 2).empty());  // exactly 10%: not above
  CHECK_FALSE(telemetry::busy_host_verdict(psi(0), psi(20'001), 0.2, 0, 2).empty());
  // A stall total beyond the look (clock skew between the reads) is clamped to 100%.
  CHECK_THAT(telemetry::busy_host_verdict(psi(0), psi(900'000), 0.2, 0, 2), Catch::StartsWith("PSI cpu stall 100.0% of"));
  // No PSI (or a counter that went backwards): the load-average rule, more than half the CPUs.
  CHECK(telemetry::busy_host_verdict(psi(0, false), psi(0, false), 0.2, 1.5, 2) ==
        "1-minute load average 1.50 on 2 CPUs (no PSI to look with): other work competes with measurements");
  CHECK(telemetry::busy_host_verdict(psi(0, false), psi(0, false), 0.2, 1.0, 2).empty());
  CHECK_FALSE(telemetry::busy_host_verdict(psi(500), psi(100), 0.2, 1.5, 2).empty());
  CHECK(telemetry::busy_host_verdict(psi(500), psi(100), 0.2, 0.5, 2).empty());
}

// ---- busy rounds left out of merged cases, the change-vs-medians footnote, unjudged cases ----

namespace {

/// Round artifacts of case "k" (40 samples around `center` s, seed = round): rounds whose
/// 1-based number is in `busy` carry busy_host("round N evidence") and are 100x slower.
std::vector<json> round_docs(size_t rounds, const std::vector<size_t>& busy, double center = 1e-3) {
  std::vector<json> out;
  for (size_t k = 1; k <= rounds; ++k) {
    const bool b = std::find(busy.begin(), busy.end(), k) != busy.end();
    out.push_back(artifact(b ? 100 * center : center, k, b ? busy_host("round " + std::to_string(k) + " evidence") : quiet_host()));
  }
  return out;
}

/// The merged artifact of `docs`, as `run --rounds` writes it, checked.
json merged_doc(const std::vector<json>& docs) {
  ArtifactMeta m;
  m.rounds = docs.size();
  return check_bench_artifact(to_json(merge_rounds(docs), m), "merged.json");
}

}  // namespace

TEST_CASE("merged rounds: busy rounds are left out when at least 3 quiet rounds and half of all remain", "[cpu][bench]") {
  // The rule by hand: (rounds, busy rounds) -> judged on the quiet ones?
  struct Row {
    size_t rounds;
    std::vector<size_t> busy;
    bool left_out;
  };
  for (const Row& t : std::vector<Row>{{5, {2}, true},           {5, {1, 4}, true},       {5, {1, 2, 3}, false},
                                       {3, {2}, false},          {4, {1, 2}, false},      {4, {3}, true},
                                       {6, {1, 3, 5}, true},     {7, {1, 2, 3, 4}, false}, {8, {1, 2, 3, 4}, true},
                                       {2, {1}, false},          {5, {}, false}}) {
    INFO("rounds " << t.rounds << ", busy " << t.busy.size());
    const std::vector<json> docs = round_docs(t.rounds, t.busy);
    const RunResult m = merge_rounds(docs);
    const CaseResult& c = m.cases[0];
    const size_t quiet = t.rounds - t.busy.size();
    if (!t.busy.empty()) CHECK(quiet_rounds_suffice(quiet, t.rounds) == t.left_out);
    CHECK(c.host.rounds == t.rounds);
    CHECK(c.host.rounds_contended == t.busy.size());
    // The samples the case is judged on: the quiet rounds' when they suffice, else all rounds'.
    std::vector<double> expect;
    std::vector<double> medians;
    for (size_t k = 1; k <= t.rounds; ++k) {
      if (t.left_out && std::find(t.busy.begin(), t.busy.end(), k) != t.busy.end()) continue;
      const auto s = docs[k - 1]["cases"][0]["samples_s"].get<std::vector<double>>();
      expect.insert(expect.end(), s.begin(), s.end());
      medians.push_back(stats::median(s));
    }
    CHECK(c.samples == expect);
    CHECK(c.round_medians == medians);
    CHECK(c.median == Approx(stats::median(expect)));
    if (t.left_out) {
      CHECK_FALSE(c.host.contended);
      CHECK(c.host.reason.empty());
      CHECK(c.host.judged_rounds == quiet);
      REQUIRE(c.host.rounds_left_out.size() == t.busy.size());
      for (size_t i = 0; i < t.busy.size(); ++i) {
        const LeftOutRound& lo = c.host.rounds_left_out[i];
        CHECK(lo.round == t.busy[i]);
        CHECK(lo.reason == "round " + std::to_string(t.busy[i]) + " evidence");
        CHECK(lo.samples == docs[t.busy[i] - 1]["cases"][0]["samples_s"].get<std::vector<double>>());
        CHECK(lo.median_s == Approx(stats::median(lo.samples)));
      }
      // The windows (1 s each, busy ones at 43% CPU) are the quiet rounds' only.
      CHECK(c.host.window_s == Approx(static_cast<double>(quiet)));
      CHECK(c.host.cpu_share() == Approx(0.99));
    } else {
      CHECK(c.host.contended == !t.busy.empty());
      CHECK(c.host.rounds_left_out.empty());
      CHECK(c.host.judged_rounds == t.rounds);
      CHECK(c.host.window_s == Approx(static_cast<double>(t.rounds)));
      if (!t.busy.empty()) {
        CHECK_THAT(c.host.reason, Catch::StartsWith("round " + std::to_string(t.busy[0]) + "/" + std::to_string(t.rounds) + ": round " +
                                                    std::to_string(t.busy[0]) + " evidence"));
        CHECK_THAT(c.host.reason, Catch::EndsWith("; " + std::to_string(t.busy.size()) + " of " + std::to_string(t.rounds) +
                                                  " rounds busy, " + std::to_string(quiet) +
                                                  " judged quiet: too few to judge on the quiet rounds alone (need 3 and at least half)"));
      }
    }
  }
  // Rounds too short to judge (window 0.02 s, judged_on "none") are not quiet rounds: 1 busy of
  // 5 with 4 unjudged leaves nothing judged quiet, so the busy round stays in (the new-user
  // trial saw a smoke pack "judged on quiet rounds" that no one had judged).
  {
    std::vector<json> docs = round_docs(5, {2});
    for (size_t k : {0, 2, 3, 4}) {
      json& h = docs[k]["cases"][0]["host"];
      h["window_s"] = 0.02;
      h["thread_cpu_s"] = 0.0198;
      h["judged_on"] = "none";
    }
    const CaseResult c = merge_rounds(docs).cases[0];
    CHECK(c.host.contended);
    CHECK(c.host.rounds_left_out.empty());
    CHECK(c.round_medians.size() == 5);
    CHECK_THAT(c.host.reason, Catch::EndsWith("; 1 of 5 rounds busy, 0 judged quiet (4 too short to judge): too few to "
                                              "judge on the quiet rounds alone (need 3 and at least half)"));
    // Three judged quiet rounds of five are enough again, the unjudged one merged with them.
    docs[3]["cases"][0]["host"]["window_s"] = 1.0;
    docs[3]["cases"][0]["host"]["thread_cpu_s"] = 0.99;
    docs[3]["cases"][0]["host"].erase("judged_on");
    docs[4]["cases"][0]["host"]["window_s"] = 1.0;
    docs[4]["cases"][0]["host"]["thread_cpu_s"] = 0.99;
    docs[4]["cases"][0]["host"].erase("judged_on");
    CHECK(merge_rounds(docs).cases[0].host.contended);  // 2 judged quiet: still too few
    docs[2]["cases"][0]["host"]["window_s"] = 1.0;
    docs[2]["cases"][0]["host"]["thread_cpu_s"] = 0.99;
    docs[2]["cases"][0]["host"].erase("judged_on");
    const CaseResult d = merge_rounds(docs).cases[0];
    CHECK_FALSE(d.host.contended);
    REQUIRE(d.host.rounds_left_out.size() == 1);
    CHECK(d.host.rounds_left_out[0].round == 2);
    CHECK(d.round_medians.size() == 4);
  }
  // The artifact records it and reads back; the table marks the case and counts it.
  const json doc = merged_doc(round_docs(5, {2, 4}));
  const json& h = doc["cases"][0]["host"];
  CHECK(h["contended"] == false);
  CHECK(h["rounds"] == 5);
  CHECK(h["rounds_contended"] == 2);
  CHECK(h["judged_rounds"] == 3);
  REQUIRE(h["rounds_left_out"].size() == 2);
  CHECK(h["rounds_left_out"][1]["round"] == 4);
  CHECK(h["rounds_left_out"][1]["reason"] == "round 4 evidence");
  CHECK(h["rounds_left_out"][1]["n"] == 40);
  CHECK(h["rounds_left_out"][1]["median_s"].get<double>() == Approx(0.1).epsilon(0.01));
  CHECK(doc["cases"][0]["n"] == 3 * 40);
  CHECK(doc["cases"][0]["round_medians_s"].size() == 3);
  CHECK(doc["summary"]["contended"] == 0);
  const HostEvidence back = host_evidence_from_json(h, "merged.json", "/cases/0/host");
  CHECK(back.judged_rounds == 3);
  REQUIRE(back.rounds_left_out.size() == 2);
  CHECK(back.rounds_left_out[0].round == 2);
  CHECK(back.rounds_left_out[0].samples.size() == 40);
  const std::string table = format_table(doc);
  CHECK(table.find("busy-rounds-left-out:2/5") != std::string::npos);
  // The table shows what compare judges beside the all-samples median: the median of the 3
  // kept rounds' medians, and their count.
  CHECK(table.find("rounds: median") != std::string::npos);
  CHECK(table.find("3: " + format_seconds(stats::median(doc["cases"][0]["round_medians_s"].get<std::vector<double>>()))) !=
        std::string::npos);
  CHECK(format_table(merged_doc(round_docs(1, {}))).find("rounds: median") == std::string::npos);  // one round: no column
  CHECK(table.find("1 judged on quiet rounds (busy rounds left out)") != std::string::npos);
  CHECK(table.find("busy-host") == std::string::npos);
  // A merged case with too few quiet rounds keeps every round and the flag.
  const json busy = merged_doc(round_docs(5, {1, 2, 3}));
  CHECK(busy["cases"][0]["host"]["contended"] == true);
  CHECK(busy["cases"][0]["host"]["judged_rounds"] == 5);
  CHECK_FALSE(busy["cases"][0]["host"].contains("rounds_left_out"));
  CHECK(busy["cases"][0]["n"] == 5 * 40);
}

TEST_CASE("compare judges a case on its quiet rounds and says which rounds were left out", "[cpu][bench]") {
  stats::CompareOptions o;
  // Base: round 2 busy and 100x slower. Before, the case was undecided; now it is judged on
  // rounds 1, 3, 4, 5 (the same host and code as new): same.
  const json base = merged_doc(round_docs(5, {2})), fresh = merged_doc(round_docs(5, {}));
  CompareReport rep = compare_artifacts(base, fresh, o, "b.json", "n.json");
  REQUIRE(rep.rows.size() == 1);
  const CompareRow& row = rep.rows[0];
  CHECK(row.busy.empty());
  CHECK(row.basis == "rounds");
  CHECK(row.cmp.n_base == 4);
  CHECK(row.cmp.n_new == 5);
  CHECK(row.cmp.verdict == stats::Verdict::Same);
  CHECK(row.base_median == Approx(1e-3).epsilon(0.01));  // the slow round is not in it
  const std::string note = "base judged on 4 of 5 rounds (round 2 busy: round 2 evidence)";
  CHECK(row.left_out == note);
  CHECK(row.judged_rounds == "base 4/5 rounds");
  CHECK(rep.same == 1);
  CHECK(rep.undecided == 0);
  CHECK(rep.left_out == 1);
  const std::string table = format_compare(rep, "table");
  INFO(table);
  CHECK(table.find("same (base 4/5 rounds)") != std::string::npos);
  CHECK(table.find("  busy rounds left out: " + note + "\n    cases: k\n") != std::string::npos);
  CHECK(table.find("1 judged on quiet rounds (busy rounds left out)") != std::string::npos);
  const std::string md = format_compare(rep, "md");
  CHECK(md.find("- busy rounds left out: " + note) != std::string::npos);
  const json j = json::parse(format_compare(rep, "json"));
  CHECK(j["cases"][0]["verdict"] == "same");
  CHECK(j["cases"][0]["rounds_note"] == note);
  CHECK(j["summary"]["left_out"] == 1);
  CHECK(format_compare(rep, "csv").find(",rounds,same,\"" + note + "; time new/base 1.000 [") != std::string::npos);  // quoted: the CI has a comma

  // Both sides left rounds out; new is 30% slower on its quiet rounds: slower stands (4 rounds
  // a side is the least that can show a change: exact p >= 2/70).
  rep = compare_artifacts(base, merged_doc(round_docs(5, {1}, 1.3e-3)), o);
  CHECK(rep.rows[0].cmp.verdict == stats::Verdict::Slower);
  CHECK(rep.slower == 1);
  CHECK(rep.rows[0].left_out == note + "; new judged on 4 of 5 rounds (round 1 busy: round 1 evidence)");
  CHECK(format_compare(rep, "table").find("slower (base 4/5, new 4/5 rounds)") != std::string::npos);
  CHECK(format_compare(rep, "md").find("**slower** (base 4/5, new 4/5 rounds)") != std::string::npos);
  // Two rounds left out of new: 3 quiet rounds, which can say same or ambiguous, never slower.
  const json three = merged_doc(round_docs(5, {1, 5}, 1.3e-3));
  CHECK(three["cases"][0]["host"]["judged_rounds"] == 3);
  rep = compare_artifacts(base, three, o);
  CHECK(rep.rows[0].cmp.verdict == stats::Verdict::Ambiguous);
  CHECK(rep.rows[0].left_out == note + "; new judged on 3 of 5 rounds (round 1 busy: round 1 evidence; round 5 busy: round 5 evidence)");

  // Too few quiet rounds on a side: undecided as before, the reason saying why.
  rep = compare_artifacts(merged_doc(round_docs(5, {1, 2, 3})), fresh, o);
  CHECK(rep.undecided == 1);
  CHECK(rep.left_out == 0);
  CHECK_THAT(rep.rows[0].busy, Catch::Contains("3 of 5 rounds busy, 2 judged quiet: too few"));
  // An artifact of an earlier build (busy round, no rounds_left_out): undecided as before.
  json old = merged_doc(round_docs(3, {2}));
  old["cases"][0]["host"].erase("judged_rounds");
  rep = compare_artifacts(check_bench_artifact(old, "old.json"), fresh, o);
  CHECK(rep.undecided == 1);
}

TEST_CASE("a malformed rounds_left_out or judged_rounds is an input error naming the field", "[cpu][bench]") {
  const json good = merged_doc(round_docs(5, {2, 4}));
  auto expect = [&](const std::function<void(json&)>& edit, const std::string& field, const std::string& what) {
    json doc = good;
    edit(doc["cases"][0]["host"]);
    expect_artifact_error(doc, {"b.json: field '/cases/0/host/" + field + "'", what});
  };
  expect([](json& h) { h["rounds_left_out"] = "x"; }, "rounds_left_out", "expected array");
  expect([](json& h) { h["rounds_left_out"][0] = 2; }, "rounds_left_out/0", "expected object");
  expect([](json& h) { h["rounds_left_out"][0]["round"] = 0; }, "rounds_left_out/0/round", "expected an integer in [1, rounds = 5]");
  expect([](json& h) { h["rounds_left_out"][1]["round"] = 6; }, "rounds_left_out/1/round", "got 6");
  expect([](json& h) { h["rounds_left_out"][1]["round"] = 2; }, "rounds_left_out/1/round", "increasing order");
  expect([](json& h) { h["rounds_left_out"][0].erase("reason"); }, "rounds_left_out/0/reason", "expected string");
  expect([](json& h) { h["rounds_left_out"][0]["samples_s"][3] = -1; }, "rounds_left_out/0/samples_s/3", "finite positive");
  expect([](json& h) { h["rounds_left_out"][0]["median_s"] = "slow"; }, "rounds_left_out/0/median_s", "finite number");
  expect([](json& h) { h["judged_rounds"] = 5; }, "judged_rounds", "(5 - 2 = 3), got 5");
  expect([](json& h) { h["judged_rounds"] = -1; }, "judged_rounds", "integer >= 0");
  expect([](json& h) { h["rounds_contended"] = 1; }, "rounds_left_out", "more than rounds_contended (1)");
  // A case judged on its quiet rounds is not contended; a paired round needs an ABBA artifact.
  expect([](json& h) { h["contended"] = true; }, "contended", "rounds_left_out lists 2 rounds");
  expect([](json& h) { h["rounds_left_out"][0]["paired"] = true; }, "rounds_left_out/0/paired", "needs the document's 'ab' object");
  // More round medians than judged rounds (200 on a 4-round case showed "200: 7 us").
  {
    json doc = merged_doc(round_docs(4, {}));
    doc["cases"][0]["round_medians_s"].push_back(1e-3);
    expect_artifact_error(doc, {"b.json: field '/cases/0/round_medians_s'", "5 round medians, more than the judged rounds (4)"});
  }
  CHECK_NOTHROW(check_bench_artifact(good, "b.json"));
}

TEST_CASE("ABBA rounds: a round busy on either side is left out of both (merge_rounds_paired)", "[cpu][bench]") {
  // New busy in round 2, the baseline in round 4, of 6. Left out independently, each side kept 5
  // rounds, one of them the partner of the other side's busy round; paired, both keep 1, 3, 5, 6.
  const std::vector<json> fresh = round_docs(6, {2}), base = round_docs(6, {4}, 2e-3);
  const auto [n, b] = merge_rounds_paired(fresh, base);
  const CaseResult& cn = n.cases[0];
  const CaseResult& cb = b.cases[0];
  for (const CaseResult* c : {&cn, &cb}) {
    CHECK_FALSE(c->host.contended);
    CHECK(c->host.reason.empty());
    CHECK(c->host.rounds == 6);
    CHECK(c->host.rounds_contended == 1);  // its own busy round only
    CHECK(c->host.judged_rounds == 4);
    CHECK(c->round_medians.size() == 4);
    CHECK(c->host.window_s == Approx(4.0));  // the kept rounds' windows only
    REQUIRE(c->host.rounds_left_out.size() == 2);
    CHECK(c->host.rounds_left_out[0].round == 2);
    CHECK(c->host.rounds_left_out[1].round == 4);
  }
  CHECK_FALSE(cn.host.rounds_left_out[0].paired);
  CHECK(cn.host.rounds_left_out[0].reason == "round 2 evidence");
  CHECK(cn.host.rounds_left_out[1].paired);
  CHECK(cn.host.rounds_left_out[1].reason == "the baseline's round 4 was busy: round 4 evidence");
  CHECK(cn.host.rounds_left_out[1].samples == fresh[3]["cases"][0]["samples_s"].get<std::vector<double>>());
  CHECK(cb.host.rounds_left_out[0].paired);
  CHECK(cb.host.rounds_left_out[0].reason == "the new build's round 2 was busy: round 2 evidence");
  CHECK_FALSE(cb.host.rounds_left_out[1].paired);
  for (const auto& [c, docs] : {std::pair{&cn, &fresh}, std::pair{&cb, &base}}) {
    std::vector<double> expect, medians;
    for (size_t k : {1, 3, 5, 6}) {
      const auto s = (*docs)[k - 1]["cases"][0]["samples_s"].get<std::vector<double>>();
      expect.insert(expect.end(), s.begin(), s.end());
      medians.push_back(stats::median(s));
    }
    CHECK(c->samples == expect);
    CHECK(c->round_medians == medians);
    CHECK(c->median == Approx(stats::median(expect)));
  }
  // Alone, each side keeps 5 rounds (what --baseline-exe did before).
  CHECK(merge_rounds(fresh).cases[0].round_medians.size() == 5);
  CHECK(merge_rounds(base).cases[0].round_medians.size() == 5);

  // The artifact says which left-out round was paired, reads back, and is checked.
  ArtifactMeta m;
  m.rounds = 6;
  // As run --baseline-exe writes them: the pair marker compare looks for.
  json nj = to_json(n, m), bj = to_json(b, m);
  nj["ab"] = {{"role", "new"}, {"other", "b.json"}, {"order", "ABBA rounds"}, {"exe", "rtx-bench"}, {"pair_id", "p1"}};
  bj["ab"] = {{"role", "baseline"}, {"other", "n.json"}, {"order", "ABBA rounds"}, {"exe", "rtx-bench"}, {"pair_id", "p1"}};
  const json nd = check_bench_artifact(nj, "n.json"), bd = check_bench_artifact(bj, "b.json");
  const json& h = nd["cases"][0]["host"];
  CHECK_FALSE(h["rounds_left_out"][0].contains("paired"));
  CHECK(h["rounds_left_out"][1]["paired"] == true);
  CHECK(h["rounds_contended"] == 1);
  CHECK(h["judged_rounds"] == 4);
  const HostEvidence back = host_evidence_from_json(h, "n.json", "/cases/0/host");
  REQUIRE(back.rounds_left_out.size() == 2);
  CHECK_FALSE(back.rounds_left_out[0].paired);
  CHECK(back.rounds_left_out[1].paired);
  json bad = nd;
  bad["cases"][0]["host"]["rounds_left_out"][1]["paired"] = "yes";
  expect_artifact_error(bad, {"b.json: field '/cases/0/host/rounds_left_out/1/paired'", "expected boolean, got string"});
  bad = nd;
  bad["cases"][0]["host"]["rounds_left_out"][1].erase("paired");  // two busy rounds, one contended
  expect_artifact_error(bad, {"b.json: field '/cases/0/host/rounds_left_out'", "lists 2 busy rounds, more than rounds_contended (1)"});

  // compare judges both on the same 4 rounds: new (1 ms) is faster than the baseline (2 ms).
  stats::CompareOptions o;
  const CompareReport rep = compare_artifacts(bd, nd, o, "b.json", "n.json");
  REQUIRE(rep.rows.size() == 1);
  CHECK(rep.rows[0].basis == "rounds");
  CHECK(rep.rows[0].cmp.n_base == 4);
  CHECK(rep.rows[0].cmp.n_new == 4);
  CHECK(rep.rows[0].cmp.verdict == stats::Verdict::Faster);
  CHECK(rep.rows[0].left_out ==
        "base judged on 4 of 6 rounds (round 2 left out with its pair, the new build's round 2 was busy: round 2 evidence; "
        "round 4 busy: round 4 evidence); new judged on 4 of 6 rounds (round 2 busy: round 2 evidence; round 4 left out "
        "with its pair, the baseline's round 4 was busy: round 4 evidence)");
  // The pair must leave out the same rounds, one side's own busy round at each (hand edits).
  {
    json moved = bd;  // the baseline's paired round 2 moved to round 3
    moved["cases"][0]["host"]["rounds_left_out"][0]["round"] = 3;
    CHECK_THROWS_WITH(compare_artifacts(check_bench_artifact(moved, "b.json"), nd, o, "b.json", "n.json"),
                      Catch::Contains("left out different rounds (base: 3, 4; new: 2, 4)") &&
                          Catch::Contains("case k of b.json and n.json"));
    json both = nd;  // new's own busy round 2 marked paired: neither side was busy there
    both["cases"][0]["host"]["rounds_left_out"][0]["paired"] = true;
    both["cases"][0]["host"]["rounds_contended"] = 0;
    CHECK_THROWS_WITH(compare_artifacts(bd, check_bench_artifact(both, "n.json"), o, "b.json", "n.json"),
                      Catch::Contains("round 2 is left out of both sides as paired"));
    // Outside one ABBA run (no shared pair id) the sides are judged as any two artifacts.
    json lone = moved;
    lone["ab"]["pair_id"] = "other";
    CHECK_NOTHROW(compare_artifacts(check_bench_artifact(lone, "b.json"), nd, o));
  }

  // Too few rounds quiet on both sides (2 of 6): neither side leaves a round out, the busy
  // sides stay contended (compare of an ABBA pair then judges on all round medians, noted).
  {
    const auto [n2, b2] = merge_rounds_paired(round_docs(6, {1, 2}), round_docs(6, {3, 4}));
    for (const RunResult* r : {&n2, &b2}) {
      CHECK(r->cases[0].host.contended);
      CHECK(r->cases[0].host.rounds_left_out.empty());
      CHECK(r->cases[0].round_medians.size() == 6);
      CHECK_THAT(r->cases[0].host.reason, Catch::EndsWith("; 2 of 6 rounds busy, 2 more on the other side, 2 judged quiet on both sides: too few to judge "
                                                          "on the quiet rounds alone (need 3 and at least half)"));
    }
    // A side quiet throughout keeps its rounds and is not contended.
    const auto [n3, b3] = merge_rounds_paired(round_docs(6, {1, 2, 3, 4}), round_docs(6, {}));
    CHECK(n3.cases[0].host.contended);
    CHECK_FALSE(b3.cases[0].host.contended);
    CHECK(b3.cases[0].round_medians.size() == 6);
    // Quiet on both sides: nothing left out, the same as merge_rounds.
    const auto [n4, b4] = merge_rounds_paired(round_docs(4, {}), round_docs(4, {}));
    CHECK(n4.cases[0].samples == merge_rounds(round_docs(4, {})).cases[0].samples);
    CHECK(n4.cases[0].host.rounds_left_out.empty());
  }
  // The sides must match round for round and case for case.
  CHECK_THROWS_WITH(merge_rounds_paired(round_docs(5, {}), round_docs(6, {})), Catch::Contains("6 baseline rounds against 5"));
  std::vector<json> other = round_docs(4, {});
  for (json& d : other) d["cases"][0]["id"] = "other";
  CHECK_THROWS_WITH(merge_rounds_paired(round_docs(4, {}), other), Catch::Contains("is 'k' here and 'other' in the baseline"));
}

TEST_CASE("change_contradicts_medians: different bands and apart by more than the threshold", "[cpu][bench]") {
  // The trial's case (hand-computed below): change -0.1% beside medians 8 ms -> 5.7 us.
  CHECK(change_contradicts_medians(0.99892, 5.7 / 7995.9, 0.05));
  CHECK(change_contradicts_medians(1.01, 1.07, 0.05));       // within vs above, 6% apart
  CHECK(change_contradicts_medians(1.06, 0.98, 0.05));       // above vs within
  CHECK(change_contradicts_medians(0.90, 1.10, 0.05));       // opposite signs, both beyond
  CHECK_FALSE(change_contradicts_medians(1.083, 1.136, 0.05));  // both above: same story
  CHECK_FALSE(change_contradicts_medians(1.049, 1.051, 0.05));  // across the edge, 0.2% apart
  CHECK_FALSE(change_contradicts_medians(0.97, 1.03, 0.05));    // opposite signs, both within
  CHECK_FALSE(change_contradicts_medians(1.001, 0.999, 0.0));   // threshold 0: 1% floor
  CHECK(change_contradicts_medians(1.02, 0.98, 0.0));
  CHECK_FALSE(change_contradicts_medians(1.0, 0.0, 0.05));      // no medians to compare
  CHECK_FALSE(change_contradicts_medians(std::nan(""), 1.5, 0.05));
  CHECK_FALSE(change_contradicts_medians(1.0, INFINITY, 0.05));
}

TEST_CASE("compare: a change that disagrees with the medians gets a footnote and a json flag", "[cpu][bench]") {
  // Round medians of the trial (us): two fast, three 8 ms rounds in base; three fast, two slow
  // in new. Base median 7995.9 us, new 5.7 us (-99.9%), but the Hodges-Lehmann estimate (the
  // 13th of the 25 sorted pairwise ratios, by hand: 7990 / 7998.6) is -0.1%.
  auto doc = [](const std::vector<double>& us) {
    std::vector<double> s;
    for (double x : us) s.push_back(x * 1e-6);
    json c = {{"id", "k"}, {"status", "ok"}, {"samples_s", s}, {"round_medians_s", s}};
    return json{{"schema", "rtx.bench.v1"}, {"seed", 0}, {"cases", json::array({c})}};
  };
  const json base = doc({5.9, 7998.6, 7996.0, 7995.9, 4.9}), fresh = doc({5.5, 5.6, 5.7, 7990, 7995});
  stats::CompareOptions o;
  CompareReport rep = compare_artifacts(base, fresh, o);
  const CompareRow& row = rep.rows[0];
  CHECK(row.basis == "rounds");
  CHECK(row.cmp.ratio == Approx(7990 / 7998.6).epsilon(1e-9));
  CHECK(row.base_median == Approx(7995.9e-6));
  CHECK(row.new_median == Approx(5.7e-6));
  CHECK(row.medians_ratio == Approx(5.7 / 7995.9));
  CHECK(row.change_disagrees);
  CHECK(rep.disagreements == 1);
  const std::string table = format_compare(rep, "table");
  INFO(table);
  CHECK(table.find("0.999 [0.000688, 1355]*") != std::string::npos);
  CHECK(table.find("* change vs medians: for 1 case(s) marked * the change and the ratio of the medians fall on different sides "
                   "of the [0.950, 1.050] threshold band. change is the Hodges-Lehmann estimate") != std::string::npos);
  CHECK(table.find("\n  k: change 0.999, medians 8 ms -> 5.7 us (0.000713), basis rounds\n") != std::string::npos);
  const std::string md = format_compare(rep, "md");
  CHECK(md.find("| 0.999 [0.000688, 1355]\\* |") != std::string::npos);
  CHECK(md.find("\n\\* change vs medians: for 1 case(s)") != std::string::npos);
  CHECK(md.find("- `k`: change 0.999, medians 8 ms -> 5.7 us (0.000713), basis rounds") != std::string::npos);
  const json j = json::parse(format_compare(rep, "json"));
  CHECK(j["cases"][0]["change_disagrees_with_medians"] == true);
  CHECK(j["cases"][0]["medians_ratio"].get<double>() == Approx(5.7 / 7995.9));
  CHECK(j["summary"]["change_disagrees"] == 1);
  REQUIRE(j.contains("notes"));
  CHECK_THAT(j["notes"][0].get<std::string>(), Catch::StartsWith("* change vs medians: for 1 case(s)"));
  CHECK(format_compare(rep, "csv").find("change disagrees with the medians (0.000713)") != std::string::npos);

  // Agreeing change and medians: no mark, no footnote, the flag false.
  rep = compare_artifacts(doc({1000, 1010, 990, 1005, 995}), doc({1300, 1310, 1290, 1305, 1295}), o);
  CHECK_FALSE(rep.rows[0].change_disagrees);
  CHECK(format_compare(rep, "table").find('*') == std::string::npos);
  const json k = json::parse(format_compare(rep, "json"));
  CHECK(k["cases"][0]["change_disagrees_with_medians"] == false);
  CHECK_FALSE(k.contains("notes"));
}

TEST_CASE("compare says when a case's host contention was not judged (its run under 50 ms)", "[cpu][bench]") {
  const auto reg = synth_registry();
  int calls = 0;  // every reading 1 ms apart: the whole run is a few ms (judged_on "none")
  const RunnerOptions o = injected(0.05, 5, [&calls] {
    ++calls;
    return reading(0.001 * calls, 0.001 * calls, 0.001 * calls, 0, true, 0);
  });
  const json shortrun = check_bench_artifact(to_json(run_cases({spin_case("a", 30), spin_case("b", 30)}, reg, o), ArtifactMeta{}), "s.json");
  REQUIRE(shortrun["cases"][0]["host"]["judged_on"] == "none");
  stats::CompareOptions co;
  co.min_samples = 5;
  CompareReport rep = compare_artifacts(shortrun, shortrun, co);
  REQUIRE(rep.rows.size() == 2);
  CHECK(rep.rows[0].unjudged == "both");
  CHECK(rep.unjudged == 2);
  CHECK(rep.undecided == 0);
  const std::string line = "note: 2 case(s) ran under 50 ms: host contention not judged";
  const std::string table = format_compare(rep, "table");
  INFO(table);
  CHECK(table.find("host not judged)") != std::string::npos);
  CHECK(table.find(line) != std::string::npos);
  CHECK(format_compare(rep, "md").find(line) != std::string::npos);
  const json j = json::parse(format_compare(rep, "json"));
  CHECK(j["cases"][0]["host_not_judged"] == "both");
  CHECK(j["summary"]["host_not_judged"] == 2);
  CHECK_THAT(j["notes"][0].get<std::string>(), Catch::StartsWith(line));
  CHECK(format_compare(rep, "csv").find("host not judged on both (ran under 50 ms)") != std::string::npos);

  // Only one side unjudged: named. A judged side, or one without host evidence (an older
  // build), is not counted.
  json judged = shortrun;
  for (auto& c : judged["cases"]) c["host"] = quiet_host();
  rep = compare_artifacts(shortrun, judged, co);
  CHECK(rep.rows[0].unjudged == "base");
  CHECK(rep.unjudged == 2);
  json old = shortrun;
  for (auto& c : old["cases"]) c.erase("host");
  rep = compare_artifacts(judged, old, co);
  CHECK(rep.unjudged == 0);
  CHECK(format_compare(rep, "table").find("not judged") == std::string::npos);
  CHECK_FALSE(json::parse(format_compare(rep, "json")).contains("notes"));
}

TEST_CASE("run --rounds writes the quiet-round merge and names the rounds left out on stderr", "[cpu][bench]") {
  // The rounds' program is a script that hands out prepared round artifacts (round 2 busy and
  // 100x slower), so the merge, the artifact and the note are checked without loading the host.
  const auto dir = std::filesystem::temp_directory_path() / ("rtx-leftout-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  const std::vector<json> docs = round_docs(5, {2});
  for (size_t k = 0; k < docs.size(); ++k) std::ofstream(d + "/round-" + std::to_string(k + 1) + ".json") << docs[k].dump();
  const std::string script = d + "/rounds.sh";
  std::ofstream(script) << "#!/bin/sh\nn=$(cat " << d << "/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > " << d
                        << "/count\nfor a; do out=$a; done\ncp " << d << "/round-$n.json \"$out\"\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  std::ofstream(d + "/pack.json") << R"({"schema": "rtx.benchpack.v1", "name": "synth", "cases": [
    {"name": "k", "op": "synth_spin", "shape": {"US": 30, "NOISE": 5}}]})";
  RunCommand c;
  c.pack = d + "/pack.json";
  c.rounds = 5;
  c.self_exe = script;
  c.argv = {"rtx-bench", "run", c.pack, "--rounds", "5"};
  c.db = d + "/rtx.db";  // recorded: what rtx-evolve's history and get_baseline read
  c.out = d + "/out.json";
  std::ostringstream out, err;
  REQUIRE(run_run(c, synth_registry(), out, err) == 0);
  INFO(err.str());
  const json doc = read_bench_artifact(c.out);
  const json& h = doc["cases"][0]["host"];
  CHECK(h["contended"] == false);
  CHECK(h["judged_rounds"] == 4);
  REQUIRE(h["rounds_left_out"].size() == 1);
  CHECK(h["rounds_left_out"][0]["round"] == 2);
  CHECK(doc["cases"][0]["round_medians_s"].size() == 4);
  CHECK(doc["cases"][0]["time"]["median_s"].get<double>() == Approx(1e-3).epsilon(0.01));
  CHECK(err.str().find("rtx-bench: note: the host was busy in some rounds of 1 case(s); those rounds are left out") !=
        std::string::npos);
  CHECK(err.str().find("  k: judged on 4 of 5 rounds; left out round 2 (round 2 evidence)\n") != std::string::npos);
  CHECK(err.str().find("busy-rounds-left-out:1/5") != std::string::npos);  // the table's status column
  CHECK(err.str().find("warning") == std::string::npos);                  // nothing is contended
  {
    // The store's row is the quiet rounds' result, not contended: history analyses it.
    store::Store st(c.db);
    auto& q = st.prepare("SELECT contended, contention_reason, median_s, n FROM bench_results");
    REQUIRE(q.step());
    CHECK(q.column_int64(0) == 0);
    CHECK(q.column_text(1).empty());
    CHECK(q.column_double(2) == Approx(doc["cases"][0]["time"]["median_s"].get<double>()));
    CHECK(q.column_int64(3) == 4 * 40);
    q.reset();
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("rounds_left_out must follow the leave-out rule: quiet rounds suffice, n and round_medians_s agree", "[cpu][bench]") {
  const json good = merged_doc(round_docs(5, {2, 4}));
  auto expect = [&](const std::function<void(json&)>& edit, const std::string& field, const std::string& what) {
    json doc = good;
    edit(doc["cases"][0]);
    expect_artifact_error(doc, {"b.json: field '/cases/0/" + field + "'", what});
  };
  // 3 of 5 left out: 2 quiet rounds do not suffice (merge_rounds would not leave them out).
  expect([](json& c) {
    json& h = c["host"];
    h["rounds_left_out"].push_back(h["rounds_left_out"][1]);
    h["rounds_left_out"][2]["round"] = 5;
    h["rounds_contended"] = 3;
    h["judged_rounds"] = 2;
  }, "host/rounds_left_out", "do not suffice");
  // Every round left out.
  expect([](json& c) {
    json& h = c["host"];
    json lo = json::array();
    for (int k = 1; k <= 5; ++k) lo.push_back({{"round", k}, {"reason", "busy"}});
    h["rounds_left_out"] = lo;
    h["rounds_contended"] = 5;
    h["judged_rounds"] = 0;
  }, "host/rounds_left_out", "do not suffice");
  expect([](json& c) { c["round_medians_s"].push_back(1e-3); }, "round_medians_s", "expected judged_rounds (3)");
  expect([](json& c) { c["host"]["rounds_left_out"][0]["n"] = 99; }, "host/rounds_left_out/0/n", "expected the sample count");
  expect([](json& c) { c["host"]["rounds_left_out"][0]["n"] = "many"; }, "host/rounds_left_out/0/n", "expected the sample count");
  // A round 2^64-1 of rounds 2^64-1 is in range (it read as -1 before); the counts then disagree.
  expect([](json& c) {
    c["host"]["rounds"] = UINT64_MAX;
    c["host"]["rounds_left_out"][1]["round"] = UINT64_MAX;
  }, "host/judged_rounds", "expected rounds minus the left-out rounds");
  CHECK_NOTHROW(check_bench_artifact(good, "b.json"));
  // Half of 2^64-1 rounds quiet: 2 * quiet overflowed.
  CHECK(quiet_rounds_suffice(UINT64_MAX - 1, UINT64_MAX));
  CHECK_FALSE(quiet_rounds_suffice(UINT64_MAX / 2 - 1, UINT64_MAX));
  CHECK(quiet_rounds_suffice(3, 5));
  CHECK_FALSE(quiet_rounds_suffice(3, 7));
}

TEST_CASE("fields show reads are type-checked; a missing ci or throughput shows '-' or 0", "[cpu][bench]") {
  const json good = merged_doc(round_docs(1, {}));
  auto expect = [&](const std::function<void(json&)>& edit, const std::string& field) {
    json doc = good;
    edit(doc);
    expect_artifact_error(doc, {"b.json: field '" + field + "'"});
  };
  expect([](json& d) { d["cases"][0]["noisy"] = "yes"; }, "/cases/0/noisy");
  expect([](json& d) { d["cases"][0]["roofline"] = {{"peak_fraction", "x"}}; }, "/cases/0/roofline/peak_fraction");
  expect([](json& d) { d["pack"] = "str"; }, "/pack");
  expect([](json& d) { d["pack"]["name"] = 5; }, "/pack/name");
  expect([](json& d) { d["cases"][0]["time"]["p10_s"] = "x"; }, "/cases/0/time/p10_s");
  expect([](json& d) { d["cases"][0]["time"]["ci"] = "x"; }, "/cases/0/time/ci");
  expect([](json& d) { d["cases"][0]["skip_reason"] = 7; }, "/cases/0/skip_reason");
  expect([](json& d) { d["peaks"]["source"] = 5; }, "/peaks/source");
  expect([](json& d) { d["options"] = "x"; }, "/options");
  expect([](json& d) { d["seed"] = -1; }, "/seed");
  json cut = good;
  cut["cases"][0]["time"] = {{"median_s", cut["cases"][0]["time"]["median_s"]}};
  cut["cases"][0].erase("throughput");
  const json checked = check_bench_artifact(cut, "b.json");
  std::string table;
  REQUIRE_NOTHROW(table = format_table(checked));
  CHECK_THAT(table, Catch::Contains("+-0.0%"));
}

TEST_CASE("compare's host list and change-vs-medians footnote escape control bytes; csv quotes a lone CR", "[cpu][bench]") {
  json base = merged_doc(round_docs(5, {2}));
  base["cases"][0]["host"]["rounds_left_out"][0]["reason"] = "evil\x1b[2J";
  const json fresh = merged_doc(round_docs(5, {}));
  stats::CompareOptions o;
  const CompareReport rep = compare_artifacts(check_bench_artifact(base, "b.json"), fresh, o, "b.json", "n.json");
  for (const char* f : {"table", "md"}) {
    const std::string s = format_compare(rep, f);
    INFO(s);
    CHECK(s.find('\x1b') == std::string::npos);
    CHECK_THAT(s, Catch::Contains("evil\\x1B[2J"));
  }
  // The footnote: ids of rows whose change disagrees with the medians (the trial's case).
  auto doc = [](const std::string& id, const std::vector<double>& us) {
    std::vector<double> s;
    for (double x : us) s.push_back(x * 1e-6);
    json c = {{"id", id}, {"status", "ok"}, {"samples_s", s}, {"round_medians_s", s}};
    return json{{"schema", "rtx.bench.v1"}, {"seed", 0}, {"cases", json::array({c})}};
  };
  const std::string id = "k\x1b]0;t\x07";
  const CompareReport r2 = compare_artifacts(doc(id, {5.9, 7998.6, 7996.0, 7995.9, 4.9}), doc(id, {5.5, 5.6, 5.7, 7990, 7995}), o);
  REQUIRE(r2.disagreements == 1);
  for (const char* f : {"table", "md"}) {
    const std::string s = format_compare(r2, f);
    INFO(s);
    CHECK(s.find('\x1b') == std::string::npos);
    CHECK(s.find('\x07') == std::string::npos);
  }
  const CompareReport r3 = compare_artifacts(doc("\r", {1, 2, 3}), doc("\r", {1, 2, 3}), o);
  CHECK_THAT(format_compare(r3, "csv"), Catch::Contains("\n\"\r\","));
}

// ---- the one busy-host rule: other processes' CPU time (telemetry::judge_host_window) --------

namespace {
/// `reading` plus /proc/stat busy time `busy_s` of `cpus` CPUs (10 ms ticks, as USER_HZ=100).
HostSample with_stat(HostSample s, double busy_s, int cpus) {
  s.cpus = cpus;
  s.cpu_busy.valid = true;
  s.cpu_busy.busy_s = busy_s;
  s.cpu_busy.cpus = cpus;
  s.cpu_busy.tick_s = 0.01;
  return s;
}
}  // namespace

TEST_CASE("parse_cpu_busy sums user+nice+system+irq+softirq+steal of the asked CPUs only", "[cpu][bench]") {
  // proc(5): cpuN user nice system idle iowait irq softirq steal guest guest_nice (USER_HZ ticks).
  const std::string stat =
      "cpu  900 10 200 5000 40 3 7 20 0 0\n"
      "cpu0 400 5 100 2500 20 1 3 10 0 0\n"
      "cpu1 500 5 100 2500 20 2 4 10 0 0\n"
      "cpu2 7 0 0 9000 0 0 0 0 0 0\n"
      "intr 12345\nctxt 999\n";
  const telemetry::CpuBusy b = telemetry::parse_cpu_busy(stat, {0, 1}, 0.01);
  REQUIRE(b.valid);
  CHECK(b.cpus == 2);
  // cpu0: 400+5+100+1+3+10 = 519; cpu1: 500+5+100+2+4+10 = 621 (idle and iowait are not busy).
  CHECK(b.busy_s == Approx((519 + 621) * 0.01));
  CHECK(telemetry::parse_cpu_busy(stat, {2}, 0.01).busy_s == Approx(0.07));
  CHECK_FALSE(telemetry::parse_cpu_busy(stat, {3}, 0.01).valid);    // no cpu3 line
  CHECK_FALSE(telemetry::parse_cpu_busy(stat, {}, 0.01).valid);     // nothing asked
  CHECK_FALSE(telemetry::parse_cpu_busy(stat, {0}, 0).valid);       // no tick length
  CHECK_FALSE(telemetry::parse_cpu_busy("cpu0 1 2 3\n", {0}, 0.01).valid);  // truncated line
  CHECK_FALSE(telemetry::parse_cpu_busy("", {0}, 0.01).valid);
  // This machine's own /proc/stat reads (Linux CI).
  const telemetry::CpuBusy live = telemetry::read_cpu_busy();
  CHECK(live.valid);
  CHECK(live.cpus >= 1);
  CHECK(live.busy_s > 0);
}

TEST_CASE("judge_host_window: other processes' CPU time decides; PSI only without /proc/stat", "[cpu][bench]") {
  telemetry::CpuWindow w;
  w.wall_s = 1.0;
  w.cpus = 2;
  w.other_valid = true;
  w.tick_slack_s = 0.04;
  w.psi_valid = true;
  w.psi_stall_s = 0.18;  // our own threads queued behind each other: not the verdict
  w.other_cpu_s = 0.03;
  telemetry::HostVerdict v = telemetry::judge_host_window(w);
  CHECK(v.judged);
  CHECK_FALSE(v.busy);
  CHECK(v.basis == "other_cpu");
  CHECK(v.other_share == 0);  // under the tick allowance
  CHECK(v.psi_share == Approx(0.18));
  // At the threshold after the allowance is not above it; just past it is.
  w.other_cpu_s = 0.04 + 0.2;
  CHECK_FALSE(telemetry::judge_host_window(w).busy);
  w.other_cpu_s = 0.04 + 0.2 + 1e-6;
  CHECK(telemetry::judge_host_window(w).busy);
  // A CPU-bound neighbour beside our 2 threads on 2 CPUs.
  w.other_cpu_s = 0.70;
  v = telemetry::judge_host_window(w);
  CHECK(v.busy);
  CHECK(v.other_share == Approx(0.33));
  CHECK(v.reason == "other processes took 0.70 CPU-s of 2 CPUs x 1.00 s (33%, > 10%)");
  // Without /proc/stat: PSI stall, said to count our own threads too.
  w.other_valid = false;
  v = telemetry::judge_host_window(w);
  CHECK(v.basis == "psi");
  CHECK(v.busy);
  CHECK(v.reason == "PSI cpu stall 18.0% of the window's 1.00 s (> 10%; no /proc/stat to tell other processes from ours)");
  // Neither signal, or a window under kMinJudgedWindowS: not judged.
  w.psi_valid = false;
  CHECK_FALSE(telemetry::judge_host_window(w).judged);
  w.other_valid = true;
  w.wall_s = 0.049;
  CHECK_FALSE(telemetry::judge_host_window(w).judged);
  CHECK_FALSE(telemetry::judge_host_window(w).busy);
}

TEST_CASE("the tool's own threads are not a busy host; a neighbour's CPU time is", "[cpu][bench]") {
  // The readings of rtx-tune --serve on an idle 2-CPU host (issue 36): the process used 1.9 of
  // 2 CPUs, its measuring thread ran half the window, PSI stall 18%, 194 involuntary
  // switches/s; /proc/stat counted 1.93 CPU-s busy, so others took 0.03 CPU-s.
  const HostSample b0 = with_stat(reading(10.0, 1.0, 5.0, 100, true, 1'000'000), 50.0, 2);
  const HostSample idle = with_stat(reading(11.0, 1.5, 6.9, 294, true, 1'180'000), 51.93, 2);
  HostEvidence e = contention_evidence(b0, idle, 2, CpuShareRule::Apply);
  CHECK(e.other_valid);
  CHECK(e.other_cpu_s == Approx(0.03));
  CHECK(e.tick_slack_s == Approx(0.04));
  CHECK_FALSE(e.contended);
  CHECK(e.reason.empty());
  // The readings that crossed are kept, named as the process's own.
  CHECK(e.oversubscribed);
  CHECK_THAT(e.oversubscription, Catch::Contains("PSI cpu stall 18% of the window"));
  CHECK_THAT(e.oversubscription, Catch::Contains("194 involuntary context switches/s"));
  CHECK_THAT(e.oversubscription, Catch::Contains("other processes took only 0% of the 2 CPUs"));
  // The same process beside a CPU hog: it got 1.3 CPU-s, the CPUs were busy 2.0 CPU-s.
  const HostSample hog = with_stat(reading(11.0, 1.65, 6.3, 394, true, 1'400'000), 52.0, 2);
  e = contention_evidence(b0, hog, 2, CpuShareRule::Apply);
  CHECK(e.contended);
  CHECK_FALSE(e.oversubscribed);
  CHECK(e.reason == "other processes took 0.70 CPU-s of 2 CPUs x 1.00 s (33%, > 10%)");
  CHECK(e.other_share() == Approx(0.33));
  // The artifact keeps the reading, and reads it back to the same verdict.
  const json j = to_json(e);
  CHECK(j["other_cpu_s"].get<double>() == Approx(0.70));
  CHECK(j["other_cpu_share"].get<double>() == Approx(0.33));
  HostEvidence back = host_evidence_from_json(j, "b.json", "/cases/x/host");
  CHECK(back.other_valid);
  back.window_s = e.window_s;
  judge_contention(back, CpuShareRule::Apply);
  CHECK(back.contended);
  CHECK(back.reason == e.reason);
  // A window whose /proc/stat reading is missing at one end falls back on the older signals.
  HostSample no_stat = hog;
  no_stat.cpu_busy.valid = false;
  e = contention_evidence(b0, no_stat, 2, CpuShareRule::Apply);
  CHECK_FALSE(e.other_valid);
  CHECK(e.contended);
  CHECK_THAT(e.reason, Catch::Contains("PSI cpu stall 40% of the window"));
  // A malformed other_cpu_s is an input error naming the field.
  json bad = j;
  bad["other_cpu_s"] = "0.7";
  CHECK_THROWS_WITH(host_evidence_from_json(bad, "b.json", "/cases/x/host"), Catch::Contains("other_cpu_s"));
}

TEST_CASE("rtx-serve bench's run verdict is the same rule", "[cpu][bench]") {
  const HostSample b0 = with_stat(reading(0.0, 0.0, 0.0, 0, true, 0), 10.0, 2);
  const HostSample b1 = with_stat(reading(3.2, 0.1, 3.0, 700, true, 1'440'000), 13.4, 2);  // clients: 45% PSI, others 0.4
  const HostEvidence ev = contention_evidence(b0, b1, 1, CpuShareRule::Off);
  const telemetry::HostVerdict v = telemetry::judge_host_window(ev.cpu_window());
  CHECK(v.judged);
  CHECK_FALSE(v.busy);  // (0.4 - 0.04) / 6.4 = 5.6%
  CHECK(v.other_share == Approx(0.36 / 6.4));
}
