// The IR planner (schedule, liveness and reuse checked by an independent overlap check,
// in-place, recomputation) and the passes (DCE, CSE, the pass list as data, compiler.pass).
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

#include "ir_check.hpp"
#include "rtx/core/error.hpp"
#include "rtx/ir/passes.hpp"
#include "rtx/ir/planner.hpp"
#include "rtx/ir/serialize.hpp"
#include "rtx/telemetry/bus.hpp"

using namespace rtx::ir;
using nlohmann::json;

namespace {

// An MLP of `layers` gelu layers, forward + backward wrt every weight and the input.
struct Mlp {
  Graph g{"mlp"};
  BackwardResult br;
};
Mlp mlp(int layers, int rows = 32, int width = 16, int hidden = 128) {
  Mlp m;
  Graph& g = m.g;
  V x = g.input("x", {rows, width});
  std::vector<int> wrt = {x.id};
  V h = x;
  for (int l = 0; l < layers; ++l) {
    V w1 = g.param("w1." + std::to_string(l), {hidden, width}), w2 = g.param("w2." + std::to_string(l), {width, hidden});
    wrt.push_back(w1.id);
    wrt.push_back(w2.id);
    h = h + g.linear(g.gelu(g.linear(h, w1)), w2);
  }
  V loss = irtest::scalarize(g, h, "0");
  m.br = backward(g, loss.id, wrt);
  g.mark_output(loss);
  for (int gr : m.br.grads) g.mark_output(gr);
  return m;
}

// Independent check of a plan: two values whose buffers are distinct (not linked by shares)
// and whose lifetimes overlap must not overlap in bytes.
void check_no_overlap(const Graph& g, const Plan& p) {
  const size_t NV = g.values().size();
  std::vector<int> pos(g.nodes().size());
  for (size_t k = 0; k < p.order.size(); ++k) pos[p.order[k]] = static_cast<int>(k);
  const int end = static_cast<int>(p.order.size());
  std::vector<int> first(NV), last(NV);
  for (const Value& v : g.values()) first[v.id] = last[v.id] = pos[v.producer];
  for (const Node& n : g.nodes())
    for (int i : n.inputs) last[i] = std::max(last[i], pos[n.id]);
  for (int i : g.inputs()) first[i] = 0, last[i] = end;
  for (int o : g.outputs()) last[o] = end;
  // root of each share chain
  std::vector<int> root(NV);
  for (size_t v = 0; v < NV; ++v) {
    int r = static_cast<int>(v);
    while (p.shares[r] >= 0) r = p.shares[r];
    root[v] = r;
  }
  std::vector<int> gf(NV, INT32_MAX), gl(NV, -1);
  for (size_t v = 0; v < NV; ++v) {
    gf[root[v]] = std::min(gf[root[v]], first[v]);
    gl[root[v]] = std::max(gl[root[v]], last[v]);
  }
  for (size_t a = 0; a < NV; ++a) {
    if (root[a] != static_cast<int>(a)) continue;
    REQUIRE(p.offset[a] >= 0);
    REQUIRE(p.offset[a] + p.bytes[a] <= p.arena_bytes);
    for (size_t b = a + 1; b < NV; ++b) {
      if (root[b] != static_cast<int>(b)) continue;
      const bool time = gf[a] <= gl[b] && gf[b] <= gl[a];
      const bool space = p.offset[a] < p.offset[b] + p.bytes[b] && p.offset[b] < p.offset[a] + p.bytes[a];
      INFO("values " << a << " [" << gf[a] << "," << gl[a] << "] @" << p.offset[a] << "+" << p.bytes[a] << " and " << b << " ["
                     << gf[b] << "," << gl[b] << "] @" << p.offset[b] << "+" << p.bytes[b] << "\n" << (std::getenv("IR_DEBUG") ? to_text(g) : ""));
      CHECK_FALSE((time && space && p.bytes[a] > 0 && p.bytes[b] > 0));
    }
  }
}

}  // namespace

