// rtx-doctor GPU probes: cudaMemcpy device-to-device bandwidth (read + write counted) and a
// bf16 cublasGemmEx (bf16 A/B/C, fp32 compute) timed with CUDA events. Errors become text.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "app/doctor/gpu_probes.hpp"

namespace rtx::app::doctor::detail {
namespace {

/// Frees what it owns on every path; records the first CUDA/cuBLAS error as text.
struct Ctx {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cublasHandle_t h = nullptr;
  std::string err;
  ~Ctx() {
    if (h) cublasDestroy(h);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaGetLastError();
  }
  bool ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    if (err.empty()) err = std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    cudaGetLastError();
    return false;
  }
  bool ok(cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    if (err.empty()) err = std::string(what) + ": cublasStatus " + std::to_string(static_cast<int>(s));
    return false;
  }
  void release() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    a = b = c = nullptr;
  }
};

/// Best elapsed seconds of `repeats` timed calls of `f` between e0/e1 (after one warm-up).
template <class F>
double best_seconds(Ctx& x, int repeats, F f) {
  if (!f()) return 0;  // warm-up
  if (!x.ok(cudaDeviceSynchronize(), "warm-up")) return 0;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    if (!x.ok(cudaEventRecord(x.e0), "cudaEventRecord")) return 0;
    if (!f()) return 0;
    if (!x.ok(cudaEventRecord(x.e1), "cudaEventRecord")) return 0;
    if (!x.ok(cudaEventSynchronize(x.e1), "cudaEventSynchronize")) return 0;
    float ms = 0;
    if (!x.ok(cudaEventElapsedTime(&ms, x.e0, x.e1), "cudaEventElapsedTime")) return 0;
    const double s = ms * 1e-3;
    if (best == 0 || s < best) best = s;
  }
  return best;
}

}  // namespace

GpuProbeResult probe_gpu(int device, uint64_t copy_bytes, int gemm_n, int repeats) {
  GpuProbeResult r;
  r.device = device;
  r.copy_bytes = copy_bytes;
  r.gemm_n = gemm_n;
  repeats = std::max(1, repeats);
  Ctx x;
  if (!x.ok(cudaSetDevice(device), "cudaSetDevice") || !x.ok(cudaEventCreate(&x.e0), "cudaEventCreate") ||
      !x.ok(cudaEventCreate(&x.e1), "cudaEventCreate")) {
    r.error = x.err;
    return r;
  }
  // Device-to-device copy: each byte is read once and written once.
  if (x.ok(cudaMalloc(&x.a, copy_bytes), "cudaMalloc(copy src)") &&
      x.ok(cudaMalloc(&x.b, copy_bytes), "cudaMalloc(copy dst)") &&
      x.ok(cudaMemset(x.a, 1, copy_bytes), "cudaMemset")) {
    const double s = best_seconds(x, repeats, [&] {
      return x.ok(cudaMemcpyAsync(x.b, x.a, copy_bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync D2D");
    });
    if (s > 0) r.copy_bytes_per_s = 2.0 * static_cast<double>(copy_bytes) / s;
  }
  x.release();
  // bf16 GEMM, fp32 accumulate: C(n,n) = A(n,n) B(n,n), column-major, 2 n^3 FLOP. Inputs are a
  // non-zero constant (bf16 0x3c3c ~ 0.0115) so the tensor cores do real work.
  const size_t n = static_cast<size_t>(gemm_n);
  const size_t bytes = n * n * sizeof(__nv_bfloat16);
  if (x.ok(cublasCreate(&x.h), "cublasCreate") && x.ok(cudaMalloc(&x.a, bytes), "cudaMalloc(A)") &&
      x.ok(cudaMalloc(&x.b, bytes), "cudaMalloc(B)") && x.ok(cudaMalloc(&x.c, bytes), "cudaMalloc(C)") &&
      x.ok(cudaMemset(x.a, 0x3c, bytes), "cudaMemset") && x.ok(cudaMemset(x.b, 0x3c, bytes), "cudaMemset")) {
    const float alpha = 1.0f, beta = 0.0f;
    const int ni = gemm_n;
    const double s = best_seconds(x, repeats, [&] {
      return x.ok(cublasGemmEx(x.h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, x.a, CUDA_R_16BF, ni, x.b,
                               CUDA_R_16BF, ni, &beta, x.c, CUDA_R_16BF, ni, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx(bf16)");
    });
    if (s > 0) r.bf16_flops = 2.0 * static_cast<double>(n) * n * n / s;
  }
  r.error = x.err;
  return r;
}

}  // namespace rtx::app::doctor::detail
