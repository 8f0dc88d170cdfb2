// rtx-bench as a subprocess: run --json gives rtx.bench.v1, exit codes (1 regression,
// 2 bad input naming case/field, 3 --backend cuda without a GPU), list/show, same-seed
// checksums, and one real A/A of the smoke pack.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "rtx/core/philox.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "test_util.hpp"

using nlohmann::json;
using rtx::test::run;

namespace {

std::string bench() { return rtx::test::tool_path("rtx-bench"); }
std::string smoke() { return rtx::test::source_dir() + "/benchpacks/smoke.json"; }

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// A minimal valid rtx.bench.v1 document with one case of log-normal samples.
/// One case of 30 samples around `center` s (2% noise); with `rounds`, as `run` writes it by
/// default: the samples of `rounds` processes and their round medians.
json fake_artifact(double center, uint64_t seed, size_t rounds = 0) {
  rtx::Philox rng(seed);
  std::vector<double> s(30);
  for (auto& x : s) x = center * std::exp(0.02 * rng.next_normal());
  json c = {{"id", "k/cpu.x/N=1/f32"}, {"status", "ok"}, {"samples_s", s}};
  if (rounds) {
    std::vector<double> m(rounds);
    for (auto& x : m) x = center * std::exp(0.01 * rng.next_normal());
    c["round_medians_s"] = m;
  }
  return {{"schema", "rtx.bench.v1"}, {"seed", 0}, {"cases", json::array({c})}};
}

}  // namespace

TEST_CASE("rtx-bench run --json writes a valid rtx.bench.v1 artifact", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  auto p = run(bench() + " run " + smoke() + " --json --max-time 0.2 --threads 1 --seed 5 --db " + d + "/rtx.db -o " + d + "/a.json");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const json doc = json::parse(p.out);
  CHECK(doc["schema"] == "rtx.bench.v1");
  CHECK(doc["seed"] == 5);
  CHECK(doc["hardware"].is_object());
  REQUIRE(doc["cases"].is_array());
  CHECK(doc["cases"].size() >= 1);
  size_t ok = 0;
  for (const auto& c : doc["cases"]) {
    INFO(c["id"]);
    if (c["status"] != "ok") {
      CHECK(c["status"] == "skipped");
      CHECK(c["skip_reason"].get<std::string>().size() > 0);
      continue;
    }
    ++ok;
    CHECK(c["n"].get<size_t>() == c["samples_s"].size());
    CHECK(c["time"]["median_s"].get<double>() > 0);
    CHECK(c["time"]["ci"]["lo_s"].get<double>() <= c["time"]["median_s"].get<double>());
    CHECK(c["check"]["ok"] == true);
    CHECK(c["checksum"].get<std::string>().rfind("0x", 0) == 0);
    CHECK(c.contains("roofline"));
  }
  CHECK(ok >= 1);
  // -o wrote the same document; show reads it
  std::ifstream f(d + "/a.json");
  CHECK(json::parse(f)["cases"].size() == doc["cases"].size());
  // --events: one bench.result event per case
  auto e = run(bench() + " run " + smoke() + " --max-time 0.02 --threads 1 --no-store -q --filter gelu --events " + d + "/ev.jsonl");
  CHECK(e.exit_code == 0);
  std::ifstream ev(d + "/ev.jsonl");
  std::string line;
  size_t results = 0;
  while (std::getline(ev, line))
    if (json::parse(line)["topic"] == "bench.result") ++results;
  CHECK(results == 1);
  auto s = run(bench() + " show " + d + "/a.json");
  CHECK(s.exit_code == 0);
  CHECK(s.out.find("median") != std::string::npos);

  // same seed -> identical checksums
  auto p2 = run(bench() + " run " + smoke() + " --json --max-time 0.05 --threads 1 --seed 5 --no-store");
  REQUIRE(p2.exit_code == 0);
  const json doc2 = json::parse(p2.out);
  REQUIRE(doc2["cases"].size() == doc["cases"].size());
  for (size_t i = 0; i < doc["cases"].size(); ++i)
    if (doc["cases"][i]["status"] == "ok") CHECK(doc2["cases"][i]["checksum"] == doc["cases"][i]["checksum"]);
}

