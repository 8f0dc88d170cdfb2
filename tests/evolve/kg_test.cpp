// The rtx-evolve knowledge graph on a hand-built store: idempotent sync (and following changes),
// the three questions with filters, dot/svg/json export (dot parsed by libgvc), bad input, CLI.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#ifdef RTX_HAVE_GRAPHVIZ
#include <graphviz/cgraph.h>
#endif

#include "rtx/core/error.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/gates.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/evolve/proposal.hpp"
#include "test_util.hpp"

using namespace rtx::evolve;
using nlohmann::json;

namespace {

json kcase(const std::string& id, const std::string& op) {
  return {{"id", id}, {"op", op}, {"variant", "cpu.vec"}, {"shape", {{"N", 7}}}, {"dtype", "f32"}};
}

Proposal make(const std::string& domain, const std::string& key, const std::string& sku, const json& workload) {
  Proposal p;
  p.domain = domain;
  p.target = target_of(domain);
  p.key = key;
  p.plan = {{"why", "test"}, {"workload", workload}};
  p.actions = json::array({{{"set", "x"}, {"from", 1}, {"to", 2}}});
  p.changeset = {{"base_version", nullptr}, {"base", {{"x", 1}}}, {"candidate", {{"x", 2}}}};
  p.rollback = {{"command", "rtx-evolve rollback <ID>"}, {"restore_version", nullptr}};
  p.provenance = {{"git_sha", "abc"}, {"sku", sku}, {"code_sha256", "0"}, {"data_sha256", "0"}, {"env_sha256", "0"},
                  {"seeds", {{"seed", 0}}}};
  p.fingerprint = make_fingerprint(domain, key, p.changeset["candidate"]);
  return p;
}

GateResult perf(bool pass, double imp, double lo, double hi, double thr, const json& cases, const char* gate = "performance") {
  return GateResult{gate, pass, "improvement_ci_lo", lo, thr,
                    {{"improvement", imp}, {"ci", {lo, hi}}, {"p", 0.01}, {"ratio", 1 - imp}, {"n_base", 8}, {"n_cand", 8},
                     {"cases", cases}, {"reason", pass ? "above threshold" : "below the threshold"}}};
}
GateResult det(bool pass, double err, double bound, const json& failures = json::array()) {
  return GateResult{"determinism", pass, "max_rel_err", err, bound,
                    {{"candidate_runs_identical", true}, {"reference_check", pass ? "ok" : "failed"}, {"failures", failures}}};
}
GateResult ok(const char* gate) { return GateResult{gate, true, "m", 1, 2, {{"reason", "fine"}}}; }

/// A store with five proposals:
///  1 tuner matmul on cpu:skuA: every gate passed (status passed);
///  2 parallelism (matmul + gelu cases) on cpu:skuB: passed, approved, promoted (1 deployment);
///  3 tuner gelu on cpu:skuA: performance passed, determinism FAILED;
///  4 memory on cpu:skuA: safety FAILED (trial killed);
///  5 scheduler on cpu:skuA: performance and heldout FAILED.
struct Fixture {
  std::string dir = rtx::test::temp_dir();
  std::string db = dir + "/rtx.db";
  rtx::store::Store st{db};
  KeyPair key = generate_key(dir + "/k", false);
  int64_t p1 = 0, p2 = 0, p3 = 0, p4 = 0, p5 = 0;
  size_t n_gates = 0, n_deltas = 0;

  int64_t add(Proposal p, const std::vector<GateResult>& g, const char* status) {
    sign(p, key);
    const int64_t id = insert_proposal(st, p, 0);
    record_gates(st, id, 0, g);
    set_status(st, id, status);
    n_gates += g.size();
    for (const auto& r : g)
      if (r.gate == "performance" || r.gate == "heldout") ++n_deltas;
    return id;
  }

