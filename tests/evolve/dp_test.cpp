// The parallelism domain's data-parallel bucket size (rtx-train --bucket-mb): the "dp" trial
// kind over 2 MPI ranks (weights after 2 steps under two bucket sizes, compared with
// output_parity), the proposer's moves when the run is distributed, and a sandboxed validation.
// Skipped, with a message, where the build has no MPI launcher.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/proposers.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/kernels/registry.hpp"
#include "test_util.hpp"

using namespace rtx::evolve;
using nlohmann::json;

namespace {

bool have_launcher() { return rtx::dist::have_mpi() && !rtx::dist::mpiexec_path().empty(); }

const json kTiny = {{"B", 2}, {"T", 16}, {"L", 1}, {"C", 32}, {"NH", 2}, {"V", 65}};

json dp_spec(const json& config, const json& reference) {
  return {{"schema", kTrialSpecSchema}, {"kind", "dp"},       {"seed", 3},         {"samples", 3},
          {"warmup", 1},                {"ranks", 2},         {"threads", 1},      {"shape", kTiny},
          {"config", config},           {"reference_config", reference},         {"self_exe", rtx::test::tool_path("rtx-evolve")}};
}

std::unique_ptr<Proposer> parallelism_proposer() {
  for (auto& p : default_proposers())
    if (p->domain() == "parallelism") return std::move(p);
  FAIL("default_proposers() has no parallelism proposer");
  return nullptr;
}

rtx::ErrorCategory category_of(const json& spec, std::string* msg) {
  try {
    run_trial(spec);
  } catch (const rtx::Error& e) {
    *msg = e.what();
    return e.category();
  }
  FAIL("no rtx::Error thrown for " << spec.dump());
  return rtx::ErrorCategory::Internal;
}

}  // namespace

TEST_CASE("evolve dp: a data-parallel trial over 2 ranks times steps and compares weights", "[cpu]") {
  if (!have_launcher()) {  // Catch2 v2 has no SKIP(): say why and leave the test case
    WARN("SKIPPED: " "no MPI launcher in this build: the data-parallel trial cannot run");
    return;
  }
  // 16 KiB buckets (the tiny model's 60 KB of gradients in 4) against one all-reduce after the
  // backward: with 2 ranks each sum is a + b in any bucketing, so the weights match bit for bit.
  const json r = run_trial(dp_spec({{"dp_bucket_mb", 1.0 / 64}}, {{"dp_bucket_mb", 0}}));
  REQUIRE(r["cases"].size() == 1);
  const json& c = r["cases"][0];
  INFO(c.dump());
  CHECK(r["ranks"] == 2);
  CHECK(c["ok"].get<bool>());
  CHECK(c["samples"].size() == 3);
  for (const auto& s : c["samples"]) CHECK(s.get<double>() > 0);
  CHECK(c["max_rel_err"].get<double>() == 0.0);
  CHECK(c["checksum"] == c["reference_checksum"]);
  CHECK(c["tolerance"].get<double>() == 1e-6);
  CHECK(c["dp_bucket_mb"].get<double>() == Approx(1.0 / 64));
  CHECK(c["comm_s"].get<double>() > 0);  // gradients were all-reduced
  CHECK(c["id"].get<std::string>().find("ranks=2") != std::string::npos);
  // The same seed gives the same weights in another run (the gate's repeat check).
  const json again = run_trial(dp_spec({{"dp_bucket_mb", 1.0 / 64}}, {{"dp_bucket_mb", 0}}));
  CHECK(again["cases"][0]["checksum"] == c["checksum"]);
}

TEST_CASE("evolve dp: bad data-parallel specs are Input errors naming the field", "[cpu]") {
  std::string msg;
  json s = dp_spec({{"dp_bucket_mb", -1}}, json::object());
  CHECK(category_of(s, &msg) == rtx::ErrorCategory::Input);
  CHECK_THAT(msg, Catch::Contains("dp_bucket_mb"));
  s = dp_spec({{"dp_bucket_mb", "big"}}, json::object());
  CHECK(category_of(s, &msg) == rtx::ErrorCategory::Input);
  s = dp_spec(json::object(), json::object());
  s["ranks"] = 1;
  CHECK(category_of(s, &msg) == rtx::ErrorCategory::Input);
  CHECK_THAT(msg, Catch::Contains("ranks"));
  s = dp_spec(json::object(), json::object());
  s["shape"]["NH"] = 5;  // 32 channels do not split into 5 heads: refused before mpirun starts
  CHECK(category_of(s, &msg) == rtx::ErrorCategory::Input);
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains("head"));
  s = dp_spec(json::object(), json::object());
  s["shape"].erase("T");
  CHECK(category_of(s, &msg) == rtx::ErrorCategory::Input);
  CHECK_THAT(msg, Catch::Contains("shape.T"));
}

