// The fusion toggler (rtx-evolve's fifth domain): the proposer's envelope and learned prior,
// the "fusion" trial kind (GPT-2 training steps, attention fused vs unfused, outputs within
// fp32 1e-5 of the baseline's), a sandboxed validation of both arms, and submit's knob check.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/proposers.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "test_util.hpp"

using namespace rtx::evolve;
using nlohmann::json;

namespace {

std::unique_ptr<Proposer> fusion_proposer() {
  for (auto& p : default_proposers())
    if (p->domain() == "fusion") return std::move(p);
  FAIL("default_proposers() has no fusion proposer");
  return nullptr;
}

const json kSmall = {{"B", 2}, {"T", 7}, {"L", 1}, {"C", 24}, {"NH", 3}, {"V", 67}};

json fusion_spec(const std::string& attention) {
  return {{"schema", kTrialSpecSchema}, {"kind", "fusion"},  {"seed", 4},        {"samples", 3},
          {"warmup", 1},                {"threads", 2},      {"shape", kSmall},  {"config", {{"attention", attention}}},
          {"reference_config", {{"attention", "fused"}}}};
}

rtx::ErrorCategory category_of(const std::function<void()>& f, std::string* msg) {
  try {
    f();
  } catch (const rtx::Error& e) {
    *msg = e.what();
    return e.category();
  }
  FAIL("no rtx::Error thrown");
  return rtx::ErrorCategory::Internal;
}

}  // namespace

TEST_CASE("evolve fusion: the proposer toggles attention with a complete envelope and honours the prior", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const KeyPair key = generate_key(dir + "/k", false);
  ProposeContext ctx;
  ctx.st = &st;
  ctx.reg = &rtx::app::bench::registry();
  ctx.sku = "cpu:fusion-test";
  ctx.pack_path = rtx::test::source_dir() + "/benchpacks/core.json";  // the subset (empty) lacks the step case
  ctx.seed = 9;
  ctx.budget = 2;
  auto prop = fusion_proposer();
  std::vector<Proposal> ps = prop->propose(ctx);
  REQUIRE(ps.size() == 1);  // the only other setting; "fused" is the baseline
  Proposal& p = ps[0];
  CHECK(p.domain == "fusion");
  CHECK(p.target == "config");
  CHECK(p.key == "fusion|cpu:fusion-test");
  CHECK(p.changeset["base"] == json{{"attention", "fused"}});
  CHECK(p.changeset["candidate"] == json{{"attention", "unfused"}});
  CHECK(p.changeset["base_version"].is_null());
  REQUIRE(p.actions.size() == 1);
  CHECK(p.actions[0] == json{{"set", "attention"}, {"from", "fused"}, {"to", "unfused"}});
  // The pack's gpt2_train_step cpu case at the pack's shape; held out: another B and T.
  const json& w = p.plan["workload"];
  CHECK(w["affected"]["shape"] == json{{"B", 12}, {"T", 64}, {"L", 4}, {"C", 128}, {"NH", 4}, {"V", 65}});
  CHECK(w["affected"]["case"].get<std::string>().rfind("gpt2_train_step_small/cpu.model/", 0) == 0);
  CHECK(w["heldout"]["shape"]["T"] != w["affected"]["shape"]["T"]);
  CHECK(w["heldout"]["shape"]["B"] != w["affected"]["shape"]["B"]);
  CHECK(p.fingerprint == make_fingerprint("fusion", p.key, p.changeset["candidate"]));
  CHECK(p.rollback["restore_version"].is_null());
  CHECK(p.provenance["sku"] == "cpu:fusion-test");
  sign(p, key);
  CHECK(missing_fields(p).empty());
  CHECK(verify(p, key).empty());
  CHECK(baseline_config(st, "fusion", p.key, *ctx.reg) == fusion_default_config());

  // Learned prior: once the toggle failed on this SKU it is not proposed again.
  const int64_t id = insert_proposal(st, p, 0);
  set_status(st, id, "failed");
  CHECK(prop->propose(ctx).empty());

  // On another SKU, with "unfused" promoted there, the proposal is to go back to fused.
  ctx.sku = "cpu:another-sku";
  std::vector<Proposal> qs = prop->propose(ctx);
  REQUIRE(qs.size() == 1);
  sign(qs[0], key);
  const int64_t id2 = insert_proposal(st, qs[0], 0);
  set_status(st, id2, "passed");
  approve(st, id2, "test", "manual");
  promote(st, id2, key, "test");
  CHECK(baseline_config(st, "fusion", "fusion|cpu:another-sku", *ctx.reg) == json{{"attention", "unfused"}});
  qs = prop->propose(ctx);
  REQUIRE(qs.size() == 1);
  CHECK(qs[0].changeset["base"] == json{{"attention", "unfused"}});
  CHECK(qs[0].changeset["candidate"] == fusion_default_config());
  CHECK(qs[0].changeset["base_version"] == 1);
}