  Fixture() {
    const json mm = kcase("matmul_fwd/K=8/f32", "matmul_forward"), mm_h = kcase("heldout:matmul_forward/K=1/f32", "matmul_forward");
    const json ge = kcase("gelu_fwd/N=127/f32", "gelu_forward"), ge_h = kcase("heldout:gelu_forward/N=1/f32", "gelu_forward");
    p1 = add(make("tuner", "matmul_forward|cpu.blocked|K=8|f32|cpu|cpu:skuA", "cpu:skuA",
                  {{"affected", {mm}}, {"heldout", {mm_h}}}),
             {det(true, 1e-7, 1e-5), perf(true, 0.20, 0.12, 0.28, 0.10, {mm["id"]}),
              perf(true, 0.01, -0.02, 0.04, -0.05, {mm_h["id"]}, "heldout"), ok("memory"), ok("safety")},
             "passed");
    p2 = add(make("parallelism", "parallelism|cpu:skuB", "cpu:skuB", {{"affected", {mm, ge}}, {"heldout", json::array()}}),
             {det(true, 2e-7, 1e-5), perf(true, 0.15, 0.11, 0.19, 0.10, {mm["id"], ge["id"]}), ok("memory"), ok("safety")},
             "passed");
    approve(st, p2, "tester", "manual");
    ++n_gates;  // the approval gate
    promote(st, p2, key, "tester");
    p3 = add(make("tuner", "gelu_forward|cpu.vec|N=127|f32|cpu|cpu:skuA", "cpu:skuA", {{"affected", {ge}}, {"heldout", {ge_h}}}),
             {det(false, 3e-3, 1e-5, {"gelu_fwd/N=127/f32: max rel err 3e-3 > 1e-5"}),
              perf(true, 0.30, 0.20, 0.40, 0.10, {ge["id"]}), ok("memory"), ok("safety")},
             "failed");
    p4 = add(make("memory", "memory|cpu:skuA", "cpu:skuA", {{"affected", {{"steps", 20}}}}),
             {GateResult{"safety", false, "sandbox_failures", 1, 0,
                         {{"failures", {"candidate trial 1: killed by signal 9 (SIGKILL)"}}, {"signature", "verified"}}}},
             "failed");
    p5 = add(make("scheduler", "scheduler|cpu:skuA", "cpu:skuA", {{"affected", {{"requests", 8}}}}),
             {det(true, 0, 0), perf(false, 0.02, -0.10, 0.14, 0.15, {"serve:tiny/req=8"}),
              perf(false, -0.20, -0.30, -0.10, -0.05, {"serve:tiny/req=3"}, "heldout"), ok("memory"), ok("safety")},
             "failed");
  }

  int64_t count(const std::string& sql) {
    auto& q = st.prepare(sql);
    REQUIRE(q.step());
    const int64_t n = q.column_int64(0);
    q.reset();
    return n;
  }
  int64_t nodes(const std::string& kind) { return count("SELECT COUNT(*) FROM kg_nodes WHERE kind = '" + kind + "'"); }
  int64_t edges(const std::string& kind) { return count("SELECT COUNT(*) FROM kg_edges WHERE kind = '" + kind + "'"); }
};

std::vector<int64_t> ids(const json& answer) {
  std::vector<int64_t> v;
  for (const auto& r : answer.at("rows")) v.push_back(r.at("proposal_id").get<int64_t>());
  return v;
}

json ask(Fixture& f, const std::string& q, const std::string& op = "", const std::string& sku = "", const std::string& gate = "",
         const std::string& domain = "") {
  KgQuery k;
  k.question = q;
  k.op = op;
  k.sku = sku;
  k.gate = gate;
  k.domain = domain;
  return kg_query(f.st, k);
}

bool has_node(const json& g, const std::string& ref) {
  for (const auto& n : g["nodes"])
    if (n["ref"] == ref) return true;
  return false;
}

}  // namespace

