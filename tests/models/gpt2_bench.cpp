// gpt2_bench: CPU training-step timing of rtx's GPT-2 (forward + backward + AdamW), the number
// compared with PyTorch eager (tests/reference/gpt2_torch_bench.py). Not a test; prints one line.
// Usage: gpt2_bench [preset=shakespeare-char-cpu] [B=12] [T=block] [steps=30] [blocked|blas] [direct|graph|graph_unfused|both|all]
// (both: a direct and a graph model in the same process, their steps alternating; all: also the
// graph engine without fusion; prints the ratios to direct)
#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <omp.h>

#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/models/gpt2.hpp"

using namespace rtx::models;
using Clock = std::chrono::steady_clock;

namespace {
/// CPU time of the whole process (all threads), ms: less sensitive than wall time to a busy machine.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string preset = argc > 1 ? argv[1] : "shakespeare-char-cpu";
    const Gpt2Config cfg = Gpt2Config::preset(preset);
    const int B = argc > 2 ? std::atoi(argv[2]) : 12;
    const int T = argc > 3 ? std::atoi(argv[3]) : cfg.block_size;
    const int steps = argc > 4 ? std::atoi(argv[4]) : 30;
    const std::string impl = argc > 5 ? argv[5] : "blocked";
    const std::string engines = argc > 6 ? argv[6] : "direct";
    Gpt2KernelParams kp;
    kp.matmul.impl = impl == "blas" ? rtx::kernels::MatmulImpl::Blas : rtx::kernels::MatmulImpl::Blocked;
    // "both": a direct and a graph model, their steps alternating (same batches), so a busy
    // machine slows both alike.
    // "all": direct, graph (fused) and graph_unfused (the graph engine without the fusion passes).
    std::vector<std::string> list;
    if (engines == "both")
      list = {"direct", "graph"};
    else if (engines == "all")
      list = {"direct", "graph", "graph_unfused"};
    else
      list = {engines};
    std::vector<std::unique_ptr<Gpt2>> models;
    for (const std::string& e : list) {
      Gpt2KernelParams k = kp;
      k.graph_fusion = e != "graph_unfused";
      models.push_back(std::make_unique<Gpt2>(cfg, B, T, Backend::Cpu, k, parse_engine(e == "graph_unfused" ? "graph" : e)));
      models.back()->init_weights(1337);
    }
    const size_t n = static_cast<size_t>(B) * T;
    std::vector<int32_t> ids(n * (steps + 3)), tg(ids.size());
    rtx::kernels::fill_ids(ids.data(), ids.size(), 1, 0, cfg.vocab_size);
    rtx::kernels::fill_ids(tg.data(), tg.size(), 1, 1, cfg.vocab_size);
    struct Times {
      std::vector<double> total, fwd, bwd, opt, cpu;
      float loss = 0;
    };
    std::vector<Times> tm(models.size());
    for (int s = 0; s < steps + 3; ++s) {  // 3 warm-up steps
      for (size_t k = 0; k < models.size(); ++k) {
        Gpt2& m = *models[(k + static_cast<size_t>(s)) % models.size()];  // alternate which goes first
        Times& t = tm[(k + static_cast<size_t>(s)) % models.size()];
        const double c0 = cpu_ms();
        const auto t0 = Clock::now();
        m.zero_grad();
        t.loss = m.forward(ids.data() + s * n, tg.data() + s * n, B, T);
        const auto t1 = Clock::now();
        m.backward();
        const auto t2 = Clock::now();
        m.step(s + 1, 1e-3f, AdamWConfig{});
        const auto t3 = Clock::now();
        const double c1 = cpu_ms();
        if (s < 3) continue;
        t.cpu.push_back(c1 - c0);
        auto ms = [](Clock::time_point a, Clock::time_point b) {
          return std::chrono::duration<double, std::milli>(b - a).count();
        };
        t.total.push_back(ms(t0, t3));
        t.fwd.push_back(ms(t0, t1));
        t.bwd.push_back(ms(t1, t2));
        t.opt.push_back(ms(t2, t3));
      }
    }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    for (size_t k = 0; k < models.size(); ++k) {
      const Times& t = tm[k];
      const double ms = med(t.total);
      std::printf("gpt2_bench %s B=%d T=%d threads=%d matmul=%s engine=%s: %.2f ms/step (fwd %.2f, bwd %.2f, adamw %.2f ms), "
                  "%.0f tokens/s, min %.2f ms, cpu time %.2f ms/step, last loss %.4f, activations %zu B\n",
                  preset.c_str(), B, T, omp_get_max_threads(), impl.c_str(), list[k].c_str(), ms, med(t.fwd),
                  med(t.bwd), med(t.opt), 1000.0 * static_cast<double>(n) / ms,
                  *std::min_element(t.total.begin(), t.total.end()), med(t.cpu), t.loss, models[k]->memory().activations);
    }
    for (size_t k = 1; k < models.size(); ++k)
      std::printf("gpt2_bench %s / direct: step time %.3fx (min %.3fx), activation bytes %.3fx\n", list[k].c_str(),
                  med(tm[k].total) / med(tm[0].total),
                  *std::min_element(tm[k].total.begin(), tm[k].total.end()) / *std::min_element(tm[0].total.begin(), tm[0].total.end()),
                  static_cast<double>(models[k]->memory().activations) / static_cast<double>(models[0]->memory().activations));
    return 0;
  } catch (const rtx::Error& e) {
    std::fprintf(stderr, "gpt2_bench: %s\n", e.what());
    return e.exit_code();
  }
}
