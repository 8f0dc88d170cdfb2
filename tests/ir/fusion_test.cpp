// Fusion (issue 39): the fused node's f32 kernel vs the unfused graph and the float64 reference,
// the legality rules with planted illegal groups, the passes' refusal log and node counts,
// GPT-2's training graph fused (loss and every gradient vs unfused).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "ir_check.hpp"
#include "rtx/core/error.hpp"
#include "rtx/ir/exec.hpp"
#include "rtx/ir/fusion.hpp"
#include "rtx/ir/passes.hpp"
#include "rtx/ir/serialize.hpp"
#include "rtx/models/gpt2_graph.hpp"

using namespace rtx::ir;
using nlohmann::json;

namespace {

json fusion_config() {
  return json{{"schema", "rtx.passes.v1"},
              {"passes", json::array({json{{"name", "fuse_matmul_bias"}}, json{{"name", "fuse_elementwise"}}, json{{"name", "dce"}}})}};
}

// max|a-b| / max|b|
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / den;
}

int count_kind(const Graph& g, Kind k) {
  int c = 0;
  for (const Node& n : g.nodes()) c += n.kind == k;
  return c;
}

}  // namespace

TEST_CASE("fuse_elementwise: bias + GELU + scale + residual + layernorm is one node; f32 vs unfused and float64", "[cpu]") {
  // odd sizes: 3 x 7 rows of 37 (tails of every vector loop), and 700 rows of 29 (several tiles)
  for (auto [rows, C] : {std::pair<int64_t, int64_t>{21, 37}, {700, 29}}) {
    Graph g("chain");
    V x = g.input("x", {rows, C}), res = g.input("res", {rows, C});
    V bias = g.param("bias", {C}), w = g.param("w", {C}), b = g.param("b", {C});
    V pre = g.add(x, bias);
    V act = g.scale(g.gelu(pre), 0.5);
    V sum = res + act;
    V y = g.layernorm(sum, w, b);
    g.mark_output(y);
    g.mark_output(pre);  // an intermediate the caller wants: emitted
    g.mark_output(sum);  // the residual stream: emitted
    Graph f = g;
    const auto recs = run_passes(f, fusion_config());
    REQUIRE(recs.size() == 3);
    CHECK(recs[1].changed);
    CHECK(recs[1].nodes_before == g.nodes().size());
    CHECK(recs[1].nodes_after == g.nodes().size() - 4);  // 5 nodes -> 1
    REQUIRE(recs[1].details["groups"].size() == 1);
    CHECK(recs[1].details["groups"][0]["pattern"] == "add.gelu.scale.add.layernorm");
    CHECK(count_kind(f, Kind::Fused) == 1);
    const Feeds feeds = irtest::random_feeds(g, {}, 3);
    const auto u = run_f32(g, {}, feeds, ExecOptions{{}, false}), v = run_f32(f, {}, feeds, ExecOptions{{}, false});
    const auto ref = interpret_f64(g, {}, feeds), ref_f = interpret_f64(f, {}, feeds);
    for (size_t o = 0; o < g.outputs().size(); ++o) {
      INFO("rows " << rows << " C " << C << " output " << o);
      CHECK(rel(v.outputs[o], u.outputs[o]) <= 1e-6);  // fused vs unfused f32
      std::vector<float> r32(ref[g.outputs()[o]].begin(), ref[g.outputs()[o]].end());
      CHECK(rel(v.outputs[o], r32) <= 1e-4);  // vs float64
      const auto& a = ref[g.outputs()[o]];
      const auto& c = ref_f[f.outputs()[o]];
      double d = 0;
      for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - c[i]));
      CHECK(d <= 1e-12);  // the fused node's float64 reference is the unfused graph's
    }
    // JSON round trip of a fused graph
    const std::string js = to_json(f).dump();
    CHECK(to_json(from_json(json::parse(js), "rt")).dump() == js);
    // determinism across thread counts is by construction (fixed tiles): same bits run twice
    const auto v2 = run_f32(f, {}, feeds, ExecOptions{{}, false});
    for (size_t o = 0; o < v.outputs.size(); ++o) CHECK(std::memcmp(v.outputs[o].data(), v2.outputs[o].data(), v.outputs[o].size() * 4) == 0);
  }
}

