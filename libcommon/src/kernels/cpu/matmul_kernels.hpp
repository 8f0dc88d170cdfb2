// Internal: the micro-kernel interface of the blocked CPU matmul and the per-ISA lookups
// (matmul_avx512.cpp, matmul_avx2.cpp, scalar in matmul_cpu.cpp).
#pragma once
#include <cstdint>

namespace rtx::kernels::matmul_detail {

/// C tile (MR,NR) with row stride ldc  (=, or += when `accumulate`)  a (kc,MR) packed  x
/// b (kc,NR) packed, i.e. c[i][j] (+)= sum_k a[k*MR+i] * b[k*NR+j], k ascending, one fused
/// multiply-add per k. When `bias` (NR) is non-null and !accumulate, c = bias + sum.
/// `b` is 64-byte aligned; c need not be.
using MicroKernel = void (*)(int kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate,
                             const float* bias);

/// The AVX-512 micro-kernel for MR x NR, or nullptr when that tile is not compiled.
MicroKernel avx512_micro_kernel(int MR, int NR);
/// AVX-512 transposing pack of one panel whose rows are contiguous along k:
/// dst[k*R + r] = src[r*rs + k] for r < rows, 0 for rows <= r < R (k < kc; R <= 64).
/// The bf16 overload converts to f32 (exact). 16x16 in-register transposes.
void avx512_pack_transpose(const float* src, int64_t rs, int rows, int kc, int R, float* dst);
void avx512_pack_transpose(const uint16_t* src, int64_t rs, int rows, int kc, int R, float* dst);

/// The AVX2+FMA micro-kernel for MR x NR, or nullptr when that tile is not compiled.
MicroKernel avx2_micro_kernel(int MR, int NR);

}  // namespace rtx::kernels::matmul_detail
