// GPT-2 built in the Polygraph IR (forward by the builder, backward by IR autodiff).
#include "rtx/models/gpt2_graph.hpp"

#include <string>

#include "rtx/core/error.hpp"
#include "rtx/ir/autodiff.hpp"

namespace rtx::models {

Gpt2Graph gpt2_graph(const Gpt2Config& cfg, int B, int T, bool with_backward) {
  cfg.validate();
  if (B < 1 || T < 1 || T > cfg.block_size)
    throw_input("B=" + std::to_string(B) + ", T=" + std::to_string(T) + " (need B >= 1, 1 <= T <= block_size " +
                    std::to_string(cfg.block_size) + ")",
                "gpt2_graph");
  Gpt2Graph m;
  ir::Graph& g = m.graph;
  const auto layout = gpt2_param_layout(cfg);
  std::vector<ir::V> p;
  for (const ParamTensor& t : layout) {
    ir::Shape s;
    for (int64_t d : t.shape) s.push_back(ir::Dim(d));
    p.push_back(g.param(t.name, s));
    m.params.push_back(p.back().id);
  }
  ir::V ids = g.input("ids", {B, T}, DType::I32), targets = g.input("targets", {B, T}, DType::I32);
  m.ids = ids.id;
  m.targets = targets.id;
  const int NH = cfg.n_head;
  auto name = [&](int l, const char* what) { return "l" + std::to_string(l) + "." + what; };
  ir::V x = g.named(g.encoder(ids, p[0], p[1]), "encoded");
  for (int l = 0; l < cfg.n_layer; ++l) {
    const size_t o = 2 + 12 * static_cast<size_t>(l);
    ir::V h = g.named(g.layernorm(x, p[o], p[o + 1]), name(l, "ln_1"));
    ir::V qkv = g.named(g.linear(h, p[o + 2], p[o + 3]), name(l, "qkv"));
    ir::V att = g.named(g.attention(qkv, NH), name(l, "attn"));
    x = g.named(x + g.linear(att, p[o + 4], p[o + 5]), name(l, "residual2"));
    h = g.named(g.layernorm(x, p[o + 6], p[o + 7]), name(l, "ln_2"));
    ir::V fc = g.named(g.gelu(g.linear(h, p[o + 8], p[o + 9])), name(l, "fch_gelu"));
    x = g.named(x + g.linear(fc, p[o + 10], p[o + 11]), name(l, "residual3"));
  }
  const size_t f = 2 + 12 * static_cast<size_t>(cfg.n_layer);
  ir::V lnf = g.named(g.layernorm(x, p[f], p[f + 1]), "ln_f");
  ir::V logits = g.named(g.matmul(lnf, p[0], false, true), "logits");
  ir::V losses = g.cross_entropy(logits, targets);
  ir::V loss = g.named(g.scale(g.sum(g.reshape(losses, {ir::Dim(static_cast<int64_t>(B) * T)}), 0), 1.0 / (static_cast<double>(B) * T)), "loss");
  m.logits = logits.id;
  m.loss = loss.id;
  g.mark_output(loss);
  g.mark_output(logits);
  if (with_backward) {
    m.grads = ir::backward(g, loss.id, m.params).grads;
    for (int gr : m.grads) g.mark_output(gr);
  }
  return m;
}

ir::Feeds gpt2_feeds(const Gpt2Config& cfg, const float* params, const int32_t* ids, const int32_t* targets, int B, int T) {
  if (!params || !ids || !targets) throw_input("null params, ids or targets", "gpt2_feeds");
  ir::Feeds f;
  for (const ParamTensor& t : gpt2_param_layout(cfg)) f[t.name] = std::vector<double>(params + t.offset, params + t.offset + t.numel);
  const size_t BT = static_cast<size_t>(B) * static_cast<size_t>(T);
  f["ids"] = std::vector<double>(ids, ids + BT);
  f["targets"] = std::vector<double>(targets, targets + BT);
  return f;
}

}  // namespace rtx::models
