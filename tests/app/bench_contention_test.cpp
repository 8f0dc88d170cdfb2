// rtx-bench host-contention evidence with injected readings: the evidence arithmetic and
// thresholds, PSI parsing, the runner's windows (sequential and interleaved), the artifact's
// "host" object round trip and merge over rounds, malformed fields, and compare's undecided rule.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
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
    // ... with PSI: the kernel's avg10 at the window's end decides (here 0.0%, then 34%).
    HostEvidence e0 = e;
    inherit_run_contention(e0, short_run);
    CHECK(e0.judged_on == "avg10");
    CHECK_FALSE(e0.contended);
    HostEvidence e34 = contention_evidence(a, reading(0.02, 0.02, 0.02, 0, true, 0, 34.0), 1, Backend::CPU);
    inherit_run_contention(e34, short_run);
    CHECK(e34.judged_on == "avg10");
    CHECK(e34.contended);
    CHECK(e34.reason.rfind("PSI cpu some avg10 34% (> 10%", 0) == 0);
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
  RunnerOptions o;
  o.max_time = 0.05;
  o.min_samples = 5;
  o.max_samples = 20;
  o.host_sampler = [&calls] {
    ++calls;
    return reading(0.25 * calls, 0.1 * calls, 0.1 * calls, calls, true, static_cast<uint64_t>(50'000) * calls);
  };
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
  RunnerOptions o;
  o.max_time = 0.05;
  o.min_samples = 5;
  o.max_samples = 20;
  int calls = 0;
  double share = 0.99;  // thread CPU per 1 s of wall
  o.host_sampler = [&] {
    ++calls;
    return reading(1.0 * calls, share * calls, share * calls, 0, true, 1000u * static_cast<uint64_t>(calls), 0.1 * calls, 0.5);
  };
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
  auto expect = [](json doc, const std::string& field) {
    try {
      check_bench_artifact(doc, "b.json");
      FAIL("expected an error for " << field);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.category() == ErrorCategory::Input);
      CHECK(std::string(e.what()).find("b.json") != std::string::npos);
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
  };
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
  CHECK(table.find("undecided (host busy during new: measuring thread ran 43%") != std::string::npos);
  CHECK(table.find("1 UNDECIDED: measured on a busy host") != std::string::npos);
  CHECK(format_compare(rep, "md").find("**undecided** (host busy during new") != std::string::npos);
  CHECK(format_compare(rep, "csv").find("undecided (host busy during new") != std::string::npos);

  // Busy baseline, busy both: named per side.
  rep = compare_artifacts(artifact(1e-3, 1, busy_host("PSI cpu stall 43% of the window (> 10%)")), artifact(1e-3, 2), o);
  CHECK(rep.rows[0].busy == "host busy during base: PSI cpu stall 43% of the window (> 10%)");
  CHECK(rep.undecided == 1);
  CHECK(rep.same == 0);  // even an A/A that looks the same is not vouched for
  rep = compare_artifacts(artifact(1e-3, 1, busy_host("a")), artifact(1e-3, 2, busy_host("b")), o);
  CHECK(rep.rows[0].busy == "host busy during base: a; host busy during new: b");

  // Old artifacts (no host objects) and quiet ones are judged as before.
  rep = compare_artifacts(artifact(1e-3, 1), artifact(1.3e-3, 2), o);
  CHECK(rep.slower == 1);
  CHECK(rep.undecided == 0);
  rep = compare_artifacts(artifact(1e-3, 1), artifact(1.3e-3, 2, quiet_host()), o);
  CHECK(rep.slower == 1);
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
  CHECK(out.str().find("undecided (host busy during new") != std::string::npos);
  CHECK(err.str().find("1 case(s) undecided: the host was busy") != std::string::npos);
  // The same pair without the evidence is a regression: exit 1.
  std::ofstream(n) << artifact(94e-3, 2).dump();
  std::ostringstream out2, err2;
  CHECK(run_compare(c, out2, err2) == 1);
  std::filesystem::remove_all(dir);
}
