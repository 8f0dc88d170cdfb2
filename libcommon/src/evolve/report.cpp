// `rtx-evolve report`: gathers the loop's state from the store into one rtx.report.v1 document and
// renders it as a self-contained HTML page (inline CSS and SVG charts), Markdown or JSON.
#include "rtx/stats/compare.hpp"
#include "rtx/evolve/report.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "rtx/core/error.hpp"
#include "rtx/core/time.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/evolve/history.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/proposal.hpp"

namespace rtx::evolve {

using nlohmann::json;

namespace {

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

std::string pct(double frac) { return fmt("%+.1f%%", 100 * frac); }

double now_epoch() { return static_cast<double>(std::time(nullptr)); }

/// A verdict was reached (the pipeline ran every gate).
bool validated_status(const std::string& s) {
  return s == "passed" || s == "failed" || s == "approved" || s == "promoted" || s == "superseded" || s == "rolled_back";
}
bool promoted_status(const std::string& s) { return s == "promoted" || s == "superseded" || s == "rolled_back"; }

std::string change_of(const Proposal& p) {
  std::string s;
  for (const auto& a : p.actions) {
    if (!a.is_object()) continue;
    if (!s.empty()) s += ", ";
    s += a.value("set", std::string("?")) + " " + a.value("from", json(nullptr)).dump() + " -> " +
         a.value("to", json(nullptr)).dump();
  }
  if (s.empty() && p.changeset.contains("candidate")) s = p.changeset["candidate"].dump();
  return s;
}

std::string sku_of(const Proposal& p) {
  if (p.provenance.is_object() && p.provenance.contains("sku") && p.provenance["sku"].is_string())
    return p.provenance["sku"].get<std::string>();
  const size_t bar = p.key.rfind('|');
  return bar == std::string::npos ? "" : p.key.substr(bar + 1);
}

std::string op_of(const Proposal& p) {
  if (p.domain == "tuner") return p.key.substr(0, p.key.find('|'));
  return p.domain;
}

/// What a person should do with a proposal in this status: {text, command}.
std::pair<std::string, std::string> action_of(int64_t id, const std::string& status, const std::string& failed_why,
                                              bool undecided, bool too_few_rounds = false) {
  const std::string sid = std::to_string(id);
  if (status == "passed") return {"approve to promote", "rtx-evolve approve " + sid};
  if (status == "approved") return {"promotion pending: approve again to retry it", "rtx-evolve approve " + sid};
  if (status == "promoted") return {"in force; to undo", "rtx-evolve rollback " + sid};
  if (status == "failed" && undecided && too_few_rounds)
    return {"none now: undecided " + failed_why +
                " (too few rounds to decide; a later run, with more --rounds, proposes it again)",
            ""};
  if (status == "failed" && undecided)
    return {"none now: undecided " + failed_why + " (this host's noise hid the effect; a later run proposes it again)",
            ""};
  if (status == "failed") return {"none: failed " + failed_why + " (not retried on this SKU)", ""};
  if (status == "superseded") return {"none: replaced by a later promotion of the same key", ""};
  if (status == "rolled_back") return {"none: rolled back", ""};
  if (status == "interrupted") return {"none: validation was interrupted (never promoted)", ""};
  if (status == "new" || status == "validating") return {"wait: not validated yet", ""};
  return {"none", ""};
}

/// A reason with its numbers masked ("CI lo +3.1% < 10%" -> "CI lo #% < #%"), so that the same
/// cause with different numbers counts once.
std::string reason_class(const std::string& r) {
  static const std::regex num(R"([+-]?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  return std::regex_replace(r, num, "#");
}

double rate(int64_t num, int64_t den) { return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0; }

/// One win-rate row. `validated` counts decided proposals only (undecided ones are in
/// `undecided`, neither wins nor failures).
json win_row(const std::string& domain, int64_t validated, int64_t passed, int64_t promoted, int64_t undecided) {
  return {{"domain", domain},
          {"validated", validated},
          {"passed", passed},
          {"failed", validated - passed},
          {"undecided", undecided},
          {"promoted", promoted},
          {"pass_rate", validated > 0 ? json(rate(passed, validated)) : json(nullptr)},
          {"promote_rate", validated > 0 ? json(rate(promoted, validated)) : json(nullptr)}};
}

}  // namespace

// ---- inputs -----------------------------------------------------------------------------------

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0.0, 1.0};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  if (target < 2) target = 2;
  auto nice = [](double x, bool round) {
    const double e = std::floor(std::log10(x)), f = x / std::pow(10.0, e);
    double nf;
    if (round) nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nf * std::pow(10.0, e);
  };
  const double range = nice(hi - lo, false);
  const double step = nice(range / (target - 1), true);
  const double start = std::floor(lo / step) * step, end = std::ceil(hi / step) * step;
  std::vector<double> t;
  for (int i = 0;; ++i) {
    const double v = start + i * step;  // by index: no accumulated rounding
    if (v > end + step * 0.5) break;
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return t;
}

std::string html_escape(const std::string& text) { return xml_escape(text); }

// ---- the document -------------------------------------------------------------------------------

json build_report(store::Store& st, const ReportOptions& o) {
  const std::string since = normalize_since(o.since, now_epoch());
  json report = {{"schema", "rtx.report.v1"}, {"kind", "evolve.report"}, {"db", st.path()},
                 {"generated_at", utc_timestamp(now_epoch())}, {"since", since}, {"limit", o.limit},
                 {"notes", json::array()}};

  // Proposals in range, newest first.
  const std::vector<std::pair<int64_t, std::string>> rows = proposals_since(st, since);  // id, created_at
  std::set<int64_t> deployed;  // proposals with a promote row
  {
    auto& q = st.prepare("SELECT DISTINCT proposal_id FROM evolve_deployments WHERE action = 'promote' AND proposal_id IS NOT NULL");
    while (q.step()) deployed.insert(q.column_int64(0));
    q.reset();
  }

  std::map<std::string, int64_t> status_counts;
  std::map<std::string, std::array<int64_t, 4>> by_domain;  // validated (decided), passed, promoted, undecided
  std::array<int64_t, 4> overall{0, 0, 0, 0};
  std::map<std::string, std::array<int64_t, 3>> by_gate;   // evaluated, failed, undecided (not counted as failed)
  struct ReasonCount {
    int64_t count = 0;
    std::string example;
  };
  std::map<std::pair<std::string, std::string>, ReasonCount> reasons;
  std::map<std::pair<std::string, std::string>, json> impact;  // (sku, op) -> items
  json queue_rows = json::array();

  for (const auto& [id, created_at] : rows) {
    const Proposal p = load_proposal(st, id);
    const std::vector<GateResult> gates = gate_results(st, id);
    ++status_counts[p.status];
    // Undecided: failed only on undecided performance gates (the host's noise hid the effect):
    // neither a win nor a failure, so it stays out of the win rate's denominator.
    const bool undecided = p.status == "failed" && failed_undecided_only(gates_json(st, id));
    const bool validated = validated_status(p.status) && !undecided;
    const bool passed = validated && p.status != "failed";
    const bool promoted = promoted_status(p.status) || deployed.count(id) > 0;
    auto& d = by_domain[p.domain];
    if (validated) ++d[0], ++overall[0];
    if (passed) ++d[1], ++overall[1];
    if (promoted) ++d[2], ++overall[2];
    if (undecided) ++d[3], ++overall[3];

    // Numbers of the performance verdict as JSON (null when absent).
    json improvement, ci_lo, ci_hi, threshold;
    bool too_few = false;  // the verdict's performance gate had too few rounds for a CI
    std::string failed_why;
    bool failed_why_undecided = false;
    json gate_rows = json::array();
    for (const auto& g : gates) {
      const std::string reason = gate_reason_text(g.gate, g.passed, g.detail);  // reason, else detail.failures, ...
      gate_rows.push_back({{"gate", g.gate}, {"passed", g.passed}, {"metric", g.metric}, {"value", g.value},
                           {"threshold", g.threshold}, {"reason", reason},
                           {"undecided", gate_undecided(g.gate, g.passed, g.detail)}});
      if (g.gate != "approval") {
        auto& bg = by_gate[g.gate];
        ++bg[0];
        if (!g.passed) {
          // The deciding gate: the first failed one that is not an undecided performance gate.
          const bool undecided_perf = gate_undecided(g.gate, g.passed, g.detail);
          ++bg[undecided_perf ? 2 : 1];
          if (!undecided_perf) {  // an undecided gate is no evidence against the change: not a failure reason
            const std::string r = reason.empty() ? "(no reason recorded)" : reason;
            auto& rc = reasons[{g.gate, reason_class(r)}];
            if (rc.count++ == 0) rc.example = r;
          }
          if (failed_why.empty() || (failed_why_undecided && !undecided_perf)) {
            failed_why = g.gate + (reason.empty() ? "" : ": " + reason);
            failed_why_undecided = undecided_perf;
          }
        }
      }
      if (g.gate == "performance") {
        // The last performance row is the verdict (a re-measured borderline result is recorded once).
        threshold = g.threshold;
        improvement = nullptr;
        ci_lo = g.value;
        ci_hi = nullptr;
        too_few = g.detail.is_object() && g.detail.value("too_few_rounds", false);
        if (too_few) ci_lo = nullptr;  // the value is the estimate, there is no CI
        if (g.detail.is_object()) {
          if (g.detail.contains("improvement") && g.detail["improvement"].is_number())
            improvement = g.detail["improvement"].get<double>();
          const json ci = g.detail.value("ci", json());
          if (ci.is_array() && ci.size() == 2 && ci[0].is_number() && ci[1].is_number()) {
            ci_lo = ci[0].get<double>();
            ci_hi = ci[1].get<double>();
          }
        }
      }
    }
    if (queue_rows.size() < o.limit) {
      const auto [text, command] = action_of(id, p.status, failed_why, undecided, too_few);
      queue_rows.push_back({{"id", id},
                            {"created_at", created_at},
                            {"domain", p.domain},
                            {"key", p.key},
                            {"sku", sku_of(p)},
                            {"status", p.status},
                            {"why", p.plan.is_object() ? p.plan.value("why", std::string()) : std::string()},
                            {"change", change_of(p)},
                            {"gates", gate_rows},
                            {"improvement", improvement},
                            {"ci_lo", ci_lo},
                            {"ci_hi", ci_hi},
                            {"too_few_rounds", too_few},
                            {"action", text},
                            {"command", command}});
    }
    if (promoted && improvement.is_number()) {
      impact[{sku_of(p), op_of(p)}].push_back({{"id", id},
                                                 {"key", p.key},
                                                 {"domain", p.domain},
                                                 {"status", p.status},
                                                 {"improvement", improvement},
                                                 {"ci_lo", ci_lo},
                                                 {"ci_hi", ci_hi},
                                                 {"threshold", threshold}});
    }
  }

  json counts = json::object();
  for (const auto& [s, n] : status_counts) counts[s] = n;
  report["queue"] = {{"total", rows.size()}, {"status_counts", counts}, {"proposals", queue_rows}};

  json domains = json::array();
  for (const auto& [dom, c] : by_domain) domains.push_back(win_row(dom, c[0], c[1], c[2], c[3]));
  report["win_rate"] = {{"overall", win_row("all", overall[0], overall[1], overall[2], overall[3])}, {"by_domain", domains}};

  json gate_rows = json::array();
  for (const auto& [g, c] : by_gate) gate_rows.push_back({{"gate", g}, {"evaluated", c[0]}, {"failed", c[1]}, {"undecided", c[2]}});
  std::vector<std::pair<std::pair<std::string, std::string>, ReasonCount>> rs(reasons.begin(), reasons.end());
  std::stable_sort(rs.begin(), rs.end(), [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
  json top = json::array();
  for (size_t i = 0; i < rs.size() && i < 10; ++i)
    top.push_back({{"gate", rs[i].first.first}, {"reason", rs[i].second.example}, {"pattern", rs[i].first.second},
                   {"count", rs[i].second.count}});
  report["gate_failures"] = {{"by_gate", gate_rows}, {"top_reasons", top}};

  json groups = json::array();
  for (auto& [k, items] : impact) {
    int64_t in_force = 0;
    double best = -1e300;
    for (const auto& it : items) {
      if (it["status"] == "promoted") ++in_force;
      best = std::max(best, it["improvement"].get<double>());
    }
    groups.push_back({{"sku", k.first}, {"op", k.second}, {"promoted", items.size()}, {"in_force", in_force},
                      {"best_improvement", best}, {"items", items}});
  }
  report["impact"] = {{"groups", groups}};

  // Performance over time: the cases with the most points (rtx/evolve/history.hpp).
  json cases = json::array();
  std::vector<std::pair<std::string, int64_t>> hc;
  for (const auto& c : history_cases(st)) hc.push_back({c.name, c.points});
  std::stable_sort(hc.begin(), hc.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [name, count] : hc) {
    if (cases.size() >= o.max_cases) break;
    if (count < 2) continue;
    HistoryOptions ho;
    ho.since = since;
    ho.limit = o.max_points;
    CaseHistory h;
    try {
      h = case_history(st, name, ho);
    } catch (const Error& e) {
      report["notes"].push_back("history of " + name + ": " + e.message());
      continue;
    }
    if (h.points.size() < 2) continue;
    json pts = json::array();
    for (const auto& pt : h.points) {
      json pid = nullptr;
      if (pt.proposal_id.has_value()) pid = pt.proposal_id.value();
      pts.push_back({{"at", pt.created_at}, {"value", pt.value}, {"run_id", pt.run_id}, {"source", pt.source},
                     {"proposal_id", pid}, {"contended", pt.contended}, {"contention_reason", pt.contention_reason}});
    }
    json cps = json::array();
    for (size_t i = 0; i < h.change_points.size(); ++i) {
      const auto& cp = h.change_points[i];
      json by = nullptr;
      if (i < h.caused_by.size() && h.caused_by[i].has_value()) by = h.caused_by[i].value();
      cps.push_back({{"index", cp.index},
                     {"at", cp.index < h.points.size() ? h.points[cp.index].created_at : std::string()},
                     {"before", cp.mean_before},
                     {"after", cp.mean_after},
                     {"rel_change", cp.relative_change},
                     {"p", cp.pvalue},
                     {"caused_by", by}});
    }
    cases.push_back({{"case", name}, {"metric", h.metric}, {"busy_points", h.contended_points},
                     {"analysis", analysis_state(h)}, {"points", pts}, {"change_points", cps}});
  }
  report["performance"] = {{"source", "history"}, {"change_points", true}, {"cases", cases}};
  if (hc.size() > o.max_cases)
    report["notes"].push_back("performance over time shows " + std::to_string(cases.size()) + " of " +
                              std::to_string(hc.size()) + " cases (the most measured); see `rtx-evolve history CASE`");
  return report;
}

// ---- SVG ----------------------------------------------------------------------------------------

namespace {

constexpr const char* kFont = "font-family=\"sans-serif\"";

std::string num(double v) { return fmt("%.1f", v); }

/// Tick label: shortest of %g forms with `digits` significant digits.
std::string tick_text(double v) {
  if (std::fabs(v) < 1e-12) return "0";
  return fmt("%.4g", v);
}

/// A time unit for seconds values so that `max_s` reads between 1 and 1000: {scale, "ms"}.
std::pair<double, std::string> time_unit(double max_s) {
  if (max_s >= 1) return {1, "s"};
  if (max_s >= 1e-3) return {1e3, "ms"};
  if (max_s >= 1e-6) return {1e6, "us"};
  return {1e9, "ns"};
}

/// Horizontal bar chart: one bar per row (value >= 0), the x axis below with ticks and `unit`.
struct Bar {
  std::string label;
  double value = 0;
  std::string text;      ///< printed after the bar
  std::string cls = "b";  ///< CSS class (colour)
};

std::string svg_bars(const std::string& title, const std::vector<Bar>& bars, const std::string& axis_label, double max_hint) {
  const double lw = 190, w = 640, row = 22, top = 28, pw = w - lw - 80;
  double mx = max_hint;
  for (const auto& b : bars) mx = std::max(mx, b.value);
  if (!(mx > 0)) mx = 1;
  const std::vector<double> ticks = nice_ticks(0, mx, 5);
  const double xmax = ticks.back();
  const double h = top + row * bars.size() + 48;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << num(h) << "\" viewBox=\"0 0 " << w
    << " " << num(h) << "\" role=\"img\" aria-label=\"" << html_escape(title) << "\" " << kFont << " font-size=\"12\">";
  s << "<text x=\"4\" y=\"16\" font-weight=\"bold\">" << html_escape(title) << "</text>";
  const double y_axis = top + row * bars.size() + 4;
  for (double t : ticks) {
    const double x = lw + pw * t / xmax;
    s << "<line x1=\"" << num(x) << "\" y1=\"" << top - 4 << "\" x2=\"" << num(x) << "\" y2=\"" << num(y_axis)
      << "\" class=\"grid\"/>";
    s << "<text x=\"" << num(x) << "\" y=\"" << num(y_axis + 14) << "\" text-anchor=\"middle\">" << html_escape(tick_text(t))
      << "</text>";
  }
  s << "<line x1=\"" << lw << "\" y1=\"" << num(y_axis) << "\" x2=\"" << num(lw + pw) << "\" y2=\"" << num(y_axis)
    << "\" class=\"axis\"/>";
  s << "<text x=\"" << num(lw + pw / 2) << "\" y=\"" << num(y_axis + 32) << "\" text-anchor=\"middle\">"
    << html_escape(axis_label) << "</text>";
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = top + row * i;
    const double bw = std::max(0.0, pw * bars[i].value / xmax);
    s << "<text x=\"" << lw - 6 << "\" y=\"" << num(y + 14) << "\" text-anchor=\"end\">" << html_escape(bars[i].label)
      << "</text>";
    s << "<rect x=\"" << lw << "\" y=\"" << num(y + 3) << "\" width=\"" << num(bw) << "\" height=\"" << row - 6
      << "\" class=\"" << bars[i].cls << "\"/>";
    s << "<text x=\"" << num(lw + bw + 4) << "\" y=\"" << num(y + 14) << "\">" << html_escape(bars[i].text) << "</text>";
  }
  s << "</svg>";
  return s.str();
}

/// Forest plot: one row per promoted proposal, its improvement (dot) with the 95% CI (whisker),
/// x axis in %, a line at 0.
struct ForestRow {
  std::string label;
  double est = 0, lo = 0, hi = 0;
  bool in_force = true;
};

/// "#ID op on SKU", or "#ID op" when that would not fit the label column (~40 characters).
std::string forest_label(int64_t id, const std::string& op, const std::string& sku) {
  const std::string base = "#" + std::to_string(id) + " " + op;
  return base.size() + 4 + sku.size() <= 40 ? base + " on " + sku : base;
}

std::string svg_forest(const std::string& title, const std::vector<ForestRow>& rows) {
  const double lw = 260, w = 720, row = 22, top = 28, pw = w - lw - 30;
  double lo = 0, hi = 0;
  for (const auto& r : rows) {
    lo = std::min({lo, r.lo * 100, r.est * 100});
    hi = std::max({hi, r.hi * 100, r.est * 100});
  }
  const std::vector<double> ticks = nice_ticks(lo, hi, 6);
  const double xmin = ticks.front(), xmax = ticks.back();
  auto X = [&](double pct_v) { return lw + pw * (pct_v - xmin) / (xmax - xmin); };
  const double y_axis = top + row * rows.size() + 4, h = y_axis + 44;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << num(h) << "\" viewBox=\"0 0 " << w
    << " " << num(h) << "\" role=\"img\" aria-label=\"" << html_escape(title) << "\" " << kFont << " font-size=\"12\">";
  s << "<text x=\"4\" y=\"16\" font-weight=\"bold\">" << html_escape(title) << "</text>";
  for (double t : ticks) {
    s << "<line x1=\"" << num(X(t)) << "\" y1=\"" << top - 4 << "\" x2=\"" << num(X(t)) << "\" y2=\"" << num(y_axis)
      << "\" class=\"" << (t == 0 ? "zero" : "grid") << "\"/>";
    s << "<text x=\"" << num(X(t)) << "\" y=\"" << num(y_axis + 14) << "\" text-anchor=\"middle\">"
      << html_escape(tick_text(t)) << "%</text>";
  }
  s << "<line x1=\"" << lw << "\" y1=\"" << num(y_axis) << "\" x2=\"" << num(lw + pw) << "\" y2=\"" << num(y_axis)
    << "\" class=\"axis\"/>";
  s << "<text x=\"" << num(lw + pw / 2) << "\" y=\"" << num(y_axis + 32)
    << "\" text-anchor=\"middle\">improvement, % of baseline time (dot: Hodges-Lehmann estimate; bar: 95% CI)</text>";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const double y = top + row * i + row / 2;
    s << "<text x=\"" << lw - 6 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">" << html_escape(r.label) << "</text>";
    s << "<line x1=\"" << num(X(r.lo * 100)) << "\" y1=\"" << num(y) << "\" x2=\"" << num(X(r.hi * 100)) << "\" y2=\""
      << num(y) << "\" class=\"ci\"/>";
    s << "<circle cx=\"" << num(X(r.est * 100)) << "\" cy=\"" << num(y) << "\" r=\"4\" class=\""
      << (r.in_force ? "est" : "est-off") << "\"/>";
  }
  s << "</svg>";
  return s.str();
}

/// Display scale and unit of a case's values: a time unit for a seconds metric ("*_s"), else as is.
std::pair<double, std::string> case_unit(const json& c) {
  const std::string m = c.value("metric", std::string("median_s"));
  double vmax = 0;
  for (const auto& p : c["points"]) vmax = std::max(vmax, p["value"].get<double>());
  if (m.size() >= 2 && m.compare(m.size() - 2, 2, "_s") == 0) return time_unit(vmax);
  return {1.0, ""};
}

/// Short UTC label of an ISO time: "11-30 07:21".
std::string short_time(const std::string& iso) { return iso.size() >= 16 ? iso.substr(5, 5) + " " + iso.substr(11, 5) : iso; }

/// Line chart of one case: x = measurement index (oldest first, date labels), y = the metric in a
/// time unit; change points as dashed vertical lines labelled with the proposal that caused them.
std::string svg_series(const json& c) {
  const json& pts = c["points"];
  const size_t n = pts.size();
  const double w = 720, h = 260, l = 70, r = 20, t = 30, b = 52, pw = w - l - r, ph = h - t - b;
  double vmax = 0, vmin = 1e300;
  for (const auto& p : pts) {
    vmax = std::max(vmax, p["value"].get<double>());
    vmin = std::min(vmin, p["value"].get<double>());
  }
  const auto su = case_unit(c);
  const double scale = su.first;  // a plain variable: lambdas may not capture structured bindings (C++17, clang)
  const auto& unit = su.second;
  const std::vector<double> ticks = nice_ticks(std::min(0.0, vmin * scale), vmax * scale, 5);
  const double y0 = ticks.front(), y1 = ticks.back();
  auto X = [&](size_t i) { return l + (n > 1 ? pw * static_cast<double>(i) / static_cast<double>(n - 1) : pw / 2); };
  auto Y = [&](double v) { return t + ph * (1 - (v * scale - y0) / (y1 - y0)); };
  const std::string title = c["case"].get<std::string>();
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " "
    << h << "\" role=\"img\" aria-label=\"" << html_escape(title) << "\" " << kFont << " font-size=\"11\">";
  s << "<text x=\"4\" y=\"16\" font-weight=\"bold\" font-size=\"12\">" << html_escape(title) << "</text>";
  for (double tv : ticks) {
    const double y = t + ph * (1 - (tv - y0) / (y1 - y0));
    s << "<line x1=\"" << l << "\" y1=\"" << num(y) << "\" x2=\"" << l + pw << "\" y2=\"" << num(y) << "\" class=\"grid\"/>";
    s << "<text x=\"" << l - 6 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">" << html_escape(tick_text(tv))
      << "</text>";
  }
  const std::string ylab = c.value("metric", std::string("median_s")) + (unit.empty() ? "" : " (" + unit + ")");
  s << "<text transform=\"translate(14," << num(t + ph / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
    << html_escape(ylab) << "</text>";
  s << "<line x1=\"" << l << "\" y1=\"" << t + ph << "\" x2=\"" << l + pw << "\" y2=\"" << t + ph << "\" class=\"axis\"/>";
  s << "<line x1=\"" << l << "\" y1=\"" << t << "\" x2=\"" << l << "\" y2=\"" << t + ph << "\" class=\"axis\"/>";
  // x ticks: at most 6 point indices, labelled with their UTC time.
  const size_t nt = std::min<size_t>(n, 6);
  for (size_t k = 0; k < nt; ++k) {
    const size_t i = nt > 1 ? k * (n - 1) / (nt - 1) : 0;
    s << "<line x1=\"" << num(X(i)) << "\" y1=\"" << t + ph << "\" x2=\"" << num(X(i)) << "\" y2=\"" << t + ph + 4
      << "\" class=\"axis\"/>";
    s << "<text x=\"" << num(X(i)) << "\" y=\"" << t + ph + 16 << "\" text-anchor=\"middle\">"
      << html_escape(short_time(pts[i]["at"].get<std::string>())) << "</text>";
  }
  s << "<text x=\"" << num(l + pw / 2) << "\" y=\"" << h - 8
    << "\" text-anchor=\"middle\">measurement, oldest to newest (UTC month-day time)</text>";
  // Change points first (under the line).
  for (const auto& cp : c["change_points"]) {
    const size_t i = cp["index"].get<size_t>();
    if (i >= n) continue;
    const double x = i > 0 ? (X(i - 1) + X(i)) / 2 : X(i);
    s << "<line x1=\"" << num(x) << "\" y1=\"" << t << "\" x2=\"" << num(x) << "\" y2=\"" << t + ph << "\" class=\"cp\"/>";
    std::string lab = "change " + pct(cp.value("rel_change", 0.0));
    if (cp["caused_by"].is_number_integer()) lab += " (#" + std::to_string(cp["caused_by"].get<int64_t>()) + ")";
    s << "<text x=\"" << num(x + 3) << "\" y=\"" << t + 10 << "\" class=\"cpt\">" << html_escape(lab) << "</text>";
  }
  s << "<polyline class=\"line\" points=\"";
  for (size_t i = 0; i < n; ++i) s << (i ? " " : "") << num(X(i)) << "," << num(Y(pts[i]["value"].get<double>()));
  s << "\"/>";
  for (size_t i = 0; i < n; ++i) {
    const std::string src = pts[i].value("source", std::string());
    const bool busy = pts[i].value("contended", false);  // busy host: a hollow, larger marker
    const std::string cls = std::string(src.rfind("evolve", 0) == 0 ? "pe" : "pb") + (busy ? " busy" : "");
    s << "<circle cx=\"" << num(X(i)) << "\" cy=\"" << num(Y(pts[i]["value"].get<double>())) << "\" r=\""
      << (busy ? "3.5" : "2.5") << "\" class=\"" << cls << "\"><title>" << html_escape(pts[i]["at"].get<std::string>())
      << " " << html_escape(src) << " " << html_escape(fmt("%.4g", pts[i]["value"].get<double>() * scale)) << " "
      << html_escape(unit)
      << (busy ? html_escape(" (busy host: " + pts[i].value("contention_reason", std::string()) + ")") : std::string())
      << "</title></circle>";
  }
  s << "</svg>";
  return s.str();
}

// ---- HTML / Markdown ----------------------------------------------------------------------------

std::string rate_text(const json& v) { return v.is_number() ? fmt("%.1f%%", 100 * v.get<double>()) : "n/a"; }

/// " N proposal(s) were undecided (...)" for a win-rate row with undecided > 0, else "".
std::string undecided_text(const json& row) {
  const int64_t u = row.value("undecided", int64_t{0});
  if (u <= 0) return "";
  return " " + std::to_string(u) + (u == 1 ? " proposal was" : " proposals were") +
         " undecided (failed only on undecided gates: the host's noise or too few rounds hid the effect) and counted "
         "neither as passed nor as failed.";
}

std::string numbers_text(const json& p) {
  if (!p["improvement"].is_number()) {
    if (p["ci_lo"].is_number()) return "time new/base CI hi " + stats::format_time_ratio(1 - p["ci_lo"].get<double>());
    return "";
  }
  std::string s = stats::format_time_ratio(1 - p["improvement"].get<double>());
  if (p["ci_lo"].is_number() && p["ci_hi"].is_number())
    s = stats::format_saving_as_time_ratio(p["improvement"].get<double>(), p["ci_lo"].get<double>(), p["ci_hi"].get<double>());
  else if (p.value("too_few_rounds", false))
    s += " (no CI: too few rounds)";
  return s;
}

/// A queue row's action without the failed gate's reason (which the row's details hold):
/// "none: failed performance (not retried on this SKU)".
std::string short_action(const std::string& action) {
  const std::pair<const char*, const char*> forms[] = {{"none: failed ", " (not retried on this SKU)"},
                                                       {"none now: undecided ", " (a later run proposes it again)"}};
  for (const auto& [prefix, tail] : forms) {
    const std::string pre = prefix;
    if (action.rfind(pre, 0) != 0) continue;
    const size_t colon = action.find(':', pre.size());
    if (colon != std::string::npos) return action.substr(0, colon) + tail;
  }
  return action;
}

/// The one thing that decided a proposal: a gate other than performance that failed ("failed
/// correctness"), else its speedup (speedup_text), else "no number".
std::string decided_by(const json& p) {
  for (const auto& g : p["gates"])
    if (g["gate"] != "performance" && g["gate"] != "approval" && gate_verdict(g) == "FAIL")
      return "failed " + g["gate"].get<std::string>();
  std::string t = speedup_text(p["improvement"], p["ci_lo"], p["ci_hi"]);
  if (!t.empty() && p.value("too_few_rounds", false)) t += " (no CI: too few rounds)";
  return t.empty() ? "no number" : t;
}

const char* kCss = R"CSS(
body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0 16px 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{background:#f5f5f5;padding:1px 4px;border-radius:3px}
.meta,.note{color:#555;font-size:13px}.empty{color:#777;font-style:italic}
.pass{color:#1a7f37}.fail{color:#c62828;font-weight:bold}.undecided{color:#9a6700}
.st-promoted{color:#1a7f37;font-weight:bold}.st-failed{color:#c62828}.st-passed{color:#0b5cad;font-weight:bold}
nav a{margin-right:14px}
details{margin:2px 0}summary{cursor:pointer;color:#0b5cad}details ul{margin:4px 0 4px 18px;padding:0}
.summary{background:#f7f9fc;border:1px solid #d7e0ea;padding:8px 14px;border-radius:4px}
svg{display:block;margin:8px 0 16px 0}
svg .grid{stroke:#e3e3e3;stroke-width:1}svg .axis{stroke:#444;stroke-width:1}
svg .zero{stroke:#444;stroke-width:1.5}
svg .b{fill:#4c78a8}svg .b2{fill:#54a24b}svg .bf{fill:#e45756}
svg .ci{stroke:#4c78a8;stroke-width:3}svg .est{fill:#1a7f37}svg .est-off{fill:#999}
svg .line{fill:none;stroke:#4c78a8;stroke-width:1.5}svg .pb{fill:#4c78a8}svg .pe{fill:#f58518}
svg .pb.busy{fill:#fff;stroke:#4c78a8;stroke-width:1.5}svg .pe.busy{fill:#fff;stroke:#f58518;stroke-width:1.5}
svg .cp{stroke:#c62828;stroke-width:1.5;stroke-dasharray:5,3}svg .cpt{fill:#c62828;font-size:11px}
)CSS";

std::string html_report(const json& r) {
  std::ostringstream s;
  auto E = [](const std::string& x) { return html_escape(x); };
  const json& q = r["queue"];
  s << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>rtx-evolve report</title>\n<style>"
    << kCss << "</style>\n</head>\n<body>\n<h1>rtx-evolve report</h1>\n";
  s << "<p class=\"meta\">store <code>" << E(r.value("db", std::string())) << "</code> &middot; generated "
    << E(r.value("generated_at", std::string()));  // ISO-8601 with Z: already says UTC
  if (!r.value("since", std::string()).empty()) s << " &middot; since " << E(r["since"].get<std::string>());
  s << " &middot; schema " << E(r.value("schema", std::string())) << "</p>\n";
  s << "<nav><a href=\"#summary\">Summary</a><a href=\"#queue\">Proposal queue</a><a href=\"#winrate\">Win rate</a><a href=\"#gates\">Gate failures</a>"
       "<a href=\"#impact\">Impact by SKU and op</a><a href=\"#perf\">Performance over time</a></nav>\n";

  // Summary: what was promoted, what waits for a person, what to run next.
  {
    std::vector<const json*> promoted, passed, undecided;
    size_t failed = 0;
    for (const auto& p : q["proposals"]) {
      const std::string st = p["status"];
      if (st == "promoted") promoted.push_back(&p);
      else if (st == "passed") passed.push_back(&p);
      else if (st == "failed") ++failed;
      if (p["action"].get<std::string>().find("undecided") != std::string::npos) undecided.push_back(&p);
    }
    s << "<section id=\"summary\" class=\"summary\">\n<h2>Summary</h2>\n<ul>";
    auto line = [&](const json& p) {
      s << "<li>#" << p["id"].get<int64_t>() << " " << E(p["domain"].get<std::string>()) << " <code>"
        << E(p["change"].get<std::string>()) << "</code>: " << E(decided_by(p));
      if (!p["command"].get<std::string>().empty()) s << "; next: <code>" << E(p["command"].get<std::string>()) << "</code>";
      s << "</li>";
    };
    if (q["proposals"].empty()) s << "<li>Nothing proposed yet: run <code>rtx-evolve run</code>.</li>";
    for (const json* p : promoted) line(*p);
    for (const json* p : passed) line(*p);
    s << "<li>" << promoted.size() << " promoted, " << passed.size() << " passed and waiting for approval, " << failed
      << " failed, " << undecided.size() << " undecided, of the newest " << q["proposals"].size() << ".</li>";
    s << "<li>Next: <code>rtx-evolve status</code> (the queue), <code>rtx-evolve approve ID</code> / <code>rtx-evolve "
         "rollback ID</code>, <code>rtx-evolve kg query improved</code> (what the knowledge graph learned).</li></ul>\n</section>\n";
  }

  // Queue.
  s << "<section id=\"queue\">\n<h2>Proposal queue</h2>\n";
  const int64_t total = q.value("total", int64_t{0});
  if (total == 0) {
    s << "<p class=\"empty\">No proposals in the store" << (r.value("since", std::string()).empty() ? "" : " in this range")
      << ". Run <code>rtx-evolve run</code> to propose and validate changes, or <code>rtx-evolve submit FILE</code>.</p>\n";
  } else {
    s << "<table><tr><th>status</th><th>proposals</th></tr>";
    std::vector<Bar> bars;
    for (const auto& [st, n] : q["status_counts"].items()) {
      s << "<tr><td class=\"st-" << E(st) << "\">" << E(st) << "</td><td class=\"n\">" << n.get<int64_t>() << "</td></tr>";
      bars.push_back({st, n.get<double>(), std::to_string(n.get<int64_t>()), st == "failed" ? "bf" : st == "promoted" ? "b2" : "b"});
    }
    s << "<tr><th>total</th><td class=\"n\">" << total << "</td></tr></table>\n";
    s << svg_bars("Proposals by status", bars, "proposals", 1);
    s << "<h3>Newest " << q["proposals"].size() << " of " << total << "</h3>\n";
    // One line per proposal: its verdict, the number that decided it, the change and what to do;
    // the reasons and each gate's evidence behind a <details> row.
    s << "<table><tr><th>#</th><th>verdict</th><th>decided by</th><th>change</th><th>what to do</th></tr>\n";
    for (const auto& p : q["proposals"]) {
      const std::string st = p["status"];
      s << "<tr><td class=\"n\">" << p["id"].get<int64_t>() << "</td><td class=\"st-" << E(st) << "\">" << E(st)
        << "</td><td class=\"n\">" << E(decided_by(p)) << "</td><td>" << E(p["domain"].get<std::string>()) << " <code>"
        << E(p["key"].get<std::string>()) << "</code><br><code>" << E(p["change"].get<std::string>()) << "</code></td><td>"
        << E(short_action(p["action"].get<std::string>()));
      if (!p["command"].get<std::string>().empty()) s << "<br><code>" << E(p["command"].get<std::string>()) << "</code>";
      s << "</td></tr>\n<tr><td></td><td colspan=\"4\"><details><summary>why, gates and host evidence</summary><p>"
        << E(p["why"].get<std::string>()) << " <span class=\"meta\">(created " << E(p["created_at"].get<std::string>())
        << ")</span></p>";
      if (short_action(p["action"].get<std::string>()) != p["action"].get<std::string>())
        s << "<p>" << E(p["action"].get<std::string>()) << "</p>";
      s << "<ul>";
      for (const auto& g : p["gates"]) {
        if (g["gate"] == "approval") continue;
        const std::string verdict = gate_verdict(g);
        s << "<li><span class=\"" << (verdict == "pass" ? "pass" : verdict == "FAIL" ? "fail" : "undecided") << "\""
          << " title=\"" << E(g.value("reason", std::string())) << "\">" << verdict << " " << E(g["gate"].get<std::string>())
          << "</span> (" << E(gate_value_text(g)) << ")";
        if (!g.value("reason", std::string()).empty()) s << ": " << E(g["reason"].get<std::string>());
        s << "</li>";
      }
      s << "</ul><p class=\"meta\">improvement 1 - t<sub>candidate</sub>/t<sub>baseline</sub>: " << E(numbers_text(p))
        << "</p></details></td></tr>\n";
    }
    s << "</table>\n";
  }
  s << "</section>\n";

  // Win rate.
  const json& w = r["win_rate"];
  s << "<section id=\"winrate\">\n<h2>Win rate</h2>\n";
  const json& ov = w["overall"];
  if (ov["validated"].get<int64_t>() == 0) {
    s << "<p class=\"empty\">No proposal has been validated yet." << E(undecided_text(ov)) << "</p>\n";
  } else {
    s << "<p>" << ov["passed"].get<int64_t>() << " of " << ov["validated"].get<int64_t>() << " validated proposals passed every gate ("
      << rate_text(ov["pass_rate"]) << "); " << ov["promoted"].get<int64_t>() << " were promoted (" << rate_text(ov["promote_rate"])
      << ")." << E(undecided_text(ov)) << "</p>\n";
    s << "<table><tr><th>domain</th><th>validated</th><th>passed</th><th>promoted</th><th>undecided</th><th>passed / validated</th>"
         "<th>promoted / validated</th></tr>\n";
    std::vector<Bar> bars;
    for (const auto& d : w["by_domain"]) {
      s << "<tr><td>" << E(d["domain"].get<std::string>()) << "</td><td class=\"n\">" << d["validated"].get<int64_t>()
        << "</td><td class=\"n\">" << d["passed"].get<int64_t>() << "</td><td class=\"n\">" << d["promoted"].get<int64_t>()
        << "</td><td class=\"n\">" << d["undecided"].get<int64_t>() << "</td><td class=\"n\">" << rate_text(d["pass_rate"]) << "</td><td class=\"n\">" << rate_text(d["promote_rate"])
        << "</td></tr>\n";
      if (d["validated"].get<int64_t>() > 0) {
        bars.push_back({d["domain"].get<std::string>() + " passed", 100 * d["pass_rate"].get<double>(), rate_text(d["pass_rate"]), "b"});
        bars.push_back({d["domain"].get<std::string>() + " promoted", 100 * d["promote_rate"].get<double>(),
                        rate_text(d["promote_rate"]), "b2"});
      }
    }
    s << "<tr><th>all</th><td class=\"n\">" << ov["validated"].get<int64_t>() << "</td><td class=\"n\">" << ov["passed"].get<int64_t>()
      << "</td><td class=\"n\">" << ov["promoted"].get<int64_t>() << "</td><td class=\"n\">" << ov["undecided"].get<int64_t>()
      << "</td><td class=\"n\">" << rate_text(ov["pass_rate"])
      << "</td><td class=\"n\">" << rate_text(ov["promote_rate"]) << "</td></tr></table>\n";
    s << svg_bars("Win rate by domain", bars, "% of validated proposals", 100);
  }
  s << "</section>\n";

  // Gate failures.
  const json& gf = r["gate_failures"];
  s << "<section id=\"gates\">\n<h2>Gate failures</h2>\n";
  if (gf["by_gate"].empty()) {
    s << "<p class=\"empty\">No gate results recorded.</p>\n";
  } else {
    // undecided: a performance or held-out gate the host's noise or too few rounds left
    // undecided; counted apart, not as failed (by_gate's 'undecided' in the JSON).
    s << "<table><tr><th>gate</th><th>evaluated</th><th>failed</th><th>undecided</th></tr>\n";
    std::vector<Bar> bars;
    for (const auto& g : gf["by_gate"]) {
      s << "<tr><td>" << E(g["gate"].get<std::string>()) << "</td><td class=\"n\">" << g["evaluated"].get<int64_t>()
        << "</td><td class=\"n\">" << g["failed"].get<int64_t>() << "</td><td class=\"n\">"
        << g.value("undecided", int64_t{0}) << "</td></tr>\n";
      bars.push_back({g["gate"].get<std::string>(), g["failed"].get<double>(),
                      std::to_string(g["failed"].get<int64_t>()) + " of " + std::to_string(g["evaluated"].get<int64_t>()), "bf"});
    }
    s << "</table>\n" << svg_bars("Failures per gate", bars, "failed gate results", 1);
    if (gf["top_reasons"].empty()) {
      s << "<p>No gate failed.</p>\n";
    } else {
      s << "<h3>Top reasons</h3>\n<table><tr><th>gate</th><th>reason (example; numbers vary)</th><th>count</th></tr>\n";
      for (const auto& t : gf["top_reasons"])
        s << "<tr><td>" << E(t["gate"].get<std::string>()) << "</td><td>" << E(t["reason"].get<std::string>())
          << "</td><td class=\"n\">" << t["count"].get<int64_t>() << "</td></tr>\n";
      s << "</table>\n";
    }
  }
  s << "</section>\n";

  // Impact.
  s << "<section id=\"impact\">\n<h2>Impact by SKU and op</h2>\n";
  const json& groups = r["impact"]["groups"];
  if (groups.empty()) {
    s << "<p class=\"empty\">No promoted improvement yet (promotion needs <code>rtx-evolve approve ID</code> or "
         "<code>--auto-approve-if-gates-pass</code>).</p>\n";
  } else {
    std::vector<ForestRow> forest;
    s << "<table><tr><th>SKU</th><th>op</th><th>#</th><th>key</th><th>status</th><th>improvement</th><th>95% CI</th></tr>\n";
    for (const auto& g : groups) {
      const auto& items = g["items"];
      bool first = true;
      for (const auto& it : items) {
        s << "<tr>";
        if (first)
          s << "<td rowspan=\"" << items.size() << "\">" << E(g["sku"].get<std::string>()) << "</td><td rowspan=\"" << items.size()
            << "\">" << E(g["op"].get<std::string>()) << "<br><span class=\"note\">" << g["in_force"].get<int64_t>() << " of "
            << g["promoted"].get<int64_t>() << " in force</span></td>";
        first = false;
        const std::string ci = it["ci_lo"].is_number() && it["ci_hi"].is_number()
                                   ? "[" + pct(it["ci_lo"].get<double>()) + ", " + pct(it["ci_hi"].get<double>()) + "]"
                                   : "n/a";
        s << "<td class=\"n\">" << it["id"].get<int64_t>() << "</td><td><code>" << E(it["key"].get<std::string>())
          << "</code></td><td class=\"st-" << E(it["status"].get<std::string>()) << "\">" << E(it["status"].get<std::string>())
          << "</td><td class=\"n\">" << E(pct(it["improvement"].get<double>())) << "</td><td class=\"n\">" << E(ci)
          << "</td></tr>\n";
        if (it["ci_lo"].is_number() && it["ci_hi"].is_number())
          forest.push_back({forest_label(it["id"].get<int64_t>(), g["op"].get<std::string>(), g["sku"].get<std::string>()),
                            it["improvement"].get<double>(), it["ci_lo"].get<double>(), it["ci_hi"].get<double>(),
                            it["status"] == "promoted"});
      }
    }
    s << "</table>\n";
    if (!forest.empty()) s << svg_forest("Promoted improvements (grey: no longer in force)", forest);
  }
  s << "</section>\n";

  // Performance over time.
  s << "<section id=\"perf\">\n<h2>Performance over time</h2>\n";
  const json& perf = r["performance"];
  if (perf["cases"].empty()) {
    s << "<p class=\"empty\">No bench case has two or more measurements yet (<code>rtx-bench run</code> and "
         "<code>rtx-evolve run</code> record them).</p>\n";
  } else {
    s << "<p class=\"note\">Per case, oldest to newest: blue dots rtx-bench runs, orange dots evolve validation arms; "
         "hollow circles were measured on a busy host (host contended; left out of the change-point analysis); red "
         "dashed lines are change points (E-divisive means), labelled with the relative change and the proposal "
         "promoted there. Details: <code>rtx-evolve history CASE</code>.</p>\n";
    for (const auto& c : perf["cases"]) {
      s << svg_series(c);
      if (const int64_t busy = c.value("busy_points", int64_t{0}); busy > 0) {
        if (static_cast<size_t>(busy) == c["points"].size())
          s << "<p class=\"note busy-all\">All " << busy << " points of " << E(c["case"].get<std::string>())
            << " were measured on a busy host (hollow circles): there is no quiet point, so the line and any first/last "
               "values are busy-host numbers and no change point was looked for (<code>rtx-evolve history CASE "
               "--include-busy</code> analyses them; re-measure on an idle host).</p>\n";
        else
          s << "<p class=\"note\">" << busy << " of " << c["points"].size() << " points of " << E(c["case"].get<std::string>())
            << " were measured on a busy host (hollow circles).</p>\n";
      }
      if (!c["change_points"].empty()) {
        s << "<table><tr><th>change point at</th><th>before</th><th>after</th><th>change</th><th>p</th><th>caused by</th></tr>\n";
        const auto [scale, unit] = case_unit(c);
        for (const auto& cp : c["change_points"])
          s << "<tr><td>" << E(cp["at"].get<std::string>()) << "</td><td class=\"n\">"
            << E(fmt("%.4g", cp["before"].get<double>() * scale) + " " + unit) << "</td><td class=\"n\">"
            << E(fmt("%.4g", cp["after"].get<double>() * scale) + " " + unit) << "</td><td class=\"n\">"
            << E(pct(cp["rel_change"].get<double>())) << "</td><td class=\"n\">" << E(fmt("%.3g", cp["p"].get<double>()))
            << "</td><td>"
            << (cp["caused_by"].is_number_integer() ? "proposal " + std::to_string(cp["caused_by"].get<int64_t>())
                                                    : std::string("no promotion there"))
            << "</td></tr>\n";
        s << "</table>\n";
      }
    }
  }
  s << "</section>\n";
  if (!r["notes"].empty()) {
    s << "<section id=\"notes\">\n<h2>Notes</h2>\n<ul>\n";
    for (const auto& n : r["notes"]) s << "<li>" << E(n.get<std::string>()) << "</li>\n";
    s << "</ul>\n</section>\n";
  }
  s << "</body>\n</html>\n";
  return s.str();
}

/// Markdown (GFM) plain text for a table cell or a line: one line, '|' as "\\|", and '<' as "&lt;"
/// only where it could open raw HTML or an autolink (before a letter, '/', '!' or '?'; CommonMark
/// 0.30 6.5/6.6), so "p < 0.05" and "a -> b" stay readable in a CI log and render the same.
std::string md(const std::string& x) {
  std::string o;
  for (size_t i = 0; i < x.size(); ++i) {
    const char c = x[i];
    const char next = i + 1 < x.size() ? x[i + 1] : '\0';
    if (c == '|') o += "\\|";
    else if (c == '\n' || c == '\r') o += ' ';
    else if (c == '<' && (std::isalpha(static_cast<unsigned char>(next)) || next == '/' || next == '!' || next == '?'))
      o += "&lt;";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) o += printable(std::string_view(&x[i], 1));  // ESC, BEL: \xHH
    else o += c;
  }
  return o;
}

/// A GFM code span: contents literal (no entity escaping: a code span shows "&lt;" as typed),
/// '|' as "\\|" (GFM tables split cells on it even in code spans), newlines as spaces, and a
/// fence longer than any backtick run inside (CommonMark 0.30 6.1).
std::string md_code(const std::string& x) {
  std::string body;
  size_t run = 0, longest = 0;
  for (char c : x) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
    if (c == '|') body += "\\|";
    else if (c == '\n' || c == '\r') body += ' ';
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) body += printable(std::string_view(&c, 1));
    else body += c;
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`');
  return fence + (pad ? " " : "") + body + (pad ? " " : "") + fence;
}

std::string md_report(const json& r) {
  std::ostringstream s;
  const json& q = r["queue"];
  s << "## rtx-evolve report\n\nstore " << md_code(r.value("db", std::string())) << ", generated "
    << md(r.value("generated_at", std::string()))
    << (r.value("since", std::string()).empty() ? "" : ", since " + r["since"].get<std::string>()) << "\n\n";

  s << "### Proposal queue\n\n";
  if (q["total"].get<int64_t>() == 0) {
    s << "No proposals in the store. Run `rtx-evolve run` or `rtx-evolve submit FILE`.\n\n";
  } else {
    s << "| status | proposals |\n|---|---:|\n";
    for (const auto& [st, n] : q["status_counts"].items()) s << "| " << md(st) << " | " << n.get<int64_t>() << " |\n";
    s << "| **total** | " << q["total"].get<int64_t>() << " |\n\n";
    s << "| # | created | domain | key | change (why) | status | gates | improvement [95% CI] | what to do |\n"
         "|---:|---|---|---|---|---|---|---|---|\n";
    for (const auto& p : q["proposals"]) {
      std::string gates;
      for (const auto& g : p["gates"]) {
        if (g["gate"] == "approval") continue;
        if (!gates.empty()) gates += "; ";
        gates += gate_verdict(g) + " " + g["gate"].get<std::string>() + " (" + gate_value_text(g) + ")";
      }
      const std::string cmd = p["command"].get<std::string>();
      s << "| " << p["id"].get<int64_t>() << " | " << md(p["created_at"].get<std::string>()) << " | "
        << md(p["domain"].get<std::string>()) << " | " << md(p["key"].get<std::string>()) << " | "
        << md(p["change"].get<std::string>() + (p["why"].get<std::string>().empty() ? "" : " (why: " + p["why"].get<std::string>() + ")"))
        << " | " << md(p["status"].get<std::string>()) << " | " << md(gates) << " | "
        << md(numbers_text(p)) << " | " << md(p["action"].get<std::string>()) << (cmd.empty() ? "" : ": " + md_code(cmd))
        << " |\n";
    }
    s << "\n";
  }

  s << "### Win rate\n\n";
  const json& ov = r["win_rate"]["overall"];
  if (ov["validated"].get<int64_t>() == 0) {
    s << "No proposal has been validated yet." << md(undecided_text(ov)) << "\n\n";
  } else {
    s << "| domain | validated | passed | promoted | undecided | passed / validated | promoted / validated |\n"
         "|---|---:|---:|---:|---:|---:|---:|\n";
    auto row = [&](const json& d) {
      s << "| " << md(d["domain"].get<std::string>()) << " | " << d["validated"].get<int64_t>() << " | "
        << d["passed"].get<int64_t>() << " | " << d["promoted"].get<int64_t>() << " | " << d["undecided"].get<int64_t>()
        << " | " << rate_text(d["pass_rate"]) << " | " << rate_text(d["promote_rate"]) << " |\n";
    };
    for (const auto& d : r["win_rate"]["by_domain"]) row(d);
    row(ov);
    s << "\n";
    if (const std::string u = undecided_text(ov); !u.empty()) s << md(u.substr(1)) << "\n\n";
  }

  s << "### Gate failures\n\n";
  const json& gf = r["gate_failures"];
  if (gf["by_gate"].empty()) {
    s << "No gate results recorded.\n\n";
  } else {
    s << "| gate | evaluated | failed | undecided |\n|---|---:|---:|---:|\n";
    for (const auto& g : gf["by_gate"])
      s << "| " << md(g["gate"].get<std::string>()) << " | " << g["evaluated"].get<int64_t>() << " | "
        << g["failed"].get<int64_t>() << " | " << g.value("undecided", int64_t{0}) << " |\n";
    s << "\n";
    if (!gf["top_reasons"].empty()) {
      s << "| gate | top reason (example) | count |\n|---|---|---:|\n";
      for (const auto& t : gf["top_reasons"])
        s << "| " << md(t["gate"].get<std::string>()) << " | " << md(t["reason"].get<std::string>()) << " | "
          << t["count"].get<int64_t>() << " |\n";
      s << "\n";
    }
  }

  s << "### Impact by SKU and op\n\n";
  const json& groups = r["impact"]["groups"];
  if (groups.empty()) {
    s << "No promoted improvement yet.\n\n";
  } else {
    s << "| SKU | op | # | key | status | improvement | 95% CI |\n|---|---|---:|---|---|---:|---|\n";
    for (const auto& g : groups)
      for (const auto& it : g["items"]) {
        const std::string ci = it["ci_lo"].is_number() && it["ci_hi"].is_number()
                                   ? "[" + pct(it["ci_lo"].get<double>()) + ", " + pct(it["ci_hi"].get<double>()) + "]"
                                   : "n/a";
        s << "| " << md(g["sku"].get<std::string>()) << " | " << md(g["op"].get<std::string>()) << " | "
          << it["id"].get<int64_t>() << " | " << md(it["key"].get<std::string>()) << " | " << md(it["status"].get<std::string>())
          << " | " << pct(it["improvement"].get<double>()) << " | " << ci << " |\n";
      }
    s << "\n";
  }

  s << "### Performance over time\n\n";
  const json& cases = r["performance"]["cases"];
  if (cases.empty()) {
    s << "No bench case has two or more measurements yet.\n\n";
  } else {
    s << "| case | points | busy | first | last | change | change points |\n|---|---:|---:|---:|---:|---:|---|\n";
    std::vector<std::string> all_busy;  // cases whose first/last are busy-host values
    for (const auto& c : cases) {
      const json& pts = c["points"];
      // First and last over the quiet-host points; when every point was busy, over those, marked.
      std::vector<double> quiet;
      for (const auto& p : pts)
        if (!p.value("contended", false)) quiet.push_back(p["value"].get<double>());
      const bool busy_only = quiet.empty();
      if (busy_only) all_busy.push_back(c["case"].get<std::string>());
      const std::string mark = busy_only ? " (busy)" : "";
      const double a = !busy_only ? quiet.front() : pts.front()["value"].get<double>();
      const double b = !busy_only ? quiet.back() : pts.back()["value"].get<double>();
      const auto [scale, unit] = case_unit(c);
      std::string cps;
      for (const auto& cp : c["change_points"]) {
        if (!cps.empty()) cps += "; ";
        cps += "at " + cp["at"].get<std::string>() + " " + pct(cp["rel_change"].get<double>());
        if (cp["caused_by"].is_number_integer()) cps += " (proposal " + std::to_string(cp["caused_by"].get<int64_t>()) + ")";
      }
      s << "| " << md(c["case"].get<std::string>()) << " | " << pts.size() << " | " << c.value("busy_points", int64_t{0})
        << " | " << fmt("%.4g", a * scale) << " " << unit << mark
        << " | " << fmt("%.4g", b * scale) << " " << unit << mark << " | "
        << (a > 0 ? pct(b / a - 1) : std::string("n/a")) << mark << " | "
        << md(cps.empty() ? (busy_only ? "not analysed (no quiet point)" : "none") : cps) << " |\n";
    }
    s << "\n";
    if (!all_busy.empty()) {
      s << "(busy): every point of ";
      for (size_t i = 0; i < all_busy.size(); ++i) s << (i ? ", " : "") << md(all_busy[i]);
      s << " was measured on a busy host, so first, last and change are busy-host values (elsewhere they are over "
           "the quiet points) and no change point was looked for.\n\n";
    }
  }
  for (const auto& n : r["notes"]) s << "- note: " << md(n.get<std::string>()) << "\n";
  return s.str();
}

}  // namespace

std::string render_report(const json& report, const std::string& format) {
  if (format == "json") return report.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  if (format == "html") return html_report(report);
  if (format == "md") return md_report(report);
  throw_input("unknown report format '" + format + "'", "--format", "one of html, md, json");
}

}  // namespace rtx::evolve
