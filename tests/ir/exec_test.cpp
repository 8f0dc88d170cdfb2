// Every node kind at odd shapes: autodiff (float64) vs float64 central differences, and the
// CPU f32 executor (registry kernels) vs the float64 interpreter on forward + backward.
// Also: determinism, telemetry, planner reuse/in-place/recompute, errors of the executors.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>

#include "ir_check.hpp"
#include "rtx/core/error.hpp"
#include "rtx/ir/serialize.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/telemetry/bus.hpp"

using namespace rtx::ir;
using rtx::DType;

namespace {

struct Case {
  const char* name;
  std::function<V(Graph&)> build;  // returns y
  std::map<std::string, int> int_hi = {};
  Bindings b = {};
};

std::vector<Case> cases() {
  return {
      {"matmul", [](Graph& g) { return g.matmul(g.input("a", {2, 3, 5}), g.input("b", {5, 4})); }},
      {"matmul_tb", [](Graph& g) { return g.matmul(g.input("a", {2, 3, 5}), g.input("b", {4, 5}), false, true); }},
      {"matmul_ta", [](Graph& g) { return g.matmul(g.input("a", {5, 3}), g.input("b", {5, 7}), true, false); }},
      {"matmul_ta_tb", [](Graph& g) { return g.matmul(g.input("a", {5, 3}), g.input("b", {7, 5}), true, true); }},
      {"add_broadcast", [](Graph& g) { return g.input("a", {3, 1, 5}) + g.input("b", {4, 5}); }},
      {"add_same", [](Graph& g) { return g.input("a", {3, 7}) + g.input("b", {3, 7}); }},
      {"sub", [](Graph& g) { return g.input("a", {3, 5}) - g.input("b", {5}); }},
      {"mul", [](Graph& g) { return g.input("a", {2, 3}) * g.input("b", {2, 1}); }},
      {"scale", [](Graph& g) { return g.input("a", {7}) * -0.37; }},
      {"gelu", [](Graph& g) { return g.gelu(g.input("a", {7, 3})); }},
      {"relu", [](Graph& g) { return g.relu(g.input("a", {7, 3})); }},
      {"silu", [](Graph& g) { return g.silu(g.input("a", {7, 3})); }},
      {"tanh", [](Graph& g) { return g.tanh(g.input("a", {7, 3})); }},
      {"exp", [](Graph& g) { return g.exp(g.input("a", {7, 3})); }},
      {"sum", [](Graph& g) { return g.sum(g.input("a", {3, 4, 5}), 1); }},
      {"mean_keepdim", [](Graph& g) { return g.mean(g.input("a", {3, 4, 5}), 0, true); }},
      {"reshape", [](Graph& g) { return g.reshape(g.input("a", {3, 4}), {2, 6}); }},
      {"transpose", [](Graph& g) { return g.transpose(g.input("a", {2, 3, 4}), std::vector<int>{2, 0, 1}); }},
      {"broadcast", [](Graph& g) { return g.broadcast(g.input("a", {3, 1}), {2, 3, 5}); }},
      {"sum_to", [](Graph& g) { return g.sum_to(g.input("a", {2, 3, 5}), {3, 1}); }},
      {"softmax", [](Graph& g) { return g.softmax(g.input("a", {5, 7})); }},
      {"layernorm", [](Graph& g) { return g.layernorm(g.input("a", {2, 3, 7}), g.input("w", {7}), g.input("b", {7})); }},
      {"attention", [](Graph& g) { return g.attention(g.input("qkv", {2, 5, 12}), 2); }},
      {"attention_1head", [](Graph& g) { return g.attention(g.input("qkv", {1, 7, 9}), 1); }},
      {"gather", [](Graph& g) { return g.gather(g.input("table", {6, 3}), g.input("ids", {2, 4}, DType::I32)); }, {{"ids", 6}}},
      {"segment_sum", [](Graph& g) { return g.segment_sum(g.input("data", {7, 3}), g.input("ids", {7}, DType::I32), 4); }, {{"ids", 4}}},
      {"encoder",
       [](Graph& g) { return g.encoder(g.input("ids", {2, 5}, DType::I32), g.input("wte", {11, 6}), g.input("wpe", {7, 6})); },
       {{"ids", 11}}},
      {"cross_entropy",
       [](Graph& g) { return g.cross_entropy(g.input("logits", {2, 3, 9}), g.input("targets", {2, 3}, DType::I32)); },
       {{"targets", 9}}},
      {"fan_out", [](Graph& g) {
         V x = g.input("a", {4, 3});
         return x * x + g.gelu(x) + g.sum_to(x, {3});
       }},
      {"symbolic_dims",
       [](Graph& g) {
         const Dim B = Dim::sym("B"), T = Dim::sym("T");
         V x = g.input("x", {B, T, 4});
         V h = g.layernorm(x, g.input("w", {4}), g.input("b", {4}));
         return g.reshape(g.matmul(h, g.input("m", {6, 4}), false, true), {B * T, 6});
       },
       {}, {{"B", 2}, {"T", 3}}},
  };
}

}  // namespace