TEST_CASE("ir planner: schedule respects dependencies; reuse never overlaps live buffers", "[cpu]") {
  Mlp m = mlp(3);
  const Plan p = plan(m.g, {});
  std::vector<int> pos(m.g.nodes().size());
  for (size_t k = 0; k < p.order.size(); ++k) pos[p.order[k]] = static_cast<int>(k);
  for (const Node& n : m.g.nodes())
    for (int i : n.inputs) CHECK(pos[m.g.value(i).producer] < pos[n.id]);
  check_no_overlap(m.g, p);
  CHECK(p.arena_bytes < p.sum_bytes);
  const Plan q = plan(m.g, {}, PlanOptions{false, false});
  check_no_overlap(m.g, q);
  CHECK(q.arena_bytes >= q.sum_bytes);
  CHECK(q.inplace == 0);
  WARN("mlp(3) forward+backward: peak " << p.arena_bytes << " B with reuse+in-place vs " << p.sum_bytes
                                        << " B sum of tensors; " << p.inplace << " in place, " << p.views << " views");
}

TEST_CASE("ir planner: elementwise chains run in place, reshape is a view", "[cpu]") {
  Graph g("chain");
  V x = g.input("x", {5, 7});
  V a = g.exp(g.scale(x, 0.5));
  V b = g.tanh(a);
  V c = g.reshape(b * 2.0, {35});
  g.mark_output(g.gelu(c));
  const Plan p = plan(g, {});
  CHECK(p.shares[a.id] >= 0);  // exp over the scale's buffer (x is an input: never overwritten)
  CHECK(p.shares[g.producer(a.id).inputs[0]] == -1);
  CHECK(p.shares[b.id] == a.id);
  CHECK(p.shares[c.id] >= 0);
  CHECK(p.views == 1);
  check_no_overlap(g, p);
  const auto f = irtest::random_feeds(g, {}, 3);
  const auto r1 = run_f32(g, {}, f);
  ExecOptions o;
  o.plan.inplace = false;
  const auto r2 = run_f32(g, {}, f, o);
  CHECK(std::memcmp(r1.outputs[0].data(), r2.outputs[0].data(), 35 * 4) == 0);
  CHECK(irtest::rel_err(r1.outputs[0], interpret_f64(g, {}, f)[g.outputs()[0]]) < 1e-5);
}

TEST_CASE("ir recompute policy lowers peak memory and keeps the bits", "[cpu]") {
  Mlp m = mlp(4);
  Graph r = apply_recompute(m.g, m.br.first_backward_node, Recompute::Elementwise);
  r.verify();
  CHECK(r.nodes().size() > m.g.nodes().size());
  const Plan p0 = plan(m.g, {}), p1 = plan(r, {});
  check_no_overlap(r, p1);
  CHECK(p1.arena_bytes < p0.arena_bytes);
  WARN("mlp(4): peak " << p0.arena_bytes << " B without recomputation, " << p1.arena_bytes << " B with elementwise recomputation");
  const auto f = irtest::random_feeds(m.g, {}, 4);
  const auto a = run_f32(m.g, {}, f), b = run_f32(r, {}, f);
  REQUIRE(a.outputs.size() == b.outputs.size());
  for (size_t k = 0; k < a.outputs.size(); ++k) CHECK(std::memcmp(a.outputs[k].data(), b.outputs[k].data(), a.outputs[k].size() * 4) == 0);
  CHECK(parse_recompute("none") == Recompute::None);
  CHECK_THROWS_WITH(parse_recompute("all"), Catch::Contains("unknown recompute policy 'all'"));
}

