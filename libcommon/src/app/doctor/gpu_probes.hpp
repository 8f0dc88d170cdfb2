// Internal: rtx-doctor's GPU performance probes (device copy bandwidth, bf16 cuBLAS GEMM).
// Implemented in cuda/gpu_probes.cu (CUDA builds) or gpu_probes_nocuda.cpp. Not a public header.
#pragma once
#include <cstdint>
#include <string>

namespace rtx::app::doctor::detail {

/// Results for one device; a probe that could not run leaves its value 0 and says why in `error`.
struct GpuProbeResult {
  int device = 0;
  uint64_t copy_bytes = 0;        ///< bytes copied per cudaMemcpy D2D
  double copy_bytes_per_s = 0;    ///< 2 x copy_bytes / best time (read + write), B/s
  int gemm_n = 0;                 ///< M = N = K
  double bf16_flops = 0;          ///< 2 n^3 / best time, FLOP/s (bf16 in, fp32 accumulate)
  std::string error;              ///< "" when both probes ran
};

/// Run both probes on `device`: copy `copy_bytes` (>= 1 GiB per the issue) best of `repeats`,
/// cublasGemmEx n x n x n best of `repeats` after a warm-up. Never throws.
GpuProbeResult probe_gpu(int device, uint64_t copy_bytes, int gemm_n, int repeats);

}  // namespace rtx::app::doctor::detail