TEST_CASE("evolve kg: sync materializes the vocabulary and is idempotent", "[cpu]") {
  Fixture f;
  kg_sync(f.st);
  CHECK(f.nodes("proposal") == 5);
  CHECK(f.nodes("sku") == 2);
  CHECK(f.nodes("gate_result") == static_cast<int64_t>(f.n_gates));
  CHECK(f.nodes("metric_delta") == static_cast<int64_t>(f.n_deltas));
  CHECK(f.nodes("deployment") == 1);
  // Cases: matmul, matmul heldout, gelu, gelu heldout, serve req=8, serve req=3 (the memory
  // proposal's workload has no case id and its only gate recorded none).
  CHECK(f.nodes("bench_case") == 6);
  CHECK(f.edges("measured_on") == 5);
  CHECK(f.edges("gated_by") == static_cast<int64_t>(f.n_gates));
  CHECK(f.edges("moved") == static_cast<int64_t>(f.n_deltas));
  CHECK(f.edges("judged_by") == static_cast<int64_t>(f.n_deltas));
  CHECK(f.edges("targets") == 1 + 2 + 1 + 0 + 1);
  CHECK(f.edges("held_out") == 1 + 0 + 1 + 0 + 1);
  CHECK(f.edges("of") == 1 + 1 + 2 + 1 + 1 + 1);
  CHECK(f.edges("deploys") == 1);
  CHECK(f.edges("on") == 1);
  const int64_t n_nodes = f.count("SELECT COUNT(*) FROM kg_nodes"), n_edges = f.count("SELECT COUNT(*) FROM kg_edges");
  const int64_t id_sum = f.count("SELECT SUM(id) FROM kg_nodes"), max_edge = f.count("SELECT MAX(id) FROM kg_edges");
  kg_sync(f.st);
  CHECK(f.count("SELECT COUNT(*) FROM kg_nodes") == n_nodes);
  CHECK(f.count("SELECT COUNT(*) FROM kg_edges") == n_edges);
  CHECK(f.count("SELECT SUM(id) FROM kg_nodes") == id_sum);        // same rows, not re-created
  CHECK(f.count("SELECT MAX(id) FROM kg_edges") == max_edge);

  // The graph follows the tables: a rollback adds a deployment and changes the status; a
  // deleted proposal takes its gates and deltas with it.
  rollback(f.st, f.p2, f.key, "tester");
  f.st.exec("DELETE FROM proposals WHERE id = " + std::to_string(f.p5));
  kg_sync(f.st);
  CHECK(f.nodes("deployment") == 2);
  CHECK(f.edges("rolls_back") == 1);
  CHECK(f.nodes("proposal") == 4);
  CHECK(f.nodes("gate_result") == static_cast<int64_t>(f.n_gates) - 5);
  CHECK(f.nodes("metric_delta") == static_cast<int64_t>(f.n_deltas) - 2);
  CHECK(f.count("SELECT COUNT(*) FROM kg_nodes WHERE kind = 'proposal' AND json_extract(props_json, '$.status') = 'rolled_back'") == 1);
  CHECK(f.count("SELECT COUNT(*) FROM kg_nodes WHERE ref = 'proposal:" + std::to_string(f.p5) + "'") == 0);
  // Dangling edges are impossible (foreign keys) and stale serve cases are gone.
  CHECK(f.count("SELECT COUNT(*) FROM kg_nodes WHERE ref LIKE 'case:serve:%'") == 0);
  CHECK(f.st.integrity_check() == std::vector<std::string>{"ok"});
}

