// ops_bench: throughput of the bandwidth-bound CPU ops against a STREAM-style triad run alternately
// with each op, and flash vs naive attention times. A benchmark executable, not a test. Usage: ops_bench [--quick]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/registry.hpp"

using namespace rtx;
using namespace rtx::kernels;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// STREAM triad a = b + s*c (McCalpin), OpenMP static; bytes counted as STREAM does: 3 arrays x 4 B.
struct Triad {
  std::vector<float> a, b, c;
  explicit Triad(size_t n) : a(n), b(n, 1.f), c(n, 2.f) {
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); ++i) a[i] = 0.f;
    once();  // first touch, warm-up
  }
  /// One triad pass; returns GB/s.
  double once() {
    const size_t n = a.size();
    const auto t0 = std::chrono::steady_clock::now();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); ++i) pa[i] = pb[i] + 3.f * pc[i];
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return 12.0 * static_cast<double>(n) / dt / 1e9;
  }
};

double time_op(const std::string& op, const std::string& variant, const Shape& s, const Params& p, int reps) {
  const Variant& v = registry().variant(op, variant);
  auto inst = v.make(s, DType::F32, p, 1);
  inst->run();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(inst->timed_run());
  return median(t);
}

/// Median op time and median triad GB/s over `reps` alternating runs (triad, op, triad, op, ...):
/// this VM's bandwidth drifts by 20% over seconds, so the op is compared with the triad measured
/// in the same window, not with one measured at the start.
std::pair<double, double> time_op_vs_triad(Triad& tr, const std::string& op, const Shape& s, const Params& p, int reps) {
  const Variant& v = registry().variant(op, "cpu.vec");
  auto inst = v.make(s, DType::F32, p, 1);
  inst->run();
  std::vector<double> t, g;
  for (int r = 0; r < reps; ++r) {
    g.push_back(tr.once());
    t.push_back(inst->timed_run());
  }
  return {median(t), median(g)};
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const size_t n = quick ? (size_t{1} << 22) : (size_t{1} << 26);  // 256 MiB per f32 tensor: beyond the LLC
  const int reps = quick ? 3 : 9;
  std::printf("ops_bench: %d OpenMP threads, ISA %s, %zu floats per tensor\n", omp_get_max_threads(),
              isa_name(cpu_isa_active()), n);
  Triad tr(n);
  std::printf("%-20s %-28s %10s %9s %9s %12s\n", "op", "shape", "time ms", "GB/s", "of triad", "triad GB/s");
  const int64_t N = static_cast<int64_t>(n);
  struct Case {
    const char* op;
    Shape s;
  };
  const std::vector<Case> cases = {
      {"softmax_forward", {{"N", N / 8192}, {"C", 8192}}}, {"layernorm_forward", {{"N", N / 768}, {"C", 768}}},
      {"gelu_forward", {{"N", N}}},                        {"gelu_backward", {{"N", N}}},
      {"residual_forward", {{"N", N}}},                    {"adamw_update", {{"N", N / 4}}},
  };
  for (const auto& c : cases) {
    const OpDef& op = registry().op(c.op);
    const Variant& v = registry().variant(c.op, "cpu.vec");
    const auto [t, triad] = time_op_vs_triad(tr, c.op, c.s, v.space.defaults(), reps);
    const double gbs = op.work(c.s, DType::F32).bytes / t / 1e9;
    std::printf("%-20s %-28s %10.2f %9.2f %8.0f%% %12.2f\n", c.op, shape_to_string(c.s).c_str(), t * 1e3, gbs,
                100.0 * gbs / triad, triad);
  }
  const int64_t T = quick ? 256 : 1024;
  for (const char* op : {"attention_forward", "attention_backward"}) {
    const Shape s{{"B", 1}, {"T", T}, {"NH", 12}, {"HS", 64}};
    const double tn = time_op(op, "cpu.naive", s, {}, 3);
    const Variant& fv = registry().variant(op, "cpu.flash");
    const double tf = time_op(op, "cpu.flash", s, fv.space.defaults(), 3);
    const double flops = registry().op(op).work(s, DType::F32).flops;
    std::printf("%-20s %-28s naive %8.2f ms (%6.1f GFLOP/s)  flash %8.2f ms (%6.1f GFLOP/s)  speedup %.2fx\n", op,
                shape_to_string(s).c_str(), tn * 1e3, flops / tn / 1e9, tf * 1e3, flops / tf / 1e9, tn / tf);
  }
  return 0;
}
