// The rtx-evolve knowledge graph: kg_nodes/kg_edges derived from proposals, gate_results and
// evolve_deployments (kg_sync), the three questions of issue 6, and dot/svg/json export.
#include "rtx/stats/compare.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/evolve/loop.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "rtx/core/error.hpp"

#ifdef RTX_HAVE_GRAPHVIZ
#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>
#endif

namespace rtx::evolve {

using nlohmann::json;

namespace {

/// Node kinds and edge kinds this module owns (sync never touches other kinds).
const std::vector<std::string>& node_kinds() {
  static const std::vector<std::string> k = {"proposal", "bench_case", "sku", "metric_delta", "gate_result", "deployment"};
  return k;
}
const std::vector<std::string>& edge_kinds() {
  static const std::vector<std::string> k = {"targets", "held_out", "measured_on", "gated_by", "moved",
                                             "of",      "judged_by", "deploys",     "rolls_back", "on"};
  return k;
}
bool owned(const std::vector<std::string>& kinds, const std::string& k) {
  return std::find(kinds.begin(), kinds.end(), k) != kinds.end();
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

json parse_or_empty(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

double num(const json& j, const char* k, double d = 0) {
  auto it = j.find(k);
  return it != j.end() && it->is_number() ? it->get<double>() : d;
}
std::string str(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// Why a gate failed (or what it recorded), from its detail: "reason" when present, else the
/// gate-specific fields (safety failures / missing fields / signature; determinism checks).
std::string gate_reason(const std::string& gate, bool passed, const json& d) {
  std::string r = str(d, "reason");
  if (!r.empty()) return r;
  std::vector<std::string> parts;
  if (d.contains("failures") && d["failures"].is_array())
    for (const auto& f : d["failures"])
      if (f.is_string()) parts.push_back(f.get<std::string>());
  if (gate == "safety") {
    if (d.contains("missing_fields") && d["missing_fields"].is_array() && !d["missing_fields"].empty())
      parts.push_back("envelope incomplete, missing " + d["missing_fields"].dump());
    const std::string sig = str(d, "signature");
    if (!sig.empty() && sig != "verified") parts.push_back("signature: " + sig);
    if (!str(d, "error").empty()) parts.push_back(str(d, "error"));
  } else if (gate == "determinism" && !passed) {
    if (d.value("candidate_runs_identical", true) == false) parts.push_back("candidate runs produced different checksums");
    auto it = d.find("exact_parity_with_baseline");
    if (it != d.end() && it->is_boolean() && !it->get<bool>()) parts.push_back("candidate output differs from the baseline's");
    if (str(d, "reference_check") == "failed" && parts.empty()) parts.push_back("reference check failed");
  } else if (gate == "approval") {
    if (!str(d, "actor").empty()) parts.push_back("by " + str(d, "actor") + (str(d, "mode").empty() ? "" : " (" + str(d, "mode") + ")"));
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

/// The op a measured case exercises: its "op" field, else the id's prefix before ':' ("serve",
/// "alloc"), else the id's first path component.
std::string case_op(const std::string& id, const json& obj) {
  if (obj.is_object() && obj.contains("op") && obj["op"].is_string()) return obj["op"].get<std::string>();
  const size_t colon = id.find(':');
  if (colon != std::string::npos && id.compare(0, colon, "heldout") != 0) return id.substr(0, colon);
  std::string s = colon != std::string::npos ? id.substr(colon + 1) : id;
  return s.substr(0, s.find('/'));
}

std::string change_text(const json& pj) {
  std::string s;
  if (pj.contains("actions") && pj["actions"].is_array())
    for (const auto& a : pj["actions"]) {
      if (!a.is_object()) continue;
      if (!s.empty()) s += ", ";
      s += str(a, "set") + " " + a.value("from", json(nullptr)).dump() + " -> " + a.value("to", json(nullptr)).dump();
    }
  return s;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Node {
  std::string kind, label;
  json props;
};
struct Edge {
  std::string src, dst, kind;
  bool operator<(const Edge& o) const { return std::tie(src, dst, kind) < std::tie(o.src, o.dst, o.kind); }
};

/// The graph as derived from the authoritative tables (refs -> nodes, edges by ref).
struct Desired {
  std::map<std::string, Node> nodes;
  std::set<Edge> edges;
  void node(const std::string& ref, const std::string& kind, const std::string& label, json props) {
    nodes[ref] = Node{kind, label, std::move(props)};
  }
  void edge(const std::string& s, const std::string& d, const std::string& k) { edges.insert({s, d, k}); }
};

/// A case id list (unique, in order) plus the workload objects by id.
void add_cases(std::vector<std::string>& ids, std::map<std::string, json>& objs, const json& list) {
  if (!list.is_array()) return;
  for (const auto& c : list) {
    std::string id;
    if (c.is_string()) id = c.get<std::string>();
    else if (c.is_object() && c.contains("id") && c["id"].is_string()) {
      id = c["id"].get<std::string>();
      objs[id] = c;
    }
    if (!id.empty() && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
}

Desired derive(store::Store& st) {
  Desired g;
  struct Prop {
    int64_t id;
    std::string sku, domain;
    std::vector<std::string> affected, heldout;
    std::map<std::string, json> objs;
    json props;
  };
  std::map<int64_t, Prop> props;
  {
    for (const StoredProposal& row : stored_proposals(st)) {
      Prop p;
      p.id = row.id;
      const json pj = parse_or_empty(row.json);
      const json plan = pj.value("plan", json::object());
      const json prov = pj.value("provenance", json::object());
      p.domain = str(pj, "domain");
      p.sku = str(prov, "sku");
      if (plan.contains("workload") && plan["workload"].is_object()) {
        add_cases(p.affected, p.objs, plan["workload"].value("affected", json()));
        add_cases(p.heldout, p.objs, plan["workload"].value("heldout", json()));
      }
      p.props = {{"id", p.id},
                 {"domain", p.domain},
                 {"key", str(pj, "key")},
                 {"status", row.status},
                 {"sku", p.sku},
                 {"change", change_text(pj)},
                 {"why", str(plan, "why")},
                 {"fingerprint", str(pj, "fingerprint")},
                 {"created_at", row.created_at},
                 {"run_id", row.run_id ? json(*row.run_id) : json(nullptr)}};
      props[p.id] = std::move(p);
    }
  }
  struct Gate {
    int64_t id, proposal;
    std::string gate, metric;
    bool passed;
    std::optional<double> value, threshold;
    json detail;
    std::optional<int64_t> run;
    std::string at;
  };
  std::vector<Gate> gates;
  {
    auto& q = st.prepare(
        "SELECT id, proposal_id, gate, passed, metric, value, threshold, detail_json, run_id, created_at FROM gate_results ORDER BY id");
    while (q.step())
      gates.push_back({q.column_int64(0), q.column_int64(1), q.column_text(2), q.column_text(4), q.column_int64(3) != 0,
                       q.column_opt_double(5), q.column_opt_double(6), parse_or_empty(q.column_text(7)), q.column_opt_int64(8),
                       q.column_text(9)});
    q.reset();
  }
  // Measured case ids recorded by the gates complete the plan's workload (serve/alloc ids).
  for (const auto& gr : gates) {
    auto it = props.find(gr.proposal);
    if (it == props.end() || !gr.detail.contains("cases")) continue;
    if (gr.gate == "performance") add_cases(it->second.affected, it->second.objs, gr.detail["cases"]);
    if (gr.gate == "heldout") add_cases(it->second.heldout, it->second.objs, gr.detail["cases"]);
  }
  auto sku_node = [&](const std::string& sku) {
    const std::string ref = "sku:" + sku;
    if (!g.nodes.count(ref)) g.node(ref, "sku", sku, {{"sku", sku}});
    return ref;
  };
  auto case_node = [&](const std::string& id, const json& obj) {
    const std::string ref = "case:" + id;
    json cp = {{"id", id}, {"op", case_op(id, obj)}};
    for (const char* k : {"variant", "shape", "dtype"})
      if (obj.is_object() && obj.contains(k)) cp[k] = obj[k];
    if (!g.nodes.count(ref)) g.node(ref, "bench_case", id, cp);
    return ref;
  };
  for (auto& [id, p] : props) {
    const std::string pref = "proposal:" + std::to_string(id);
    std::vector<std::string> ops;
    for (const auto& c : p.affected) {
      const std::string op = case_op(c, p.objs.count(c) ? p.objs[c] : json());
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
    }
    const std::string key = p.props["key"];
    if (ops.empty() && p.domain == "tuner" && key.find('|') != std::string::npos) ops.push_back(key.substr(0, key.find('|')));
    p.props["ops"] = ops;
    const std::string change = p.props["change"];
    g.node(pref, "proposal", "#" + std::to_string(id) + " " + p.domain + ": " + (change.empty() ? key : change), p.props);
    if (!p.sku.empty()) g.edge(pref, sku_node(p.sku), "measured_on");
    for (const auto& c : p.affected) g.edge(pref, case_node(c, p.objs.count(c) ? p.objs[c] : json()), "targets");
    for (const auto& c : p.heldout) g.edge(pref, case_node(c, p.objs.count(c) ? p.objs[c] : json()), "held_out");
  }
  for (const auto& gr : gates) {
    if (!props.count(gr.proposal)) continue;
    const Prop& p = props[gr.proposal];
    const std::string pref = "proposal:" + std::to_string(gr.proposal);
    const std::string gref = "gate:" + std::to_string(gr.id);
    const std::string reason = gate_reason(gr.gate, gr.passed, gr.detail);
    json gp = {{"gate_id", gr.id},
               {"proposal_id", gr.proposal},
               {"gate", gr.gate},
               {"passed", gr.passed},
               {"metric", gr.metric},
               {"value", gr.value ? json(*gr.value) : json(nullptr)},
               {"threshold", gr.threshold ? json(*gr.threshold) : json(nullptr)},
               {"reason", reason},
               {"detail", gr.detail},
               {"run_id", gr.run ? json(*gr.run) : json(nullptr)},
               {"created_at", gr.at}};
    std::string label = gr.gate + (gr.passed ? " pass" : gate_undecided(gr.gate, false, gr.detail) ? " undecided" : " FAIL");
    if (gr.value && gr.gate != "approval")
      label += "\n" + gr.metric + " " + fmt("%.3g", *gr.value) + (gr.threshold ? " (bound " + fmt("%.3g", *gr.threshold) + ")" : "");
    g.node(gref, "gate_result", label, gp);
    g.edge(pref, gref, "gated_by");
    // A performance or held-out gate measured a change: its metric delta.
    if ((gr.gate == "performance" || gr.gate == "heldout") && gr.detail.contains("improvement")) {
      // No CI (too few rounds: "ci" null): the delta has none either, not a zero-width one.
      const json ci = gr.detail.value("ci", json::array());
      const bool no_ci = gr.detail.value("too_few_rounds", false) || ci.is_null();
      const json lo = no_ci ? json(nullptr)
                            : json(ci.is_array() && ci.size() == 2 ? ci[0].get<double>() : num(gr.detail, "improvement"));
      const json hi = no_ci ? json(nullptr)
                            : json(ci.is_array() && ci.size() == 2 ? ci[1].get<double>() : num(gr.detail, "improvement"));
      const std::string workload = gr.gate == "performance" ? "affected" : "heldout";
      const std::string dref = "delta:" + std::to_string(gr.id);
      json dp = {{"proposal_id", gr.proposal},
                 {"gate_id", gr.id},
                 {"workload", workload},
                 {"metric", "time_saved_frac"},
                 {"improvement", num(gr.detail, "improvement")},
                 {"ci_lo", lo},
                 {"ci_hi", hi},
                 {"ratio", num(gr.detail, "ratio", 1)},
                 {"p", num(gr.detail, "p", 1)},
                 {"n_base", num(gr.detail, "n_base")},
                 {"n_cand", num(gr.detail, "n_cand")}};
      g.node(dref, "metric_delta",
             workload + " " + stats::kTimeRatioLabel + " " + stats::format_time_ratio(1 - num(gr.detail, "improvement")) + "\n" +
                 (no_ci ? std::string("no CI (too few rounds)")
                        : "95% CI [" + stats::format_time_ratio(1 - hi.get<double>()) + ", " +
                              stats::format_time_ratio(1 - lo.get<double>()) + "]"),
             dp);
      g.edge(pref, dref, "moved");
      g.edge(dref, gref, "judged_by");
      for (const auto& c : workload == "affected" ? p.affected : p.heldout)
        g.edge(dref, "case:" + c, "of");
    }
  }
  {
    auto& q = st.prepare(
        "SELECT id, proposal_id, target, key, from_version, to_version, action, actor, created_at FROM evolve_deployments ORDER BY id");
    while (q.step()) {
      const int64_t id = q.column_int64(0);
      const auto pid = q.column_opt_int64(1);
      const std::string key = q.column_text(3), action = q.column_text(6);
      const auto fv = q.column_opt_int64(4), tv = q.column_opt_int64(5);
      auto vt = [](const std::optional<int64_t>& v) { return v ? "v" + std::to_string(*v) : std::string("defaults"); };
      const std::string dref = "deployment:" + std::to_string(id);
      g.node(dref, "deployment", action + " " + vt(fv) + " -> " + vt(tv) + " (" + q.column_text(7) + ")",
             {{"id", id},
              {"proposal_id", pid ? json(*pid) : json(nullptr)},
              {"target", q.column_text(2)},
              {"key", key},
              {"from_version", fv ? json(*fv) : json(nullptr)},
              {"to_version", tv ? json(*tv) : json(nullptr)},
              {"action", action},
              {"actor", q.column_text(7)},
              {"created_at", q.column_text(8)}});
      std::string sku;
      if (pid && props.count(*pid)) {
        g.edge(dref, "proposal:" + std::to_string(*pid), action == "rollback" ? "rolls_back" : "deploys");
        sku = props[*pid].sku;
      }
      if (sku.empty() && key.find('|') != std::string::npos) sku = key.substr(key.rfind('|') + 1);
      if (!sku.empty()) g.edge(dref, sku_node(sku), "on");
    }
    q.reset();
  }
  return g;
}

/// The stored graph (this module's kinds), loaded for queries and export.
struct Loaded {
  struct N {
    int64_t id;
    std::string kind, ref, label;
    json props;
  };
  std::vector<N> nodes;                          // by kg_nodes.id
  std::map<int64_t, size_t> by_id;
  std::vector<std::tuple<int64_t, int64_t, std::string>> edges;  // src id, dst id, kind
  std::multimap<int64_t, std::pair<int64_t, std::string>> out;   // src -> (dst, kind)
  std::multimap<int64_t, std::pair<int64_t, std::string>> in;    // dst -> (src, kind)
  const N& at(int64_t id) const { return nodes[by_id.at(id)]; }
};

Loaded load(store::Store& st) {
  Loaded l;
  auto& q = st.prepare("SELECT id, kind, ref, label, props_json FROM kg_nodes ORDER BY id");
  while (q.step()) {
    if (!owned(node_kinds(), q.column_text(1))) continue;
    l.by_id[q.column_int64(0)] = l.nodes.size();
    l.nodes.push_back({q.column_int64(0), q.column_text(1), q.column_text(2), q.column_text(3), parse_or_empty(q.column_text(4))});
  }
  q.reset();
  auto& e = st.prepare("SELECT src, dst, kind FROM kg_edges ORDER BY id");
  while (e.step()) {
    const int64_t s = e.column_int64(0), d = e.column_int64(1);
    if (!owned(edge_kinds(), e.column_text(2)) || !l.by_id.count(s) || !l.by_id.count(d)) continue;
    l.edges.emplace_back(s, d, e.column_text(2));
    l.out.insert({s, {d, e.column_text(2)}});
    l.in.insert({d, {s, e.column_text(2)}});
  }
  e.reset();
  return l;
}

/// An op filter names the op ("matmul_forward") or its stem before the direction ("matmul").
bool op_matches(const std::string& op, const std::string& filter) {
  return op == filter || (op.size() > filter.size() && op.compare(0, filter.size(), filter) == 0 && op[filter.size()] == '_');
}

/// Statuses of a proposal that passed every gate (then maybe approved, promoted, replaced, rolled back).
bool validated(const std::string& status) {
  return status == "passed" || status == "approved" || status == "promoted" || status == "superseded" || status == "rolled_back";
}

/// A proposal node matches the filters (op or op stem among its ops, SKU case-insensitive substring,
/// domain exact, id).
bool matches(const json& p, const std::string& op, const std::string& sku, const std::string& domain, int64_t id) {
  if (id && p.value("id", int64_t(0)) != id) return false;
  if (!domain.empty() && str(p, "domain") != domain) return false;
  if (!sku.empty() && lower(str(p, "sku")).find(lower(sku)) == std::string::npos) return false;
  if (!op.empty()) {
    bool any = false;
    for (const auto& o : p.value("ops", json::array()))
      if (o.is_string() && op_matches(o.get<std::string>(), op)) any = true;
    if (!any) return false;
  }
  return true;
}

}  // namespace

std::string gate_reason_text(const std::string& gate, bool passed, const json& detail) {
  return gate_reason(gate, passed, detail.is_object() ? detail : json::object());
}

const std::vector<std::string>& kg_questions() {
  static const std::vector<std::string> q = {"improved", "hurt-determinism", "failed"};
  return q;
}

void kg_sync(store::Store& st) {
  store::Transaction tx(st);
  const Desired want = derive(st);
  // Existing rows of our kinds: ref -> (id, label, props).
  std::map<std::string, std::tuple<int64_t, std::string, std::string, std::string>> have;
  {
    auto& q = st.prepare("SELECT id, kind, ref, label, props_json FROM kg_nodes");
    while (q.step())
      if (owned(node_kinds(), q.column_text(1)))
        have[q.column_text(2)] = {q.column_int64(0), q.column_text(1), q.column_text(3), q.column_text(4)};
    q.reset();
  }
  std::map<std::string, int64_t> ids;
  auto& del_node = st.prepare("DELETE FROM kg_nodes WHERE id = ?1");
  for (const auto& [ref, row] : have) {
    auto it = want.nodes.find(ref);
    if (it == want.nodes.end() || it->second.kind != std::get<1>(row)) {
      del_node.bind(1, std::get<0>(row));
      del_node.run();
    }
  }
  auto& ins = st.prepare(
      "INSERT INTO kg_nodes(kind, ref, label, props_json) VALUES (?1, ?2, ?3, ?4) "
      "ON CONFLICT(kind, ref) DO UPDATE SET label = excluded.label, props_json = excluded.props_json");
  auto& upd = st.prepare("UPDATE kg_nodes SET label = ?2, props_json = ?3 WHERE id = ?1");
  for (const auto& [ref, n] : want.nodes) {
    const std::string pj = n.props.dump();
    auto h = have.find(ref);
    if (h != have.end() && std::get<1>(h->second) == n.kind) {
      ids[ref] = std::get<0>(h->second);
      if (std::get<2>(h->second) != n.label || std::get<3>(h->second) != pj) {
        upd.bind(1, std::get<0>(h->second)).bind(2, n.label).bind(3, pj);
        upd.run();
      }
      continue;
    }
    ins.bind(1, n.kind).bind(2, ref).bind(3, n.label).bind(4, pj);
    ins.run();
    auto& idq = st.prepare("SELECT id FROM kg_nodes WHERE kind = ?1 AND ref = ?2");
    idq.bind(1, n.kind).bind(2, ref);
    if (!idq.step()) throw_internal("knowledge graph node '" + ref + "' missing right after insert", "kg_sync");
    ids[ref] = idq.column_int64(0);
    idq.reset();
  }
  // Edges: keep the wanted ones, delete the rest of our kinds, insert the missing.
  std::set<std::tuple<int64_t, int64_t, std::string>> want_e;
  for (const auto& e : want.edges) {
    auto s = ids.find(e.src), d = ids.find(e.dst);
    if (s == ids.end() || d == ids.end()) continue;  // an endpoint not derived (cannot happen for sync'd refs)
    want_e.insert({s->second, d->second, e.kind});
  }
  std::set<std::tuple<int64_t, int64_t, std::string>> have_e;
  {
    std::vector<int64_t> stale;
    auto& q = st.prepare("SELECT id, src, dst, kind FROM kg_edges");
    while (q.step()) {
      const std::string k = q.column_text(3);
      if (!owned(edge_kinds(), k)) continue;
      auto t = std::make_tuple(q.column_int64(1), q.column_int64(2), k);
      if (want_e.count(t)) have_e.insert(t);
      else stale.push_back(q.column_int64(0));
    }
    q.reset();
    auto& del = st.prepare("DELETE FROM kg_edges WHERE id = ?1");
    for (int64_t id : stale) {
      del.bind(1, id);
      del.run();
    }
  }
  auto& ie = st.prepare("INSERT OR IGNORE INTO kg_edges(src, dst, kind) VALUES (?1, ?2, ?3)");
  for (const auto& t : want_e) {
    if (have_e.count(t)) continue;
    ie.bind(1, std::get<0>(t)).bind(2, std::get<1>(t)).bind(3, std::get<2>(t));
    ie.run();
  }
  tx.commit();
}

json kg_query(store::Store& st, const KgQuery& q) {
  const auto& qs = kg_questions();
  if (std::find(qs.begin(), qs.end(), q.question) == qs.end())
    throw_input("unknown knowledge-graph question '" + q.question + "'", "kg query",
                "ask one of: improved (what improved <op> on <SKU>?), hurt-determinism (which changes hurt "
                "determinism?), failed (what failed which gate and why?)");
  if (q.limit == 0) throw_input("limit must be at least 1", "kg query --limit");
  if (!q.gate.empty() && q.question != "failed")
    throw_input("the gate filter applies to the question 'failed' only", "kg query --gate", "drop --gate or ask 'failed'");
  kg_sync(st);
  const Loaded g = load(st);
  json filters = json::object();
  for (const auto& [k, v] : {std::pair<const char*, const std::string&>{"op", q.op}, {"sku", q.sku}, {"gate", q.gate}, {"domain", q.domain}})
    if (!v.empty()) filters[k] = v;
  json rows = json::array();
  // Proposals newest first.
  std::vector<const Loaded::N*> props;
  for (const auto& n : g.nodes)
    if (n.kind == "proposal" && matches(n.props, q.op, q.sku, q.domain, 0)) props.push_back(&n);
  std::sort(props.begin(), props.end(),
            [](const Loaded::N* a, const Loaded::N* b) { return a->props.value("id", int64_t(0)) > b->props.value("id", int64_t(0)); });
  for (const Loaded::N* p : props) {
    if (rows.size() >= q.limit) break;
    // The proposal's gates, newest row last.
    std::vector<const Loaded::N*> gates;
    auto range = g.out.equal_range(p->id);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second.second == "gated_by") gates.push_back(&g.at(it->second.first));
    std::sort(gates.begin(), gates.end(), [](const Loaded::N* a, const Loaded::N* b) {
      return a->props.value("gate_id", int64_t(0)) < b->props.value("gate_id", int64_t(0));
    });
    const json& pp = p->props;
    json base = {{"proposal_id", pp.value("id", int64_t(0))}, {"domain", str(pp, "domain")}, {"key", str(pp, "key")},
                 {"change", str(pp, "change")},           {"ops", pp.value("ops", json::array())},
                 {"sku", str(pp, "sku")},                  {"status", str(pp, "status")}};
    if (q.question == "failed") {
      for (const Loaded::N* gn : gates) {
        const json& gp = gn->props;
        if (gp.value("passed", true) || (!q.gate.empty() && str(gp, "gate") != q.gate)) continue;
        if (rows.size() >= q.limit) break;
        json r = base;
        r["gate"] = str(gp, "gate");
        r["metric"] = str(gp, "metric");
        r["value"] = gp.value("value", json(nullptr));
        r["threshold"] = gp.value("threshold", json(nullptr));
        r["reason"] = str(gp, "reason");
        // Not passed without a verdict (the host's noise or too few rounds), not a measured failure.
        r["undecided"] = gate_undecided(str(gp, "gate"), false, gp.value("detail", json::object()));
        rows.push_back(r);
      }
      continue;
    }
    const std::string want_gate = q.question == "improved" ? "performance" : "determinism";
    const Loaded::N* last = nullptr;  // the latest judgement of that gate
    for (const Loaded::N* gn : gates)
      if (str(gn->props, "gate") == want_gate) last = gn;
    if (!last) continue;
    const json& gp = last->props;
    const bool passed = gp.value("passed", false);
    if (q.question == "improved") {
      if (!passed || !validated(str(pp, "status"))) continue;
      // The metric delta this gate judged.
      const Loaded::N* delta = nullptr;
      auto dr = g.in.equal_range(last->id);
      for (auto it = dr.first; it != dr.second; ++it)
        if (it->second.second == "judged_by") delta = &g.at(it->second.first);
      const json dp = delta ? delta->props : json::object();
      // "Improved" means measured faster: a gate with a "no regression" threshold (memory) passes
      // a change that measured slower, and one without a metric delta measured nothing.
      if (!(num(dp, "improvement") > 0)) continue;
      json r = base;
      r["improvement"] = num(dp, "improvement");
      r["ci_lo"] = num(dp, "ci_lo");
      r["ci_hi"] = num(dp, "ci_hi");
      r["p"] = num(dp, "p", 1);
      r["threshold"] = gp.value("threshold", json(nullptr));
      r["promoted"] = str(pp, "status") == "promoted";
      json cases = json::array();
      if (delta) {
        auto cr = g.out.equal_range(delta->id);
        for (auto it = cr.first; it != cr.second; ++it)
          if (it->second.second == "of") cases.push_back(g.at(it->second.first).label);
      }
      r["cases"] = cases;
      rows.push_back(r);
    } else {
      if (passed) continue;
      json r = base;
      r["max_rel_err"] = gp.value("value", json(nullptr));
      r["bound"] = gp.value("threshold", json(nullptr));
      r["reason"] = str(gp, "reason");
      rows.push_back(r);
    }
  }
  return {{"question", q.question}, {"filters", filters}, {"rows", rows}};
}

std::string kg_format_text(const json& answer) {
  std::ostringstream s;
  const std::string q = answer.value("question", "");
  const json& rows = answer.at("rows");
  std::string f;
  const json filters = answer.value("filters", json::object());
  for (const auto& [k, v] : filters.items()) f += " " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  s << "kg query " << q << (f.empty() ? "" : " (" + f.substr(1) + ")") << ": " << rows.size() << " row"
    << (rows.size() == 1 ? "" : "s") << "\n";
  for (const auto& r : rows) {
    std::string ops;
    const json ops_j = r.value("ops", json::array());
    for (const auto& o : ops_j) ops += (ops.empty() ? "" : ",") + o.get<std::string>();
    s << "#" << r.value("proposal_id", int64_t(0)) << " [" << str(r, "domain") << "] " << (ops.empty() ? "-" : ops) << "  "
      << str(r, "change") << "\n    ";
    if (q == "improved")
      s << stats::kTimeRatioLabel << " " << stats::format_saving_as_time_ratio(num(r, "improvement"), num(r, "ci_lo"), num(r, "ci_hi"))
        << " (95% CI, p=" << fmt("%.3g", num(r, "p")) << ", threshold " << stats::format_time_ratio(1 - num(r, "threshold"))
        << "), status " << str(r, "status");
    else if (q == "hurt-determinism")
      s << "max rel err " << fmt("%.3g", num(r, "max_rel_err")) << " (bound " << fmt("%.3g", num(r, "bound")) << "): "
        << str(r, "reason");
    else
      s << str(r, "gate") << (r.value("undecided", false) ? " undecided: " : " FAIL: ") << str(r, "metric") << " " << fmt("%.4g", num(r, "value")) << " (threshold "
        << fmt("%.4g", num(r, "threshold")) << "): " << str(r, "reason");
    s << "\n    on " << str(r, "sku") << "\n";
  }
  return s.str();
}

json kg_graph(store::Store& st, const KgExportFilter& f) {
  kg_sync(st);
  const Loaded g = load(st);
  const bool all = !f.proposal && f.sku.empty() && f.op.empty() && f.domain.empty();
  std::set<int64_t> keep;
  if (all) {
    for (const auto& n : g.nodes) keep.insert(n.id);
  } else {
    for (const auto& n : g.nodes) {
      if (n.kind != "proposal" || !matches(n.props, f.op, f.sku, f.domain, f.proposal)) continue;
      keep.insert(n.id);
      auto r = g.out.equal_range(n.id);
      for (auto it = r.first; it != r.second; ++it) {
        keep.insert(it->second.first);
        if (it->second.second == "moved") {
          auto r2 = g.out.equal_range(it->second.first);
          for (auto j = r2.first; j != r2.second; ++j) keep.insert(j->second.first);
        }
      }
      auto ri = g.in.equal_range(n.id);  // deployments of it and their SKU
      for (auto it = ri.first; it != ri.second; ++it) {
        keep.insert(it->second.first);
        auto r2 = g.out.equal_range(it->second.first);
        for (auto j = r2.first; j != r2.second; ++j) keep.insert(j->second.first);
      }
    }
    if (f.proposal && keep.empty())
      throw_input("no proposal " + std::to_string(f.proposal) + " in the knowledge graph" +
                      (f.sku.empty() && f.op.empty() && f.domain.empty() ? "" : " matching the other filters"),
                  "kg export --proposal", "list proposals with `rtx-evolve status`");
  }
  json nodes = json::array(), edges = json::array();
  for (const auto& n : g.nodes)
    if (keep.count(n.id)) nodes.push_back({{"id", n.id}, {"kind", n.kind}, {"ref", n.ref}, {"label", n.label}, {"props", n.props}});
  for (const auto& [s, d, k] : g.edges)
    if (keep.count(s) && keep.count(d)) edges.push_back({{"src", g.at(s).ref}, {"dst", g.at(d).ref}, {"kind", k}});
  return {{"schema", "rtx.kg.v1"}, {"nodes", nodes}, {"edges", edges}};
}

std::string dot_quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (c == '\r') continue;
    else o += c;
  }
  return o + "\"";
}

namespace {

std::string to_dot(const json& graph) {
  std::ostringstream s;
  s << "digraph rtx_kg {\n"
       "  graph [rankdir=LR, fontname=\"Helvetica\", label=\"rtx-evolve knowledge graph\", labelloc=t];\n"
       "  node [fontname=\"Helvetica\", fontsize=10, style=filled];\n"
       "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n";
  for (const auto& n : graph.at("nodes")) {
    const std::string kind = n.at("kind").get<std::string>();
    std::string shape = "plaintext", color = "#eeeeee";
    if (kind == "proposal") shape = "box", color = "#cfe2ff";
    else if (kind == "bench_case") shape = "ellipse", color = "#fff3c4";
    else if (kind == "sku") shape = "house", color = "#e2d4f0";
    else if (kind == "metric_delta") shape = "diamond", color = "#d9f2f2";
    else if (kind == "deployment") shape = "cds", color = "#ffd8b0";
    else if (kind == "gate_result") {
      shape = "octagon";
      // Green pass, red failure, amber a gate that reached no verdict (gate_verdict).
      const std::string v = gate_verdict(n.value("props", json::object()));
      color = v == "pass" ? "#c8f0c8" : v == "undecided" ? "#fde8b0" : "#f5c2c2";
    }
    s << "  " << dot_quote(n.at("ref").get<std::string>()) << " [label=" << dot_quote(n.at("label").get<std::string>())
      << ", shape=" << shape << ", fillcolor=" << dot_quote(color) << ", tooltip=" << dot_quote(kind) << "];\n";
  }
  for (const auto& e : graph.at("edges"))
    s << "  " << dot_quote(e.at("src").get<std::string>()) << " -> " << dot_quote(e.at("dst").get<std::string>())
      << " [label=" << dot_quote(e.at("kind").get<std::string>()) << "];\n";
  s << "}\n";
  return s.str();
}

}  // namespace

std::string kg_render(const json& graph, const std::string& format) {
  if (format == "json") return graph.dump(2) + "\n";
  if (format != "dot" && format != "svg")
    throw_input("unknown export format '" + format + "'", "kg export --format", "one of dot, svg, json");
  const std::string dot = to_dot(graph);
  if (format == "dot") return dot;
#ifdef RTX_HAVE_GRAPHVIZ
  struct Ctx {
    GVC_t* gvc = gvContext();
    Agraph_t* g = nullptr;
    bool laid_out = false;
    ~Ctx() {
      if (g && laid_out) gvFreeLayout(gvc, g);
      if (g) agclose(g);
      if (gvc) gvFreeContext(gvc);
    }
  } c;
  if (!c.gvc) throw_env("Graphviz context could not be created", "kg export --format svg");
  c.g = agmemread(dot.c_str());
  if (!c.g) throw_internal("libgvc could not parse the generated dot text", "kg export --format svg", "export --format dot and report it");
  if (gvLayout(c.gvc, c.g, "dot") != 0)
    throw_env("Graphviz has no usable 'dot' layout plugin", "kg export --format svg",
              "install graphviz's plugins (Debian: libgvc6) and run `dot -c` as root, or export --format dot");
  c.laid_out = true;
  char* buf = nullptr;
  unsigned int len = 0;
  if (gvRenderData(c.gvc, c.g, "svg", &buf, &len) != 0 || !buf)
    throw_env("Graphviz has no 'svg' render plugin", "kg export --format svg", "run `dot -c` as root, or export --format dot");
  std::string out(buf, len);
  gvFreeRenderData(buf);
  return out;
#else
  throw_env("this rtx was built without Graphviz (libgvc), so it cannot lay out SVG", "kg export --format svg",
            "install libgraphviz-dev and rebuild, or export --format dot and run `dot -Tsvg`");
#endif
}

}  // namespace rtx::evolve
