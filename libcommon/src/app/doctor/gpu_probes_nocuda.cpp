// rtx-doctor GPU probes when the CUDA backend is not built: nothing to measure, say why.
#include "app/doctor/gpu_probes.hpp"

#ifndef RTX_HAVE_CUDA
namespace rtx::app::doctor::detail {
GpuProbeResult probe_gpu(int device, uint64_t copy_bytes, int gemm_n, int repeats) {
  GpuProbeResult r;
  r.device = device;
  r.error = "CUDA backend not built";
  return r;
}
}  // namespace rtx::app::doctor::detail
#endif
