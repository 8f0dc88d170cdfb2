// GPT-2 CPU backend: forward, backward and AdamW written layer by layer on the op library
// (rtx/kernels/ops.hpp, matmul.hpp), in llm.c's order. No kernels of its own beyond a few
// element-wise loops (scaling, zeroing, the float64 gradient norm).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <limits>
#include <vector>

#include "models/gpt2_backend.hpp"
#include "rtx/core/error.hpp"
#include "rtx/telemetry/bus.hpp"
#include "rtx/kernels/matmul.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::models::detail {
namespace {

namespace k = rtx::kernels;

/// A 64-byte aligned float buffer, uninitialised (the owner decides what to zero).
class FloatBuf {
 public:
  explicit FloatBuf(size_t n) : n_(n) {
    const size_t bytes = ((std::max<size_t>(n, 1) * sizeof(float)) + 63) / 64 * 64;
    p_ = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!p_)
      throw_env("GPT-2 CPU backend: out of host memory allocating " + std::to_string(bytes) + " B", "allocation",
                "use a smaller model or batch");
  }
  ~FloatBuf() { std::free(p_); }
  FloatBuf(const FloatBuf&) = delete;
  FloatBuf& operator=(const FloatBuf&) = delete;
  float* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

/// Elements per work item of the element-wise loops below (fixed, so results do not depend on
/// the thread count).
constexpr int64_t kChunk = 1 << 15;

void zero(float* p, size_t n) {
  const int64_t N = static_cast<int64_t>(n), nc = (N + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (nc > 1)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t b = c * kChunk, e = std::min(N, b + kChunk);
    std::memset(p + b, 0, static_cast<size_t>(e - b) * sizeof(float));
  }
}

void scale(float* p, size_t n, float s) {
  const int64_t N = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (N > kChunk)
  for (int64_t i = 0; i < N; ++i) p[i] *= s;
}

/// Pointers to one layer's tensors inside a flat buffer laid out as gpt2_param_layout.
struct LayerPtrs {
  float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *mprojw, *mprojb;
};
/// Pointers to every tensor of a flat buffer (parameters or gradients).
struct ModelPtrs {
  float *wte, *wpe, *lnfw, *lnfb;
  std::vector<LayerPtrs> layer;
};
ModelPtrs carve_params(float* base, const std::vector<ParamTensor>& lay, int L) {
  auto at = [&](size_t i) { return base + lay[i].offset; };
  ModelPtrs m;
  m.wte = at(0);
  m.wpe = at(1);
  m.layer.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    const size_t i = 2 + 12 * static_cast<size_t>(l);
    m.layer[static_cast<size_t>(l)] = LayerPtrs{at(i),     at(i + 1), at(i + 2), at(i + 3), at(i + 4),  at(i + 5),
                                                at(i + 6), at(i + 7), at(i + 8), at(i + 9), at(i + 10), at(i + 11)};
  }
  m.lnfw = at(2 + 12 * static_cast<size_t>(L));
  m.lnfb = at(3 + 12 * static_cast<size_t>(L));
  return m;
}

class Gpt2Cpu final : public Gpt2Backend {
 public:
  Gpt2Cpu(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout, int max_B, int max_T,
          const Gpt2KernelParams& kp)
      : cfg_(cfg),
        layout_(layout),
        kp_(kp),
        np_(layout.back().offset + layout.back().numel),
        params_(np_),
        grads_(np_),
        m_(np_),
        v_(np_),
        plan_(gpt2_act_sizes(cfg, max_B, max_T)),
        acts_(plan_.total_floats()),
        ids_(static_cast<size_t>(max_B) * max_T),
        targets_(static_cast<size_t>(max_B) * max_T) {
    const std::string why = k::matmul_params_invalid(kp.matmul, k::cpu_isa_active());
    if (kp.matmul.impl == k::MatmulImpl::Blocked && !why.empty())
      throw_input("GPT-2 CPU backend: matmul parameters cannot run here: " + why, "Gpt2KernelParams.matmul",
                  "use the defaults (all 0) or a tuned profile for this CPU");
    if (kp.attention.Br < 1 || kp.attention.Br > 512 || kp.attention.Bc < 1 || kp.attention.Bc > 512)
      throw_input("GPT-2 CPU backend: attention tiles Br=" + std::to_string(kp.attention.Br) +
                      " Bc=" + std::to_string(kp.attention.Bc) + " outside [1,512]",
                  "Gpt2KernelParams.attention", "use tiles between 1 and 512");
    zero(params_.data(), np_);
    zero(grads_.data(), np_);
    zero(m_.data(), np_);
    zero(v_.data(), np_);
    P_ = carve_params(params_.data(), layout_, cfg_.n_layer);
    G_ = carve_params(grads_.data(), layout_, cfg_.n_layer);
  }

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
  void zero_grad() override { zero(grads_.data(), np_); }
  bool set_grad_ready_hook(Gpt2::GradReadyHook hook) override {
    hook_ = std::move(hook);
    return true;
  }
  float* grad_data() override { return grads_.data(); }