TEST_CASE("fusion legality: planted illegal groups are refused with the rule and a reason", "[cpu]") {
  Graph g("illegal");
  V x = g.input("x", {4, 6}), y = g.input("y", {3, 4, 6});
  V a = g.exp(x);                 // node 2
  V s = g.sum(a, 1, true);        // node 3: a reduction reading the chain
  V c = g.broadcast(s, {4, 6});   // node 4
  V b = g.add(a, c);              // node 5: reads a, and c which is computed from a outside {a, b}
  V z = g.mul(b, y);              // node 6: broadcasts to [3,4,6]
  V q = g.layernorm(b, g.param("w", {6}), g.param("lb", {6}));
  V t = g.tanh(q);
  V e = g.exp(g.input("u", {4, 6}));  // independent of x
  g.mark_output(z);
  g.mark_output(t);
  g.mark_output(e);
  const int na = g.value(a.id).producer, ns = g.value(s.id).producer, nb = g.value(b.id).producer, nz = g.value(z.id).producer;
  // a fusion that reads c before it is written (c depends on a through the sum): a cycle
  FusionVerdict v = fusion_legality(g, {na, nb});
  CHECK_FALSE(v.legal);
  CHECK(v.rule == "convexity");
  CHECK_THAT(v.reason, Catch::Contains("before it is written"));
  // a fusion that would change a reduction's order
  v = fusion_legality(g, {na, ns});
  CHECK_FALSE(v.legal);
  CHECK(v.rule == "kind");
  CHECK_THAT(v.reason, Catch::Contains("reduction order"));
  // a broadcast beyond the group's shape
  v = fusion_legality(g, {nb, nz});
  CHECK_FALSE(v.legal);
  CHECK(v.rule == "shape");
  // layernorm only as the last step
  v = fusion_legality(g, {nb, g.value(q.id).producer, g.value(t.id).producer});
  CHECK_FALSE(v.legal);
  CHECK(v.rule == "kind");
  // unrelated nodes are no chain
  v = fusion_legality(g, {na, g.value(e.id).producer});
  CHECK_FALSE(v.legal);
  CHECK(v.rule == "chain");
  // legal: b and its layernorm
  CHECK(fusion_legality(g, {nb, g.value(q.id).producer}).legal);
  // the pass logs its refusals and keeps the meaning
  Graph f = g;
  const auto recs = run_passes(f, fusion_config());
  const json& d = recs[1].details;
  bool saw_kind = false, saw_shape = false;
  for (const json& r : d["refused"]) {
    saw_kind = saw_kind || (r["rule"] == "kind" && r["node"] == ns);
    saw_shape = saw_shape || (r["rule"] == "shape" && r["node"] == nz);
  }
  CHECK(saw_kind);
  CHECK(saw_shape);
  CHECK(d["refused_count"].get<int>() >= 2);
  const Feeds feeds = irtest::random_feeds(g, {}, 8);
  const auto u = run_f32(g, {}, feeds, ExecOptions{{}, false}), w = run_f32(f, {}, feeds, ExecOptions{{}, false});
  for (size_t o = 0; o < u.outputs.size(); ++o) CHECK(rel(w.outputs[o], u.outputs[o]) <= 1e-6);
}