TEST_CASE("run --no-store reads the doctor's peaks from the store read-only and writes nothing", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string db = d + "/rtx.db";
  const auto& hw = rtx::telemetry::hardware_profile();
  std::string key = rtx::telemetry::cpu_sku_key(hw);  // the doctor's machine identity (doctor.hpp, hw_key)
  for (const auto& g : hw.gpus) key += "|" + rtx::telemetry::gpu_sku_key(g);
  const auto runs = [&] {
    rtx::store::Store st(db);
    auto& q = st.prepare("SELECT COUNT(*) FROM runs");
    q.step();
    const int64_t n = q.column_int64(0);
    q.reset();
    return n;
  };
  {
    rtx::store::Store st(db);
    const json rep = {{"schema", "rtx.doctor.v1"},
                      {"probes", {{"peaks", {{"cpu_sgemm_flops", 1.5e11}, {"cpu_stream_bytes_per_s", 2.5e10},
                                             {"hw_key", key}, {"measured_at", "2026-12-03T00:00:00.000Z"}}}}}};
    st.put_doctor_report(0, rep.dump());
  }
  const int64_t before = runs();
  auto p = run(bench() + " run " + smoke() + " --json --max-time 0.02 --threads 1 --filter gelu --no-store --db " + db);
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const json doc = json::parse(p.out);
  CHECK(doc["peaks"]["source"] == "rtx-doctor 2026-12-03T00:00:00.000Z: cblas_sgemm FLOP/s, STREAM triad B/s");
  CHECK(doc["peaks"]["flops_per_s"].get<double>() == 1.5e11);
  CHECK(doc["peaks"]["bytes_per_s"].get<double>() == 2.5e10);
  bool roofline = false;
  for (const auto& c : doc["cases"])
    if (c["status"] == "ok") roofline |= c["roofline"].contains("peak_fraction");
  CHECK(roofline);
  CHECK(runs() == before);  // --no-store: the run was not recorded

  // No store there: said in peaks.source, and none is created.
  auto q = run(bench() + " run " + smoke() + " --json --max-time 0.02 --threads 1 --filter gelu --no-store --db " + d +
               "/sub/none.db");
  INFO(q.err);
  REQUIRE(q.exit_code == 0);
  CHECK_THAT(json::parse(q.out)["peaks"]["source"].get<std::string>(), Catch::Contains("no store at"));
  CHECK_FALSE(std::filesystem::exists(d + "/sub"));

  // The latest report is a --quick one with no peaks to carry over: said so, with what to run
  // (it had read "no doctor report for this machine", which sent users to run --quick again).
  {
    rtx::store::Store st(db);
    st.put_doctor_report(0, json{{"schema", "rtx.doctor.v1"}, {"created_at", "2026-12-03T01:00:00.000Z"},
                                 {"probes", {{"skipped", true}, {"reason", "--quick"}}}}
                                .dump());
  }
  auto r = run(bench() + " run " + smoke() + " --json --max-time 0.02 --threads 1 --filter gelu --no-store --db " + db);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["peaks"]["source"] ==
        "the latest doctor report (2026-12-03T01:00:00.000Z) ran with --quick and had no measured peaks to carry over; "
        "run rtx-doctor without --quick");
}

TEST_CASE("a pack with a bad field exits 2 naming case and field", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  write(d + "/bad.json", R"({"schema": "rtx.benchpack.v1", "cases": [
    {"name": "mm", "op": "matmul_forward", "shape": {"M": 64, "N": -1, "K": 64}}]})");
  auto p = run(bench() + " run " + d + "/bad.json --no-store");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("case 'mm'") != std::string::npos);
  CHECK(p.err.find("field 'shape'") != std::string::npos);
  p = run(bench() + " list " + d + "/bad.json --json");
  CHECK(p.exit_code == 2);
  CHECK(json::parse(p.out)["error"]["category"] == "input");
  write(d + "/bad2.json", R"({"schema": "rtx.benchpack.v1", "cases": [{"name": "x", "op": "gelu_forward", "shap": "N=3"}]})");
  p = run(bench() + " run " + d + "/bad2.json --no-store");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("field 'shap'") != std::string::npos);
  p = run(bench() + " run " + d + "/missing.json --no-store");
  CHECK(p.exit_code == 2);
  p = run(bench() + " run");  // usage
  CHECK(p.exit_code == 2);
}

