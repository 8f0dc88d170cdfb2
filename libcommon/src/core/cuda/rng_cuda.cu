// CUDA Philox uniform fill: one thread per Philox block of 4 outputs, grid-stride loop.
// Matches rtx::philox_uniform (philox.hpp) bitwise; see rtx/core/cuda_rng.hpp.
#include <cuda_runtime_api.h>

#include "rtx/core/cuda_check.hpp"
#include "rtx/core/cuda_rng.hpp"
#include "rtx/core/philox.hpp"

namespace rtx {
namespace {

// out (n,) f32. Element i is word i%4 of philox(counter {i/4, subseq}, key seed), the
// stream of philox_u32; the affine map uses explicit _rn intrinsics so nvcc cannot fuse
// it into an FMA (the CPU computes two separately rounded operations).
__global__ void fill_uniform_kernel(float* out, uint64_t n, uint64_t seed, uint64_t subseq, float lo, float hi) {
  const uint64_t nblk = (n + 3) / 4;
  const float span = __fsub_rn(hi, lo);
  for (uint64_t blk = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; blk < nblk;
       blk += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const U32x4 c{{static_cast<uint32_t>(blk), static_cast<uint32_t>(blk >> 32), static_cast<uint32_t>(subseq),
                   static_cast<uint32_t>(subseq >> 32)}};
    const U32x4 r = philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    const uint64_t base = blk * 4;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (base + k < n) out[base + k] = __fadd_rn(lo, __fmul_rn(span, u32_to_unit_float(r.v[k])));
    }
  }
}

}  // namespace

void cuda_fill_uniform(float* dev, size_t n, uint64_t seed, uint64_t subseq, float lo, float hi, void* stream) {
  if (n == 0) return;
  if (!dev) throw_usage("device pointer is null for " + std::to_string(n) + " elements", "cuda_fill_uniform(dev)");
  const uint64_t nblk = (static_cast<uint64_t>(n) + 3) / 4;
  const int threads = 256;
  const uint64_t want = (nblk + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(want < 65536 ? want : 65536);
  fill_uniform_kernel<<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(dev, n, seed, subseq, lo, hi);
  RTX_CUDA_CHECK_LAUNCH();
}

}  // namespace rtx
