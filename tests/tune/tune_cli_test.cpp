// rtx-tune as a subprocess: run --json (rtx.tune.v1) on a tiny matmul, resume and replay
// through the store, show --stats, export/import (rtx.profile.v1, SKU refusal), exit codes.
#include <catch2/catch.hpp>

#include "rtx/stats/compare.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rtx/store/store.hpp"
#include "test_util.hpp"

using nlohmann::json;
using rtx::test::run;

namespace {

std::string tune() { return rtx::test::tool_path("rtx-tune"); }

// --include-busy: ctest -j runs other tests beside these, and a trial judged busy would neither
// be reused nor win (tested with injected host readings in tune_measure_test).
const char* kTiny = " run --op matmul_forward --shape M=64,N=64,K=64 --strategy random --budget 5evals --seed 3"
                    " --min-samples 3 --max-samples 8 --max-time 0.02 --include-busy";

json parse_out(const rtx::test::Proc& p) {
  INFO("stdout: " << p.out << "\nstderr: " << p.err);
  REQUIRE_NOTHROW(json::parse(p.out));
  return json::parse(p.out);
}

}  // namespace

TEST_CASE("rtx-tune run/show/export/import end to end", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string db = " --db " + d + "/rtx.db";
  auto p = run(tune() + kTiny + " --json" + db);
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  json doc = parse_out(p);
  CHECK(doc["schema"] == "rtx.tune.v1");
  CHECK(doc["hardware"].is_object());
  REQUIRE(doc["keys"].size() == 1);
  json k = doc["keys"][0];
  CHECK(k["variant"] == "cpu.blocked");
  CHECK(k["evaluations"] == 5);
  CHECK(k["measured"] == 5);
  CHECK(k["failed"] == 0);
  CHECK(k["best"]["median_s"].get<double>() > 0);
  CHECK(k["default"]["params"] == json{{"KC", 0}, {"MC", 0}, {"MR", 0}, {"NC", 0}, {"NR", 0}});
  CHECK(k["best"]["median_s"].get<double>() <= k["default"]["median_s"].get<double>());
  CHECK(k["profile_version"] == 1);
  CHECK(k["curve"].size() == 5);
  // The winner is confirmed against the defaults with interleaved A/B runs.
  if (k["best"]["params"] != k["default"]["params"]) {
    REQUIRE(k["confirm"].is_object());
    CHECK(k["confirm"]["n"] == 15);
    CHECK(k["speedup_vs_default"] == k["confirm"]["speedup"]);
    const double sp = k["confirm"]["speedup"].get<double>();
    CHECK(k["confirm"]["ci"][0].get<double>() <= sp);
    CHECK(sp <= k["confirm"]["ci"][1].get<double>());
    // The suite's notation beside the speedup: the time ratio best/default is its inverse.
    CHECK(k["confirm"]["time_ratio"].get<double>() == Approx(1 / sp).epsilon(1e-12));
    CHECK(k["confirm"]["time_ratio_ci"][0].get<double>() == Approx(1 / k["confirm"]["ci"][1].get<double>()).epsilon(1e-12));
    CHECK(k["time_ratio_vs_default"].get<double>() == Approx(1 / sp).epsilon(1e-12));
    CHECK(k["confirm"]["change"].get<std::string>().find(rtx::stats::format_time_ratio(1 / sp) + " [") == 0);
    const std::string v = k["confirm"]["verdict"].get<std::string>();
    CHECK((v == "same" || v == "faster" || v == "slower" || v == "ambiguous"));
    CHECK(k["profile_params"] == (v == "slower" ? k["default"]["params"] : k["best"]["params"]));
  } else {
    CHECK(k["confirm"].is_null());
  }

  // Same command again: everything comes from the store, and the speedup reported is the A/B
  // the standing profile was saved with (not the sequential search ratio).
  const json first = k;
  p = run(tune() + kTiny + " --json" + db);
  REQUIRE(p.exit_code == 0);
  k = parse_out(p)["keys"][0];
  CHECK(k["measured"] == 0);
  CHECK(k["reused"] == 5);
  CHECK(k["profile_version"] == 1);
  CHECK(parse_out(p)["warnings"].is_array());
  if (first["confirm"].is_object()) {
    REQUIRE(k["confirm"].is_object());
    CHECK(k["confirm"]["from_profile_version"] == 1);
    CHECK(k["confirm"]["speedup"] == first["confirm"]["speedup"]);
    CHECK(k["speedup_vs_default"] == first["speedup_vs_default"]);
  }

  // Replay with another strategy: nothing measured, nothing written.
  p = run(tune() + " run --op matmul_forward --shape 64x64x64 --strategy tpe --budget 50 --replay --include-busy --json" + db);
  REQUIRE(p.exit_code == 0);
  k = parse_out(p)["keys"][0];
  CHECK(k["measured"] == 0);
  CHECK(k["profile_version"].is_null());
  CHECK(k["evaluations"].get<int>() <= 5);

  p = run(tune() + " show --stats --json" + db);
  REQUIRE(p.exit_code == 0);
  doc = parse_out(p);
  REQUIRE(doc["profiles"].size() == 1);
  CHECK(doc["profiles"][0]["version"] == 1);
  CHECK(doc["stats"]["trials"][0]["ok"] == 5);
  CHECK(doc["stats"]["lookup"]["exact"] == 1);
  p = run(tune() + " show --stats" + db);
  CHECK(p.exit_code == 0);
  CHECK(p.out.find("1 exact") != std::string::npos);

  const std::string file = d + "/profile.json";
  p = run(tune() + " export -o " + file + db);
  REQUIRE(p.exit_code == 0);
  std::ifstream in(file);
  json prof = json::parse(in);
  CHECK(prof["schema"] == "rtx.profile.v1");
  REQUIRE(prof["entries"].size() == 1);

  const std::string db2 = " --db " + d + "/other.db";
  p = run(tune() + " import " + file + " --json" + db2);
  REQUIRE(p.exit_code == 0);
  CHECK(parse_out(p)["imported"] == 1);

  // The same profile claiming another SKU: refused (exit 2) unless --force.
  json foreign = prof;
  std::string key = foreign["entries"][0]["key"];
  key = key.substr(0, key.rfind('|') + 1) + "cpu:elsewhere-9999:avx512";
  foreign["entries"][0]["key"] = key;
  const std::string ffile = d + "/foreign.json";
  std::ofstream(ffile) << foreign.dump();
  const std::string db3 = " --db " + d + "/third.db";
  p = run(tune() + " import " + ffile + db3);
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("--force") != std::string::npos);
  p = run(tune() + " show --json" + db3);
  CHECK(parse_out(p)["profiles"].empty());
  p = run(tune() + " import " + ffile + " --force" + db3);
  CHECK(p.exit_code == 0);
}