TEST_CASE("list shows unregistered ops as skipped, not as a crash", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  write(d + "/p.json", R"({"schema": "rtx.benchpack.v1", "cases": [
    {"name": "future", "op": "flash_attention_v3", "shape": {"B": 1}}]})");
  auto p = run(bench() + " list " + d + "/p.json --json");
  REQUIRE(p.exit_code == 0);
  const json j = json::parse(p.out);
  CHECK(j["cases"][0]["runnable"] == false);
  CHECK(j["cases"][0]["skip_reason"].get<std::string>().find("not registered") != std::string::npos);
  p = run(bench() + " run " + d + "/p.json --json --no-store");
  CHECK(p.exit_code == 0);
  CHECK(json::parse(p.out)["summary"]["skipped"] == 1);
  p = run(bench() + " list " + d + "/p.json --strict");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("field 'op'") != std::string::npos);
}

TEST_CASE("compare: exit 1 on a slowdown, 0 on A/A, 2 on a non-bench file", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  write(d + "/base.json", fake_artifact(1e-3, 1, 5).dump());
  write(d + "/same.json", fake_artifact(1e-3, 2, 5).dump());
  write(d + "/slow.json", fake_artifact(1.2e-3, 3, 5).dump());
  // One process per side: the same 20% is reported, unconfirmed, and exits 0.
  write(d + "/slow1.json", fake_artifact(1.2e-3, 3).dump());
  CHECK(run(bench() + " compare " + d + "/base.json " + d + "/slow1.json").exit_code == 0);
  auto p = run(bench() + " compare " + d + "/base.json " + d + "/same.json");
  CHECK(p.exit_code == 0);
  CHECK(p.out.find("same") != std::string::npos);
  p = run(bench() + " compare " + d + "/base.json " + d + "/slow.json --format json");
  CHECK(p.exit_code == 1);
  const json j = json::parse(p.out);
  CHECK(j["cases"][0]["verdict"] == "slower");
  CHECK(j["cases"][0]["ratio"].get<double>() == Approx(1.2).epsilon(0.03));
  p = run(bench() + " compare " + d + "/base.json " + d + "/slow.json --threshold 30%");
  CHECK(p.exit_code == 0);  // a 20% change is within a 30% threshold
  // bad input
  p = run(bench() + " compare " + d + "/base.json " + smoke());
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("smoke.json") != std::string::npos);
  CHECK(p.err.find("schema") != std::string::npos);
  write(d + "/junk.json", "{not json");
  CHECK(run(bench() + " compare " + d + "/junk.json " + d + "/base.json").exit_code == 2);
  CHECK(run(bench() + " compare " + d + "/nope.json " + d + "/base.json").exit_code == 2);
  json broken = fake_artifact(1e-3, 4);
  broken["cases"][0].erase("samples_s");
  write(d + "/broken.json", broken.dump());
  p = run(bench() + " compare " + d + "/base.json " + d + "/broken.json");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("samples_s") != std::string::npos);
  CHECK(run(bench() + " compare " + d + "/base.json " + d + "/same.json --threshold x").exit_code == 2);
  // Machine formats carry the error in-band on stdout (a pipe into jq must not get nothing).
  p = run(bench() + " compare " + d + "/nope.json " + d + "/base.json --format json");
  CHECK(p.exit_code == 2);
  CHECK(json::parse(p.out)["error"]["where"] == d + "/nope.json");
  p = run(bench() + " compare " + d + "/nope.json " + d + "/base.json --json");
  CHECK(p.exit_code == 2);
  CHECK(json::parse(p.out)["error"]["exit_code"] == 2);  // one document, written by the tool's error path
  p = run(bench() + " compare " + d + "/nope.json " + d + "/base.json --format csv");
  CHECK(p.exit_code == 2);
  CHECK(p.out.rfind("error,category,message,where,hint,exit_code\nerror,input,", 0) == 0);
  // An empty pack: said, exit 2, nothing written (it used to run and print "0 ok").
  write(d + "/empty_pack.json", R"({"schema": "rtx.benchpack.v1", "name": "nothing", "cases": []})");
  p = run(bench() + " run " + d + "/empty_pack.json --no-store -o " + d + "/nothing.json");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("pack 'nothing' has no cases: nothing to run") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(d + "/nothing.json"));
}

TEST_CASE("--backend cuda without a GPU exits 3", "[cpu][cli]") {
  if (rtx::test::have_gpu()) {  // Catch2 v2 has no SKIP(): say why and leave
    WARN("SKIPPED: a GPU is present, the no-GPU path cannot be exercised here");
    return;
  }
  auto p = run(bench() + " run " + smoke() + " --backend cuda --no-store");
  CHECK(p.exit_code == 3);
  CHECK(p.err.find("--backend cuda") != std::string::npos);
}

