// AVX2 micro-kernels of the blocked CPU matmul: MR x (8*NV) register tiles, one FMA per
// (row, vector) per k. Compiled with a target attribute; only called when the CPU has AVX2 and FMA.
#include <immintrin.h>

#include "matmul_kernels.hpp"

#define RTX_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace rtx::kernels::matmul_detail {
namespace {

constexpr int kVec = 8;  // fp32 lanes per ymm
constexpr int kRegs = 16;

// c (MR, 16*NV) (=|+=) a (kc,MR) x b (kc,16*NV); see MicroKernel in matmul_kernels.hpp.
template <int MR, int NV>
RTX_TARGET_AVX2 void micro_kernel(int kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                                    int64_t ldc, bool accumulate, const float* __restrict bias) {
  __m256 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kVec * NV - 1), _MM_HINT_T0);
  }
  for (int k = 0; k < kc; ++k) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(b + kVec * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_set1_ps(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += kVec * NV;
  }
  if (accumulate) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* p = c + i * ldc + kVec * v;
        _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), acc[i][v]));
      }
  } else if (bias) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m256 bb = _mm256_loadu_ps(bias + kVec * v);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) _mm256_storeu_ps(c + i * ldc + kVec * v, _mm256_add_ps(bb, acc[i][v]));
    }
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + i * ldc + kVec * v, acc[i][v]);
  }
}

// Accumulators + B vectors + one broadcast must fit in the register file.
template <int MR, int NV>
constexpr MicroKernel fit() {
  if constexpr (MR * NV + NV + 1 <= kRegs) return &micro_kernel<MR, NV>;
  else return nullptr;
}

template <int NV>
MicroKernel by_rows(int MR) {
  switch (MR) {
    case 1: return fit<1, NV>();
    case 2: return fit<2, NV>();
    case 4: return fit<4, NV>();
    case 6: return fit<6, NV>();
    case 8: return fit<8, NV>();
    case 12: return fit<12, NV>();
    case 14: return fit<14, NV>();
    default: return nullptr;
  }
}

}  // namespace

MicroKernel avx2_micro_kernel(int MR, int NR) {
  switch (NR) {
    case 8: return by_rows<1>(MR);
    case 16: return by_rows<2>(MR);
    case 24: return by_rows<3>(MR);
    case 32: return by_rows<4>(MR);
    default: return nullptr;
  }
}

}  // namespace rtx::kernels::matmul_detail
