// GPT-2 CUDA backend against the CPU backend: loss, logits, every gradient, the gradient norm and
// parameters/moments after 3 AdamW steps, for a tiny odd config and gpt2-tiny; determinism, gradient
// accumulation and bad input. GPU cases say SKIPPED and return without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/gpt2_backend.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/models/gpt2.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::models;

namespace {

/// The tiny odd config of the CPU parity test (vocab 67, C 24, 3 heads of 8, 2 layers, block 16).
Gpt2Config tiny_config() {
  Gpt2Config c;
  c.vocab_size = 67;
  c.n_embd = 24;
  c.n_head = 3;
  c.n_layer = 2;
  c.block_size = 16;
  return c;
}

struct Batch {
  std::vector<int32_t> ids, targets;  // (B,T) each
};

/// Uniform ids and targets in [0,V) from Philox(seed).
Batch make_batch(int B, int T, int V, uint64_t seed) {
  Philox rng(seed, 7);
  Batch b;
  b.ids.resize(static_cast<size_t>(B) * T);
  b.targets.resize(b.ids.size());
  for (auto& x : b.ids) x = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(V));
  for (auto& x : b.targets) x = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(V));
  return b;
}

/// Max-norm relative error max|a-b| / max|b| over [off, off+n) (as rtx/kernels/check.hpp).
/// When b is all zero, returns max|a| (so a must be zero too).
double max_rel(const std::vector<float>& a, const std::vector<float>& b, size_t off, size_t n) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = off; i < off + n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    ref = std::max(ref, std::fabs(static_cast<double>(b[i])));
  }
  return ref > 0.0 ? diff / ref : diff;
}
double max_rel(const std::vector<float>& a, const std::vector<float>& b) { return max_rel(a, b, 0, b.size()); }
double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

/// Category of the rtx::Error `f` throws (Internal with a failed CHECK when it throws nothing).
template <typename F>
ErrorCategory error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    INFO(e.what());
    return e.category();
  }
  FAIL_CHECK("expected an rtx::Error");
  return ErrorCategory::Internal;
}

std::vector<float> params_of(const Gpt2& m) {
  std::vector<float> p(m.num_params());
  m.get_params(p.data());
  return p;
}
std::vector<float> grads_of(const Gpt2& m) {
  std::vector<float> g(m.num_params());
  m.get_grads(g.data());
  return g;
}
std::vector<float> logits_of(const Gpt2& m, int B, int T) {
  std::vector<float> l(static_cast<size_t>(B) * T * m.config().vocab_size);
  m.get_logits(l.data());
  return l;
}

/// Largest errors seen by one parity run (printed for the GPU log).
struct ParityErrors {
  double loss = 0, logits = 0, grad = 0, norm = 0, params = 0, m = 0, v = 0;
  std::string worst_grad;
};