// Honesty check on real kernels. On this shared 2-core box (other builds running, load often
// > 5) two separate processes can differ by 50% or more on microsecond kernels (frequency,
// co-tenants, OpenMP/OpenBLAS threads stalling for scheduler quanta): between-process A/A is
// flaky for reasons unrelated to the code, so the strict repeated A/A (>= 95% "same" at 5%)
// runs on the synthetic op (tests/app/bench_runner_test.cpp). Here the real A/A is done
// within ONE interleaved run: the pack lists the same kernels twice (cases a and b), the
// interleaver spreads machine drift over both, and a vs b must be judged neither slower nor
// faster at a generous 40% threshold. (Measured here: the a/b ratio CI is usually within
// +-3%, but about one comparison in seven shifts by 10-25% even within one run, so 5% would
// be flaky on this box.)
TEST_CASE("real A/A (same kernels twice, interleaved) reports no regression", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  write(d + "/aa.json", R"({"schema": "rtx.benchpack.v1", "cases": [
    {"name": "a", "op": "gelu_forward", "shape": "N=65536"},
    {"name": "b", "op": "gelu_forward", "shape": "N=65536"},
    {"name": "a2", "op": "matmul_forward", "shape": {"M": 96, "N": 96, "K": 96}},
    {"name": "b2", "op": "matmul_forward", "shape": {"M": 96, "N": 96, "K": 96}}]})");
  auto p = run(bench() + " run " + d + "/aa.json --threads 1 --interleave --max-time 0.3 --min-samples 20 --seed 3 --no-store -q --json");
  REQUIRE(p.exit_code == 0);
  const json doc = json::parse(p.out);
  json base = doc, fresh = doc;
  base["cases"] = json::array();
  fresh["cases"] = json::array();
  for (json c : doc["cases"]) {
    if (c["status"] != "ok") continue;  // op not registered in this build yet: skipped
    const std::string name = c["name"], rest = c["id"].get<std::string>().substr(name.size());
    c["id"] = (name.back() == '2' ? "k2" : "k1") + rest;
    (name[0] == 'a' ? base : fresh)["cases"].push_back(c);
  }
  if (base["cases"].empty()) {  // Catch2 v2 has no SKIP(): say why and leave
    WARN("SKIPPED: gelu_forward and matmul_forward are not registered in this build");
    return;
  }
  write(d + "/a.json", base.dump());
  write(d + "/b.json", fresh.dump());
  p = run(bench() + " compare " + d + "/a.json " + d + "/b.json --threshold 40% --format json");
  INFO(p.out);
  CHECK(p.exit_code == 0);
  const json rep = json::parse(p.out);
  CHECK(rep["summary"]["slower"] == 0);
  CHECK(rep["summary"]["faster"] == 0);
}

