// The macro op "gpt2_train_step" for rtx-bench: one whole GPT-2 training step (zero_grad,
// forward, backward, AdamW) at a (B, T, L, C, NH, V) shape, so bench packs time the model the
// way users run it, beside the single ops it is made of.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/models/bench_ops.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/models/infer.hpp"

namespace rtx::kernels {

namespace {

using models::Gpt2;
using models::Gpt2Config;

Gpt2Config config_of(const Shape& s) {
  Gpt2Config c;
  c.n_layer = static_cast<int>(s.at("L"));
  c.n_head = static_cast<int>(s.at("NH"));
  c.n_embd = static_cast<int>(s.at("C"));
  c.block_size = static_cast<int>(s.at("T"));
  c.vocab_size = static_cast<int>(s.at("V"));
  return c;
}

/// Bytes written twice to evict caches: twice the L3 (sysconf), clamped to [8 MiB, 1 GiB].
size_t flush_size() {
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  size_t b = l3 > 0 ? static_cast<size_t>(l3) * 2 : (64u << 20);
  return std::clamp<size_t>(b, 8u << 20, 1u << 30);
}

class TrainStepInstance final : public Instance {
 public:
  TrainStepInstance(const Shape& s, const Params& p, uint64_t seed, models::Backend backend)
      : cfg_(config_of(s)), B_(static_cast<int>(s.at("B"))), T_(static_cast<int>(s.at("T"))) {
    cfg_.validate();
    models::Gpt2KernelParams kp;
    auto it = p.find("MATMUL");
    if (it != p.end()) kp.matmul.impl = it->second == 1 ? MatmulImpl::Blas : MatmulImpl::Blocked;
    model_ = std::make_unique<Gpt2>(cfg_, B_, T_, backend, kp);
    model_->init_weights(seed);
    init_.resize(model_->num_params());
    model_->get_params(init_.data());
    ids_.resize(static_cast<size_t>(B_) * T_);
    tgt_.resize(ids_.size());
    Philox rng(seed, 1);
    for (size_t i = 0; i < ids_.size(); ++i) {
      ids_[i] = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(cfg_.vocab_size));
      tgt_[i] = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(cfg_.vocab_size));
    }
  }

  void run() override {
    model_->zero_grad();
    loss_ = model_->forward(ids_.data(), tgt_.data(), B_, T_);
    model_->backward(1.0f);
    model_->step(++t_, 1e-4f, opt_);
  }

  CheckResult check() override {
    // From the initial state (weights as made, zero moments, step 1), so check() gives the same
    // output however many run() calls came before. Reference: the loss of the same batch at the
    // same weights through the KV-cache decoder (an independent forward: naive attention, one
    // position at a time), summed in float64.
    model_->set_params(init_.data());
    const std::vector<float> zeros(init_.size(), 0.0f);
    model_->set_moments(zeros.data(), zeros.data());
    t_ = 0;
    run();
    models::Gpt2Decoder dec(cfg_, init_.data());
    const int V = cfg_.vocab_size;
    double ref = 0;
    for (int b = 0; b < B_; ++b) {
      dec.reset();
      for (int t = 0; t < T_; ++t) {
        const int32_t id = ids_[static_cast<size_t>(b) * T_ + t];
        const std::vector<float>& lg = t == 0 ? dec.prefill(&id, 1) : dec.step(id);
        double mx = lg[0];
        for (int v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(lg[v]));
        double se = 0;
        for (int v = 0; v < V; ++v) se += std::exp(static_cast<double>(lg[v]) - mx);
        ref += std::log(se) + mx - lg[tgt_[static_cast<size_t>(b) * T_ + t]];
      }
    }
    ref /= static_cast<double>(B_) * T_;
    CheckResult r;
    r.tolerance = 1e-4;
    if (!std::isfinite(loss_)) {
      r.nonfinite = 1;
      r.detail = "loss is not finite";
    }
    r.max_rel_err = std::fabs(loss_ - ref) / std::max(std::fabs(ref), 1e-30);
    r.ok = r.nonfinite == 0 && r.max_rel_err <= r.tolerance;
    if (!r.ok && r.detail.empty())
      r.detail = "loss " + std::to_string(loss_) + " vs reference " + std::to_string(ref);
    return r;
  }