  float forward(const int32_t* ids, const int32_t* targets, int B, int T) override;
  void get_logits(float* host) const override {
    std::memcpy(host, A_.logits, static_cast<size_t>(B_) * T_ * cfg_.vocab_size * sizeof(float));
  }
  void backward(float loss_scale) override;
  double grad_norm() const override;
  double step(int t, float lr, const AdamWConfig& opt) override;

  Gpt2Memory memory() const override {
    Gpt2Memory mem;
    mem.params = np_ * sizeof(float);
    mem.grads = np_ * sizeof(float);
    mem.optimizer = 2 * np_ * sizeof(float);
    mem.activations = plan_.total_floats() * sizeof(float) + plan_.token_bytes;
    return mem;
  }

 private:
  /// Activation pointers for the current (B,T): carved from acts_ with the batch's own sizes,
  /// so per-layer tensors are contiguous (layer l at l * BT * width).
  struct Acts {
    float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att_lse, *residual2, *ln2, *ln2_mean, *ln2_rstd, *fch,
        *fch_gelu, *residual3, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses, *proj, *dresidual, *dqkv, *dfch_gelu,
        *dfch, *dlogits;
  };
  void carve_acts(int B, int T) {
    const Gpt2ActSizes s = gpt2_act_sizes(cfg_, B, T);
    float* p = acts_.data();
    auto take = [&p](size_t n) {
      float* r = p;
      p += n;
      return r;
    };
    Acts a;
    a.encoded = take(s.encoded);
    a.ln1 = take(s.ln1);
    a.ln1_mean = take(s.ln1_stat);
    a.ln1_rstd = take(s.ln1_stat);
    a.qkv = take(s.qkv);
    a.atty = take(s.atty);
    a.att_lse = take(s.att_lse);
    a.residual2 = take(s.residual2);
    a.ln2 = take(s.ln2);
    a.ln2_mean = take(s.ln2_stat);
    a.ln2_rstd = take(s.ln2_stat);
    a.fch = take(s.fch);
    a.fch_gelu = take(s.fch_gelu);
    a.residual3 = take(s.residual3);
    a.lnf = take(s.lnf);
    a.lnf_mean = take(s.lnf_stat);
    a.lnf_rstd = take(s.lnf_stat);
    a.logits = take(s.logits);
    a.losses = take(s.losses);
    a.proj = take(s.proj);
    a.dresidual = take(s.dresidual);
    a.dqkv = take(s.dqkv);
    a.dfch_gelu = take(s.dfch_gelu);
    a.dfch = take(s.dfch);
    a.dlogits = take(s.dlogits);
    RTX_CHECK(static_cast<size_t>(p - acts_.data()) <= acts_.size(), "activation plan exceeds its buffer");
    A_ = a;
  }

  Gpt2Config cfg_;
  std::vector<ParamTensor> layout_;
  Gpt2KernelParams kp_;
  size_t np_;
  FloatBuf params_, grads_, m_, v_;
  Gpt2ActSizes plan_;
  FloatBuf acts_;
  std::vector<int32_t> ids_, targets_;
  ModelPtrs P_, G_;
  Acts A_{};
  Gpt2::GradReadyHook hook_;  // data-parallel: told when a range of gradients is final
  /// Report layout tensors [first, last] as final to the hook (a no-op without one).
  void ready(size_t first, size_t last) {
    if (hook_) hook_(layout_[first].offset, layout_[last].offset + layout_[last].numel - layout_[first].offset);
  }
  int B_ = 0, T_ = 0;
  bool have_targets_ = false;
};

