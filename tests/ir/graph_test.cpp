// The Polygraph IR graph: dims, builder, shape functions and their errors, verifier, JSON
// rtx.graph.v1 round trip and schema checks, text and DOT views.
#include <catch2/catch.hpp>

#include "rtx/core/error.hpp"
#include "rtx/ir/graph.hpp"
#include "rtx/ir/serialize.hpp"

using namespace rtx::ir;
using rtx::DType;

namespace {

// A GPT-2-like block with symbolic B, T: the builder reads like the model.
Graph block_graph() {
  Graph g("block");
  const Dim B = Dim::sym("B"), T = Dim::sym("T");
  const int C = 8, NH = 2;
  V x = g.input("x", {B, T, C});
  V w1 = g.param("ln.w", {C}), b1 = g.param("ln.b", {C});
  V wqkv = g.param("qkv.w", {3 * C, C}), bqkv = g.param("qkv.b", {3 * C});
  V wfc = g.param("fc.w", {4 * C, C}), wpr = g.param("proj.w", {C, 4 * C});
  V h = g.layernorm(x, w1, b1);
  h = x + g.named(g.attention(g.linear(h, wqkv, bqkv), NH), "l0.attn");
  h = h + g.linear(g.gelu(g.linear(h, wfc)), wpr);
  g.mark_output(h);
  return g;
}

}  // namespace

TEST_CASE("ir dims: symbolic products, parse/str, division, eval", "[cpu]") {
  const Dim B = Dim::sym("B"), T = Dim::sym("T");
  CHECK((B * T).str() == "B*T");
  CHECK((Dim(3) * B).str() == "3*B");
  CHECK(Dim::parse("T*3*B") == Dim(3) * B * T);
  CHECK(Dim::parse("768").coeff == 768);
  Dim q;
  CHECK(dim_div(Dim(6) * B, Dim(3), q));
  CHECK(q == Dim(2) * B);
  CHECK_FALSE(dim_div(Dim(6) * B, T, q));
  CHECK(eval(Dim(3) * B * T, {{"B", 2}, {"T", 5}}) == 30);
  CHECK_THROWS_WITH(eval(B, {}), Catch::Contains("'B' is not bound"));
  CHECK_THROWS_AS(Dim::parse("3*"), rtx::Error);
  CHECK_THROWS_AS(Dim::sym("1x"), rtx::Error);
}

TEST_CASE("ir builder infers shapes, strides and keeps ids in order", "[cpu]") {
  Graph g = block_graph();
  g.verify();
  const Value& out = g.value(g.outputs()[0]);
  CHECK(shape_str(out.shape) == "[B,T,8]");
  CHECK(shape_str(out.strides()) == "[8*T,8,1]");
  // layernorm has 3 outputs, attention 2
  int ln = -1, at = -1;
  for (const Node& n : g.nodes()) {
    if (n.kind == Kind::LayerNorm) ln = n.id;
    if (n.kind == Kind::Attention) at = n.id;
  }
  REQUIRE(ln >= 0);
  REQUIRE(at >= 0);
  CHECK(g.node(ln).outputs.size() == 3);
  CHECK(shape_str(g.value(g.node(ln).outputs[1]).shape) == "[B,T]");
  CHECK(shape_str(g.value(g.node(at).outputs[1]).shape) == "[B,2,T]");
  CHECK(g.value(g.node(at).outputs[0]).name == "l0.attn");
}