TEST_CASE("bad input never crashes: skipped shapes, option ranges, -o onto the pack", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  // softmax N=C=2^32 and a mixed pack (one good case, one N=0): skipped with the reason
  write(d + "/sm.json", R"({"schema":"rtx.benchpack.v1","cases":[{"name":"s","op":"softmax_forward","shape":{"N":4294967296,"C":4294967296}}]})");
  auto p = run(bench() + " run " + d + "/sm.json --no-store --json -q");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  CHECK(json::parse(p.out)["cases"][0]["skip_reason"].get<std::string>().find("exceeds 2^31-1") != std::string::npos);
  p = run(bench() + " run " + d + "/sm.json --no-store --strict");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("sm.json: case 's': field 'shapes[0]'") != std::string::npos);
  write(d + "/mixed.json", R"({"schema":"rtx.benchpack.v1","cases":[{"name":"g","op":"gelu_forward","shape":"N=64"},
    {"name":"z","op":"gelu_forward","shape":"N=0"}]})");
  p = run(bench() + " list " + d + "/mixed.json");
  CHECK(p.exit_code == 0);
  CHECK(p.out.find("1 runnable, 1 skipped") != std::string::npos);
  CHECK(p.out.find("dim N = 0 must be >= 1") != std::string::npos);
  p = run(bench() + " run " + d + "/mixed.json --no-store --json -q --max-time 0.01 --threads 1");
  REQUIRE(p.exit_code == 0);
  const json doc = json::parse(p.out);
  CHECK(doc["summary"]["ok"] == 1);
  CHECK(doc["summary"]["skipped"] == 1);
  // option ranges: exit 2 naming the flag, before any work
  for (const char* bad : {"--warmup -1", "--warmup 2000000", "--min-samples 0", "--max-samples -1", "--max-time 0",
                          "--max-time nan", "--max-time 1e9", "--max-rel-ci 2", "--threads 100000", "--threads -1",
                          "--min-samples 50 --max-samples 10", "--seed -1", "--seed 18446744073709551616"}) {
    INFO(bad);
    p = run(bench() + " run " + d + "/mixed.json --no-store -q " + bad);
    CHECK(p.exit_code == 2);
    const std::string flag = std::string(bad).substr(0, std::string(bad).find(' '));
    CHECK(p.err.find(flag) != std::string::npos);
  }
  // --seed at the top of the range is fine, and recorded
  p = run(bench() + " run " + d + "/mixed.json --no-store -q --json --max-time 0.01 --seed 18446744073709551615");
  REQUIRE(p.exit_code == 0);
  CHECK(json::parse(p.out)["seed"].get<uint64_t>() == 18446744073709551615ull);
  // -o onto the pack itself (also through a relative path): refused, pack untouched
  p = run("cd " + d + " && " + bench() + " run ./mixed.json --no-store -q -o " + d + "/mixed.json");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("is the bench pack itself") != std::string::npos);
  std::ifstream f(d + "/mixed.json");
  CHECK(json::parse(f)["schema"] == "rtx.benchpack.v1");
  // a wrong type at a top-level field: Input naming the field, not an internal error
  write(d + "/name7.json", R"({"schema":"rtx.benchpack.v1","name":7,"cases":[{"name":"g","op":"gelu_forward","shape":"N=8"}]})");
  p = run(bench() + " list " + d + "/name7.json");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("name7.json: field 'name': expected a string") != std::string::npos);
  // an unreadable pack is exit 2 (input), like a missing one
  CHECK(run(bench() + " list /proc/self/mem").exit_code == 2);
  // --filter: too long
  p = run(bench() + " list " + d + "/mixed.json --filter " + std::string(1001, 'a'));
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("--filter") != std::string::npos);
  // --filter matching no case: a usage error naming the pack's case count, for run and list
  // (an empty run exiting 0 would pass a CI step that measured nothing), with no artifact written.
  for (const std::string cmd : {" run " + smoke() + " --filter no_such_case --no-store -o " + d + "/none.json",
                                 " list " + smoke() + " --filter no_such_case"}) {
    INFO(cmd);
    p = run(bench() + cmd);
    CHECK(p.exit_code == 2);
    CHECK(p.err.find("--filter") != std::string::npos);
    CHECK(p.err.find("matches none of the") != std::string::npos);
    CHECK(p.err.find("rtx-bench list") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(d + "/none.json"));
}

TEST_CASE("compare/show reject inconsistent artifacts; compare - - is a usage error", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  write(d + "/base.json", fake_artifact(1e-3, 1).dump());
  json dup = fake_artifact(1e-3, 2);
  dup["cases"].push_back(dup["cases"][0]);
  write(d + "/dup.json", dup.dump());
  auto p = run(bench() + " compare " + d + "/base.json " + d + "/dup.json");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("dup.json: field '/cases/1/id': duplicate case id") != std::string::npos);
  json empty = fake_artifact(1e-3, 3);
  empty["cases"][0]["samples_s"] = json::array();
  write(d + "/empty.json", empty.dump());
  p = run(bench() + " show " + d + "/empty.json");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("empty.json: field '/cases/0/samples_s'") != std::string::npos);
  // summary counts that show prints: a string was an internal error (exit 4), 2.5 printed "2".
  for (const auto& [field, value] : {std::pair<const char*, json>{"contended", "x"}, {"contended", 2.5}, {"contended", -3}, {"ok", "x"}}) {
    json bad = fake_artifact(1e-3, 5);
    bad["summary"] = {{field, value}};
    write(d + "/summary.json", bad.dump());
    p = run(bench() + " show " + d + "/summary.json");
    INFO(field << " = " << value.dump() << ": " << p.err);
    CHECK(p.exit_code == 2);
    CHECK(p.err.find(std::string("summary.json: field '/summary/") + field + "'") != std::string::npos);
  }
  json edited = fake_artifact(1e-3, 4);
  edited["cases"][0]["time"] = {{"median_s", 1.0}};
  write(d + "/edited.json", edited.dump());
  p = run(bench() + " compare " + d + "/base.json " + d + "/edited.json");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("/cases/0/time/median_s") != std::string::npos);
  p = run(bench() + " compare - - < " + d + "/base.json");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("stdin can be read only once") != std::string::npos);
  // md escapes '|' in ids
  json pipe = fake_artifact(1e-3, 5);
  pipe["cases"][0]["id"] = "a|b";
  write(d + "/pipe.json", pipe.dump());
  p = run(bench() + " compare " + d + "/pipe.json " + d + "/pipe.json --format md");
  CHECK(p.exit_code == 0);
  CHECK(p.out.find("`a\\|b`") != std::string::npos);
}