float Gpt2Cpu::forward(const int32_t* ids, const int32_t* targets, int B, int T) {
  const int L = cfg_.n_layer, NH = cfg_.n_head, C = cfg_.n_embd, V = cfg_.vocab_size, HS = C / NH;
  const int BT = B * T;
  const size_t btc = static_cast<size_t>(BT) * C;
  const k::MatmulParams* mm = &kp_.matmul;
  const k::AttentionParams* ap = &kp_.attention;
  const bool fused = ap->algo == k::AttentionParams::Algo::Flash;
  const k::OpParams* op = &kp_.elementwise;
  carve_acts(B, T);
  B_ = B;
  T_ = T;
  std::memcpy(ids_.data(), ids, static_cast<size_t>(BT) * sizeof(int32_t));
  have_targets_ = targets != nullptr;
  if (targets) std::memcpy(targets_.data(), targets, static_cast<size_t>(BT) * sizeof(int32_t));
  const Acts& a = A_;

  // Engine spans (rtx-trace): forward > layer.N > attn|mlp > kernel.launch records, then
  // lm_head; near-free when off.
  telemetry::ScopedSpan span_fwd("forward");
  k::encoder_forward(a.encoded, ids_.data(), P_.wte, P_.wpe, B, T, C, V);
  const float* residual = a.encoded;
  for (int l = 0; l < L; ++l) {
    telemetry::ScopedSpan span_layer(telemetry::layer_span_name(l),
                                     telemetry::enabled() ? nlohmann::json{{"layer", l}} : nlohmann::json());
    const LayerPtrs& w = P_.layer[static_cast<size_t>(l)];
    float* ln1 = a.ln1 + l * btc;
    float* ln1_mean = a.ln1_mean + static_cast<size_t>(l) * BT;
    float* ln1_rstd = a.ln1_rstd + static_cast<size_t>(l) * BT;
    float* qkv = a.qkv + 3 * l * btc;
    float* atty = a.atty + l * btc;
    float* lse = a.att_lse + static_cast<size_t>(l) * NH * BT;
    float* res2 = a.residual2 + l * btc;
    float* ln2 = a.ln2 + l * btc;
    float* ln2_mean = a.ln2_mean + static_cast<size_t>(l) * BT;
    float* ln2_rstd = a.ln2_rstd + static_cast<size_t>(l) * BT;
    float* fch = a.fch + 4 * l * btc;
    float* fchg = a.fch_gelu + 4 * l * btc;
    float* res3 = a.residual3 + l * btc;

    {
      telemetry::ScopedSpan span("attn");
      k::layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, w.ln1w, w.ln1b, BT, C, op);
      k::matmul_forward(qkv, ln1, w.qkvw, w.qkvb, BT, 3 * C, C, mm);
      // Fused (flash) saves the logsumexp for its backward; unfused (naive) saves nothing.
      k::attention_forward(atty, qkv, B, T, NH, HS, ap, fused ? lse : nullptr);
      k::matmul_forward(a.proj, atty, w.projw, w.projb, BT, C, C, mm);
      k::residual_forward(res2, residual, a.proj, static_cast<int64_t>(btc), op);
    }
    {
      telemetry::ScopedSpan span("mlp");
      k::layernorm_forward(ln2, ln2_mean, ln2_rstd, res2, w.ln2w, w.ln2b, BT, C, op);
      k::matmul_forward(fch, ln2, w.fcw, w.fcb, BT, 4 * C, C, mm);
      k::gelu_forward(fchg, fch, 4 * static_cast<int64_t>(btc), op);
      k::matmul_forward(a.proj, fchg, w.mprojw, w.mprojb, BT, C, 4 * C, mm);
      k::residual_forward(res3, res2, a.proj, static_cast<int64_t>(btc), op);
    }
    residual = res3;
  }
  telemetry::ScopedSpan span_head("lm_head");
  k::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, P_.lnfw, P_.lnfb, BT, C, op);
  // Tied output projection: logits (BT,V) = lnf (BT,C) @ wte (V,C)^T, no bias.
  k::matmul_forward(a.logits, a.lnf, P_.wte, nullptr, BT, V, C, mm);
  if (!targets) return std::numeric_limits<float>::quiet_NaN();
  k::crossentropy_forward(a.losses, a.logits, targets_.data(), BT, V);
  double sum = 0;  // mean in float64, in (b,t) order
  for (int i = 0; i < BT; ++i) sum += a.losses[i];
  return static_cast<float>(sum / BT);
}