TEST_CASE("evolve kg: what improved <op> on <SKU>?", "[cpu]") {
  Fixture f;
  // p3 passed performance but failed determinism: not an improvement.
  CHECK(ids(ask(f, "improved")) == std::vector<int64_t>{f.p2, f.p1});
  CHECK(ids(ask(f, "improved", "matmul")) == std::vector<int64_t>{f.p2, f.p1});
  CHECK(ids(ask(f, "improved", "matmul_forward")) == std::vector<int64_t>{f.p2, f.p1});
  CHECK(ids(ask(f, "improved", "gelu")) == std::vector<int64_t>{f.p2});
  CHECK(ids(ask(f, "improved", "mat")).empty());  // a stem ends at '_'
  CHECK(ids(ask(f, "improved", "matmul", "skuA")) == std::vector<int64_t>{f.p1});
  CHECK(ids(ask(f, "improved", "", "CPU:SKUB")) == std::vector<int64_t>{f.p2});
  CHECK(ids(ask(f, "improved", "", "", "", "tuner")) == std::vector<int64_t>{f.p1});
  CHECK(ids(ask(f, "improved", "softmax")).empty());
  const json a = ask(f, "improved", "matmul", "skuB");
  REQUIRE(a["rows"].size() == 1);
  const json& r = a["rows"][0];
  CHECK(a["question"] == "improved");
  CHECK(a["filters"] == json{{"op", "matmul"}, {"sku", "skuB"}});
  CHECK(r["improvement"].get<double>() == Approx(0.15));
  CHECK(r["ci_lo"].get<double>() == Approx(0.11));
  CHECK(r["ci_hi"].get<double>() == Approx(0.19));
  CHECK(r["threshold"].get<double>() == Approx(0.10));
  CHECK(r["status"] == "promoted");
  CHECK(r["promoted"] == true);
  CHECK(r["sku"] == "cpu:skuB");
  CHECK(r["ops"] == json({"matmul_forward", "gelu_forward"}));
  CHECK(r["cases"].size() == 2);
  KgQuery lim;
  lim.question = "improved";
  lim.limit = 1;
  CHECK(ids(kg_query(f.st, lim)) == std::vector<int64_t>{f.p2});

  // The memory domain's performance threshold is "no regression" (-5%): its gate passes a change
  // that measured 1.5% slower, and one that measured nothing (0). Neither improved anything; the
  // one that measured 4% faster did.
  const json alloc = {{"id", "alloc:gpt2-small-step"}};
  const int64_t slower = f.add(make("memory", "memory|cpu:skuA", "cpu:skuA", {{"affected", {alloc}}}),
                               {det(true, 0, 0), perf(true, -0.015, -0.03, 0.0, -0.05, {"alloc:gpt2-small-step"}),
                                ok("memory"), ok("safety")},
                               "passed");
  const int64_t flat = f.add(make("memory", "memory|cpu:skuA|b", "cpu:skuA", {{"affected", {alloc}}}),
                             {det(true, 0, 0), perf(true, 0.0, -0.01, 0.01, -0.05, {"alloc:gpt2-small-step"}), ok("memory"),
                              ok("safety")},
                             "passed");
  const int64_t faster = f.add(make("memory", "memory|cpu:skuA|c", "cpu:skuA", {{"affected", {alloc}}}),
                               {det(true, 0, 0), perf(true, 0.04, 0.01, 0.07, -0.05, {"alloc:gpt2-small-step"}),
                                ok("memory"), ok("safety")},
                               "passed");
  CHECK(slower < flat);
  const json mem = ask(f, "improved", "", "", "", "memory");
  REQUIRE(ids(mem) == std::vector<int64_t>{faster});
  CHECK(mem["rows"][0]["improvement"].get<double>() == Approx(0.04));
  CHECK(ids(ask(f, "improved")) == std::vector<int64_t>{faster, f.p2, f.p1});
  const json improved = ask(f, "improved");  // a named value: the loop must not outlive the temporary
  for (const auto& row : improved["rows"]) CHECK(row["improvement"].get<double>() > 0);
}

TEST_CASE("evolve kg: which changes hurt determinism? what failed which gate and why?", "[cpu]") {
  Fixture f;
  const json d = ask(f, "hurt-determinism");
  REQUIRE(ids(d) == std::vector<int64_t>{f.p3});
  CHECK(d["rows"][0]["max_rel_err"].get<double>() == Approx(3e-3));
  CHECK(d["rows"][0]["bound"].get<double>() == Approx(1e-5));
  CHECK_THAT(d["rows"][0]["reason"].get<std::string>(), Catch::Contains("max rel err 3e-3"));
  CHECK(ids(ask(f, "hurt-determinism", "gelu")) == std::vector<int64_t>{f.p3});
  CHECK(ids(ask(f, "hurt-determinism", "matmul")).empty());
  CHECK(ids(ask(f, "hurt-determinism", "", "skuB")).empty());

  const json all = ask(f, "failed");
  REQUIRE(ids(all) == std::vector<int64_t>{f.p5, f.p5, f.p4, f.p3});
  CHECK(all["rows"][0]["gate"] == "performance");
  CHECK(all["rows"][1]["gate"] == "heldout");
  CHECK(all["rows"][2]["gate"] == "safety");
  CHECK_THAT(all["rows"][2]["reason"].get<std::string>(), Catch::Contains("killed by signal 9"));
  CHECK(all["rows"][3]["gate"] == "determinism");
  CHECK(all["rows"][0]["value"].get<double>() == Approx(-0.10));
  CHECK(all["rows"][0]["threshold"].get<double>() == Approx(0.15));
  CHECK(all["rows"][0]["reason"] == "below the threshold");
  CHECK(ids(ask(f, "failed", "", "", "performance")) == std::vector<int64_t>{f.p5});
  CHECK(ids(ask(f, "failed", "", "", "safety", "memory")) == std::vector<int64_t>{f.p4});
  CHECK(ids(ask(f, "failed", "serve")) == std::vector<int64_t>{f.p5, f.p5});
  CHECK(ids(ask(f, "failed", "", "skuB")).empty());
  CHECK(ids(ask(f, "failed", "", "", "memory")).empty());
  const std::string text = kg_format_text(all);
  CHECK_THAT(text, Catch::Contains("kg query failed: 4 rows"));
  CHECK_THAT(text, Catch::Contains("safety FAIL"));
}