TEST_CASE("ir passes: CSE merges duplicates, DCE drops dead nodes, bits unchanged, events published", "[cpu]") {
  Graph g("dup");
  V x = g.input("x", {4, 6}), y = g.input("y", {6});
  V a = g.gelu(x + y), b = g.gelu(x + y);  // duplicate chain
  g.tanh(a);                               // dead
  V unused_input = g.input("z", {2});
  (void)unused_input;
  g.mark_output(a * b);
  const auto f = irtest::random_feeds(g, {}, 2);
  const auto before = run_f32(g, {}, f);
  std::vector<json> events;
  const uint64_t sub = rtx::telemetry::subscribe("compiler.pass", [&](const json& e) { events.push_back(e["fields"]); });
  const auto rec = run_passes(g, default_pass_config(), "default");
  rtx::telemetry::unsubscribe(sub);
  REQUIRE(rec.size() == 2);
  CHECK(rec[0].name == "cse");
  CHECK(rec[0].changed);
  CHECK(rec[0].nodes_before == 9);
  CHECK(rec[0].nodes_after == 7);
  CHECK(rec[1].name == "dce");
  CHECK(rec[1].nodes_after == 6);  // x, y, z, add, gelu, mul
  REQUIRE(events.size() == 2);
  CHECK(events[0]["pass"] == "cse");
  CHECK(events[0]["nodes_before"] == 9);
  CHECK(events[1]["nodes_after"] == 6);
  const auto after = run_f32(g, {}, f);
  CHECK(std::memcmp(before.outputs[0].data(), after.outputs[0].data(), 24 * 4) == 0);
  // a second run changes nothing
  const auto again = run_passes(g, default_pass_config());
  CHECK_FALSE(again[0].changed);
  CHECK_FALSE(again[1].changed);
}

TEST_CASE("ir pass list is data: disabled, illegal, unknown and registered passes", "[cpu]") {
  Graph g("nout");
  V x = g.input("x", {3});
  g.exp(x);
  json cfg = {{"schema", "rtx.passes.v1"}, {"passes", {{{"name", "dce"}}, {{"name", "cse"}, {"enabled", false}}}}};
  const auto rec = run_passes(g, cfg);
  CHECK_FALSE(rec[0].legal);
  CHECK(rec[0].reason.find("no outputs") != std::string::npos);
  CHECK(g.nodes().size() == 2);
  CHECK(rec[1].reason == "disabled");
  cfg["passes"][0]["name"] = "fuse_everything";
  CHECK_THROWS_WITH(run_passes(g, cfg, "p.json"), Catch::Contains("'/passes/0/name': unknown pass 'fuse_everything'") &&
                                                      Catch::Contains("known passes: ") && Catch::Contains("cse"));
  cfg["schema"] = "rtx.graph.v1";
  CHECK_THROWS_WITH(run_passes(g, cfg, "p.json"), Catch::Contains("schema"));
  // a pass joins by name (as issue 39's fusion passes will)
  struct Count : Pass {
    std::string name() const override { return "count_only"; }
    std::string illegal(const Graph&) const override { return ""; }
    bool run(Graph&) const override { return false; }
  };
  const auto names = pass_names();
  if (std::find(names.begin(), names.end(), std::string("count_only")) == names.end())
    register_pass("count_only", [](const json&) { return std::make_unique<Count>(); });
  CHECK_THROWS_AS(register_pass("dce", [](const json&) { return make_dce_pass(); }), rtx::Error);
  const auto r2 = run_passes(g, json{{"schema", "rtx.passes.v1"}, {"passes", {{{"name", "count_only"}, {"options", json::object()}}}}});
  CHECK(r2[0].name == "count_only");
  CHECK_FALSE(r2[0].changed);
}