void Gpt2Cpu::backward(float loss_scale) {
  RTX_CHECK(have_targets_, "backward without a forward with targets");
  const int L = cfg_.n_layer, NH = cfg_.n_head, C = cfg_.n_embd, V = cfg_.vocab_size, HS = C / NH;
  const int B = B_, T = T_, BT = B * T;
  const size_t btc = static_cast<size_t>(BT) * C;
  const k::MatmulParams* mm = &kp_.matmul;
  const k::AttentionParams* ap = &kp_.attention;
  const bool fused = ap->algo == k::AttentionParams::Algo::Flash;
  const k::OpParams* op = &kp_.elementwise;
  const Acts& a = A_;

  telemetry::ScopedSpan span_bwd("backward");
  std::optional<telemetry::ScopedSpan> span_head(std::in_place, "lm_head");
  // dlogits = (softmax - onehot) / BT, times loss_scale (gradient accumulation).
  k::crossentropy_backward(a.dlogits, a.logits, targets_.data(), BT, V);
  if (loss_scale != 1.0f) scale(a.dlogits, static_cast<size_t>(BT) * V, loss_scale);
  // logits = lnf @ wte^T: dlnf (into proj scratch) and dwte +=.
  k::matmul_backward(a.proj, G_.wte, nullptr, a.dlogits, a.lnf, P_.wte, BT, V, C, mm);
  // dresidual: gradient w.r.t. the residual stream, accumulated by every LayerNorm backward.
  zero(a.dresidual, btc);
  const float* last = a.residual3 + (L - 1) * btc;
  k::layernorm_backward(a.dresidual, G_.lnfw, G_.lnfb, a.proj, last, P_.lnfw, a.lnf_mean, a.lnf_rstd, BT, C, op);
  ready(2 + 12 * static_cast<size_t>(L), 3 + 12 * static_cast<size_t>(L));  // ln_f
  span_head.reset();

  for (int l = L - 1; l >= 0; --l) {
    telemetry::ScopedSpan span_layer(telemetry::layer_span_name(l),
                                     telemetry::enabled() ? nlohmann::json{{"layer", l}} : nlohmann::json());
    const LayerPtrs& w = P_.layer[static_cast<size_t>(l)];
    const LayerPtrs& g = G_.layer[static_cast<size_t>(l)];
    const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * btc;
    const float* ln1 = a.ln1 + l * btc;
    const float* ln1_mean = a.ln1_mean + static_cast<size_t>(l) * BT;
    const float* ln1_rstd = a.ln1_rstd + static_cast<size_t>(l) * BT;
    const float* qkv = a.qkv + 3 * l * btc;
    const float* atty = a.atty + l * btc;
    const float* lse = a.att_lse + static_cast<size_t>(l) * NH * BT;
    const float* res2 = a.residual2 + l * btc;
    const float* ln2 = a.ln2 + l * btc;
    const float* ln2_mean = a.ln2_mean + static_cast<size_t>(l) * BT;
    const float* ln2_rstd = a.ln2_rstd + static_cast<size_t>(l) * BT;
    const float* fch = a.fch + 4 * l * btc;
    const float* fchg = a.fch_gelu + 4 * l * btc;

    std::optional<telemetry::ScopedSpan> span_part(std::in_place, "mlp");
    // residual3 = residual2 + mlp(ln2(residual2)): dresidual is d(residual3) = d(mlp out).
    k::matmul_backward(a.dfch_gelu, g.mprojw, g.mprojb, a.dresidual, fchg, w.mprojw, BT, C, 4 * C, mm);
    zero(a.dfch, 4 * btc);
    k::gelu_backward(a.dfch, fch, a.dfch_gelu, 4 * static_cast<int64_t>(btc), op);
    k::matmul_backward(a.proj, g.fcw, g.fcb, a.dfch, ln2, w.fcw, BT, 4 * C, C, mm);
    k::layernorm_backward(a.dresidual, g.ln2w, g.ln2b, a.proj, res2, w.ln2w, ln2_mean, ln2_rstd, BT, C, op);
    span_part.emplace("attn");
    // residual2 = residual + attn(ln1(residual)): dresidual is now d(residual2).
    k::matmul_backward(a.proj, g.projw, g.projb, a.dresidual, atty, w.projw, BT, C, C, mm);
    zero(a.dqkv, 3 * btc);
    k::attention_backward(a.dqkv, a.proj, qkv, B, T, NH, HS, ap, fused ? atty : nullptr, fused ? lse : nullptr);
    k::matmul_backward(a.proj, g.qkvw, g.qkvb, a.dqkv, ln1, w.qkvw, BT, 3 * C, C, mm);
    k::layernorm_backward(a.dresidual, g.ln1w, g.ln1b, a.proj, residual, w.ln1w, ln1_mean, ln1_rstd, BT, C, op);
    ready(2 + 12 * static_cast<size_t>(l), 13 + 12 * static_cast<size_t>(l));  // layer l's 12 tensors
  }
  k::encoder_backward(G_.wte, G_.wpe, a.dresidual, ids_.data(), B, T, C, V);
  ready(0, 1);  // wte (also the tied output projection) and wpe
}

