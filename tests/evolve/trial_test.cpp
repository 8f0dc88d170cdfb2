// Trials run in-process: kernel cases are checked against the float64 reference and hash alike
// on repeat; the allocation trace's data survives every allocator config; the serving trial's
// tokens do not depend on scheduler knobs (batch invariance); bad specs are errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include "rtx/core/error.hpp"
#include "rtx/evolve/trial.hpp"
#include "test_util.hpp"

using namespace rtx::evolve;
using nlohmann::json;

namespace {
json spec(const char* kind) { return {{"schema", kTrialSpecSchema}, {"kind", kind}, {"seed", 5}, {"samples", 3}, {"warmup", 1}}; }
}  // namespace

TEST_CASE("evolve trial: kernel cases (odd shapes) are checked and reproducible", "[cpu]") {
  json s = spec("kernels");
  s["threads"] = 1;
  s["cases"] = json::array({{{"id", "mm"}, {"op", "matmul_forward"}, {"variant", "cpu.blocked"},
                             {"shape", {{"M", 7}, {"N", 127}, {"K", 13}}}, {"dtype", "f32"}, {"params", json::object()}},
                            {{"id", "sm"}, {"op", "softmax_forward"}, {"variant", "cpu.vec"}, {"shape", {{"N", 1}, {"C", 7}}},
                             {"dtype", "f32"}, {"params", {{"ROWS", 8}}}}});
  const json a = run_trial(s), b = run_trial(s);
  REQUIRE(a["cases"].size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(a["cases"][i]["ok"].get<bool>());
    CHECK(a["cases"][i]["samples"].size() == 3);
    CHECK(a["cases"][i]["repeat_checksum_equal"].get<bool>());
    CHECK(a["cases"][i]["checksum"] == b["cases"][i]["checksum"]);
    CHECK(a["cases"][i]["max_rel_err"].get<double>() <= a["cases"][i]["tolerance"].get<double>());
  }
  CHECK(a["peak_rss_bytes"].get<double>() > 0);
  s["cases"][0]["params"] = {{"MC", 3}};  // not in the space
  CHECK_THROWS_AS(run_trial(s), rtx::Error);
}

TEST_CASE("evolve trial: kernel cases compare with the baseline's params on the same inputs", "[cpu]") {
  json s = spec("kernels");
  s["threads"] = 1;
  s["baseline_threads"] = 2;
  // K = 1000 is not a multiple of any KC: KC 64 vs 512 sums each dot product in other blocks.
  const json mm = {{"op", "matmul_forward"}, {"variant", "cpu.blocked"}, {"shape", {{"M", 37}, {"N", 127}, {"K", 1000}}},
                   {"dtype", "f32"}};
  json same = mm, reordered = mm, bf = mm, ln = mm;
  same["id"] = "same";
  same["params"] = {{"KC", 64}};
  same["baseline_params"] = {{"KC", 64}};
  reordered["id"] = "reordered";
  reordered["params"] = {{"KC", 64}};
  reordered["baseline_params"] = {{"KC", 512}};
  bf["id"] = "bf16";
  bf["dtype"] = "bf16";
  bf["params"] = {{"KC", 64}};
  bf["baseline_params"] = {{"KC", 512}};
  ln = {{"id", "ln"}, {"op", "layernorm_backward"}, {"variant", "cpu.vec"}, {"shape", {{"N", 7}, {"C", 127}}},
        {"dtype", "f32"}, {"params", json::object()}, {"baseline_params", json::object()}};
  s["cases"] = json::array({same, reordered, bf, ln});
  const json r = run_trial(s);
  REQUIRE(r["cases"].size() == 4);
  for (const auto& c : r["cases"]) {
    INFO(c.dump());
    REQUIRE(c.contains("parity"));
    CHECK(c["parity"]["available"].get<bool>());
    CHECK(c["parity"]["ok"].get<bool>());
    CHECK(c["parity"]["rel_diff"].get<double>() <= c["parity"]["max_rel_diff"].get<double>() * 1.0000001);
  }
  // Same params: bit-identical (the thread count does not change a matmul's sums).
  CHECK(r["cases"][0]["parity"]["rel_diff"].get<double>() == 0.0);
  // Another K blocking: fp32 rounding, within the 1e-6 bound but not zero.
  const double reord = r["cases"][1]["parity"]["rel_diff"].get<double>();
  CHECK(reord > 0.0);
  CHECK(reord <= 1e-6);
  CHECK(r["cases"][1]["parity"]["tolerance"].get<double>() == 1e-6);
  CHECK(r["cases"][2]["parity"]["tolerance"].get<double>() == 1e-3);
  // layernorm's row reductions do not depend on the thread count (1 vs 2 threads).
  CHECK(r["cases"][3]["parity"]["rel_diff"].get<double>() == 0.0);
  // Baseline params outside the space are an Input error naming the field.
  s["cases"] = json::array({reordered});
  s["cases"][0]["baseline_params"] = {{"KC", 100}};
  try {
    run_trial(s);
    FAIL("baseline params outside the space were accepted");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Input);
    CHECK_THAT(e.message(), Catch::Contains("KC=100"));
  }
}

