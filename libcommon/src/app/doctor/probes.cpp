// rtx-doctor host probes (STREAM triad, OpenBLAS SGEMM) and the GPU datasheet table.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <cmath>
#include <memory>
#include <new>
#include <vector>

#include "rtx/app/doctor.hpp"
#include "rtx/core/error.hpp"

namespace rtx::app::doctor {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
}  // namespace

double stream_triad_bytes_per_s(uint64_t n, int repeats, double budget_s) {
  if (n == 0 || repeats < 1) throw_usage("STREAM triad needs n >= 1 and repeats >= 1", "stream_triad_bytes_per_s");
  const size_t bytes = static_cast<size_t>(n) * sizeof(double);
  auto alloc = [&]() {
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes) != 0 || !p)
      throw_env("cannot allocate " + std::to_string(bytes >> 20) + " MiB for the STREAM probe", "rtx-doctor",
                "free memory or run with --quick");
    return std::unique_ptr<double, FreeDeleter>(static_cast<double*>(p));
  };
  auto a = alloc(), b = alloc(), c = alloc();
  double* A = a.get();
  double* B = b.get();
  double* C = c.get();
  const int64_t N = static_cast<int64_t>(n);
  // First touch in parallel with the same static schedule as the triad (NUMA placement).
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    A[i] = 0.0;
    B[i] = 1.0 + static_cast<double>(i & 1023);
    C[i] = 2.0;
  }
  const double s = 3.0;
  double best = 0, spent = 0;
  for (int r = 0; r < repeats && (r == 0 || budget_s <= 0 || spent < budget_s); ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) A[i] = B[i] + s * C[i];
    const double t = seconds_since(t0);
    spent += t;
    if (best == 0 || t < best) best = t;
  }
  // Verify (exact in float64: small integers).
  double err = 0;
#pragma omp parallel for reduction(max : err) schedule(static)
  for (int64_t i = 0; i < N; ++i) err = std::max(err, std::fabs(A[i] - (B[i] + s * C[i])));
  if (err != 0) throw_internal("STREAM triad produced wrong values (max error " + std::to_string(err) + ")", "rtx-doctor");
  return 24.0 * static_cast<double>(n) / best;
}

double sgemm_flops(int n, int repeats, double budget_s) {
  if (n < 1 || repeats < 1) throw_usage("SGEMM probe needs n >= 1 and repeats >= 1", "sgemm_flops");
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> A(nn), B(nn), C(nn, 0.0f);
  for (size_t i = 0; i < nn; ++i) {
    A[i] = static_cast<float>((i * 7) % 13) * 0.125f - 0.75f;
    B[i] = static_cast<float>((i * 5) % 11) * 0.125f - 0.625f;
  }
  auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
  };
  gemm();  // warm-up (thread pool start, page faults)
  double best = 0, spent = 0;
  for (int r = 0; r < repeats && (r == 0 || budget_s <= 0 || spent < budget_s); ++r) {
    const auto t0 = Clock::now();
    gemm();
    const double t = seconds_since(t0);
    spent += t;
    if (best == 0 || t < best) best = t;
  }
  // Spot-check one element against a float64 dot product.
  const int i = n / 2, j = n - 1;
  double ref = 0;
  for (int k = 0; k < n; ++k) ref += static_cast<double>(A[static_cast<size_t>(i) * n + k]) * B[static_cast<size_t>(k) * n + j];
  const double got = C[static_cast<size_t>(i) * n + j];
  if (std::fabs(got - ref) > 1e-3 * (1.0 + std::fabs(ref)) * std::sqrt(static_cast<double>(n)))
    throw_internal("cblas_sgemm returned a wrong value (" + std::to_string(got) + " vs " + std::to_string(ref) + ")",
                   "rtx-doctor", "check the BLAS installation");
  return 2.0 * static_cast<double>(n) * n * n / best;
}

std::optional<GpuDatasheet> gpu_datasheet(const std::string& name, uint64_t memory_bytes) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  // Vendor datasheet numbers (NVIDIA H100/H200/A100/L40S datasheets, Ada Lovelace whitepaper for the
  // RTX 4090): dense BF16 tensor TFLOP/s with FP32 accumulate (no sparsity) and memory bandwidth.
  if (has("H200")) return GpuDatasheet{"H200", 989e12, 4.8e12};
  if (has("H100") && (has("PCIe") || has("PCIE"))) return GpuDatasheet{"H100 PCIe", 756e12, 2.0e12};
  if (has("H100") && has("NVL")) return GpuDatasheet{"H100 NVL", 835e12, 3.9e12};
  if (has("H100")) return GpuDatasheet{"H100 SXM", 989e12, 3.35e12};
  if (has("A100")) {
    const bool big = has("80GB") || memory_bytes > (48ull << 30);
    return big ? GpuDatasheet{"A100 80GB", 312e12, 2.039e12} : GpuDatasheet{"A100 40GB", 312e12, 1.555e12};
  }
  if (has("L40S")) return GpuDatasheet{"L40S", 362e12, 864e9};
  if (has("4090")) return GpuDatasheet{"RTX 4090", 165.2e12, 1008e9};
  return std::nullopt;
}

}  // namespace rtx::app::doctor