double Gpt2Cpu::grad_norm() const { return host_grad_norm(grads_.data(), np_); }

double Gpt2Cpu::step(int t, float lr, const AdamWConfig& opt) {
  return host_adamw_step(params_.data(), grads_.data(), m_.data(), v_.data(), layout_, t, lr, opt, &kp_.elementwise);
}

}  // namespace

double host_grad_norm(const float* g, size_t n) {
  // Sum of squares in float64 per fixed chunk, chunks added in order: independent of threads.
  const int64_t N = static_cast<int64_t>(n), nc = (N + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(nc));
#pragma omp parallel for schedule(static) if (nc > 1)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t b = c * kChunk, e = std::min(N, b + kChunk);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = b;
    for (; i + 4 <= e; i += 4) {
      s0 += static_cast<double>(g[i]) * g[i];
      s1 += static_cast<double>(g[i + 1]) * g[i + 1];
      s2 += static_cast<double>(g[i + 2]) * g[i + 2];
      s3 += static_cast<double>(g[i + 3]) * g[i + 3];
    }
    for (; i < e; ++i) s0 += static_cast<double>(g[i]) * g[i];
    part[static_cast<size_t>(c)] = (s0 + s1) + (s2 + s3);
  }
  double s = 0;
  for (double p : part) s += p;
  return std::sqrt(s);
}

double host_adamw_step(float* params, float* grads, float* m, float* v, const std::vector<ParamTensor>& layout, int t, float lr,
                       const AdamWConfig& opt, const kernels::OpParams* op) {
  telemetry::ScopedSpan span("adamw");
  const size_t np = layout.back().offset + layout.back().numel;
  const double norm = host_grad_norm(grads, np);
  if (!std::isfinite(norm)) return norm;  // diverged: update nothing, the caller decides
  // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1.
  if (opt.grad_clip > 0) {
    const double coef = static_cast<double>(opt.grad_clip) / (norm + 1e-6);
    if (coef < 1.0) scale(grads, np, static_cast<float>(coef));
  }
  k::AdamWParams hp;
  hp.lr = lr;
  hp.beta1 = opt.beta1;
  hp.beta2 = opt.beta2;
  hp.eps = opt.eps;
  hp.t = t;
  // consecutive tensors sharing the decay flag: one adamw_update call
  size_t i = 0;
  while (i < layout.size()) {
    size_t j = i + 1;
    while (j < layout.size() && layout[j].decay == layout[i].decay && layout[j].offset == layout[j - 1].offset + layout[j - 1].numel) ++j;
    const size_t off = layout[i].offset, n = layout[j - 1].offset + layout[j - 1].numel - off;
    hp.weight_decay = layout[i].decay ? opt.weight_decay : 0.0f;
    k::adamw_update(params + off, m + off, v + off, grads + off, static_cast<int64_t>(n), hp, op);
    i = j;
  }
  return norm;
}

std::unique_ptr<Gpt2Backend> make_gpt2_cpu(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout, int max_B,
                                           int max_T, const Gpt2KernelParams& kp) {
  return std::make_unique<Gpt2Cpu>(cfg, layout, max_B, max_T, kp);
}

}  // namespace rtx::models::detail