  uint64_t checksum() override { return fnv1a64(&loss_, sizeof loss_); }
  std::vector<std::vector<float>> output_values() override { return {{loss_}}; }
  size_t footprint_bytes() const override { return model_->memory().total() + init_.size() * sizeof(float); }

  double timed_run() override {
    const auto t0 = std::chrono::steady_clock::now();
    run();  // forward returns the loss and step() the norm: the step has finished on any backend
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void flush_cache() override {
    static std::vector<unsigned char> scratch(flush_size());
    volatile unsigned char* s = scratch.data();
    for (size_t i = 0; i < scratch.size(); i += 64) s[i] = static_cast<unsigned char>(s[i] + 1);
  }

 private:
  Gpt2Config cfg_;
  int B_, T_;
  std::unique_ptr<Gpt2> model_;
  std::vector<int32_t> ids_, tgt_;
  std::vector<float> init_;  // the weights as made (check() restarts from them)
  models::AdamWConfig opt_{};
  int t_ = 0;
  float loss_ = 0;
};

/// Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", Table 1): forward FLOPs per
/// token 2N + 2 L T C with N = 12 L C^2 non-embedding parameters; we add the tied output
/// projection (2 V C) and take training as 3x forward. Bytes: parameters, gradients and both
/// AdamW moments read and written once (16 bytes x 2 per parameter) plus the activations.
Work train_step_work(const Shape& s, DType) {
  const double B = static_cast<double>(s.at("B")), T = static_cast<double>(s.at("T"));
  const double L = static_cast<double>(s.at("L")), C = static_cast<double>(s.at("C"));
  const double V = static_cast<double>(s.at("V"));
  const double N = 12.0 * L * C * C;
  Work w;
  w.flops = 3.0 * B * T * (2.0 * N + 2.0 * L * T * C + 2.0 * V * C);
  const double params = N + V * C + T * C;
  w.bytes = 32.0 * params + static_cast<double>(Gpt2::activation_bytes(config_of(s), static_cast<int>(B),
                                                                        static_cast<int>(T)));
  return w;
}

std::string train_step_valid(const Shape& s, const Params&) {
  if (s.at("C") % s.at("NH") != 0) return "C must be a multiple of NH";
  return "";
}

}  // namespace

}  // namespace rtx::kernels

namespace rtx::models {

void register_model_ops(kernels::Registry& r) {
  using namespace rtx::kernels;
  OpDef op;
  op.name = "gpt2_train_step";
  op.doc = "one GPT-2 training step (zero_grad, forward, backward, AdamW): batch B x T tokens, L layers, C channels, "
           "NH heads, vocab V";
  op.dims = {"B", "T", "L", "C", "NH", "V"};
  op.work = train_step_work;
  op.tol_f32 = 1e-4;
  op.test_shapes = {{{"B", 2}, {"T", 7}, {"L", 1}, {"C", 24}, {"NH", 3}, {"V", 67}},
                    {{"B", 1}, {"T", 1}, {"L", 2}, {"C", 8}, {"NH", 1}, {"V", 5}}};
  Variant cpu;
  cpu.name = "cpu.model";
  cpu.backend = kernels::Backend::CPU;
  cpu.dtypes = {DType::F32};
  cpu.space.params = {{"MATMUL", {0, 1}, 0, "matmul implementation: 0 own blocked GEMM, 1 OpenBLAS"}};
  cpu.validate = train_step_valid;
  cpu.make = [](const Shape& s, DType dt, const Params& p, uint64_t seed) -> std::unique_ptr<Instance> {
    if (dt != DType::F32) throw_input("gpt2_train_step runs in f32 only", "dtype");
    return std::make_unique<TrainStepInstance>(s, p, seed, models::Backend::Cpu);
  };
  op.variants.push_back(std::move(cpu));
#ifdef RTX_HAVE_CUDA
  Variant cuda;
  cuda.name = "cuda.model";
  cuda.backend = kernels::Backend::CUDA;
  cuda.dtypes = {DType::F32};
  cuda.validate = train_step_valid;
  cuda.make = [](const Shape& s, DType dt, const Params& p, uint64_t seed) -> std::unique_ptr<Instance> {
    if (dt != DType::F32) throw_input("gpt2_train_step runs in f32 only", "dtype");
    return std::make_unique<TrainStepInstance>(s, p, seed, models::Backend::Cuda);
  };
  op.variants.push_back(std::move(cuda));
#endif
  r.add(std::move(op));
}

}  // namespace rtx::models