TEST_CASE("evolve kg: a gate with too few rounds gives a metric delta without a CI", "[cpu]") {
  Fixture f;
  std::vector<std::vector<double>> base{{1.0, 1.1, 0.9, 1.05}}, cand{{0.5, 0.55, 0.45, 0.5}};
  PerfRule rule = default_rule("parallelism");
  rule.rounds = 2;
  GateResult pg = judge_performance(base, cand, rule).gate();
  REQUIRE(pg.detail["ci"].is_null());
  const int64_t id = f.add(make("parallelism", "parallelism|cpu:skuC", "cpu:skuC", {{"affected", json::array()}}),
                           {det(true, 0, 1e-6), pg, judge_heldout(base, cand, 0.05, 2), ok("safety")}, "failed");
  kg_sync(f.st);
  auto& q = f.st.prepare("SELECT label, props_json FROM kg_nodes WHERE kind = 'metric_delta' AND "
                         "json_extract(props_json, '$.proposal_id') = ?1 ORDER BY id");
  q.bind(1, id);
  int n = 0;
  while (q.step()) {
    ++n;
    const json props = json::parse(q.column_text(1));
    INFO(q.column_text(0) << " " << props.dump());
    CHECK(props["ci_lo"].is_null());  // no zero-width CI at the estimate either
    CHECK(props["ci_hi"].is_null());
    CHECK(props["improvement"].get<double>() > 0.4);
    CHECK_THAT(q.column_text(0), Catch::EndsWith("no CI (too few rounds)"));
  }
  q.reset();
  CHECK(n == 2);  // performance and heldout
  // The questions still answer (too few rounds never passes, so it is not "improved").
  const auto improved = ids(ask(f, "improved"));
  CHECK(std::find(improved.begin(), improved.end(), id) == improved.end());
  const json failed = ask(f, "failed", "", "", "performance");
  bool seen = false;
  for (const auto& r : failed["rows"]) seen = seen || r["proposal_id"] == id;
  CHECK(seen);
}

TEST_CASE("evolve kg: bad questions and formats are input errors", "[cpu]") {
  Fixture f;
  auto category = [](auto&& fn) {
    try {
      fn();
    } catch (const rtx::Error& e) {
      return e.category();
    }
    return rtx::ErrorCategory::Internal;
  };
  const int64_t before = f.count("SELECT COUNT(*) FROM kg_nodes");
  CHECK(category([&] { ask(f, "fastest"); }) == rtx::ErrorCategory::Input);
  try {
    ask(f, "fastest");
  } catch (const rtx::Error& e) {
    CHECK_THAT(e.hint(), Catch::Contains("improved") && Catch::Contains("hurt-determinism") && Catch::Contains("failed"));
  }
  CHECK(f.count("SELECT COUNT(*) FROM kg_nodes") == before);  // nothing synced for a bad question
  CHECK(category([&] { ask(f, "improved", "", "", "performance"); }) == rtx::ErrorCategory::Input);
  KgQuery zero;
  zero.question = "failed";
  zero.limit = 0;
  CHECK(category([&] { kg_query(f.st, zero); }) == rtx::ErrorCategory::Input);
  const json g = kg_graph(f.st, {});
  CHECK(category([&] { kg_render(g, "png"); }) == rtx::ErrorCategory::Input);
  KgExportFilter missing;
  missing.proposal = 999;
  CHECK(category([&] { kg_graph(f.st, missing); }) == rtx::ErrorCategory::Input);
}