TEST_CASE("rtx-tune efficiency replays strategies against a recorded grid", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string db = " --db " + d + "/rtx.db";
  const std::string key = " --op attention_forward --shape B=1,T=7,NH=2,HS=8";
  // A partly recorded grid is refused (naming the coverage), then the full grid is recorded.
  auto p = run(tune() + " run" + key + " --strategy random --budget 4evals --max-samples 5 --max-time 0.01 --include-busy" + db);
  REQUIRE(p.exit_code == 0);
  p = run(tune() + " efficiency" + key + db);
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("4 of 20 valid points") != std::string::npos);
  p = run(tune() + " run" + key + " --strategy grid --budget 100evals --abort-ratio 0 --max-samples 5 --max-time 0.01 --include-busy --json" + db);
  REQUIRE(p.exit_code == 0);
  const json tuned = parse_out(p)["keys"][0];

  p = run(tune() + " efficiency" + key + " --seeds 6 --json" + db);
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const json doc = parse_out(p);
  CHECK(doc["schema"] == "rtx.tune.efficiency.v1");
  CHECK(doc["seeds"] == 6);
  CHECK(doc["within"].get<double>() == Approx(0.03));
  REQUIRE(doc["keys"].size() == 1);
  const json k = doc["keys"][0];
  CHECK(k["valid_points"] == 20);
  CHECK(k["recorded"] == 20);
  CHECK(k["budget"] == 20);
  // The optimum is the recorded best, the same one `run` reported.
  CHECK(k["optimum"]["median_s"].get<double>() == Approx(tuned["best"]["median_s"].get<double>()));
  // Two points can measure exactly equal at these sizes (timer resolution); `run` and
  // `efficiency` may then name different ones of them, both an optimum. Otherwise the same point.
  if (k["optimum"]["params"] != tuned["best"]["params"])
    CHECK(k["optimum"]["median_s"].get<double>() == tuned["best"]["median_s"].get<double>());
  REQUIRE(k["strategies"].size() == 4);
  for (const json& se : k["strategies"]) {
    INFO(se["strategy"]);
    CHECK(se["evals_to_target"].size() == 6);
    CHECK(se["mean_ratio"].size() == 20);
    CHECK(se["mean_ratio"].back().get<double>() >= 1.0);
    CHECK(se["mean_evals"].get<double>() >= 1);
    CHECK(se["worst_evals"].get<size_t>() <= 20);
  }
  // Exhaustive grid and random (without replacement, budget = grid) always get there.
  CHECK(k["strategies"][0]["reached"] == 6);
  CHECK(k["strategies"][0]["mean_ratio"].back() == 1.0);
  CHECK(k["strategies"][1]["reached"] == 6);

  p = run(tune() + " efficiency" + key + " --seeds 3 --strategies random,tpe --format csv" + db);
  REQUIRE(p.exit_code == 0);
  CHECK(p.out.rfind("key,strategy,evaluations,mean_ratio,worst_ratio\n", 0) == 0);
  CHECK(std::count(p.out.begin(), p.out.end(), '\n') == 1 + 2 * 20);
  p = run(tune() + " efficiency" + key + " --seeds 3" + db);
  REQUIRE(p.exit_code == 0);
  CHECK(p.out.find("best: ") != std::string::npos);
  CHECK(p.out.find("20 recorded") != std::string::npos);
}

