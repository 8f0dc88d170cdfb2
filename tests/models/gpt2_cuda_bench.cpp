// gpt2_cuda_bench: GPT-2 training-step throughput on the CUDA backend (tokens/s, ms per step split
// into forward, backward and AdamW, achieved FLOP/s). An executable for the GPU machine, not a test.
//   usage: gpt2_cuda_bench [preset (gpt2)] [B (4)] [T (1024)] [steps (10)]
// Trains on one fixed random batch, so the printed loss must fall. Exit 3 without a GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/models/gpt2.hpp"

using rtx::models::Backend;
using rtx::models::Gpt2;
using rtx::models::Gpt2Config;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int run(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "gpt2";
  int B = argc > 2 ? std::atoi(argv[2]) : 4;
  const int T = argc > 3 ? std::atoi(argv[3]) : 1024;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 10;
  if (B < 1 || T < 1 || steps < 1) {
    std::fprintf(stderr, "usage: gpt2_cuda_bench [preset] [B >= 1] [T >= 1] [steps >= 1]\n");
    return 2;
  }
  if (rtx::cuda_device_count() == 0) {
    std::fprintf(stderr, "gpt2_cuda_bench: SKIPPED: no usable CUDA device (%s)\n",
                 rtx::cuda_unavailable_reason().c_str());
    return 3;
  }
  const Gpt2Config cfg = Gpt2Config::preset(preset);
  std::unique_ptr<Gpt2> model;
  while (!model) {  // halve the batch when the device runs out of memory
    try {
      model = std::make_unique<Gpt2>(cfg, B, T, Backend::Cuda);
    } catch (const rtx::Error& e) {
      if (e.category() != rtx::ErrorCategory::Environment || B == 1) throw;
      std::fprintf(stderr, "B=%d does not fit (%s); trying B=%d\n", B, e.what(), B / 2);
      B /= 2;
    }
  }
  const double t0 = now_ms();
  model->init_weights(1337);
  const double init_ms = now_ms() - t0;

  rtx::Philox rng(42);
  std::vector<int32_t> ids(static_cast<size_t>(B) * T), targets(ids.size());
  for (auto& x : ids) x = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(cfg.vocab_size));
  for (auto& x : targets) x = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(cfg.vocab_size));

  const rtx::models::AdamWConfig opt;
  std::vector<double> fwd, bwd, upd, total;
  float first_loss = 0.f, last_loss = 0.f;
  const int warmup = 2;  // the first forward plans the cuBLASLt GEMMs
  for (int s = 1; s <= warmup + steps; ++s) {
    const double a = now_ms();
    model->zero_grad();
    const float loss = model->forward(ids.data(), targets.data(), B, T);
    const double b = now_ms();
    model->backward(1.0f);
    const double c = now_ms();
    const double norm = model->step(s, 3e-4f, opt);
    const double d = now_ms();
    if (s == 1) first_loss = loss;
    last_loss = loss;
    std::printf("step %3d  loss %.4f  grad norm %.3f  %.2f ms\n", s, loss, norm, d - a);
    if (s > warmup) {
      fwd.push_back(b - a);
      bwd.push_back(c - b);
      upd.push_back(d - c);
      total.push_back(d - a);
    }
  }
  const double ms = median(total);
  const double tokens = static_cast<double>(B) * T;
  // training FLOPs per token: 6 N (matmuls, fwd+bwd) + 12 L T C (attention scores, PaLM appendix B)
  const double flops = tokens * (6.0 * static_cast<double>(model->num_params()) +
                                 12.0 * cfg.n_layer * static_cast<double>(T) * cfg.n_embd);
  const auto mem = model->memory();
  std::printf("gpt2_cuda_bench %s (%zu params) B=%d T=%d, median of %d steps:\n", preset.c_str(), model->num_params(),
              B, T, steps);
  std::printf("  step %.2f ms (forward %.2f ms, backward %.2f ms, AdamW %.2f ms)\n", ms, median(fwd), median(bwd),
              median(upd));
  std::printf("  %.0f tokens/s, %.2f TFLOP/s (f32, no TF32)\n", tokens / (ms * 1e-3), flops / (ms * 1e-3) / 1e12);
  std::printf("  memory %.1f MiB (params %.1f, grads %.1f, AdamW %.1f, activations %.1f); init_weights %.0f ms\n",
              mem.total() / 1048576.0, mem.params / 1048576.0, mem.grads / 1048576.0, mem.optimizer / 1048576.0,
              mem.activations / 1048576.0, init_ms);
  std::printf("  loss %.4f -> %.4f on one repeated batch (%s)\n", first_loss, last_loss,
              last_loss < first_loss ? "falling: ok" : "NOT falling");
  return last_loss < first_loss ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const rtx::Error& e) {
    std::fprintf(stderr, "gpt2_cuda_bench: %s\n", e.what());
    return e.exit_code();
  }
}