TEST_CASE("fuse_matmul_bias folds a row bias into the matmul; refuses when the unbiased product is read", "[cpu]") {
  Graph g("lin");
  V x = g.input("x", {2, 5, 12});
  V w = g.param("w", {9, 12}), bias = g.param("bias", {9});
  V h = g.gelu(g.linear(x, w, bias));           // fused: matmul(x, w^T) + bias
  V m2 = g.matmul(x, w, false, true);
  V k = g.add(bias, m2);                         // bias first: still a row bias
  V also = g.scale(m2, 2.0);                     // m2 read again: refused
  g.mark_output(h);
  g.mark_output(k);
  g.mark_output(also);
  Graph f = g;
  json cfg = {{"schema", "rtx.passes.v1"}, {"passes", json::array({json{{"name", "fuse_matmul_bias"}}})}};
  const auto recs = run_passes(f, cfg);
  CHECK(recs[0].details["fused"].size() == 1);
  REQUIRE(recs[0].details["refused"].size() >= 1);
  CHECK(recs[0].details["refused"][0]["rule"] == "readers");
  int biased = 0;
  for (const Node& n : f.nodes()) biased += n.kind == Kind::MatMul && n.inputs.size() == 3;
  CHECK(biased == 1);
  const Feeds feeds = irtest::random_feeds(g, {}, 4);
  const auto u = run_f32(g, {}, feeds, ExecOptions{{}, false}), v = run_f32(f, {}, feeds, ExecOptions{{}, false});
  const auto ref = interpret_f64(f, {}, feeds);
  for (size_t o = 0; o < u.outputs.size(); ++o) {
    CHECK(rel(v.outputs[o], u.outputs[o]) <= 1e-6);
    std::vector<float> r32(ref[f.outputs()[o]].begin(), ref[f.outputs()[o]].end());
    CHECK(rel(v.outputs[o], r32) <= 1e-5);
  }
  // a biased matmul has no backward rule: fusion runs after autodiff
  CHECK_THROWS_WITH(backward(f, f.outputs()[0], {f.find_input("w")}), Catch::Contains("after autodiff"));
  // bad fused attrs are refused by the shape function
  Graph bad("bad");
  V bx = bad.input("x", {3, 4});
  CHECK_THROWS_WITH(bad.add_node(Kind::Fused, {bx.id}, json{{"steps", json::array({json{{"kind", "sum"}, {"args", {"i0"}}}})}, {"emit", {0}}}),
                    Catch::Contains("cannot be a fused step"));
  CHECK_THROWS_WITH(bad.add_node(Kind::Fused, {bx.id}, json{{"steps", json::array({json{{"kind", "exp"}, {"args", {"s0"}}}})}, {"emit", {0}}}),
                    Catch::Contains("out of range"));
  CHECK_THROWS_WITH(make_fuse_elementwise_pass(json{{"max_step", 3}}), Catch::Contains("unknown option"));
}

TEST_CASE("gpt2 training graph fused: loss and every gradient as unfused; fewer nodes", "[cpu]") {
  rtx::models::Gpt2Config cfg;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 16;
  cfg.block_size = 8;
  cfg.vocab_size = 11;
  const int B = 2, T = 5;
  rtx::models::Gpt2Graph gg = rtx::models::gpt2_graph(cfg, B, T, true);
  Graph f = gg.graph;
  const auto recs = run_passes(f, fusion_config());
  const int fused = count_kind(f, Kind::Fused);
  int biased = 0;
  for (const Node& n : f.nodes()) biased += n.kind == Kind::MatMul && n.inputs.size() == 3;
  WARN("gpt2 tiny training graph: " << gg.graph.nodes().size() << " nodes -> " << f.nodes().size() << " (" << fused << " fused chains: "
                                    << recs[1].details["groups"].dump() << "; " << biased << " matmuls with the bias in the epilogue; "
                                    << recs[1].details["refused_count"] << " refusals)");
  CHECK(biased == 4 * cfg.n_layer);  // qkv, attn proj, fc, mlp proj
  CHECK(fused >= 1);
  CHECK(f.nodes().size() < gg.graph.nodes().size());
  std::mt19937 rng(5);
  std::vector<float> params(rtx::models::gpt2_num_params(cfg));
  for (auto& p : params) p = std::normal_distribution<float>(0.0f, 0.1f)(rng);
  std::vector<int32_t> ids(B * T), tg(B * T);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % cfg.vocab_size);
  for (auto& i : tg) i = static_cast<int32_t>(rng() % cfg.vocab_size);
  const Feeds feeds = rtx::models::gpt2_feeds(cfg, params.data(), ids.data(), tg.data(), B, T);
  const auto u = run_f32(gg.graph, {}, feeds, ExecOptions{{}, false}), v = run_f32(f, {}, feeds, ExecOptions{{}, false});
  double worst = 0;
  for (size_t o = 0; o < u.outputs.size(); ++o) worst = std::max(worst, rel(v.outputs[o], u.outputs[o]));
  WARN("fused vs unfused: worst output (loss, logits, every gradient) " << worst);
  CHECK(worst <= 1e-5);
}