// --baseline-exe: the baseline's rounds alternate with ours (ABBA), so drift of the machine over
// the run falls on both sides. A/A (this binary on both sides) must give no slower/faster
// verdict; a baseline that runs the scalar kernels (RTX_ISA=scalar, a real planted
// difference) must make some case faster and none slower. Threshold 10%: the test shares 2
// cores with ctest -j2 (docs/perf-history.md has the 5% A/A runs on a quieter machine).
TEST_CASE("run --baseline-exe: ABBA rounds against another build; A/A is never slower or faster", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string common = " run " + smoke() + " --rounds 12 --threads 1 --no-store -q ";
  auto p = run(bench() + common + "--baseline-exe " + bench() + " --baseline-out " + d + "/base.json -o " + d + "/new.json");
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const json base = json::parse(read(d + "/base.json")), fresh = json::parse(read(d + "/new.json"));
  CHECK(base["ab"]["role"] == "baseline");
  CHECK(fresh["ab"]["role"] == "new");
  // One pairing marker shared by the two files, and a merged whole-run window over the rounds.
  REQUIRE(base["ab"].contains("pair_id"));
  CHECK(base["ab"]["pair_id"].get<std::string>().size() == 32);
  CHECK(base["ab"]["pair_id"] == fresh["ab"]["pair_id"]);
  for (const json* doc : {&base, &fresh}) {
    REQUIRE((*doc)["host"].contains("run"));
    CHECK((*doc)["host"]["run"]["rounds"] == 12);
    for (const auto& c : (*doc)["cases"])
      if (c["host"].contains("psi_cpu_some_share")) CHECK(c["host"]["psi_cpu_some_share"].get<double>() <= 1.0);
  }
  REQUIRE(base["cases"].size() == fresh["cases"].size());
  for (const json* doc : {&base, &fresh})
    for (const auto& c : (*doc)["cases"]) {
      // Rounds on a busy host are left out when enough quiet ones remain (host.rounds_left_out):
      // every round is either judged or listed there.
      const size_t left_out = c["host"].contains("rounds_left_out") ? c["host"]["rounds_left_out"].size() : 0;
      CHECK(c["round_medians_s"].size() + left_out == 12);
      if (left_out > 0) CHECK(c["host"]["judged_rounds"] == 12 - left_out);
    }
  p = run(bench() + " compare " + d + "/base.json " + d + "/new.json --threshold 10% --format json");
  INFO(p.out);
  CHECK(p.exit_code == 0);
  json rep = json::parse(p.out);
  CHECK(rep["summary"]["slower"] == 0);
  CHECK(rep["summary"]["faster"] == 0);
  for (const auto& c : rep["cases"]) CHECK(c["basis"] == "rounds");

  // Planted: the baseline runs the scalar kernels (RTX_ISA=scalar; gelu about 15x slower than
  // its AVX2 or AVX-512 path). A cache flush per sample (--cold) was the planted difference
  // before, but on a CPU whose prefetchers stream the 64 KiB case back from DRAM (AMD EPYC,
  // 512 KiB L2) it cost only ~6%, below the threshold.
  REQUIRE(rtx::kernels::cpu_isa_supported() != rtx::kernels::Isa::Scalar);  // x86-64 CI machines have AVX2
  const std::string cold = d + "/scalar-bench.sh";
  write(cold, "#!/bin/sh\nRTX_ISA=scalar exec " + bench() + " \"$@\"\n");
  REQUIRE(::chmod(cold.c_str(), 0755) == 0);
  p = run(bench() + " run " + smoke() + " --filter gelu --rounds 6 --min-samples 10 --max-samples 10 --threads 1 --no-store -q " +
          "--baseline-exe " + cold + " --baseline-out " + d + "/cold.json -o " + d + "/new2.json");
  REQUIRE(p.exit_code == 0);
  p = run(bench() + " compare " + d + "/cold.json " + d + "/new2.json --threshold 10% --format json");
  INFO(p.out);
  rep = json::parse(p.out);
  CHECK(rep["summary"]["slower"] == 0);
  // The two files of one ABBA run: a busy host in some rounds (other jobs on a shared CI
  // machine) is balanced across the sides, so the verdict stands (with a host_note).
  CHECK(rep["summary"]["undecided"] == 0);
  CHECK(rep["summary"]["faster"] == 1);

  // Bad input: exit 2 naming the flag, nothing written.
  p = run(bench() + common + "--baseline-exe " + bench() + " -o " + d + "/x.json");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("--baseline-out"));
  p = run(bench() + common + "--baseline-exe " + d + "/nope --baseline-out " + d + "/b.json -o " + d + "/x.json");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("not an executable"));
  p = run(bench() + " run " + smoke() + " --rounds 1 --no-store -q --baseline-exe " + bench() + " --baseline-out " + d +
          "/b.json -o " + d + "/x.json");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("--rounds"));
  p = run(bench() + common + "--baseline-exe " + bench() + " --baseline-out " + d + "/x.json -o " + d + "/x.json");
  CHECK(p.exit_code == 2);
  p = run(bench() + common + "--baseline-exe /bin/false --baseline-out " + d + "/b.json -o " + d + "/x.json");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("baseline"));
  // The same output file spelled two ways, a folder as the program, a missing folder.
  p = run(bench() + common + "--baseline-exe " + bench() + " --baseline-out " + d + "/x.json -o " + d + "/../" +
          std::filesystem::path(d).filename().string() + "/./x.json");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("--baseline-out"));
  p = run(bench() + common + "--baseline-exe " + d + " --baseline-out " + d + "/b.json -o " + d + "/x.json");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("not an executable"));
  p = run(bench() + common + "--baseline-exe " + bench() + " --baseline-out " + d + "/nodir/b.json -o " + d + "/x.json");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("--baseline-out") && Catch::Contains("does not exist"));
  // A baseline that exits 0 without an artifact is named, with its round.
  const std::string silent = d + "/silent.sh";
  write(silent, "#!/bin/sh\nexit 0\n");
  REQUIRE(::chmod(silent.c_str(), 0755) == 0);
  p = run(bench() + common + "--baseline-exe " + silent + " --baseline-out " + d + "/b.json -o " + d + "/x.json");
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("baseline round 1/12") && Catch::Contains("wrote no valid rtx.bench.v1 artifact"));
  CHECK_FALSE(std::filesystem::exists(d + "/x.json"));
  CHECK_FALSE(std::filesystem::exists(d + "/b.json"));
}

