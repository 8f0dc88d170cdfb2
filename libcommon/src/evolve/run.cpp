// The `rtx-evolve run` loop (evolve::run_loop): propose -> validate -> approve -> promote under
// the run's budgets, with the knowledge graph and the report of the run. Validation itself is
// validate.cpp; status, submit and the report renderers are status.cpp.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "evolve/pipeline.hpp"
#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/history.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/measure/measure.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/lookup.hpp"
#include "rtx/tune/records.hpp"

namespace rtx::evolve {

using nlohmann::json;
using detail::fmt;
using detail::summarize;

namespace {

std::string actor_default() {
  const char* u = std::getenv("USER");
  return u && *u ? u : "unknown";
}

std::string default_model_path() {
  const char* d = std::getenv("RTX_DATA");
  const std::string rel = "/stories260k/tinyllamas-stories-260k-f32.gguf";
  for (const std::string& base : {std::string(d && *d ? d : ""), std::string("../shared/data"), std::string("/work/shared/data")}) {
    if (base.empty()) continue;
    if (std::ifstream(base + rel).good()) return base + rel;
  }
  return "";
}

}  // namespace

json run_loop(store::Store& st, const RunOptions& o, std::ostream& err) {
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
  const auto& reg = measure::registry();
  const std::string sku = telemetry::sku_key("cpu");
  json report = {{"schema", "rtx.report.v1"}, {"kind", "evolve.run"}, {"sku", sku}, {"git_sha", git_sha()},
                 {"db", st.path()}, {"proposals", json::array()}, {"notes", json::array()}};
  // Input errors (pack, filter) before anything is written.
  std::vector<measure::BenchCase> cases;
  {
    std::error_code ec;
    if (!std::filesystem::exists(o.pack, ec))
      throw_input("no bench pack at '" + o.pack + "' (relative to the working directory)", "--pack",
                  "run from the rtx checkout (its benchpacks/ folder), or pass --pack PATH/benchpacks/core.json");
    const measure::Pack pack = measure::load_pack(o.pack);
    measure::ExpandOptions eo;
    eo.filter = o.filter;
    for (auto& c : measure::expand_pack(pack, reg, eo))
      if (c.skip_reason.empty()) cases.push_back(c);
  }
  const int64_t run_id = st.begin_run("rtx-evolve", "[\"run\"]", o.v.seed, git_sha(), sku,
                                      telemetry::to_json(telemetry::hardware_profile()).dump());
  report["run_id"] = run_id;
  // Proposals left "validating" by a killed run never finished: mark them, never judge them.
  {
    const int n = mark_interrupted_validations(st);
    if (n) report["notes"].push_back(std::to_string(n) + " proposal(s) left 'validating' by an interrupted run marked 'interrupted'");
  }
  const std::string key_path = o.key_path.empty() ? default_key_path(st.path()) : o.key_path;
  KeyPair key;
  if (::access(key_path.c_str(), F_OK) != 0) {
    key = generate_key(key_path, false);
    report["notes"].push_back("created the signing key " + key_path + " (mode 0600)");
  } else {
    key = load_key(key_path);
  }

  ProposeContext ctx;
  ctx.st = &st;
  ctx.reg = &reg;
  ctx.sku = sku;
  ctx.pack_path = o.pack;
  ctx.seed = o.v.seed;
  ctx.explore_evals = o.explore_evals;
  ctx.dp_ranks = o.dp_ranks;
  ctx.log = &err;
  ctx.should_stop = o.v.sandbox.cancel;
  ctx.model_path = o.v.model_path.empty() ? default_model_path() : o.v.model_path;
  ctx.cases = cases;
  report["cases"] = json::array();
  for (const auto& c : ctx.cases) report["cases"].push_back(c.id);
  err << "rtx-evolve run: " << ctx.cases.size() << " cases of " << o.pack << " on " << sku << ", budget " << o.budget
      << " proposals (" << o.budget_per_domain << " per domain)\n";
  if (const std::string busy = telemetry::busy_host_warning(telemetry::hardware_profile()); !busy.empty()) {
    err << "rtx-evolve run: warning: " << busy << ": performance gates will be noisy\n";
    report["notes"].push_back("busy host: " + busy);
  }

  ValidateOptions vo = o.v;
  vo.model_path = ctx.model_path;
  vo.log = &err;
  size_t used = 0;
  const std::string actor = o.actor.empty() ? actor_default() : o.actor;
  auto proposers = default_proposers();
  const auto enabled = [&](const std::string& dom) {
    return o.domains.empty() || std::find(o.domains.begin(), o.domains.end(), dom) != o.domains.end();
  };
  size_t domains_left = 0;
  for (const auto& pr : proposers) domains_left += enabled(pr->domain()) ? 1 : 0;
  // Ctrl-C: no new proposal starts; the one validating is killed and marked "interrupted".
  const auto stop = [&] { return o.v.sandbox.cancel && o.v.sandbox.cancel(); };
  bool interrupted = false;
  for (auto& proposer : proposers) {
    if (interrupted) break;
    const std::string dom = proposer->domain();
    if (!enabled(dom)) continue;
    --domains_left;
    if (used >= o.budget) {
      report["notes"].push_back("budget of " + std::to_string(o.budget) + " proposals spent before domain " + dom);
      continue;
    }
    // Keep one proposal for each domain still to come, so a small budget spans every domain.
    const size_t left = o.budget - used;
    ctx.budget = std::min(o.budget_per_domain, left > domains_left ? left - domains_left : size_t{1});
    err << "[" << dom << "] proposing\n";
    if (stop()) {
      interrupted = true;
      break;
    }
    std::vector<Proposal> props = proposer->propose(ctx);
    if (props.empty()) report["notes"].push_back(dom + ": nothing to propose");
    for (Proposal& p : props) {
      if (interrupted || stop()) {
        interrupted = true;
        report["notes"].push_back(dom + ": interrupted; '" + change_text(p) + "' left for a later run");
        continue;
      }
      if (elapsed() > o.time_budget_s) {
        report["notes"].push_back(dom + ": time budget of " + fmt("%.0f", o.time_budget_s) + " s spent; '" + change_text(p) +
                                  "' left for a later run");
        continue;
      }
      const double t_val = elapsed();
      sign(p, key);
      insert_proposal(st, p, run_id);
      ++used;
      err << "  #" << p.id << " " << change_text(p) << "\n";
      Validation val;
      try {
        val = validate(st, p.id, key, vo, run_id);
      } catch (const ValidationInterrupted& e) {
        interrupted = true;
        err << "    INTERRUPTED: " << e.what() << "; marked 'interrupted' (the next run proposes it again)\n";
        report["notes"].push_back("#" + std::to_string(p.id) + " interrupted during validation (" + e.what() +
                                  "): marked 'interrupted', no gate recorded; the next run proposes it again");
        report["proposals"].push_back(proposal_row(st, load_proposal(st, p.id)));
        continue;
      }
      // Failed on undecided gates alone: no verdict (failed_undecided_only), not FAILED.
      bool decided_failure = false, undecided = false;
      for (const auto& gr : val.gates) {
        if (gr.passed || gr.gate == "approval") continue;
        (gate_undecided(gr.gate, gr.passed, gr.detail) ? undecided : decided_failure) = true;
      }
      std::string line = std::string("    ") + (val.passed ? "PASSED" : !decided_failure && undecided ? "UNDECIDED" : "FAILED") +
                         " in " + fmt("%.1f", elapsed() - t_val) + " s:";
      for (const auto& gr : val.gates)
        line += " " + gr.gate + (gr.passed ? "=ok" : gate_undecided(gr.gate, gr.passed, gr.detail) ? "=undecided" : "=FAIL");
      err << line << "\n";
      if (val.passed && o.auto_approve) {
        approve(st, p.id, actor, "auto-policy");
        try {
          const DeployResult d = promote(st, p.id, key, actor);
          err << "    promoted (auto-approved by policy) in " << fmt("%.3f", d.seconds * 1e3) << " ms\n";
        } catch (const Error& e) {
          // Another proposal of this run promoted the same key first: this one was judged
          // against the old baseline, so it stays approved but unpromoted (re-validate it).
          err << "    approved, not promoted: " << e.message() << "\n";
          report["notes"].push_back("#" + std::to_string(p.id) + " approved, not promoted: " + e.message());
        }
      }
      report["proposals"].push_back(proposal_row(st, load_proposal(st, p.id)));
    }
  }
  report["summary"] = summarize(report["proposals"]);
  report["seconds"] = elapsed();
  // Say when the machine, not the proposals, decided: performance gates whose CI straddled the
  // threshold even after re-measuring could not tell a change from this host's noise.
  size_t perf_gates = 0, undecided = 0, too_few = 0, busy_host = 0, busy_left_out = 0;
  size_t min_rounds = 0;
  std::vector<double> halfwidths;
  for (const auto& row : report["proposals"]) {
    if (!row.contains("id")) continue;
    for (const GateResult& gr : gate_results(st, row["id"].get<int64_t>())) {
      if (gr.gate != "performance") continue;
      ++perf_gates;
      if (gr.detail.contains("host") && gr.detail["host"].is_object() && gr.detail["host"].value("rounds_left_out", json::array()).size() > 0)
        ++busy_left_out;
      if (gr.detail.value("busy_host_balanced", false)) ++busy_host;  // judged on all rounds, then as below
      if (gr.detail.value("too_few_rounds", false)) {
        ++too_few;
        min_rounds = std::max<size_t>(min_rounds, gr.detail.value("min_rounds", size_t{0}));
        continue;
      }
      if (gr.detail.value("undecided", false)) ++undecided;
      if (gr.detail.contains("ci_halfwidth") && gr.detail["ci_halfwidth"].is_number())
        halfwidths.push_back(gr.detail["ci_halfwidth"].get<double>());
    }
  }
  if (too_few > 0) {
    // Not the host: the run asked for fewer rounds than a 95% CI needs, so nothing could pass.
    const std::string n = std::to_string(too_few) + " of " + std::to_string(perf_gates) +
                          " performance gates had too few rounds for a 95% CI (--rounds " + std::to_string(o.v.rounds) +
                          "; it needs " + std::to_string(min_rounds) +
                          " per arm): no CI is reported and none of them could pass; use --rounds " +
                          std::to_string(min_rounds) + " or more for decisions";
    report["notes"].push_back(n);
    err << "rtx-evolve run: note: " << n << "\n";
  }
  if (busy_host > 0 || busy_left_out > 0) {
    // The host, not the change: busy rounds (rtx-bench's per-window rule, judged in each trial).
    const std::string n = std::to_string(busy_host) + " of " + std::to_string(perf_gates) +
                          " performance gates were judged on all rounds with busy round pairs in them (too few "
                          "quiet pairs to leave them out; the interleaved ABBA order balances them), and " +
                          std::to_string(busy_left_out) +
                          " with busy rounds left out of both arms (gate detail.host): a quieter machine or more "
                          "--rounds give tighter CIs";
    report["notes"].push_back(n);
    err << "rtx-evolve run: note: " << n << "\n";
  }
  if (undecided > 0) {
    const double med = halfwidths.empty() ? 0 : stats::median(halfwidths);
    const std::string n = std::to_string(undecided) + " of " + std::to_string(perf_gates) +
                          " performance gates were undecided (the 95% CI straddled the threshold after re-measuring; "
                          "median CI half-width " + fmt("%.1f", 100 * med) +
                          "%): this host's run-to-run noise is near the gate thresholds; more --rounds, pinned "
                          "threads or a quieter machine give decisions";
    report["notes"].push_back(n);
    err << "rtx-evolve run: note: " << n << "\n";
  }
  report["notes"].push_back("run took " + fmt("%.1f", elapsed()) + " s");
  report["interrupted"] = interrupted;
  kg_sync(st);  // the knowledge graph follows the tables this run wrote
  st.finish_run(run_id, interrupted ? "interrupted" : "ok");
  return report;
}

}  // namespace rtx::evolve