TEST_CASE("ir every forward kind: gradcheck (f64) and f32 executor vs f64 interpreter", "[cpu]") {
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    Graph g(c.name);
    V y = c.build(g);
    V loss = irtest::scalarize(g, y, "0");
    g.mark_output(y);
    const auto r = irtest::gradcheck(g, loss, c.b, seed++, c.int_hi);
    INFO(c.name << ": autodiff vs central differences " << r.grad_err << " (" << r.worst << "), f32 vs f64 " << r.exec_err);
    CHECK(r.grad_err < 1e-6);
    CHECK(r.exec_err < 1e-4);
  }
}

TEST_CASE("ir f32 executor calls the registry kernel: attention matches it bit for bit", "[cpu]") {
  Graph g("kern");
  V qkv = g.input("qkv", {2, 9, 24});
  V a = g.attention(qkv, 2);
  g.mark_output(a);
  const auto feeds = irtest::random_feeds(g, {}, 5);
  const auto r = run_f32(g, {}, feeds);
  std::vector<float> in(feeds.at("qkv").begin(), feeds.at("qkv").end()), out(2 * 9 * 8), lse(2 * 2 * 9);
  rtx::kernels::attention_forward(out.data(), in.data(), 2, 9, 2, 4, nullptr, lse.data());
  CHECK(std::memcmp(out.data(), r.outputs[0].data(), out.size() * 4) == 0);
}

TEST_CASE("ir f32 executor is deterministic and in-place/reuse do not change bits", "[cpu]") {
  Graph g("det");
  V x = g.input("x", {3, 5, 12});
  V h = g.layernorm(x, g.input("w", {12}), g.input("b", {12}));
  V q = g.linear(h, g.input("wq", {36, 12}), g.input("bq", {36}));
  V y = x + g.attention(q, 2);
  y = y + g.gelu(g.scale(y, 0.5)) * g.tanh(y);
  V loss = irtest::scalarize(g, y, "0");
  std::vector<int> wrt = {x.id};
  const auto br = backward(g, loss.id, wrt);
  g.mark_output(loss);
  g.mark_output(br.grads[0]);
  const auto f = irtest::random_feeds(g, {}, 9);
  const auto a = run_f32(g, {}, f);
  const auto b = run_f32(g, {}, f);
  ExecOptions plain;
  plain.plan.reuse = false;
  plain.plan.inplace = false;
  const auto c = run_f32(g, {}, f, plain);
  for (size_t k = 0; k < a.outputs.size(); ++k) {
    CHECK(std::memcmp(a.outputs[k].data(), b.outputs[k].data(), a.outputs[k].size() * 4) == 0);
    CHECK(std::memcmp(a.outputs[k].data(), c.outputs[k].data(), a.outputs[k].size() * 4) == 0);
  }
  CHECK(a.plan.inplace > 0);
  CHECK(a.plan.arena_bytes < a.plan.sum_bytes);
  CHECK(c.plan.arena_bytes >= c.plan.sum_bytes);
}

