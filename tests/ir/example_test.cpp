// The worked example of docs/ir.md: build a small model with the builder, print it, run the
// passes, differentiate it, plan it and run it on both executors. Run it with
//   ctest --test-dir build -R ir_example_test --verbose
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "rtx/ir/autodiff.hpp"
#include "rtx/ir/exec.hpp"
#include "rtx/ir/passes.hpp"
#include "rtx/ir/serialize.hpp"

using namespace rtx::ir;

TEST_CASE("ir worked example: a residual MLP block, forward and backward", "[cpu]") {
  // 1. Build: x (B,T,C) -> x + W2 gelu(W1 ln(x)); loss = mean cross-entropy against targets.
  Graph g("example");
  const Dim B = Dim::sym("B"), T = Dim::sym("T");
  const int C = 8, NV = 5;  // NV: vocabulary (V is the builder's value type)
  V x = g.input("x", {B, T, C});
  V targets = g.input("targets", {B, T}, rtx::DType::I32);
  V w = g.param("ln.w", {C}), b = g.param("ln.b", {C});
  V w1 = g.param("fc.w", {4 * C, C}), w2 = g.param("proj.w", {C, 4 * C}), wout = g.param("out.w", {NV, C});
  V h = x + g.linear(g.gelu(g.linear(g.layernorm(x, w, b), w1)), w2);
  V losses = g.cross_entropy(g.linear(h, wout), targets);
  V loss = g.named(g.sum(g.sum(losses, 1), 0), "loss");  // summed; divide by B*T outside

  // 2. Differentiate: the backward is more nodes of the same graph.
  const BackwardResult br = backward(g, loss.id, {w.id, b.id, w1.id, w2.id, wout.id});
  g.mark_output(loss);
  for (int gr : br.grads) g.mark_output(gr);

  // 3. Passes (as data), then look at it.
  const auto records = run_passes(g, default_pass_config());
  std::printf("%s", to_text(g).c_str());
  for (const auto& r : records) std::printf("pass %s: %zu -> %zu nodes\n", r.name.c_str(), r.nodes_before, r.nodes_after);

  // 4. Run at B=2, T=3 on the f32 executor (registry kernels) and the float64 interpreter.
  const Bindings bind = {{"B", 2}, {"T", 3}};
  Feeds feeds;
  for (int v : g.inputs()) {
    const Value& in = g.value(v);
    std::vector<double> d(static_cast<size_t>(eval_numel(in.shape, bind)));
    for (size_t i = 0; i < d.size(); ++i)
      d[i] = in.dtype == rtx::DType::I32 ? static_cast<double>(i % NV) : static_cast<double>(static_cast<float>(0.1 * std::sin(1.0 + i + v)));
    feeds[in.name] = d;
  }
  const ExecResult r = run_f32(g, bind, feeds);
  const auto ref = interpret_f64(g, bind, feeds);
  std::printf("loss f32 %.7f, f64 %.7f; arena %lld B (sum of tensors %lld B, %d in place)\n", r.outputs[0][0],
              ref[g.outputs()[0]][0], static_cast<long long>(r.plan.arena_bytes), static_cast<long long>(r.plan.sum_bytes),
              r.plan.inplace);
  CHECK(std::fabs(r.outputs[0][0] - ref[g.outputs()[0]][0]) <= 1e-5 * std::fabs(ref[g.outputs()[0]][0]));
  CHECK(r.plan.arena_bytes < r.plan.sum_bytes);
}