TEST_CASE("evolve trial: allocation trace under different allocator knobs", "[cpu]") {
  json s = spec("alloc");
  s["steps"] = 2;
  const json base = run_trial(s);
  s["config"] = {{"round_bytes", 256}, {"large_round_bytes", 1 << 20}};
  const json cand = run_trial(s);
  s["config"] = {{"caching", false}};
  const json nocache = run_trial(s);
  for (const json* r : {&base, &cand, &nocache}) {
    CHECK((*r)["cases"][0]["ok"].get<bool>());
    CHECK((*r)["cases"][0]["checksum"] == base["cases"][0]["checksum"]);  // same data whatever the knobs
    CHECK((*r)["peak_reserved_bytes"].get<double>() >= (*r)["peak_allocated_bytes"].get<double>());
  }
  // Rounding large segments to 1 MiB instead of 2 MiB cannot reserve more for this trace.
  CHECK(cand["peak_reserved_bytes"].get<double>() <= base["peak_reserved_bytes"].get<double>());
  s["config"] = {{"round_bytes", 100}};
  CHECK_THROWS_AS(run_trial(s), rtx::Error);
  s["config"] = {{"colour", 1}};
  CHECK_THROWS_AS(run_trial(s), rtx::Error);
  CHECK(allocator_config_from_json(allocator_config_json(rtx::AllocatorConfig{}), "x").round_bytes == 512);
}

TEST_CASE("evolve trial: serving tokens are independent of the scheduler knobs", "[cpu]") {
  const std::string model = rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  REQUIRE(std::ifstream(model).good());
  json s = spec("serve");
  s["model"] = model;
  s["requests"] = 5;
  s["prompt_tokens"] = 7;
  s["max_tokens"] = 9;
  s["samples"] = 2;
  const json a = run_trial(s);
  s["config"] = {{"max_batch", 2}, {"kv_block_tokens", 8}, {"prefill_chunk", 3}};
  const json b = run_trial(s);
  CHECK(a["cases"][0]["ok"].get<bool>());
  CHECK(a["cases"][0]["checksum"] == b["cases"][0]["checksum"]);
  CHECK(a["cases"][0]["samples"].size() == 2);
  s["config"] = {{"max_batch", 0}};
  CHECK_THROWS_AS(run_trial(s), rtx::Error);
}

TEST_CASE("evolve trial: malformed specs", "[cpu]") {
  CHECK_THROWS_AS(run_trial(json::object()), rtx::Error);
  CHECK_THROWS_AS(run_trial(spec("astrology")), rtx::Error);
  json s = spec("kernels");
  s["cases"] = 3;
  CHECK_THROWS_AS(run_trial(s), rtx::Error);
}

