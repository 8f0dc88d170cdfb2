// AVX-512 (F/BW/VL/DQ) instantiation of the flash attention bodies in attention_simd.inc: 16 float
// lanes, register blocks of 8 rows x 2 vectors (16 of the 32 zmm registers hold accumulators).
#include <immintrin.h>

#include <cstring>

#include "attention_simd.hpp"

#define RTX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,prefer-vector-width=512")))
#define RTX_ATTN_NS attn_avx512
#define RTX_ATTN_TABLE kAttnAvx512

namespace rtx::kernels::attn::attn_avx512 {
namespace {
constexpr int W = 16;
constexpr int R = 8;
typedef float V __attribute__((vector_size(64)));
typedef int32_t VI __attribute__((vector_size(64)));
// set1, not V{} + x: the latter costs a scalar 0 + x (signed zeros) before every broadcast.
RTX_TARGET inline V splat(float x) { return (V)_mm512_set1_ps(x); }
RTX_TARGET inline VI splati(int32_t x) { return VI{} + x; }
RTX_TARGET inline VI iota() { return VI{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; }
RTX_TARGET inline V loadu(const float* p) { V v; std::memcpy(&v, p, sizeof v); return v; }
RTX_TARGET inline void storeu(float* p, V v) { std::memcpy(p, &v, sizeof v); }
RTX_TARGET inline V load_part(const float* p, int64_t n, float fill) {
  return (V)_mm512_mask_loadu_ps((__m512)splat(fill), static_cast<__mmask16>((1u << n) - 1), p);
}
RTX_TARGET inline void store_part(float* p, V v, int64_t n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), (__m512)v);
}
RTX_TARGET inline V fma(V a, V b, V c) { return (V)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
RTX_TARGET inline V vmax(V a, V b) { return a > b ? a : b; }
RTX_TARGET inline V vmin(V a, V b) { return a < b ? a : b; }
RTX_TARGET inline V vsel(VI m, V a, V b) { return m ? a : b; }
RTX_TARGET inline VI cvt_i(V a) { return __builtin_convertvector(a, VI); }
RTX_TARGET inline V as_f(VI a) { return (V)a; }
RTX_TARGET inline float hsum(V a) { float s = a[0]; for (int i = 1; i < W; ++i) s += a[i]; return s; }
/// dst[c*dld + r] = src[r*ld + c] for r, c < 16: 32-bit, 64-bit, then two 128-bit lane interleaves
/// (the all-ones maskz forms: the plain ones trip GCC 12 -Wuninitialized on their undefined passthrough).
RTX_TARGET inline void transpose_block(float* dst, int64_t dld, const float* src, int64_t ld) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(0xffff, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(0xffff, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, _mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, _mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, _mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, _mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_maskz_shuffle_f32x4(0xffff, r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_maskz_shuffle_f32x4(0xffff, r[h + i], r[h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_maskz_shuffle_f32x4(0xffff, t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_maskz_shuffle_f32x4(0xffff, t[i], t[i + 8], 0xdd);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * dld, r[i]);
}
}  // namespace
}  // namespace rtx::kernels::attn::attn_avx512

#include "attention_simd.inc"