TEST_CASE("evolve dp: bucket-size moves only when the run is distributed", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  ProposeContext ctx;
  ctx.st = &st;
  ctx.reg = &rtx::app::bench::registry();
  ctx.sku = "cpu:dp-test";
  ctx.budget = 3;
  auto prop = parallelism_proposer();
  ctx.dp_ranks = 0;
  for (const auto& p : prop->propose(ctx)) CHECK_FALSE(p.plan["workload"].value("kind", "") == "dp");
  if (!have_launcher()) {  // Catch2 v2 has no SKIP(): say why and leave the test case
    WARN("SKIPPED: " "no MPI launcher in this build: no bucket-size moves");
    return;
  }
  ctx.dp_ranks = 2;
  const auto ps = prop->propose(ctx);
  REQUIRE(ps.size() == 3);
  std::vector<double> sizes;
  for (const auto& p : ps) {
    INFO(to_json(p).dump());
    CHECK(p.domain == "parallelism");
    CHECK(p.plan["workload"]["kind"] == "dp");
    CHECK(p.plan["workload"]["affected"]["ranks"] == 2);
    CHECK(p.plan["workload"]["heldout"]["shape"] != p.plan["workload"]["affected"]["shape"]);
    CHECK(p.changeset["base"]["dp_bucket_mb"].get<double>() == 25.0);  // rtx-train's default
    CHECK(p.changeset["candidate"]["threads"] == p.changeset["base"]["threads"]);
    REQUIRE(p.actions.size() == 1);
    CHECK(p.actions[0]["set"] == "dp_bucket_mb");
    sizes.push_back(p.changeset["candidate"]["dp_bucket_mb"].get<double>());
  }
  CHECK(sizes == std::vector<double>{1.0, 0.25, 0.0});
}

TEST_CASE("evolve dp: a sandboxed validation runs mpirun in both arms and records every gate", "[cpu]") {
  if (!have_launcher()) {  // Catch2 v2 has no SKIP(): say why and leave the test case
    WARN("SKIPPED: " "no MPI launcher in this build");
    return;
  }
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const KeyPair key = generate_key(dir + "/k", false);
  ProposeContext ctx;
  ctx.st = &st;
  ctx.reg = &rtx::app::bench::registry();
  ctx.sku = "cpu:dp-test";
  ctx.budget = 1;
  ctx.dp_ranks = 2;
  std::vector<Proposal> ps = parallelism_proposer()->propose(ctx);
  REQUIRE(ps.size() == 1);
  Proposal& p = ps[0];
  p.plan["workload"]["affected"]["shape"] = kTiny;  // keep the test short
  p.plan["workload"]["heldout"]["shape"] = {{"B", 1}, {"T", 9}, {"L", 1}, {"C", 24}, {"NH", 3}, {"V", 65}};
  sign(p, key);
  const int64_t id = insert_proposal(st, p, 0);
  ValidateOptions o;
  o.self_exe = rtx::test::tool_path("rtx-evolve");
  o.rounds = 2;
  o.samples = 5;
  const Validation v = validate(st, id, key, o, 0);
  std::vector<std::string> seen;
  for (const auto& g : v.gates) {
    INFO(g.gate << " " << g.detail.dump());
    seen.push_back(g.gate);
    if (g.gate == "safety") {
      CHECK(g.passed);  // mpirun and its ranks ran inside the sandbox
      CHECK(g.detail["trials"].get<int>() == 4);
    }
    if (g.gate == "determinism") {
      CHECK(g.passed);
      CHECK(g.value == 0.0);  // 2 ranks: bit-identical weights whatever the bucket size
    }
  }
  for (const char* want : {"safety", "determinism", "performance", "heldout", "memory"})
    CHECK(std::find(seen.begin(), seen.end(), want) != seen.end());
  CHECK_FALSE(v.passed);  // two rounds cannot pass an improvement
}

TEST_CASE("evolve dp: a proposal's workload cannot choose the trial kind or the program mpirun starts", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const KeyPair key = generate_key(dir + "/k", false);
  for (const char* field : {"kind", "self_exe", "reference_config"}) {
    Proposal p;
    p.domain = "scheduler";
    p.target = "config";
    p.key = "scheduler|cpu:dp-test";
    json part = {{"requests", 2}, {"prompt_tokens", 4}, {"max_tokens", 2}};
    part[field] = std::string(field) == "reference_config" ? json::object() : json("dp");
    if (std::string(field) == "self_exe") part[field] = "/bin/sh";
    p.plan = {{"why", "hostile workload"}, {"workload", {{"affected", part}}}};
    p.actions = json::array({{{"set", "max_batch"}, {"from", 32}, {"to", 4}}});
    p.changeset = {{"base_version", nullptr}, {"base", {{"max_batch", 32}}}, {"candidate", {{"max_batch", 4}}}};
    p.rollback = {{"command", "rtx-evolve rollback <ID>"}};
    p.provenance = {{"git_sha", "x"}, {"sku", "cpu:dp-test"}, {"code_sha256", "0"}, {"data_sha256", "0"}, {"env_sha256", "0"},
                    {"seeds", {{"seed", 1}}}};
    p.fingerprint = std::string("hostile-") + field;
    sign(p, key);
    const int64_t id = insert_proposal(st, p, 0);
    ValidateOptions o;
    o.self_exe = rtx::test::tool_path("rtx-evolve");
    const Validation v = validate(st, id, key, o, 0);
    CHECK_FALSE(v.passed);
    REQUIRE(v.gates.size() == 1);
    INFO(v.gates[0].detail.dump());
    CHECK(v.gates[0].gate == "safety");
    CHECK_THAT(v.gates[0].detail.value("reason", std::string()), Catch::Contains(std::string("may not set '") + field + "'"));
  }
}
