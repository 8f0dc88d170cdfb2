// GPT-2 built in the Polygraph IR (forward by the builder, backward by IR autodiff).
#include "rtx/models/gpt2_graph.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "models/gpt2_backend.hpp"
#include "rtx/core/error.hpp"
#include "rtx/ir/autodiff.hpp"
#include "rtx/ir/passes.hpp"

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
    const ir::BackwardResult r = ir::backward(g, loss.id, m.params);
    m.grads = r.grads;
    m.first_backward = r.first_backward_node;
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

namespace detail {
namespace {

/// The graph engine: one prepared executor per batch shape (and per kind: forward only, or
/// forward + backward), parameters and gradients bound to the host buffers in place.
class Gpt2GraphBackend final : public Gpt2Backend {
 public:
  Gpt2GraphBackend(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout, int max_B, int max_T, const Gpt2KernelParams& kp)
      : cfg_(cfg), layout_(layout), kp_(kp), max_B_(max_B), max_T_(max_T), np_(layout.back().offset + layout.back().numel),
        params_(np_, 0.0f), grads_(np_, 0.0f), m_(np_, 0.0f), v_(np_, 0.0f) {}

  void set_params(const float* host) override { std::memcpy(params_.data(), host, np_ * sizeof(float)); }
  void get_params(float* host) const override { std::memcpy(host, params_.data(), np_ * sizeof(float)); }
  void get_grads(float* host) const override { std::memcpy(host, grads_.data(), np_ * sizeof(float)); }
  void get_moments(float* mh, float* vh) const override {
    std::memcpy(mh, m_.data(), np_ * sizeof(float));
    std::memcpy(vh, v_.data(), np_ * sizeof(float));
  }
  void set_moments(const float* mh, const float* vh) override {
    std::memcpy(m_.data(), mh, np_ * sizeof(float));
    std::memcpy(v_.data(), vh, np_ * sizeof(float));
  }
  float* grad_data() override { return grads_.data(); }

  float forward(const int32_t* ids, const int32_t* targets, int B, int T) override {
    // The forward part of the training graph when this shape trains (the backward then reads its
    // activations); a forward-only graph otherwise (evaluation batches of another shape: a
    // backward after one reruns the forward through the training graph).
    const bool train = targets && (train_.count({B, T}) || (B == max_B_ && T == max_T_));
    Prepared& e = get(B, T, train);
    const size_t BT = static_cast<size_t>(B) * T;
    std::memcpy(e.ex->data(e.g.ids), ids, BT * sizeof(int32_t));
    if (targets)
      std::memcpy(e.ex->data(e.g.targets), targets, BT * sizeof(int32_t));
    else
      std::memset(e.ex->data(e.g.targets), 0, BT * sizeof(int32_t));  // logits only: any valid targets
    e.ex->run(0, e.backward_pos);
    last_ = &e;
    B_ = B;
    T_ = T;
    if (!targets) return std::numeric_limits<float>::quiet_NaN();
    last_ids_.assign(ids, ids + BT);
    last_targets_.assign(targets, targets + BT);
    return e.ex->data(e.g.loss)[0];
  }
  void get_logits(float* host) const override {
    std::memcpy(host, last_->ex->data(last_->g.logits), static_cast<size_t>(B_) * T_ * cfg_.vocab_size * sizeof(float));
  }
  void zero_grad() override {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    grads_zero_ = true;
  }
  void backward(float loss_scale) override {
    Prepared* e = last_;
    if (e->backward_pos == e->ex->plan().order.size()) {  // forward-only graph: rerun through the training graph
      e = &get(B_, T_, true);
      std::memcpy(e->ex->data(e->g.ids), last_ids_.data(), last_ids_.size() * sizeof(int32_t));
      std::memcpy(e->ex->data(e->g.targets), last_targets_.data(), last_targets_.size() * sizeof(int32_t));
      e->ex->run(0, e->backward_pos);
      last_ = e;
    }
    // The first backward after zero_grad with scale 1 (one micro-batch) writes the gradients in
    // place; otherwise they land in a staging buffer and are accumulated (scaled) into grads_.
    const bool direct = grads_zero_ && loss_scale == 1.0f;
    if (!direct && stage_.empty()) stage_.assign(np_, 0.0f);
    float* dst = direct ? grads_.data() : stage_.data();
    for (size_t i = 0; i < layout_.size(); ++i) e->ex->bind(e->g.grads[i], dst + layout_[i].offset);
    e->ex->run(e->backward_pos);
    if (!direct) {
      float* g = grads_.data();
      const float* st = stage_.data();
      const int64_t n = static_cast<int64_t>(np_);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) g[i] += loss_scale * st[i];
    }
    grads_zero_ = false;
  }
  double grad_norm() const override { return host_grad_norm(grads_.data(), np_); }
  double step(int t, float lr, const AdamWConfig& opt) override {
    return host_adamw_step(params_.data(), grads_.data(), m_.data(), v_.data(), layout_, t, lr, opt, &kp_.elementwise);
  }
  Gpt2Memory memory() const override {
    Gpt2Memory mem;
    mem.params = np_ * sizeof(float);
    mem.grads = (np_ + stage_.size()) * sizeof(float);
    mem.optimizer = 2 * np_ * sizeof(float);
    for (const auto& [key, e] : train_) mem.activations = std::max<size_t>(mem.activations, static_cast<size_t>(e->ex->plan().arena_bytes));
    for (const auto& [key, e] : fwd_) mem.activations = std::max<size_t>(mem.activations, static_cast<size_t>(e->ex->plan().arena_bytes));
    return mem;
  }