// Host contention end to end: spinning threads in this process (two per logical CPU, so every
// CPU has two runnable competitors whatever the machine's size) while `run` samples a tiny
// case for 0.5 s with one thread. The measuring thread then gets about a third of a CPU
// (0.33 measured on the 2-CPU dev VM, PSI stall share 1.0, 121 involuntary switches/s), far
// beyond the 80% / 10% / 50/s thresholds; other processes (this test's threads) took 0.87 of the
// window's 1.0 CPU-s (83%, the rule's threshold is 10%). The margin is large: the
// test fails only if the evidence is not collected or not reported.
TEST_CASE("run under a busy loop warns, records host.contended; compare calls it undecided", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  write(d + "/tiny.json", R"({"schema": "rtx.benchpack.v1", "name": "tiny", "cases": [
    {"name": "gelu", "op": "gelu_forward", "shape": "N=1000"}]})");
  // --min-samples above what 0.5 s can take: the case samples for the whole --max-time.
  const std::string args = " run " + d + "/tiny.json --rounds 1 --threads 1 --max-time 0.5 --min-samples 10000000 " +
                           "--max-samples 100000000 --db " + d + "/rtx.db --json";
  rtx::test::BusyHost busy;
  auto p = run(bench() + args + " -o " + d + "/busy.json");
  busy.stop();
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const json doc = json::parse(p.out);
  const json& c = doc["cases"][0];
  if (c["status"] == "skipped") {  // Catch2 v2 has no SKIP(): say why and leave
    WARN("SKIPPED: gelu_forward is not registered in this build");
    return;
  }
  REQUIRE(c.contains("host"));
  const json& h = c["host"];
  INFO(h.dump());
  CHECK(h["window_s"].get<double>() >= 0.45);
  CHECK(h["cpu_share"].get<double>() < 0.8);
  CHECK(h["contended"] == true);
  // The one rule names the CPU time other processes (this test's spinning threads) took; the
  // older signals name the measuring thread where /proc/stat cannot be read.
  const std::string lead = h.contains("other_cpu_s") ? "other processes took " : "measuring thread ran";
  CHECK(h["reason"].get<std::string>().find(lead) != std::string::npos);
  if (h.contains("other_cpu_s")) CHECK(h["other_cpu_share"].get<double>() > 0.1);
  if (h.contains("psi_cpu_some_share")) CHECK(h["psi_cpu_some_share"].get<double>() > 0.1);
  CHECK(doc["summary"]["contended"] == 1);
  CHECK(doc["host"]["contended_cases"] == 1);
  // One warning for the run, naming the case and the evidence.
  CHECK_THAT(p.err, Catch::Contains("rtx-bench: warning: the host was busy while 1 case(s) were measured"));
  CHECK_THAT(p.err, Catch::Contains(c["id"].get<std::string>() + ": " + lead));
  CHECK_THAT(p.err, Catch::Contains("1-minute load average"));
  CHECK_THAT(p.err, Catch::Contains("busy-host"));  // the table's status column
  // The store keeps the verdict beside the result (schema 3), so history and get_baseline can
  // tell this run from a quiet one.
  {
    rtx::store::Store st(d + "/rtx.db");
    auto& q = st.prepare("SELECT contended, contention_reason, COUNT(*) FROM bench_results");
    REQUIRE(q.step());
    CHECK(q.column_int64(2) == 1);
    CHECK(q.column_int64(0) == 1);
    CHECK(q.column_text(1) == h["reason"].get<std::string>());
    q.reset();
  }

  // compare: undecided (named, with the reason), exit 0, a warning on stderr.
  auto q = run(bench() + " compare " + d + "/busy.json " + d + "/busy.json --format json");
  INFO(q.out);
  CHECK(q.exit_code == 0);
  const json rep = json::parse(q.out);
  CHECK(rep["summary"]["undecided"] == 1);
  CHECK(rep["cases"][0]["verdict"] == "undecided");
  CHECK(rep["cases"][0]["reason"].get<std::string>().find("host busy during base: " + lead) == 0);
  CHECK_THAT(q.err, Catch::Contains("1 case(s) undecided"));
}

