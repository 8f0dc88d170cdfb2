// CUDA backing of the caching allocator: cudaMalloc / cudaFree on one device.
#include <cuda_runtime_api.h>

#include "rtx/core/allocator.hpp"
#include "rtx/core/cuda_check.hpp"
#include "rtx/core/device.hpp"

namespace rtx {

AllocatorBacking cuda_backing(int device) {
  require_cuda("cuda_backing(" + std::to_string(device) + ")");
  AllocatorBacking b;
  b.alloc = [device](size_t n) -> void* {
    RTX_CUDA_CHECK(cudaSetDevice(device));
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the allocator frees its cache and retries
      return nullptr;
    }
    RTX_CUDA_CHECK(e);
    return p;
  };
  b.free = [device](void* p, size_t) {
    RTX_CUDA_CHECK(cudaSetDevice(device));
    RTX_CUDA_CHECK(cudaFree(p));
  };
  b.name = "cuda:" + std::to_string(device);
  return b;
}

}  // namespace rtx
