// rtx-evolve's status, submit and report: proposals as report rows (gates, verdicts, speedups),
// the status report, the markdown/text/JSON renderers and submitting an external proposal.
// Validation is validate.cpp; the run loop is run.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <sstream>

#include "evolve/pipeline.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/history.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/measure/measure.hpp"
#include "rtx/stats/compare.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/records.hpp"

namespace rtx::evolve {

using nlohmann::json;

namespace detail {

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

json summarize(const json& rows) {
  size_t passed = 0, failed = 0, promoted = 0, undecided = 0;
  for (const auto& r : rows) {
    const std::string s = r["status"];
    if (s == "failed") ++failed;
    if (s == "failed" && failed_undecided_only(r["gates"])) ++undecided;
    else if (s == "passed" || s == "approved" || s == "promoted" || s == "superseded" || s == "rolled_back") ++passed;
    if (s == "promoted") ++promoted;
  }
  return {{"proposed", rows.size()}, {"passed", passed}, {"failed", failed}, {"undecided", undecided}, {"promoted", promoted}};
}

}  // namespace detail

using detail::fmt;
using detail::summarize;

// ---- the loop -----------------------------------------------------------------------------------

std::string change_text(const Proposal& p) {
  std::string s;
  for (const auto& a : p.actions) {
    if (!s.empty()) s += ", ";
    s += a.value("set", std::string("?")) + " " + a.value("from", json(nullptr)).dump() + " -> " + a.value("to", json(nullptr)).dump();
  }
  return s.empty() ? p.changeset.value("candidate", json::object()).dump() : s;
}

bool gate_undecided(const std::string& gate, bool passed, const json& detail) {
  return !passed && (gate == "performance" || gate == "heldout") && detail.is_object() && detail.value("undecided", false);
}

bool failed_undecided_only(const json& gates) {
  bool any = false;
  for (const auto& g : gates) {
    if (g.value("passed", true) || g.value("gate", std::string()) == "approval") continue;
    if (!gate_undecided(g.value("gate", std::string()), false, g.value("detail", json::object()))) return false;
    any = true;
  }
  return any;
}

std::string gate_verdict(const json& g) {
  if (g.value("passed", false)) return "pass";
  if (g.contains("undecided") && g["undecided"].is_boolean()) return g["undecided"].get<bool>() ? "undecided" : "FAIL";
  const json none = json::object();
  const json& detail = g.contains("detail") ? g["detail"] : none;
  return gate_undecided(g.value("gate", std::string()), false, detail) ? "undecided" : "FAIL";
}

json gates_json(store::Store& st, int64_t id) {
  json gates = json::array();
  for (const auto& r : gate_results(st, id))
    gates.push_back({{"gate", r.gate}, {"passed", r.passed}, {"metric", r.metric}, {"value", r.value}, {"threshold", r.threshold},
                     {"reason", r.detail.value("reason", std::string())}, {"detail", r.detail}});
  return gates;
}

std::string gate_value_text(const json& g) {
  const std::string gate = g.value("gate", std::string());
  const double v = g.value("value", 0.0);
  if ((gate == "performance" || gate == "heldout") && g.value("metric", std::string()) == "improvement_estimate")
    return std::string(stats::kTimeRatioLabel) + " " + stats::format_time_ratio(1 - v) + " estimate, no CI (too few rounds)";
  // v is the saving's CI lo (1 - t_c/t_b): in the common notation, the time ratio's CI hi.
  if (gate == "performance" || gate == "heldout") return std::string(stats::kTimeRatioLabel) + " CI hi " + stats::format_time_ratio(1 - v);
  if (gate == "memory") return fmt("%.3g", v) + " B";
  if (gate == "determinism") return fmt("%.2g", v) + " rel err";
  if (gate == "safety") return fmt("%.0f", v) + " failures";
  if (gate == "canary") return "p99 " + fmt("%.1f", v) + " ms";
  return fmt("%.4g", v);
}

json proposal_row(store::Store& st, const Proposal& p) {
  const json gates = gates_json(st, p.id);
  json deps = json::array();
  auto& q = st.prepare("SELECT action, from_version, to_version, actor, created_at FROM evolve_deployments WHERE proposal_id = ?1 ORDER BY id");
  q.bind(1, p.id);
  while (q.step())
    deps.push_back({{"action", q.column_text(0)},
                    {"from_version", q.column_opt_int64(1) ? json(*q.column_opt_int64(1)) : json(nullptr)},
                    {"to_version", q.column_opt_int64(2) ? json(*q.column_opt_int64(2)) : json(nullptr)},
                    {"actor", q.column_text(3)},
                    {"at", q.column_text(4)}});
  q.reset();
  return {{"id", p.id},
          {"domain", p.domain},
          {"key", p.key},
          {"change", change_text(p)},
          {"why", p.plan.value("why", std::string())},
          {"status", p.status},
          {"gates", gates},
          {"deployments", deps},
          {"rollback", p.status == "promoted" ? "rtx-evolve rollback " + std::to_string(p.id) : ""},
          {"approve", p.status == "passed" ? "rtx-evolve approve " + std::to_string(p.id) : ""}};
}

json status_report(store::Store& st, size_t limit) {
  json report = {{"schema", "rtx.report.v1"}, {"kind", "evolve.status"}, {"db", st.path()}, {"proposals", json::array()},
                 {"notes", json::array()}};
  for (int64_t id : list_proposals(st, "", limit)) report["proposals"].push_back(proposal_row(st, load_proposal(st, id)));
  report["summary"] = summarize(report["proposals"]);
  return report;
}

/// A proposal's improvement 1 - t_c/t_b as a plain speedup t_b/t_c = 1/(1 - improvement):
/// "1.25x faster [1.18, 1.33]", "2.09x slower [1.82, 2.44]" (the interval in the headline's
/// unit, from the 95% CI of the improvement); "" when `imp` is not a number. The one place a
/// change's number is formatted in the report (a shared stats formatter replaces it).
std::string speedup_text(const json& imp, const json& lo, const json& hi) {
  if (!imp.is_number()) return "";
  auto speedup = [](double i) { return i < 1 ? 1 / (1 - i) : INFINITY; };
  const double x = speedup(imp.get<double>());
  const bool faster = x >= 1;
  std::string t = faster ? fmt("%.2fx faster", x) : fmt("%.2fx slower", 1 / x);
  if (lo.is_number() && hi.is_number()) {
    double a = speedup(lo.get<double>()), b = speedup(hi.get<double>());
    if (!faster) std::tie(a, b) = std::make_pair(1 / b, 1 / a);
    t += " [" + fmt("%.2f", a) + ", " + fmt("%.2f", b) + "]";
  }
  return t;
}


std::string gates_speedup_text(const json& gates) {
  const json* perf = nullptr;
  for (const auto& g : gates)
    if (g["gate"] == "performance") perf = &g;  // the last row is the verdict
  if (!perf || !perf->contains("detail") || !(*perf)["detail"].is_object()) return "";
  const json& d = (*perf)["detail"];
  const json ci = d.value("ci", json());
  const bool two = ci.is_array() && ci.size() == 2;
  return speedup_text(d.value("improvement", json()), two ? ci[0] : json(), two ? ci[1] : json());
}

std::string format_report(const json& r, const std::string& format) {
  if (format == "json") return r.dump(2) + "\n";
  if (format != "md" && format != "text")
    throw_usage("unknown report format '" + format + "'", "--format", "one of md, text, json");
  std::ostringstream s;
  const bool md = format == "md";
  const json sum = r.value("summary", json::object());
  if (md) s << "## rtx-evolve " << (r.value("kind", "") == "evolve.run" ? "run" : "status") << "\n\n";
  s << (md ? "" : "rtx-evolve: ") << sum.value("proposed", 0) << " proposed, " << sum.value("passed", 0) << " passed every gate, "
    << sum.value("failed", 0) << " failed"
    << (sum.value("undecided", 0) > 0 ? " (" + std::to_string(sum.value("undecided", 0)) + " undecided)" : std::string())
    << ", " << sum.value("promoted", 0) << " promoted" << (r.contains("sku") ? " on " + r["sku"].get<std::string>() : "")
    << "\n\n";
  if (md) s << "| # | domain | change | status | gates |\n|---|---|---|---|---|\n";
  for (const auto& p : r["proposals"]) {
    std::string gates;
    for (const auto& g : p["gates"]) {
      if (g["gate"] == "approval") continue;
      if (!gates.empty()) gates += md ? "<br>" : "; ";
      const std::string val = gate_value_text(g);
      gates += gate_verdict(g) + " " + g["gate"].get<std::string>() + " (" + val + ")";
    }
    const std::string change = p["change"].get<std::string>();
    if (md)
      s << "| " << p["id"] << " | " << p["domain"].get<std::string>() << " | `" << change << "` | " << p["status"].get<std::string>()
        << " | " << gates << " |\n";
    else {
      // The verdict and the number that decided it first; the gates (evidence) below.
      const std::string number = gates_speedup_text(p["gates"]);
      s << "#" << p["id"] << " " << p["status"].get<std::string>() << (number.empty() ? "" : ", " + number) << ": ["
        << p["domain"].get<std::string>() << "] " << change << "\n    gates: " << gates << "\n";
    }
  }
  s << "\n";
  std::vector<std::string> promoted, waiting, failed, stuck, undecided;
  for (const auto& p : r["proposals"]) {
    const std::string st = p["status"], id = std::to_string(p["id"].get<int64_t>());
    if (st == "promoted") promoted.push_back(id);
    if (st == "passed") waiting.push_back(id);
    if (st == "approved") stuck.push_back(id);
    if (st == "failed" && failed_undecided_only(p["gates"])) {
      for (const auto& g : p["gates"])
        if (!g["passed"].get<bool>()) {
          undecided.push_back("#" + id + " " + g["gate"].get<std::string>() + ": " + g.value("reason", std::string()));
          break;
        }
    } else if (st == "failed") {
      // The gate that decided: the first failed one that is not an undecided performance gate
      // (a memory or held-out failure next to an undecided performance gate is the reason).
      std::string why;
      for (const auto& g : p["gates"]) {
        if (g["passed"].get<bool>() || g["gate"] == "approval") continue;
        const bool undecided_perf = gate_undecided(g["gate"].get<std::string>(), false, g.value("detail", json::object()));
        if (undecided_perf && !why.empty()) continue;
        why = g["gate"].get<std::string>() + ": " + g.value("reason", std::string());
        if (g["gate"] == "safety" && g.value("reason", std::string()).empty() && g["detail"].contains("failures"))
          why += g["detail"]["failures"].dump();
        if (!undecided_perf) break;
      }
      failed.push_back("#" + id + " " + why);
    }
  }
  const std::string b = md ? "- " : "  ";
  if (!promoted.empty()) {
    s << (md ? "**Promoted** (roll back with one command each):\n\n" : "Promoted; to roll back:\n");
    for (const auto& id : promoted) s << b << (md ? "`" : "") << "rtx-evolve rollback " << id << (md ? "`" : "") << "\n";
    s << "\n";
  }
  if (!waiting.empty()) {
    s << (md ? "**Passed, waiting for approval** (approving promotes):\n\n" : "Passed every gate, waiting for approval:\n");
    for (const auto& id : waiting) s << b << (md ? "`" : "") << "rtx-evolve approve " << id << (md ? "`" : "") << "\n";
    s << "\n";
  }
  if (!stuck.empty()) {
    s << (md ? "**Approved, not promoted**" : "Approved, not promoted")
      << " (the baseline moved after validation; `rtx-evolve approve ID` promotes it once the version it was "
         "validated against is current again, e.g. after a rollback; otherwise submit the change again):\n";
    if (md) s << "\n";
    for (const auto& id : stuck) s << b << "#" << id << "\n";
    s << "\n";
  }
  if (!failed.empty()) {
    s << (md ? "**Failed** (not retried on this SKU):\n\n" : "Failed (not retried on this SKU):\n");
    for (const auto& f : failed) s << b << f << "\n";
    s << "\n";
  }
  if (!undecided.empty()) {
    s << (md ? "**Undecided** (not promoted; this host's noise or too few --rounds hid the effect; a later run proposes "
               "them again):\n\n"
             : "Undecided (not promoted; this host's noise or too few --rounds hid the effect; a later run proposes them "
               "again):\n");
    for (const auto& f : undecided) s << b << f << "\n";
    s << "\n";
  }
  for (const auto& n : r.value("notes", json::array())) s << b << "note: " << n.get<std::string>() << "\n";
  return s.str();
}

int64_t submit(store::Store& st, const json& doc, const std::string& source, const KeyPair& key, const kernels::Registry& reg) {
  Proposal p = from_json(doc, source);
  const std::string sku = telemetry::sku_key("cpu");
  if (p.domain == "tuner") {
    const tune::TuneKey k = tune::TuneKey::parse(p.key);
    if (k.sku != sku) throw_input("profile key is for SKU '" + k.sku + "', this host is '" + sku + "'", source + ": field 'key'");
    const auto& v = reg.variant(k.op, k.variant);
    const kernels::Params cand = p.changeset["candidate"].get<kernels::Params>();
    if (v.validate)
      if (std::string why = v.validate(k.shape, cand); !why.empty())
        throw_input("candidate params are invalid for " + p.key + ": " + why, source + ": field 'changeset.candidate'");
    if (!p.plan.contains("workload")) {
      const json c = {{"id", k.op + "/" + k.variant + "/" + kernels::shape_to_string(k.shape) + "/" + dtype_name(k.dtype)},
                      {"op", k.op}, {"variant", k.variant}, {"shape", k.shape}, {"dtype", dtype_name(k.dtype)}};
      p.plan["workload"] = {{"affected", json::array({c})}, {"heldout", json::array()}};
    }
  } else {
    if (p.key != config_key(p.domain, sku))
      throw_input("config key must be '" + config_key(p.domain, sku) + "' on this host", source + ": field 'key'");
    if (p.domain == "scheduler") serve::SchedulerConfig::from_json(p.changeset["candidate"], source + ": changeset.candidate");
    if (p.domain == "memory") allocator_config_from_json(p.changeset["candidate"], source + ": changeset.candidate");
    if (p.domain == "parallelism") {
      const json& t = p.changeset["candidate"].value("threads", json(nullptr));
      if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 4096)
        throw_input("'threads' must be an integer in [1, 4096]", source + ": field 'changeset.candidate.threads'");
    }
    if (!p.plan.contains("workload"))
      throw_input("a " + p.domain + " proposal needs plan.workload (see docs/evolution.md)", source + ": field 'plan.workload'");
  }
  // The baseline is what runs here now, whatever the submitter assumed.
  const json base = baseline_config(st, p.domain, p.key, reg);
  auto cur = p.domain == "tuner" ? current_profile(st, p.key) : current_config(st, p.key);
  p.changeset["base"] = base;
  p.changeset["base_version"] = cur ? json(cur->version) : json(nullptr);
  // The candidate is the base with the submitted knobs changed (a partial candidate keeps
  // every other knob as it runs here), and the actions are computed from the two, so what an
  // approver reads is exactly what would be promoted.
  json cand = base.is_object() ? base : json::object();
  for (const auto& item : p.changeset["candidate"].items()) cand[item.key()] = item.value();
  json actions = json::array();
  for (const auto& item : cand.items())
    if (!base.contains(item.key()) || base[item.key()] != item.value())
      actions.push_back({{"set", item.key()}, {"from", base.value(item.key(), json(nullptr))}, {"to", item.value()}});
  if (actions.empty())
    throw_input("the candidate changes nothing: it equals what runs here now (" + base.dump() + ")",
                source + ": field 'changeset.candidate'");
  for (const auto& a : p.actions) {
    const std::string knob = a.is_object() ? a.value("set", std::string()) : std::string();
    if (knob.empty() || !cand.contains(knob) || !a.contains("to") || a["to"] != cand[knob])
      throw_input("action " + a.dump() + " does not match the candidate (" + knob + " = " +
                      (cand.contains(knob) ? cand[knob].dump() : std::string("unset")) +
                      "); leave 'actions' empty to have them computed",
                  source + ": field 'actions'");
  }
  p.changeset["candidate"] = cand;
  p.actions = actions;
  if (!p.plan.contains("why")) p.plan["why"] = "submitted from " + source;
  p.plan["submitted_from"] = source;
  p.provenance = make_provenance(sku, {}, 0);
  ProposeContext ctx;
  ctx.sku = sku;
  finish_proposal(p, ctx);
  p.status = "new";
  p.validation = json::object();
  sign(p, key);
  return insert_proposal(st, p, 0);
}

}  // namespace rtx::evolve
