// rtx::evolve knowledge graph: nodes and edges materialized from the authoritative tables
// (proposals, gate_results, evolve_deployments) into kg_nodes/kg_edges, the three questions of
// issue 6 and Graphviz/JSON export. The graph is derived data: kg_sync rebuilds it idempotently.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/store/store.hpp"

namespace rtx::evolve {

/// Materialize the graph from the authoritative tables into kg_nodes/kg_edges (idempotent
/// upserts, one transaction). Called by kg_query/kg_export and at the end of run_loop.
/// Vocabulary (node kind: ref):
///  proposal: "proposal:<id>"; bench_case: "case:<case id or workload>"; sku: "sku:<name>";
///  gate_result: "gate:<proposal id>:<gate>"; metric_delta: "delta:<proposal id>:<workload>";
///  deployment: "deployment:<evolve_deployments id>".
/// Edges (src -[kind]-> dst): proposal-[targets]->bench_case, proposal-[held_out]->bench_case,
///  proposal-[measured_on]->sku, proposal-[gated_by]->gate_result, proposal-[moved]->metric_delta,
///  metric_delta-[of]->bench_case, metric_delta-[judged_by]->gate_result,
///  deployment-[deploys|rolls_back]->proposal, deployment-[on]->sku. Only these kinds are touched:
///  stale rows of them are deleted, changed ones updated in place (ids stay stable).
///  docs/evolution.md "Knowledge graph".
/// Throws rtx::Error from the store (Environment when locked).
void kg_sync(store::Store& st);

/// One of the three questions, with filters (empty = any).
struct KgQuery {
  std::string question;  ///< "improved" | "hurt-determinism" | "failed"
  std::string op, sku, gate, domain;
  size_t limit = 50;
};

/// The valid questions, in documentation order.
const std::vector<std::string>& kg_questions();

/// Answer a question (syncs first). Returns {"question", "filters", "rows": [...]}; rows per
/// question:
///  improved: {"proposal_id", "domain", "key", "sku", "status", "improvement", "ci_lo", "ci_hi",
///   "p", "threshold", "promoted", "cases"} (fractions of time saved, from the metric delta),
///   proposals whose performance gate passed, that passed validation as a whole (status
///   passed, approved, promoted, superseded or rolled_back: see "status", "promoted") and whose
///   measured improvement is > 0 (a "no regression" threshold, as the memory domain's, passes
///   a change that measured slower: that did not improve anything);
///  hurt-determinism: {..., "max_rel_err", "bound", "reason"}, determinism gate failed;
///  failed: {..., "gate", "metric", "value", "threshold", "reason", "undecided"}, one row per
///   gate that did not pass; "undecided" when it reached no verdict (gate_undecided: the host's
///   noise or too few rounds), shown so in the text, else a measured failure.
/// Every row also carries "change" and "ops" (the ops of the proposal's affected cases; serving
/// and allocator workloads are "serve" / "alloc"). Filters: op exact or its stem ("matmul" for
/// "matmul_forward") among ops, sku a
/// case-insensitive substring of the proposal's SKU, domain exact, gate exact ("failed" only,
/// else rtx::Error(Input)). "improved"/"hurt-determinism" judge the latest such gate row.
/// Newest proposal first, at most q.limit rows. Throws rtx::Error(Input) for an unknown question
/// naming the valid ones, or limit 0.
nlohmann::json kg_query(store::Store& st, const KgQuery& q);

/// A query answer as human text (one block per row), for the tool's default output.
std::string kg_format_text(const nlohmann::json& answer);

/// Filters of an export (empty / 0 = any). A proposal filter keeps that proposal's neighbourhood
/// (its gates, deltas, cases, SKU and deployments); an SKU filter keeps proposals measured on it.
struct KgExportFilter {
  int64_t proposal = 0;
  std::string sku, op, domain;
};

/// The (filtered) graph as {"schema": "rtx.kg.v1", "nodes": [{"id", "kind", "ref", "label",
/// "props"}], "edges": [{"src", "dst", "kind"}]} where src/dst are node refs. Syncs first.
nlohmann::json kg_graph(store::Store& st, const KgExportFilter& f);

/// Render a graph document (kg_graph's shape) as "json" (pretty), "dot" (Graphviz digraph, node
/// kinds as shapes/colours) or "svg" (dot laid out in-process with libgvc). Throws
/// rtx::Error(Input) for another format (naming dot|svg|json), rtx::Error(Environment) for svg
/// when rtx was built without Graphviz, rtx::Error(Internal) when libgvc fails on the dot text.
std::string kg_render(const nlohmann::json& graph, const std::string& format);

/// Why a gate failed (or what it recorded), from its detail_json: detail.reason when present, else
/// the gate-specific fields joined with "; ": detail.failures (any gate), safety's
/// missing_fields / signature / error, determinism's checksum and parity flags, approval's actor.
/// "" when the detail says nothing. Used by the graph's gate nodes and by rtx-evolve report.
std::string gate_reason_text(const std::string& gate, bool passed, const nlohmann::json& detail);

/// Escape a string for a double-quoted Graphviz ID (backslash, quote, newline).
std::string dot_quote(const std::string& s);

}  // namespace rtx::evolve
