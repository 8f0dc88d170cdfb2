// CUDA device discovery and error checking.
#include <cuda_runtime_api.h>

#include "rtx/core/cuda_check.hpp"
#include "rtx/core/device.hpp"

namespace rtx {

void cuda_check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  const std::string where = std::string(file) + ":" + std::to_string(line);
  const std::string msg = std::string(call) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError)
    throw_env(msg, where, "check the NVIDIA driver with nvidia-smi, or use --backend cpu");
  if (e == cudaErrorMemoryAllocation) throw_env(msg, where, "the GPU is out of memory: use a smaller problem");
  throw_internal(msg, where);
}

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return n;
}

std::string cuda_unavailable_reason() {
  // Without a driver the runtime's own error reads "CUDA driver version is insufficient for CUDA
  // runtime version", which sounds like an old driver; cudaDriverGetVersion reports 0 when there
  // is none at all (CUDA Runtime API, cudaDriverGetVersion).
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    cudaGetLastError();
    return "no NVIDIA driver installed (libcuda.so.1 not found)";
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cudaGetErrorString(e);
  }
  return n > 0 ? "" : "no CUDA device found";
}

void require_cuda(const std::string& what) {
  if (cuda_device_count() > 0) return;
  throw_env("no usable CUDA device (" + cuda_unavailable_reason() + ")", what,
            "run on a machine with an NVIDIA GPU and driver, or use --backend cpu");
}

}  // namespace rtx