TEST_CASE("ir executor publishes graph.capture and one span per node", "[cpu]") {
  Graph g("tel");
  V x = g.input("x", {4, 3});
  g.mark_output(g.softmax(g.gelu(x)));
  int captures = 0, spans = 0;
  const uint64_t s1 = rtx::telemetry::subscribe("graph.capture", [&](const nlohmann::json& e) {
    ++captures;
    CHECK(e["fields"]["nodes"] == 3);
    CHECK(e["fields"]["hash"] == graph_hash(g));
  });
  const uint64_t s2 = rtx::telemetry::subscribe("span", [&](const nlohmann::json& e) {
    if (e["fields"]["name"].get<std::string>().rfind("ir.", 0) == 0) ++spans;
  });
  run_f32(g, {}, irtest::random_feeds(g, {}, 1));
  rtx::telemetry::unsubscribe(s1);
  rtx::telemetry::unsubscribe(s2);
  CHECK(captures == 1);
  CHECK(spans == 2);  // gelu, softmax (inputs are copies, not spans)
}

TEST_CASE("ir executors reject bad feeds, unbound dims and bad indices, naming them", "[cpu]") {
  Graph g("errs");
  V t = g.input("table", {4, 2});
  V ids = g.input("ids", {Dim::sym("E")}, DType::I32);
  g.mark_output(g.gather(t, ids));
  Feeds f{{"table", std::vector<double>(8, 0.5)}, {"ids", {0, 3, 4}}};
  CHECK_THROWS_WITH(interpret_f64(g, {}, f), Catch::Contains("'E' is not bound"));
  CHECK_THROWS_WITH(interpret_f64(g, {{"E", 3}}, f), Catch::Contains("node 2 (gather): gather id 4") && Catch::Contains("[0,4)"));
  CHECK_THROWS_WITH(run_f32(g, {{"E", 3}}, f), Catch::Contains("node 2 (gather): gather id 4"));
  f["ids"] = {0, 1};
  CHECK_THROWS_WITH(run_f32(g, {{"E", 3}}, f), Catch::Contains("feed 'ids' has 2 elements") && Catch::Contains("needs 3"));
  f["ids"] = {0, 1.5, 2};
  CHECK_THROWS_WITH(run_f32(g, {{"E", 3}}, f), Catch::Contains("is i32 but holds 1.5"));
  f.erase("ids");
  CHECK_THROWS_WITH(interpret_f64(g, {{"E", 3}}, f), Catch::Contains("no feed for input 'ids'"));
  f["ids"] = {0, 1, 2};
  f["nope"] = {1};
  CHECK_THROWS_WITH(interpret_f64(g, {{"E", 3}}, f), Catch::Contains("feed 'nope' names no input"));
}

TEST_CASE("ir autodiff refuses what it cannot differentiate", "[cpu]") {
  Graph g("ad");
  V x = g.input("x", {3, 4});
  V ids = g.input("ids", {3}, DType::I32);
  V m = g.v(g.producer(g.layernorm(x, g.input("w", {4}), g.input("b", {4})).id).outputs[1]);  // mean
  V l = g.sum(m, 0);
  CHECK_THROWS_WITH(backward(g, l.id, {x.id}), Catch::Contains("(layernorm): output 1 is on the path"));
  CHECK_THROWS_WITH(backward(g, l.id, {ids.id}), Catch::Contains("dtype i32"));
  V s = g.sum(g.input("y", {Dim::sym("T")}), 0);
  V unrelated = g.input("z", {2});
  const auto br = backward(g, s.id, {unrelated.id});
  CHECK(g.producer(br.grads[0]).kind == Kind::Full);  // zero gradient
}