/// CPU and CUDA models from the same weights, 3 training steps on the same batches (B,T):
/// losses, logits and every gradient tensor at step 1, norms at every step, params and moments
/// after step 3.
ParityErrors check_parity(const Gpt2Config& cfg, int max_B, int max_T, int B, int T, const Gpt2KernelParams& kp,
                          uint64_t seed) {
  INFO("config " << cfg.to_json().dump() << " max " << max_B << "x" << max_T << " batch " << B << "x" << T
                 << " attention " << (kp.attention.algo == kernels::AttentionParams::Algo::Flash ? "flash" : "naive")
                 << " Br " << kp.attention.Br << " Bc " << kp.attention.Bc);
  Gpt2 cpu(cfg, max_B, max_T, Backend::Cpu);
  Gpt2 gpu(cfg, max_B, max_T, Backend::Cuda, kp);
  REQUIRE(gpu.backend() == Backend::Cuda);
  REQUIRE(gpu.num_params() == cpu.num_params());
  cpu.init_weights(seed);
  const std::vector<float> p0 = params_of(cpu);
  gpu.set_params(p0.data());
  REQUIRE(params_of(gpu) == p0);  // exact round trip through the device

  ParityErrors e;
  AdamWConfig opt;  // defaults: betas 0.9/0.95, wd 0.1, clip 1.0
  const float lr = 1e-3f;
  for (int t = 1; t <= 3; ++t) {
    const Batch b = make_batch(B, T, cfg.vocab_size, seed * 31 + t);
    cpu.zero_grad();
    gpu.zero_grad();
    const float lc = cpu.forward(b.ids.data(), b.targets.data(), B, T);
    const float lg = gpu.forward(b.ids.data(), b.targets.data(), B, T);
    INFO("step " << t << " loss cpu " << lc << " cuda " << lg);
    REQUIRE(std::isfinite(lg));
    e.loss = std::max(e.loss, rel(lg, lc));
    CHECK(rel(lg, lc) <= 1e-4);
    if (t == 1) {
      // random weights at init: the loss is close to ln(V) (not a copy of a constant)
      CHECK(std::fabs(lg - std::log(static_cast<float>(cfg.vocab_size))) < 1.0);
      e.logits = max_rel(logits_of(gpu, B, T), logits_of(cpu, B, T));
      CHECK(e.logits <= 1e-4);
    }
    cpu.backward(1.0f);
    gpu.backward(1.0f);
    if (t == 1) {
      const std::vector<float> gc = grads_of(cpu), gg = grads_of(gpu);
      for (const auto& pt : cpu.layout()) {
        const double err = max_rel(gg, gc, pt.offset, pt.numel);
        INFO("gradient " << pt.name << " max-norm rel err " << err);
        CHECK(err <= 1e-3);
        if (err >= e.grad) e.grad = err, e.worst_grad = pt.name;
      }
      const double nc = cpu.grad_norm(), ng = gpu.grad_norm();
      CHECK(ng > 0.0);
      e.norm = rel(ng, nc);
      CHECK(e.norm <= 1e-4);
    }
    const double nc = cpu.step(t, lr, opt), ng = gpu.step(t, lr, opt);
    CHECK(rel(ng, nc) <= 1e-4);
    e.norm = std::max(e.norm, rel(ng, nc));
  }
  const std::vector<float> pc = params_of(cpu), pg = params_of(gpu);
  CHECK(pg != p0);  // the steps moved the parameters
  e.params = max_rel(pg, pc);
  CHECK(e.params <= 1e-4);
  std::vector<float> mc(cpu.num_params()), vc(mc.size()), mg(mc.size()), vg(mc.size());
  cpu.get_moments(mc.data(), vc.data());
  gpu.get_moments(mg.data(), vg.data());
  e.m = max_rel(mg, mc);
  e.v = max_rel(vg, vc);
  CHECK(e.m <= 1e-3);
  CHECK(e.v <= 1e-3);
  return e;
}

void print_errors(const char* what, const ParityErrors& e) {
  std::printf(
      "gpt2 cuda vs cpu %s: loss %.2e logits %.2e grad %.2e (%s) norm %.2e params(3 steps) %.2e m %.2e v %.2e\n",
      what, e.loss, e.logits, e.grad, e.worst_grad.c_str(), e.norm, e.params, e.m, e.v);
}

}  // namespace

TEST_CASE("gpt2 cuda: Backend::Cuda without a usable GPU throws Error(Environment)", "[cuda]") {
  if (rtx::test::have_gpu()) return;  // covered by the cases below on a GPU machine
  const Gpt2Config cfg = tiny_config();
  CHECK(error_of([&] { Gpt2 m(cfg, 1, 4, Backend::Cuda); }) == ErrorCategory::Environment);
  CHECK(error_of([&] { detail::make_gpt2_cuda(cfg, gpt2_param_layout(cfg), 1, 4, {}); }) ==
        ErrorCategory::Environment);
}

TEST_CASE("gpt2 cuda: tiny odd config matches the CPU backend at odd shapes and attention kernels", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  const Gpt2Config cfg = tiny_config();
  Gpt2KernelParams flash, naive, odd_tiles;
  naive.attention.algo = kernels::AttentionParams::Algo::Naive;
  odd_tiles.attention.Br = 5;
  odd_tiles.attention.Bc = 3;
  struct Shape {
    int B, T;
  };
  for (const Shape s : {Shape{3, 11}, Shape{1, 1}, Shape{3, 16}, Shape{2, 7}}) {
    const ParityErrors e = check_parity(cfg, 3, 16, s.B, s.T, flash, 1000 + s.B * 17 + s.T);
    print_errors(("tiny " + std::to_string(s.B) + "x" + std::to_string(s.T) + " flash").c_str(), e);
  }
  print_errors("tiny 3x11 naive", check_parity(cfg, 3, 16, 3, 11, naive, 77));
  print_errors("tiny 3x11 flash Br5 Bc3", check_parity(cfg, 3, 16, 3, 11, odd_tiles, 78));
}

