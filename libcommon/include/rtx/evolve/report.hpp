// rtx::evolve report: `rtx-evolve report` -- what the store says about the evolution loop (proposal
// queue, win rate, gate failures, impact by SKU and op, performance over time) as one document,
// rendered as a self-contained HTML page (inline CSS + SVG, no scripts), Markdown or JSON.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/evolve/history.hpp"  // normalize_since: the one --since parser of history and report
#include "rtx/store/store.hpp"

namespace rtx::evolve {

/// What `rtx-evolve report` covers.
struct ReportOptions {
  /// Only proposals, gate results and measurements created at or after this instant, in any
  /// form normalize_since() (rtx/evolve/history.hpp) reads: "2026-01-31", ISO-8601 with Z or an
  /// offset, or an age "7d"; compared as instants; "" = everything.
  std::string since;
  size_t limit = 20;      ///< newest proposals listed in the queue (counts cover all in range)
  size_t max_cases = 12;  ///< performance-over-time charts (cases with the most points first)
  size_t max_points = 200;///< newest points kept per case
};

/// Build the report document (rtx.report.v1, kind "evolve.report") from the store tables
/// proposals, gate_results, evolve_deployments, bench_results and runs:
///  "queue":       {"total", "status_counts" {status: n}, "proposals": newest `limit` rows
///                  {"id", "created_at", "domain", "key", "sku", "status", "why", "change",
///                   "gates": [{"gate","passed","metric","value","threshold","reason"}],
///                   "improvement", "ci_lo", "ci_hi" (fractions; null without a performance
///                   gate), "action", "command"}}
///  "win_rate":    {"overall", "by_domain": [...]} each {"domain", "validated", "passed",
///                  "failed", "undecided", "promoted", "pass_rate" = passed/validated,
///                  "promote_rate" = promoted/validated (null when validated = 0)}. Validated: a
///                  verdict was reached (status not new/validating/interrupted) and the proposal
///                  is not undecided (failed only on undecided performance gates,
///                  failed_undecided_only: neither a win nor a failure); passed: validated and not
///                  failed; promoted: ever promoted (promoted, superseded, rolled_back, or a
///                  promote row in evolve_deployments).
///  "gate_failures": {"by_gate": [{"gate","evaluated","failed"}], "top_reasons":
///                  [{"gate","reason","count"}] (at most 10, most frequent first)}. A gate's
///                  reason is detail.reason, else what gate_reason_text (kg.hpp) finds in its
///                  detail (safety: detail.failures joined with "; "), else "(no reason recorded)".
///  "impact":      {"groups": [{"sku","op","promoted","in_force","best_improvement","items":
///                  [{"id","key","status","improvement","ci_lo","ci_hi","threshold"}]}]}:
///                  ever-promoted proposals with a performance gate, grouped by SKU and op
///                  (the op of a tuner key "op|variant|shape|dtype|backend|sku"; the domain
///                  otherwise).
///  "performance": {"source", "change_points" (bool), "cases": [{"case", "metric"
///                  ("median_s", seconds), "busy_points", "points": [{"at","value","run_id","source",
///                  "proposal_id","contended","contention_reason"}], "change_points": [{"index","at","before","after" (segment
///                  means), "rel_change","p","caused_by"}]}]}: the `max_cases` most measured
///                  cases with >= 2 points, from rtx/evolve/history.hpp (E-divisive change
///                  points linked to the proposal promoted there).
///  "notes": [text].
/// An empty store gives a document with zero counts and empty lists. Throws rtx::Error(Input)
/// for a bad `since` (see normalize_since).
nlohmann::json build_report(store::Store& st, const ReportOptions& o);

/// Render a report document: "html" (one self-contained page: inline CSS, inline SVG charts,
/// no scripts, no external links; every string from the store HTML-escaped), "md" (Markdown
/// tables for CI logs, no SVG), "json" (the document, 2-space indented). Throws
/// rtx::Error(Input) naming --format for another format.
std::string render_report(const nlohmann::json& report, const std::string& format);

/// `text` with & < > " ' replaced by HTML character references (safe in element content and
/// in quoted attribute values, HTML5 13.1.2.6): rtx::xml_escape (core/printable.hpp), so bytes
/// that are not XML/UTF-8 characters become '?'.
std::string html_escape(const std::string& text);

/// Nice axis ticks covering [lo, hi]: about `target` values at a step of 1, 2 or 5 x 10^k
/// (Heckbert, "Nice numbers for graph labels", Graphics Gems, 1990). lo == hi widens the range.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

}  // namespace rtx::evolve