TEST_CASE("ir shape functions reject mismatches naming node, kind and dims", "[cpu]") {
  Graph g("bad");
  V a = g.input("a", {3, 5}), b = g.input("b", {4, 2}), c = g.input("c", {3, 4});
  V ids = g.input("ids", {7}, DType::I32);
  CHECK_THROWS_WITH(g.matmul(a, b), Catch::Contains("node 4 (matmul): inner dims differ: a [3,5] K=5, b [4,2] K=4"));
  CHECK_THROWS_WITH(g.add(a, c), Catch::Contains("(add): shapes do not broadcast: [3,5] and [3,4]"));
  CHECK_THROWS_WITH(g.gelu(ids), Catch::Contains("x must be f32, got i32"));
  CHECK_THROWS_WITH(g.reshape(a, {4, 4}), Catch::Contains("element count differs"));
  CHECK_THROWS_WITH(g.transpose(a, std::vector<int>{0, 0}), Catch::Contains("is not a permutation"));
  CHECK_THROWS_WITH(g.sum(a, 2), Catch::Contains("axis 2 out of range"));
  CHECK_THROWS_WITH(g.attention(a, 2), Catch::Contains("qkv must be [B,T,3C]"));
  CHECK_THROWS_WITH(g.segment_sum(a, ids, 4), Catch::Contains("ids must be [3]"));
  CHECK_THROWS_WITH(g.input("a", {1}), Catch::Contains("duplicate input name 'a'"));
  CHECK_THROWS_WITH(g.add_node(Kind::Add, {a.id, 99}), Catch::Contains("input value 99 does not exist"));
  // broadcasting that works: [3,5] + [5] and [3,1]
  CHECK(shape_str(g.add(a, g.input("r", {5})).shape()) == "[3,5]");
  CHECK(shape_str(g.mul(g.input("col", {3, 1}), g.input("row", {1, 5})).shape()) == "[3,5]");
}

TEST_CASE("ir JSON rtx.graph.v1 round trip is exact; text and DOT views", "[cpu]") {
  Graph g = block_graph();
  const auto j = to_json(g);
  CHECK(j["schema"] == "rtx.graph.v1");
  Graph r = from_json(j, "mem");
  CHECK(to_json(r).dump() == j.dump());
  CHECK(graph_hash(r) == graph_hash(g));
  CHECK(to_text(r) == to_text(g));
  const std::string t = to_text(g);
  CHECK(t.find("= layernorm(%0, %1, %2) : f32[B,T,8], f32[B,T], f32[B,T]") != std::string::npos);
  CHECK(t.find("attention(") != std::string::npos);
  CHECK(t.find("# l0.attn") != std::string::npos);
  const std::string d = to_dot(g);
  CHECK(d.rfind("digraph \"block\" {", 0) == 0);
  CHECK(d.find("label=\"f32[B,T,8]\"") != std::string::npos);
  CHECK(d.find("peripheries=2") != std::string::npos);
  // a different graph hashes differently
  Graph g2 = block_graph();
  g2.mark_output(g2.inputs()[0]);
  CHECK(graph_hash(g2) != graph_hash(g));
}

TEST_CASE("ir JSON reader rejects bad documents naming the field", "[cpu]") {
  Graph g = block_graph();
  const auto good = to_json(g);
  auto j = good;
  j["schema"] = "rtx.graph.v2";
  CHECK_THROWS_WITH(from_json(j, "g.json"), Catch::Contains("g.json") && Catch::Contains("schema"));
  j = good;
  j["nodes"][5]["kind"] = "conv9d";
  CHECK_THROWS_WITH(from_json(j, "g.json"), Catch::Contains("unknown node kind 'conv9d'"));
  j = good;
  j["nodes"][2]["id"] = "two";
  CHECK_THROWS_WITH(from_json(j, "g.json"), Catch::Contains("field '/nodes/2/id': expected integer"));
  j = good;
  const int ln_out = g.node(7).outputs[0];
  j["values"][ln_out]["shape"] = {"B", "T", 9};
  CHECK_THROWS_WITH(from_json(j, "g.json"), Catch::Contains("'/values/" + std::to_string(ln_out) + "'") &&
                                                Catch::Contains("recorded f32[B,T,9]"));
  j = good;
  j["nodes"][8]["inputs"][0] = 1000;
  CHECK_THROWS_WITH(from_json(j, "g.json"), Catch::Contains("field '/nodes/8'") && Catch::Contains("1000"));
  j = good;
  j["values"][0]["layout"] = "strided";
  CHECK_THROWS_WITH(from_json(j, "g.json"), Catch::Contains("only \"contiguous\""));
  j = good;
  j["outputs"] = {12345};
  CHECK_THROWS_WITH(from_json(j, "g.json"), Catch::Contains("'/outputs'"));
  // a graph whose input names collide fails verify through the reader
  j = good;
  j["values"][1]["name"] = "x";
  CHECK_THROWS_WITH(from_json(j, "g.json"), Catch::Contains("duplicate input name 'x'"));
}