TEST_CASE("gpt2 cuda: gpt2-tiny (vocab 50257) matches the CPU backend", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  const Gpt2Config cfg = Gpt2Config::preset("gpt2-tiny");
  print_errors("gpt2-tiny 4x64", check_parity(cfg, 4, 64, 4, 64, {}, 5));
  print_errors("gpt2-tiny 3x37", check_parity(cfg, 4, 64, 3, 37, {}, 6));
}

TEST_CASE("gpt2 cuda: forward without targets gives NaN and the CPU logits", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  const Gpt2Config cfg = tiny_config();
  Gpt2 cpu(cfg, 2, 9, Backend::Cpu), gpu(cfg, 2, 9, Backend::Cuda);
  cpu.init_weights(3);
  const std::vector<float> p = params_of(cpu);
  gpu.set_params(p.data());
  const Batch b = make_batch(2, 9, cfg.vocab_size, 4);
  CHECK(std::isnan(gpu.forward(b.ids.data(), nullptr, 2, 9)));
  cpu.forward(b.ids.data(), nullptr, 2, 9);
  CHECK(max_rel(logits_of(gpu, 2, 9), logits_of(cpu, 2, 9)) <= 1e-4);
}

TEST_CASE("gpt2 cuda: two runs are bitwise identical", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  const Gpt2Config cfg = tiny_config();
  struct Run {
    std::vector<float> losses, logits, grads, params, m, v;
    std::vector<double> norms;
  };
  auto run = [&]() {
    Gpt2 gpu(cfg, 3, 16, Backend::Cuda);
    gpu.init_weights(11);
    Run r;
    AdamWConfig opt;
    for (int t = 1; t <= 2; ++t) {
      const Batch b = make_batch(3, 13, cfg.vocab_size, 100 + t);
      gpu.zero_grad();
      r.losses.push_back(gpu.forward(b.ids.data(), b.targets.data(), 3, 13));
      gpu.backward(1.0f);
      r.norms.push_back(gpu.step(t, 3e-3f, opt));
    }
    r.logits = logits_of(gpu, 3, 13);
    r.grads = grads_of(gpu);
    r.params = params_of(gpu);
    r.m.resize(r.params.size());
    r.v.resize(r.params.size());
    gpu.get_moments(r.m.data(), r.v.data());
    return r;
  };
  const Run a = run(), b = run();
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  CHECK(same(a.losses, b.losses));
  CHECK(same(a.norms, b.norms));
  CHECK(same(a.logits, b.logits));
  CHECK(same(a.grads, b.grads));
  CHECK(same(a.params, b.params));
  CHECK(same(a.m, b.m));
  CHECK(same(a.v, b.v));
}

TEST_CASE("gpt2 cuda: gradient accumulation with loss_scale matches one batch and the CPU", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  const Gpt2Config cfg = tiny_config();
  const int B = 2, T = 9;
  Gpt2 cpu(cfg, 2 * B, T, Backend::Cpu), gpu(cfg, 2 * B, T, Backend::Cuda);
  cpu.init_weights(21);
  const std::vector<float> p = params_of(cpu);
  gpu.set_params(p.data());
  const Batch b1 = make_batch(B, T, cfg.vocab_size, 31), b2 = make_batch(B, T, cfg.vocab_size, 32);
  // K = 2 half batches with loss_scale 1/2 on both backends
  for (Gpt2* m : {&cpu, &gpu}) {
    m->zero_grad();
    m->forward(b1.ids.data(), b1.targets.data(), B, T);
    m->backward(0.5f);
    m->forward(b2.ids.data(), b2.targets.data(), B, T);
    m->backward(0.5f);
  }
  const std::vector<float> acc_gpu = grads_of(gpu), acc_cpu = grads_of(cpu);
  for (const auto& pt : cpu.layout()) {
    INFO("gradient " << pt.name);
    CHECK(max_rel(acc_gpu, acc_cpu, pt.offset, pt.numel) <= 1e-3);
  }
  // the same two halves as one (2B, T) batch: the mean loss is the mean of the halves' means
  Batch full;
  for (const Batch* h : {&b1, &b2}) {
    full.ids.insert(full.ids.end(), h->ids.begin(), h->ids.end());
    full.targets.insert(full.targets.end(), h->targets.begin(), h->targets.end());
  }
  gpu.zero_grad();
  gpu.forward(full.ids.data(), full.targets.data(), 2 * B, T);
  gpu.backward(1.0f);
  const std::vector<float> one = grads_of(gpu);
  for (const auto& pt : cpu.layout()) {
    INFO("gradient " << pt.name);
    CHECK(max_rel(acc_gpu, one, pt.offset, pt.numel) <= 1e-4);
  }
}