TEST_CASE("evolve trial: each part's measuring window carries host evidence (injected readings)", "[cpu]") {
  // An injected sampler: each reading 1 s after the last, the measuring thread ran 40% of it and
  // PSI saw a 30% stall: rtx-bench's rule flags the window.
  double t = 0;
  auto busy = [&t]() {
    rtx::measure::HostSample h;
    t += 1;
    h.wall_s = t;
    h.thread_cpu_s = h.process_cpu_s = 0.4 * t;
    h.psi_valid = true;
    h.psi_some_total_us = static_cast<uint64_t>(300'000 * t);
    h.involuntary_switches = static_cast<int64_t>(5 * t);
    return h;
  };
  json s = spec("kernels");
  s["threads"] = 1;
  s["cases"] = json::array({{{"id", "sm"}, {"op", "softmax_forward"}, {"variant", "cpu.vec"}, {"shape", {{"N", 1}, {"C", 7}}},
                             {"dtype", "f32"}, {"params", json::object()}}});
  const json r = run_trial(s, busy);
  REQUIRE(r.contains("host"));
  CHECK(r["host"]["contended"] == true);
  CHECK(r["host"]["judged_on"] == "case");
  CHECK(r["host"]["window_s"].get<double>() == Approx(1.0));
  CHECK(r["host"]["cpu_share"].get<double>() == Approx(0.4));
  CHECK(r["host"]["psi_cpu_some_share"].get<double>() == Approx(0.3));
  CHECK_THAT(r["host"]["reason"].get<std::string>(), Catch::Contains("measuring thread ran 40%") && Catch::Contains("PSI cpu stall 30%"));
  const auto e = trial_host_evidence(r, "t.json", "/parts/0");
  REQUIRE(e.has_value());
  CHECK(e->contended);
  // A timed loop of 10 ms (microsecond kernels) is too short to judge alone: it takes the verdict
  // of the part's whole run (1.02 s, busy), judged_on "run", as rtx-bench does for a short case.
  const double at[] = {0.0, 1.0, 1.01, 1.02};
  size_t call = 0;
  auto short_loop = [&]() {
    rtx::measure::HostSample h;
    h.wall_s = at[std::min<size_t>(call++, 3)];
    h.thread_cpu_s = h.process_cpu_s = 0.4 * h.wall_s;
    h.psi_valid = true;
    h.psi_some_total_us = static_cast<uint64_t>(300'000 * h.wall_s);
    return h;
  };
  const json rs = run_trial(s, short_loop);
  CHECK(call == 4);
  CHECK(rs["host"]["judged_on"] == "run");
  CHECK(rs["host"]["contended"] == true);
  CHECK(rs["host"]["window_s"].get<double>() == Approx(0.01));
  CHECK_THAT(rs["host"]["reason"].get<std::string>(), Catch::StartsWith("whole run (1.02 s; "));
  CHECK(trial_host_evidence(rs, "t.json", "/parts/0")->contended);
  // The allocation trace: judged on the part's whole run, CPU-share rule on.
  json a = spec("alloc");
  a["steps"] = 2;
  const json ra = run_trial(a, busy);
  CHECK(ra["host"]["contended"] == true);
  // The real sampler on this host: a short window is not judged ("none"), a verdict either way
  // is well formed.
  const json q = run_trial(s);
  REQUIRE(q.contains("host"));
  CHECK(q["host"]["contended"].is_boolean());
  CHECK(trial_host_evidence(q, "t.json", "/parts/0").has_value());
  // A part without host evidence (an earlier build's child): nothing, not an error.
  CHECK_FALSE(trial_host_evidence(json{{"cases", json::array()}}, "t.json", "/parts/0").has_value());
}

TEST_CASE("evolve trial: malformed host evidence in a trial result is an input error naming the field", "[cpu]") {
  const json good = {{"window_s", 1.0}, {"thread_cpu_s", 0.5}, {"process_cpu_s", 0.5}, {"threads", 1},
                     {"involuntary_switches", 3}, {"contended", true}, {"reason", "PSI cpu stall 30% of the window (> 10%)"},
                     {"judged_on", "case"}};
  CHECK(trial_host_evidence(json{{"host", good}}, "trial output", "/parts/1")->contended);
  auto field_of = [](json host) -> std::string {
    try {
      trial_host_evidence(json{{"host", host}}, "trial output", "/parts/1");
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      return e.where();
    }
    return "(accepted)";
  };
  json h = good;
  h["contended"] = "yes";
  CHECK(field_of(h) == "trial output: field '/parts/1/host/contended'");
  h = good;
  h["window_s"] = -1;
  CHECK(field_of(h) == "trial output: field '/parts/1/host/window_s'");
  h = good;
  h.erase("window_s");
  CHECK(field_of(h) == "trial output: field '/parts/1/host/window_s'");
  h = good;
  h["reason"] = 7;
  CHECK(field_of(h) == "trial output: field '/parts/1/host/reason'");
  h = good;
  h["reason"] = "";
  CHECK(field_of(h) == "trial output: field '/parts/1/host/reason'");
  h = good;
  h["judged_on"] = "none";
  CHECK(field_of(h) == "trial output: field '/parts/1/host/judged_on'");
  h = good;
  h["judged_on"] = "tea leaves";
  CHECK(field_of(h) == "trial output: field '/parts/1/host/judged_on'");
  h = good;
  h["rounds"] = 3;
  CHECK(field_of(h) == "trial output: field '/parts/1/host/rounds'");
  h = good;
  h.erase("contended");
  CHECK(field_of(h).find("/parts/1/host") != std::string::npos);
  CHECK(field_of(json::array()) == "trial output: field '/parts/1/host'");
}