TEST_CASE("run --json: a failed store write leaves stdout one JSON document (the error), -o FILE written", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string db = d + "/rtx.db";
  {
    rtx::store::Store st(db);  // created at the current schema, then refusing the run's rows
    st.exec("CREATE TRIGGER no_runs BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'refused'); END");
  }
  auto p = run(bench() + " run " + smoke() + " --json --max-time 0.02 --threads 1 --filter gelu --db " + db + " -o " + d + "/a.json");
  INFO(p.out << p.err);
  CHECK(p.exit_code != 0);
  json out;
  REQUIRE_NOTHROW(out = json::parse(p.out));  // before: the artifact, then the error object
  CHECK(out.contains("error"));
  CHECK_FALSE(out.contains("cases"));
  CHECK(std::filesystem::exists(d + "/a.json"));
}

TEST_CASE("show prints seed 2^64-1 unsigned and escapes ids, pack name and skip reasons", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  json doc = fake_artifact(1e-3, 1);
  doc["seed"] = UINT64_MAX;
  doc["pack"] = {{"name", "p\x1b[31m"}, {"source", "x"}};
  doc["cases"][0]["id"] = "k\x1b[2J";
  doc["cases"].push_back({{"id", "s\rx"}, {"status", "skipped"}, {"samples_s", json::array()}, {"skip_reason", "no\x07"}});
  std::ofstream(d + "/a.json") << doc.dump();
  auto p = run(bench() + " show " + d + "/a.json");
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Catch::Contains("seed 18446744073709551615"));
  CHECK(p.out.find('\x1b') == std::string::npos);
  CHECK(p.out.find('\r') == std::string::npos);
  CHECK(p.out.find('\x07') == std::string::npos);
  CHECK_THAT(p.out, Catch::Contains("k\\x1B[2J"));
  doc["seed"] = -1;
  std::ofstream(d + "/b.json") << doc.dump();
  auto q = run(bench() + " show " + d + "/b.json");
  CHECK(q.exit_code == 2);
  CHECK_THAT(q.err, Catch::Contains("field '/seed'"));
}
