// GPT-2 through the Polygraph IR vs the hand-written Gpt2 (the oracle) on a tiny config:
// loss and logits, every parameter gradient, and 10 AdamW steps (host-driven, docs/ir.md).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>

#include "rtx/ir/planner.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/models/gpt2_graph.hpp"

using namespace rtx;
using namespace rtx::models;

namespace {

Gpt2Config tiny() {
  Gpt2Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 11;
  return c;
}

// max|a-b| / max|b| (check.hpp's max-norm relative error)
double rel(const float* a, const float* b, size_t n) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / den;
}

}  // namespace

TEST_CASE("gpt2 through the IR matches the hand-written Gpt2: loss, logits, gradients, 10 AdamW steps", "[cpu]") {
  const Gpt2Config cfg = tiny();
  const int B = 2, T = 5;  // T < block_size: wpe has unused rows
  Gpt2 ref(cfg, B, T);
  ref.init_weights(7);
  std::vector<float> params(ref.num_params());
  ref.get_params(params.data());
  std::mt19937 rng(3);
  std::vector<int32_t> ids(B * T), targets(B * T);
  for (auto& x : ids) x = static_cast<int32_t>(rng() % cfg.vocab_size);
  for (auto& x : targets) x = static_cast<int32_t>(rng() % cfg.vocab_size);

  Gpt2Graph gg = gpt2_graph(cfg, B, T, true);
  gg.graph.verify();
  const auto layout = gpt2_param_layout(cfg);

  // forward + backward once
  ref.zero_grad();
  const float loss_ref = ref.forward(ids.data(), targets.data(), B, T);
  ref.backward(1.0f);
  std::vector<float> logits_ref(static_cast<size_t>(B) * T * cfg.vocab_size), grads_ref(ref.num_params());
  ref.get_logits(logits_ref.data());
  ref.get_grads(grads_ref.data());
  const auto run = ir::run_f32(gg.graph, {}, gpt2_feeds(cfg, params.data(), ids.data(), targets.data(), B, T));
  const double loss_err = std::fabs(run.outputs[0][0] - loss_ref) / std::fabs(loss_ref);
  const double logit_err = rel(run.outputs[1].data(), logits_ref.data(), logits_ref.size());
  double grad_err = 0;
  std::string worst;
  for (size_t i = 0; i < layout.size(); ++i) {
    const double e = rel(run.outputs[2 + i].data(), grads_ref.data() + layout[i].offset, layout[i].numel);
    if (e > grad_err) grad_err = e, worst = layout[i].name;
  }
  WARN("gpt2 tiny (2 layers, 2 heads, C 16, V 11, B 2, T 5): loss " << loss_ref << ", IR vs hand-written: loss " << loss_err
                                                                   << ", logits " << logit_err << ", worst gradient " << grad_err
                                                                   << " (" << worst << "); arena " << run.plan.arena_bytes
                                                                   << " B of " << run.plan.sum_bytes << " B");
  CHECK(loss_err <= 1e-6);
  CHECK(logit_err <= 1e-6);
  CHECK(grad_err <= 1e-5);

  // 10 AdamW steps: the hand-written step vs the host step over the IR's gradients
  AdamWConfig opt;
  opt.grad_clip = 0;  // the host step below does not clip
  std::vector<float> p = params, m(params.size(), 0.0f), v(params.size(), 0.0f);
  ref.set_params(params.data());
  std::vector<float> zeros(params.size(), 0.0f);
  ref.set_moments(zeros.data(), zeros.data());
  double step_err = 0;
  for (int t = 1; t <= 10; ++t) {
    ref.zero_grad();
    const float lr = ref.forward(ids.data(), targets.data(), B, T);
    ref.backward(1.0f);
    ref.step(t, 1e-2f, opt);
    const auto r = ir::run_f32(gg.graph, {}, gpt2_feeds(cfg, p.data(), ids.data(), targets.data(), B, T), ir::ExecOptions{{}, false});
    step_err = std::max(step_err, std::fabs(static_cast<double>(r.outputs[0][0]) - lr) / std::fabs(lr));
    kernels::AdamWParams hp;
    hp.lr = 1e-2f;
    hp.beta1 = opt.beta1;
    hp.beta2 = opt.beta2;
    hp.eps = opt.eps;
    hp.t = t;
    for (size_t i = 0; i < layout.size(); ++i) {
      hp.weight_decay = layout[i].decay ? opt.weight_decay : 0.0f;
      const size_t o = layout[i].offset;
      kernels::adamw_update(p.data() + o, m.data() + o, v.data() + o, r.outputs[2 + i].data(), static_cast<int64_t>(layout[i].numel), hp);
    }
  }
  WARN("10 AdamW steps (lr 1e-2): worst loss difference " << step_err);
  CHECK(step_err <= 1e-5);
}

TEST_CASE("gpt2_graph rejects bad sizes", "[cpu]") {
  CHECK_THROWS_WITH(gpt2_graph(tiny(), 1, 9, false), Catch::Contains("T=9"));
  CHECK_THROWS_WITH(gpt2_graph(tiny(), 0, 4, false), Catch::Contains("B=0"));
  const Gpt2Graph g = gpt2_graph(tiny(), 1, 4, false);
  CHECK(g.graph.outputs().size() == 2);
  CHECK(g.graph.value(g.logits).name == "logits");
}
