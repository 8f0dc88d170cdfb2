// Philox uniform fill on the GPU: the same stream as rtx::philox_uniform on the CPU, bit for bit.
// Declared in every build; without the CUDA backend the call throws rtx::Error(Environment).
#pragma once
#include <cstddef>
#include <cstdint>

namespace rtx {

/// Fill dev[0..n) (f32, device memory) with dev[i] = philox_uniform(seed, subseq, i, lo, hi)
/// (rtx/core/philox.hpp), computed as lo + (hi - lo) * u with IEEE round-to-nearest and no
/// FMA contraction, so the values equal the CPU's bitwise. Asynchronous on `stream`
/// (a cudaStream_t; nullptr is the legacy default stream). n == 0 does nothing.
/// Throws rtx::Error(Usage) for dev == nullptr with n > 0, rtx::Error(Environment) when
/// the CUDA backend is not built, and the RTX_CUDA_CHECK error of a failed launch.
void cuda_fill_uniform(float* dev, size_t n, uint64_t seed, uint64_t subseq, float lo, float hi, void* stream);

}  // namespace rtx