TEST_CASE("gpt2 cuda: bad input is rejected and leaves the model usable", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  const Gpt2Config cfg = tiny_config();
  const auto layout = gpt2_param_layout(cfg);
  // direct backend construction: sizes and a layout of another config
  CHECK(error_of([&] { detail::make_gpt2_cuda(cfg, layout, 0, 4, {}); }) == ErrorCategory::Input);
  CHECK(error_of([&] { detail::make_gpt2_cuda(cfg, layout, 2, cfg.block_size + 1, {}); }) == ErrorCategory::Input);
  Gpt2Config other = cfg;
  other.n_embd = 30;
  CHECK(error_of([&] { detail::make_gpt2_cuda(cfg, gpt2_param_layout(other), 2, 4, {}); }) == ErrorCategory::Input);
  Gpt2Config bad = cfg;
  bad.n_head = 5;  // 24 % 5 != 0
  CHECK(error_of([&] { detail::make_gpt2_cuda(bad, layout, 2, 4, {}); }) == ErrorCategory::Input);
  // calls out of order on a fresh backend
  auto be = detail::make_gpt2_cuda(cfg, layout, 2, 8, {});
  CHECK(error_of([&] { be->backward(1.0f); }) == ErrorCategory::Usage);
  std::vector<float> sink(static_cast<size_t>(2) * 8 * cfg.vocab_size);
  CHECK(error_of([&] { be->get_logits(sink.data()); }) == ErrorCategory::Usage);
  CHECK(error_of([&] { be->step(0, 1e-3f, AdamWConfig{}); }) == ErrorCategory::Input);
  const Batch ok = make_batch(2, 8, cfg.vocab_size, 9);
  CHECK(error_of([&] { be->forward(ok.ids.data(), ok.targets.data(), 3, 8); }) == ErrorCategory::Input);
  CHECK(error_of([&] { be->forward(ok.ids.data(), ok.targets.data(), 2, 9); }) == ErrorCategory::Input);
  be->forward(ok.ids.data(), nullptr, 2, 8);
  CHECK(error_of([&] { be->backward(1.0f); }) == ErrorCategory::Usage);  // last forward had no targets

  // through Gpt2: batch too large, ids/targets out of range
  Gpt2 gpu(cfg, 2, 8, Backend::Cuda);
  gpu.init_weights(5);
  const float before = gpu.forward(ok.ids.data(), ok.targets.data(), 2, 8);
  CHECK(error_of([&] { gpu.forward(ok.ids.data(), ok.targets.data(), 3, 8); }) == ErrorCategory::Input);
  CHECK(error_of([&] { gpu.forward(ok.ids.data(), ok.targets.data(), 2, 9); }) == ErrorCategory::Input);
  Batch bad_ids = ok;
  bad_ids.ids[5] = cfg.vocab_size;
  CHECK(error_of([&] { gpu.forward(bad_ids.ids.data(), bad_ids.targets.data(), 2, 8); }) == ErrorCategory::Input);
  Batch bad_tgt = ok;
  bad_tgt.targets[3] = -1;
  CHECK(error_of([&] { gpu.forward(bad_tgt.ids.data(), bad_tgt.targets.data(), 2, 8); }) == ErrorCategory::Input);
  const float after = gpu.forward(ok.ids.data(), ok.targets.data(), 2, 8);
  CHECK(std::memcmp(&before, &after, sizeof(float)) == 0);
}

TEST_CASE("gpt2 cuda: memory() reports the device buffers", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  const Gpt2Config cfg = tiny_config();
  Gpt2 gpu(cfg, 3, 16, Backend::Cuda);
  const Gpt2Memory m = gpu.memory();
  // each tensor starts on a 256-byte boundary on the device: at most 252 bytes of padding per tensor
  const size_t p = gpu.num_params() * sizeof(float), pad = gpu.layout().size() * 252;
  CHECK(m.params >= p);
  CHECK(m.params <= p + pad);
  CHECK(m.grads == m.params);
  CHECK(m.optimizer == 2 * m.params);
  // at least the logits, dlogits and one layer's activations for 3 x 16 rows
  const size_t BT = 3 * 16;
  CHECK(m.activations >= (2 * BT * cfg.vocab_size + BT * 12 * cfg.n_embd) * sizeof(float));
  CHECK(m.total() == m.params + m.grads + m.optimizer + m.activations);
}