TEST_CASE("rtx-tune run --serve tunes the scheduler; rtx-serve starts with the profile", "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string db = " --db " + d + "/rtx.db";
  const std::string model = rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  auto p = run(tune() + " run --serve " + model +
               " --workload requests=4,prompt=8,gen=4 --strategy random --budget 6evals --min-samples 2 --max-samples 3 --max-time 0.01 --include-busy --json" + db);
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  const json k = parse_out(p)["keys"][0];
  CHECK(k["op"] == "serve_scheduler");
  CHECK(k["variant"] == "tinyllamas-stories-260k-f32");
  CHECK(k["shape"] == json{{"gen", 4}, {"prompt", 8}, {"requests", 4}});
  CHECK(k["evaluations"] == 6);
  CHECK(k["failed"] == 0);  // no knob changes what a greedy request generates
  CHECK(k["default"]["params"] ==
        json{{"kv_block_tokens", 16}, {"max_batch", 32}, {"prefill_chunk", 256}, {"threads", 0}, {"token_budget", 512}});
  REQUIRE(k["best"].is_object());
  CHECK(k["profile_version"] == 1);
  const int best_batch = k["best"]["params"]["max_batch"].get<int>();

  const std::string serve = "timeout -s TERM 3 " + rtx::test::tool_path("rtx-serve") + " run --port 0 -m " + model + db;
  p = run(serve);
  CHECK_THAT(p.err, Catch::Contains("tuned scheduler: ") && Catch::Contains(k["key"].get<std::string>()) &&
                        Catch::Contains("max_batch " + std::to_string(best_batch) + ","));
  p = run(serve + " --max-batch 3");
  CHECK_THAT(p.err, Catch::Contains("flags kept: max_batch") && Catch::Contains("max_batch 3,"));
  p = run(serve + " --no-profile");
  CHECK_THAT(p.err, !Catch::Contains("tuned scheduler") && Catch::Contains("max_batch 32,"));

  CHECK(run(tune() + " run --serve " + d + "/none.gguf" + db).exit_code == 2);
  CHECK(run(tune() + " run --serve " + model + " --op matmul_forward --shape M=8,N=8,K=8" + db).exit_code == 2);
  p = run(tune() + " run --serve " + model + " --workload requests=0" + db);
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("requests=0 is outside"));
  // stories260k holds 512 positions: BOS + 500 + 100 do not fit.
  p = run(tune() + " run --serve " + model + " --workload requests=1,prompt=500,gen=100 --budget 2evals" + db);
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::Contains("needs 601 positions") && Catch::Contains("context holds 512"));
}