TEST_CASE("evolve fusion: trial arms give the same loss and gradients within fp32 1e-6", "[cpu]") {
  const json base = run_trial(fusion_spec("fused")), cand = run_trial(fusion_spec("unfused")),
             again = run_trial(fusion_spec("unfused"));
  for (const json* r : {&base, &cand, &again}) {
    const json& c = (*r)["cases"][0];
    INFO(c.dump());
    CHECK(c["ok"].get<bool>());
    CHECK(c["repeat_checksum_equal"].get<bool>());
    CHECK(c["samples"].size() == 3);
    CHECK(c["max_rel_err"].get<double>() <= 1e-6);
    CHECK(c["tolerance"].get<double>() == 1e-6);
    CHECK(c["reference_loss"] == base["cases"][0]["loss"]);
    CHECK((*r)["peak_rss_bytes"].get<double>() > 0);
  }
  CHECK(base["cases"][0]["max_rel_err"].get<double>() == 0.0);  // the baseline is its own reference
  CHECK(cand["cases"][0]["attention"] == "unfused");
  // ln(V) at init: the loss of a near-uniform prediction over 67 tokens.
  CHECK(std::fabs(base["cases"][0]["loss"].get<double>() - std::log(67.0)) < 0.1);
  CHECK(cand["cases"][0]["checksum"] == again["cases"][0]["checksum"]);  // identical across runs
  CHECK(cand["cases"][0]["id"] == base["cases"][0]["id"]);

  json s = fusion_spec("fast");
  std::string msg;
  CHECK(category_of([&] { run_trial(s); }, &msg) == rtx::ErrorCategory::Input);
  CHECK_THAT(msg, Catch::Contains("attention"));
  s = fusion_spec("unfused");
  s["shape"]["NH"] = 5;  // 24 channels do not split into 5 heads
  CHECK_THROWS_AS(run_trial(s), rtx::Error);
  s = fusion_spec("unfused");
  s["shape"].erase("T");
  CHECK_THROWS_AS(run_trial(s), rtx::Error);
  s = fusion_spec("unfused");
  s["config"] = {{"mlp", "fused"}};
  CHECK(category_of([&] { run_trial(s); }, &msg) == rtx::ErrorCategory::Input);
  CHECK_THAT(msg, Catch::Contains("mlp"));
  CHECK(fusion_attention_fused(json::object(), "x"));
  CHECK_FALSE(fusion_attention_fused({{"attention", "unfused"}}, "x"));
}

TEST_CASE("evolve fusion: a sandboxed validation runs both arms and records every gate", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const KeyPair key = generate_key(dir + "/k", false);
  const std::string sku = rtx::telemetry::sku_key("cpu");
  json doc = {{"schema", kProposalSchema},
              {"domain", "fusion"},
              {"key", "fusion|" + sku},
              {"plan", {{"why", "test"},
                        {"workload", {{"affected", {{"case", "small"}, {"shape", kSmall}}},
                                      {"heldout", {{"case", "small-heldout"}, {"shape", {{"B", 1}, {"T", 11}, {"L", 1}, {"C", 24}, {"NH", 3}, {"V", 67}}}}}}}}},
              {"actions", json::array()},
              {"changeset", {{"candidate", {{"attention", "unfused"}}}}}};
  const int64_t id = submit(st, doc, "ext.json", key, rtx::app::bench::registry());
  const Proposal p = load_proposal(st, id);
  CHECK(p.changeset["base"] == fusion_default_config());
  CHECK(p.actions.size() == 1);
  ValidateOptions o;
  o.self_exe = rtx::test::tool_path("rtx-evolve");
  o.rounds = 2;
  o.samples = 6;
  const Validation v = validate(st, id, key, o, 0);
  std::vector<std::string> seen;
  for (const auto& g : v.gates) {
    INFO(g.gate << " " << g.detail.dump());
    seen.push_back(g.gate);
    if (g.gate == "safety") CHECK(g.passed);
    if (g.gate == "determinism") {
      CHECK(g.passed);
      CHECK(g.value <= 1e-6);
      CHECK(g.threshold == 1e-6);
    }
    if (g.gate == "memory") CHECK(g.value > 0);  // the candidate's peak RSS, recorded
  }
  for (const char* want : {"safety", "determinism", "performance", "heldout", "memory"})
    CHECK(std::find(seen.begin(), seen.end(), want) != seen.end());
  // Two rounds cannot pass an improvement (docs/evolution.md), whatever the timing.
  CHECK_FALSE(v.passed);
}

TEST_CASE("evolve fusion: submit refuses an invalid fusion knob value with an Input error", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const KeyPair key = generate_key(dir + "/k", false);
  const std::string sku = rtx::telemetry::sku_key("cpu");
  json doc = {{"schema", kProposalSchema},
              {"domain", "fusion"},
              {"key", "fusion|" + sku},
              {"plan", {{"workload", {{"affected", {{"shape", kSmall}}}}}}},
              {"actions", json::array()},
              {"changeset", {{"candidate", {{"attention", "fast"}}}}}};
  std::string msg;
  CHECK(category_of([&] { submit(st, doc, "ext.json", key, rtx::app::bench::registry()); }, &msg) == rtx::ErrorCategory::Input);
  CHECK_THAT(msg, Catch::Contains("attention"));
  CHECK_THAT(msg, Catch::Contains("fast"));
  doc["changeset"]["candidate"] = {{"fusion", true}};
  CHECK(category_of([&] { submit(st, doc, "ext.json", key, rtx::app::bench::registry()); }, &msg) == rtx::ErrorCategory::Input);
  CHECK_THAT(msg, Catch::Contains("fusion"));
  CHECK(list_proposals(st, "", 10).empty());  // nothing stored
  doc["changeset"]["candidate"] = {{"attention", "unfused"}};
  CHECK(submit(st, doc, "ext.json", key, rtx::app::bench::registry()) > 0);
}
