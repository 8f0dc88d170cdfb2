// AVX-512 micro-kernels of the blocked CPU matmul: MR x (16*NV) register tiles, one FMA per
// (row, vector) per k. Compiled with a target attribute; only called when the CPU has AVX-512.
// GCC 12 warns "__Y may be used uninitialized" inside its own AVX-512 shuffle intrinsics
// (the _mm512_undefined_* idiom; GCC PR 105593, fixed in 13): silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "matmul_kernels.hpp"

#define RTX_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace rtx::kernels::matmul_detail {
namespace {

constexpr int kVec = 16;  // fp32 lanes per zmm
constexpr int kRegs = 32;

// c (MR, 16*NV) (=|+=) a (kc,MR) x b (kc,16*NV); see MicroKernel in matmul_kernels.hpp.
template <int MR, int NV>
RTX_TARGET_AVX512 void micro_kernel(int kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                                    int64_t ldc, bool accumulate, const float* __restrict bias) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kVec * NV - 1), _MM_HINT_T0);
  }
  for (int k = 0; k < kc; ++k) {
    // Few rows (decode over packed weights): B streams from DRAM once; ask for it 4 KiB ahead
    // (the hardware prefetchers alone leave a core well below its bandwidth). With many rows
    // B is reused from cache and the hint would only cost issue slots.
    if constexpr (MR <= 4)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(b + 1024 + kVec * v), _MM_HINT_T0);
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + kVec * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
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
        _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), acc[i][v]));
      }
  } else if (bias) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m512 bb = _mm512_loadu_ps(bias + kVec * v);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) _mm512_storeu_ps(c + i * ldc + kVec * v, _mm512_add_ps(bb, acc[i][v]));
    }
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + i * ldc + kVec * v, acc[i][v]);
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

// In-register transpose of 16 rows of 16 floats: x[i][j] -> x[j][i] (64 shuffles).
RTX_TARGET_AVX512 inline void transpose16(__m512 x[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {  // lane L: rows 2p,2p+1 interleaved, cols 4L..4L+1 / 4L+2..4L+3
    t[2 * p] = _mm512_unpacklo_ps(x[2 * p], x[2 * p + 1]);
    t[2 * p + 1] = _mm512_unpackhi_ps(x[2 * p], x[2 * p + 1]);
  }
  __m512 s[16];  // s[4q+c] lane L = column 4L+c, rows 4q..4q+3
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m512d lo0 = _mm512_castps_pd(t[4 * q]), lo1 = _mm512_castps_pd(t[4 * q + 2]);
    const __m512d hi0 = _mm512_castps_pd(t[4 * q + 1]), hi1 = _mm512_castps_pd(t[4 * q + 3]);
    s[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
    s[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
    s[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
    s[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // gather lane L of s[c], s[4+c], s[8+c], s[12+c] -> column 4L+c
    const __m512 u0 = _mm512_shuffle_f32x4(s[c], s[4 + c], 0x44), u1 = _mm512_shuffle_f32x4(s[c], s[4 + c], 0xEE);
    const __m512 v0 = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], 0x44), v1 = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], 0xEE);
    x[c] = _mm512_shuffle_f32x4(u0, v0, 0x88);
    x[4 + c] = _mm512_shuffle_f32x4(u0, v0, 0xDD);
    x[8 + c] = _mm512_shuffle_f32x4(u1, v1, 0x88);
    x[12 + c] = _mm512_shuffle_f32x4(u1, v1, 0xDD);
  }
}

RTX_TARGET_AVX512 inline __m512 load_row(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
RTX_TARGET_AVX512 inline __m512 load_row(const uint16_t* p, __mmask16 m) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));  // bf16 -> f32: bits << 16
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

template <typename T>
RTX_TARGET_AVX512 void pack_transpose(const T* src, int64_t rs, int rows, int kc, int R, float* dst) {
  for (int k0 = 0; k0 < kc; k0 += 16) {
    const int kn = kc - k0 < 16 ? kc - k0 : 16;
    const __mmask16 km = static_cast<__mmask16>((1u << kn) - 1u);
    for (int r0 = 0; r0 < R; r0 += 16) {
      const int rn = R - r0 < 16 ? R - r0 : 16;
      __m512 x[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        x[i] = r0 + i < rows ? load_row(src + (r0 + i) * rs + k0, km) : _mm512_setzero_ps();
      transpose16(x);
      const __mmask16 rm = static_cast<__mmask16>((1u << rn) - 1u);
      for (int kk = 0; kk < kn; ++kk) _mm512_mask_storeu_ps(dst + static_cast<int64_t>(k0 + kk) * R + r0, rm, x[kk]);
    }
  }
}

}  // namespace

void avx512_pack_transpose(const float* src, int64_t rs, int rows, int kc, int R, float* dst) {
  pack_transpose(src, rs, rows, kc, R, dst);
}
void avx512_pack_transpose(const uint16_t* src, int64_t rs, int rows, int kc, int R, float* dst) {
  pack_transpose(src, rs, rows, kc, R, dst);
}

MicroKernel avx512_micro_kernel(int MR, int NR) {
  switch (NR) {
    case 16: return by_rows<1>(MR);
    case 32: return by_rows<2>(MR);
    case 48: return by_rows<3>(MR);
    case 64: return by_rows<4>(MR);
    default: return nullptr;
  }
}

}  // namespace rtx::kernels::matmul_detail