 private:
  struct Prepared {
    Gpt2Graph g;
    std::unique_ptr<ir::Executor> ex;
    size_t backward_pos = 0;  ///< schedule position where the backward starts (order size: none)
  };
  using Key = std::pair<int, int>;

  /// Run the fusion passes on m's graph and re-find its parts (inputs by name, outputs by
  /// position: loss, logits, then the gradients).
  static void fuse(Gpt2Graph& m) {
    std::vector<std::string> names;
    for (int p : m.params) names.push_back(m.graph.value(p).name);
    ir::run_passes(m.graph, nlohmann::json{{"schema", "rtx.passes.v1"},
                                           {"passes", nlohmann::json::array({nlohmann::json{{"name", "fuse_matmul_bias"}},
                                                                             nlohmann::json{{"name", "fuse_elementwise"}}})}});
    const ir::Graph& g = m.graph;
    for (size_t i = 0; i < m.params.size(); ++i) m.params[i] = g.find_input(names[i]);
    m.ids = g.find_input("ids");
    m.targets = g.find_input("targets");
    m.loss = g.outputs()[0];
    m.logits = g.outputs()[1];
    for (size_t i = 0; i < m.grads.size(); ++i) m.grads[i] = g.outputs()[2 + i];
    m.first_backward = -1;  // node ids changed; the engine splits after the loss's producer
  }

  Prepared& get(int B, int T, bool train) {
    auto& cache = train ? train_ : fwd_;
    auto it = cache.find({B, T});
    if (it != cache.end()) return *it->second;
    auto e = std::make_unique<Prepared>();
    e->g = gpt2_graph(cfg_, B, T, train);
    if (kp_.graph_fusion) fuse(e->g);
    ir::ExecOptions o;
    o.matmul = kp_.matmul;
    for (int p : e->g.params) o.plan.external.push_back(p);
    for (int gr : e->g.grads) o.plan.external.push_back(gr);
    e->ex = std::make_unique<ir::Executor>(e->g.graph, ir::Bindings{}, o);
    for (size_t i = 0; i < layout_.size(); ++i) e->ex->bind(e->g.params[i], params_.data() + layout_[i].offset);
    // the forward part: the schedule up to the loss's producer (every node the loss and logits
    // need runs before it); what follows is the backward
    e->backward_pos = train ? e->ex->position_of(e->g.graph.value(e->g.loss).producer) + 1 : e->ex->plan().order.size();
    return *cache.emplace(Key{B, T}, std::move(e)).first->second;
  }

  Gpt2Config cfg_;
  std::vector<ParamTensor> layout_;
  Gpt2KernelParams kp_;
  int max_B_, max_T_;
  size_t np_;
  std::vector<float> params_, grads_, m_, v_, stage_;
  std::map<Key, std::unique_ptr<Prepared>> train_, fwd_;
  Prepared* last_ = nullptr;
  int B_ = 0, T_ = 0;
  std::vector<int32_t> last_ids_, last_targets_;
  bool grads_zero_ = true;
};

}  // namespace

std::unique_ptr<Gpt2Backend> make_gpt2_graph(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout, int max_B, int max_T,
                                             const Gpt2KernelParams& kp) {
  return std::make_unique<Gpt2GraphBackend>(cfg, layout, max_B, max_T, kp);
}

}  // namespace detail

}  // namespace rtx::models