TEST_CASE("rtx-tune exit codes on bad input", "[cpu][cli]") {
  const std::string db = " --db " + rtx::test::temp_dir() + "/rtx.db";
  struct Bad {
    const char* args;
    int code;
  };
  for (const Bad& b : std::vector<Bad>{
           {" run", 2},
           {" run --op matmul_forward", 2},
           {" run --op matmul_forward --shape M=8,N=8,K=8 --strategy annealing", 2},
           {" run --op matmul_forward --shape M=8,N=8,K=8 --budget lots", 2},
           {" run --op no_such_op --shape M=8", 2},
           {" run --op matmul_forward --shape M=8,N=8,K=-1", 2},
           {" run --op matmul_forward --shape M=8,N=8,K=8 --variant cpu.nope", 2},
           {" run --pack x.json --op matmul_forward --shape M=8,N=8,K=8", 2},
           {" run --op matmul_forward --shape M=8,N=8,K=8 --replay", 2},  // nothing recorded
           {" efficiency", 2},
           {" efficiency --op matmul_forward --shape M=8,N=8,K=8", 2},  // nothing recorded
           {" efficiency --op matmul_forward --shape M=8,N=8,K=8 --within 150%", 2},
           {" efficiency --op matmul_forward --shape M=8,N=8,K=8 --strategies grid,annealing", 2},
           {" efficiency --op matmul_forward --shape M=8,N=8,K=8 --format xml", 2},
           {" efficiency --op matmul_forward --shape M=8,N=8,K=8 --seeds -1", 2},
           {" efficiency --op matmul_forward --shape M=8,N=8,K=8 --budget -1", 2},
           {" run --op matmul_forward --shape M=8,N=8,K=8 --confirm -3", 2},
           {" import /nonexistent.json", 2},
           {" export", 2},
           {" frobnicate", 2},
       }) {
    INFO(b.args);
    const auto p = run(tune() + b.args + db);
    CHECK(p.exit_code == b.code);
    CHECK_FALSE(p.err.empty());
  }
  const auto p = run(tune() + " run --op matmul_forward --shape M=8,N=8,K=8 --strategy annealing --json" + db);
  CHECK(p.exit_code == 2);
  CHECK(parse_out(p).contains("error"));
  CHECK(run(tune() + " --help").exit_code == 0);
}

// Ctrl-C mid-search: the search stops before its next trial (exit 130 within about a trial),
// every trial measured so far is in the store (one transaction each), the run is recorded as
// "interrupted" with no profile, and the same search again reuses those trials.
TEST_CASE("rtx-tune run: SIGINT mid-search exits 130 in seconds; the store is whole and a rerun reuses the trials",
          "[cpu][cli]") {
  const std::string d = rtx::test::temp_dir();
  const std::string db = " --db " + d + "/rtx.db";
  // A wall-time budget of 10 minutes: only the signal ends this search early.
  const std::string search = " run --op matmul_forward --shape M=64,N=64,K=64 --strategy random --seed 3"
                             " --min-samples 3 --max-samples 8 --max-time 0.02 --abort-ratio 0 --include-busy";
  const auto t0 = std::chrono::steady_clock::now();
  auto p = run("timeout --preserve-status -s INT 2 " + tune() + search + " --budget 10m --json" + db);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(p.err);
  REQUIRE(p.exit_code == 130);
  CHECK(wall < 4.0);
  json doc = parse_out(p);
  CHECK(doc["interrupted"] == true);
  REQUIRE(doc["keys"].size() == 1);
  const json k = doc["keys"][0];
  CHECK(k["stop_reason"] == "interrupted");
  CHECK(k["profile_version"].is_null());
  const int measured = k["measured"].get<int>();
  REQUIRE(measured >= 1);
  CHECK(p.err.find("no profile saved") != std::string::npos);
  {
    rtx::store::Store st(d + "/rtx.db");
    auto& q = st.prepare("SELECT status, finished_at IS NOT NULL FROM runs WHERE tool = 'rtx-tune'");
    REQUIRE(q.step());
    CHECK(q.column_text(0) == "interrupted");
    CHECK(q.column_int64(1) == 1);
    CHECK_FALSE(q.step());
    q.reset();
    auto& t = st.prepare("SELECT COUNT(*) FROM tuning_trials");
    REQUIRE(t.step());
    // Each trial the search reported (measured, or skipped as invalid) is stored; none half-written.
    CHECK(t.column_int64(0) == measured + k["skipped"].get<int>());
    t.reset();
    auto& pr = st.prepare("SELECT COUNT(*) FROM profiles");
    REQUIRE(pr.step());
    CHECK(pr.column_int64(0) == 0);
    pr.reset();
  }
  // The same search, to a few more evaluations: the stored trials are reused, the rest measured.
  p = run(tune() + search + " --budget " + std::to_string(measured + 2) + "evals --json" + db);
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  doc = parse_out(p);
  CHECK(doc["interrupted"] == false);
  const json k2 = doc["keys"][0];
  CHECK(k2["stop_reason"] == "evals");
  CHECK(k2["reused"] == measured);
  CHECK(k2["measured"] == 2);
  CHECK(k2["profile_version"] == 1);
}
