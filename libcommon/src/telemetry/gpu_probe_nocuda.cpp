// GPU part of the hardware profile when the CUDA backend is not built: no devices, a reason.
#include "telemetry/dynlibs.hpp"

#ifndef RTX_HAVE_CUDA
namespace rtx::telemetry::detail {
void probe_gpus(HardwareProfile& p) {
  p.cuda_built = false;
  p.cuda_unavailable = "CUDA backend not built (configure with the CUDA toolkit)";
  p.nvml_driver = nvml_driver_version();
}
}  // namespace rtx::telemetry::detail
#endif