TEST_CASE("evolve kg: export as json, dot (parsed by libgvc) and svg, with filters", "[cpu]") {
  Fixture f;
  const json g = kg_graph(f.st, {});
  CHECK(g["schema"] == "rtx.kg.v1");
  CHECK(g["nodes"].size() == static_cast<size_t>(f.count("SELECT COUNT(*) FROM kg_nodes")));
  CHECK(g["edges"].size() == static_cast<size_t>(f.count("SELECT COUNT(*) FROM kg_edges")));
  CHECK(json::parse(kg_render(g, "json")) == g);

  const std::string dot = kg_render(g, "dot");
  CHECK_THAT(dot, Catch::StartsWith("digraph rtx_kg {"));
  CHECK_THAT(dot, Catch::Contains("\"proposal:" + std::to_string(f.p2) + "\" -> \"sku:cpu:skuB\" [label=\"measured_on\"]"));
  CHECK_THAT(dot, Catch::Contains("shape=octagon"));
  CHECK(dot_quote("a\"b\\c\nd") == "\"a\\\"b\\\\c\\nd\"");
#ifdef RTX_HAVE_GRAPHVIZ
  Agraph_t* parsed = agmemread(dot.c_str());
  REQUIRE(parsed != nullptr);
  CHECK(static_cast<size_t>(agnnodes(parsed)) == g["nodes"].size());
  CHECK(static_cast<size_t>(agnedges(parsed)) == g["edges"].size());
  agclose(parsed);
  const std::string svg = kg_render(g, "svg");
  CHECK_THAT(svg, Catch::Contains("<svg"));
  CHECK_THAT(svg, Catch::Contains("#" + std::to_string(f.p2) + " parallelism"));
  CHECK_THAT(svg, Catch::Contains("cpu:skuB"));
  CHECK_THAT(svg, Catch::Contains("gelu_fwd/N=127/f32"));
#else
  try {
    kg_render(g, "svg");
    FAIL("svg without Graphviz must throw");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Environment);
  }
#endif

  KgExportFilter one;
  one.proposal = f.p2;
  const json sub = kg_graph(f.st, one);
  CHECK(has_node(sub, "proposal:" + std::to_string(f.p2)));
  CHECK(has_node(sub, "sku:cpu:skuB"));
  CHECK(has_node(sub, "case:gelu_fwd/N=127/f32"));
  CHECK_FALSE(has_node(sub, "proposal:" + std::to_string(f.p1)));
  CHECK_FALSE(has_node(sub, "sku:cpu:skuA"));
  size_t deployments = 0, gates = 0;
  for (const auto& n : sub["nodes"]) {
    deployments += n["kind"] == "deployment";
    gates += n["kind"] == "gate_result";
  }
  CHECK(deployments == 1);
  CHECK(gates == 5);  // determinism, performance, memory, safety, approval
  for (const auto& e : sub["edges"]) {
    CHECK(has_node(sub, e["src"]));
    CHECK(has_node(sub, e["dst"]));
  }
  KgExportFilter by_sku;
  by_sku.sku = "skuA";
  const json a = kg_graph(f.st, by_sku);
  size_t props = 0;
  for (const auto& n : a["nodes"]) props += n["kind"] == "proposal";
  CHECK(props == 4);
}

TEST_CASE("evolve kg: rtx-evolve kg query / export through the tool", "[cpu]") {
  Fixture f;
  const std::string tool = rtx::test::tool_path("rtx-evolve") + " --db " + f.db + " ";
  auto r = rtx::test::run(tool + "--json kg query improved --op matmul --sku skuA");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const json a = json::parse(r.out);
  CHECK(ids(a) == std::vector<int64_t>{f.p1});
  r = rtx::test::run(tool + "kg query failed --gate safety");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("killed by signal 9"));
  r = rtx::test::run(tool + "kg query fastest");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("hurt-determinism"));
  r = rtx::test::run(tool + "kg export --format png");
  CHECK(r.exit_code == 2);
  const std::string out = f.dir + "/kg.json";
  r = rtx::test::run(tool + "kg export --format json --proposal " + std::to_string(f.p2) + " -o " + out);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(json::parse(ss.str()) == kg_graph(f.st, [&] {
          KgExportFilter x;
          x.proposal = f.p2;
          return x;
        }()));
#ifdef RTX_HAVE_GRAPHVIZ
  r = rtx::test::run(tool + "kg export --format svg");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("</svg>"));
#endif
}
