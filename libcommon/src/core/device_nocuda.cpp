// Device discovery when the CUDA backend is not built: no devices, a clear reason.
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"

#ifndef RTX_HAVE_CUDA
namespace rtx {
int cuda_device_count() noexcept { return 0; }
std::string cuda_unavailable_reason() { return "CUDA backend not built (configure with the CUDA toolkit)"; }
void require_cuda(const std::string& what) {
  throw_env("this rtx build has no CUDA backend", what, "rebuild with the CUDA toolkit installed, or use --backend cpu");
}
}  // namespace rtx
#endif