TEST_CASE("ir Executor: external parameters and gradients, runs in parts, same bits as run_f32", "[cpu]") {
  Mlp m = mlp(2);
  const Feeds feeds = irtest::random_feeds(m.g, {}, 11);
  const ExecResult ref = run_f32(m.g, {}, feeds);
  ExecOptions o;
  std::vector<int> params;
  for (int v : m.g.inputs())
    if (m.g.value(v).name != "x") params.push_back(v);
  o.plan.external = params;
  for (int gr : m.br.grads) o.plan.external.push_back(gr);
  Executor ex(m.g, {}, o);
  const Plan& p = ex.plan();
  // external values take no arena bytes (in the full plan a gradient may share an
  // intermediate's bytes in place, so the difference can be less than their sum)
  const Plan full = plan(m.g, {});
  int64_t ext_bytes = 0;
  for (int v : o.plan.external) {
    CHECK(p.ext[v] == v);
    CHECK(p.offset[v] == -1);
    ext_bytes += p.bytes[v];
  }
  WARN("mlp(2): arena " << full.arena_bytes << " B owning everything, " << p.arena_bytes << " B with " << ext_bytes
                        << " B of parameters and gradients external");
  CHECK(p.arena_bytes < full.arena_bytes);
  CHECK(p.sum_bytes == full.sum_bytes);
  // caller memory for the parameters and gradients
  std::vector<std::vector<float>> host(m.g.values().size());
  for (int v : o.plan.external) {
    host[v].assign(static_cast<size_t>(p.bytes[v] / 4), 0.0f);
    if (m.g.producer(v).kind == Kind::Input)
      for (size_t i = 0; i < host[v].size(); ++i) host[v][i] = static_cast<float>(feeds.at(m.g.value(v).name)[i]);
    ex.bind(v, host[v].data());
  }
  const int x = m.g.find_input("x");
  for (size_t i = 0; i < feeds.at("x").size(); ++i) ex.data(x)[i] = static_cast<float>(feeds.at("x")[i]);
  const size_t bwd = ex.position_of(m.br.first_backward_node);
  CHECK(bwd > 0);
  CHECK(bwd < p.order.size());
  for (int rep = 0; rep < 2; ++rep) {  // forward, then backward; twice on the same executor
    ex.run(0, bwd);
    ex.run(bwd);
    const auto& outs = m.g.outputs();
    for (size_t k = 0; k < outs.size(); ++k) {
      INFO("output " << k << " (value " << outs[k] << "), rep " << rep);
      CHECK(std::memcmp(ex.data(outs[k]), ref.outputs[k].data(), ref.outputs[k].size() * sizeof(float)) == 0);
    }
  }
  for (int gr : m.br.grads) CHECK(ex.data(gr) == host[gr].data());  // written in place
  // errors
  CHECK_THROWS_WITH(ex.bind(x, host[params[0]].data()), Catch::Contains("not external"));
  CHECK_THROWS_WITH(ex.bind(params[0], nullptr), Catch::Contains("null pointer"));
  CHECK_THROWS_WITH(ex.run(5, 2), Catch::Contains("reversed"));
  Executor unbound(m.g, {}, o);
  CHECK_THROWS_WITH(unbound.run(), Catch::Contains("is not bound"));
  ExecOptions bad;
  bad.plan.external = {m.g.producer(m.br.grads[0]).inputs[0]};  // an intermediate
  CHECK_THROWS_WITH(Executor(m.g, {}, bad), Catch::Contains("not a graph input or output"));
}

TEST_CASE("ir Executor: a view of an external input reads the caller's memory; an external output is written, not aliased", "[cpu]") {
  Graph g("views");
  V w = g.param("w", {2, 3});
  V r = g.reshape(w, {6});
  V y = g.scale(r, 2.0);
  V z = g.reshape(g.exp(y), {3, 2});
  g.mark_output(y);
  g.mark_output(z);
  ExecOptions o;
  o.plan.external = {w.id, z.id};
  Executor ex(g, {}, o);
  CHECK(ex.plan().ext[r.id] == w.id);  // the view lives in the caller's memory
  CHECK(ex.plan().shares[z.id] == -1);  // not a view of the exp: its producer copies into it
  float wv[6] = {1, -2, 3, 0.5f, 0, -1}, zv[6] = {};
  ex.bind(w.id, wv);
  ex.bind(z.id, zv);
  ex.run();
  for (int i = 0; i < 6; ++i) {
    CHECK(ex.data(y.id)[i] == 2 * wv[i]);
    CHECK(zv[i] == std::exp(2 * wv[i]));
  }
}
