// Internal helpers shared by the CUDA kernel files: stream casts, warp reductions, bf16
// loads, argument checks. Not a public header.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "rtx/core/cuda_check.hpp"
#include "rtx/core/error.hpp"
#include "kernels/cuda/launch_note.cuh"

namespace rtx::kernels::cuda::detail {

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Let `kernel` launch with up to `smem` bytes of dynamic shared memory on the current device
/// (past 48 KiB a kernel must opt in: cudaFuncAttributeMaxDynamicSharedMemorySize). The
/// attribute is a per-kernel ceiling, not the launch's size, so it is only ever raised, under a
/// lock: two threads launching one kernel with different tiles cannot lower it between the
/// other's set and launch (that launch would fail for too much shared memory).
inline void allow_dynamic_smem(const void* kernel, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> ceiling;
  int dev = 0;
  RTX_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  size_t& have = ceiling[{kernel, dev}];
  if (smem <= have) return;
  RTX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  have = smem;
}

/// Throws Error(Input) when a size is not positive; `what` names the function and dim.
inline void require_positive(int64_t v, const char* fn, const char* dim) {
  if (v <= 0)
    throw_input(std::string(fn) + ": dimension " + dim + " = " + std::to_string(v) + " must be positive", fn,
                "pass positive sizes");
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
/// `shm` holds 32 floats. Fixed reduction tree: deterministic.
__device__ __forceinline__ float block_sum(float v, float* shm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shm[lane] : 0.f;
  return warp_sum(r);
}

/// Block-wide max, same contract as block_sum.
__device__ __forceinline__ float block_max(float v, float* shm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shm[lane] : -INFINITY;
  return warp_max(r);
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

}  // namespace rtx::kernels::cuda::detail
