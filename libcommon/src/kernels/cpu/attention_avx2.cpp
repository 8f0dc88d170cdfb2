// AVX2+FMA instantiation of the flash attention bodies in attention_simd.inc: 8 float lanes,
// register blocks of 6 rows x 2 vectors (12 of the 16 ymm registers hold accumulators).
#include <immintrin.h>

#include <cstring>

#include "attention_simd.hpp"

#define RTX_TARGET __attribute__((target("avx2,fma")))
#define RTX_ATTN_NS attn_avx2
#define RTX_ATTN_TABLE kAttnAvx2

namespace rtx::kernels::attn::attn_avx2 {
namespace {
constexpr int W = 8;
constexpr int R = 6;
typedef float V __attribute__((vector_size(32)));
typedef int32_t VI __attribute__((vector_size(32)));
// set1, not V{} + x: the latter costs a scalar 0 + x (signed zeros) before every broadcast.
RTX_TARGET inline V splat(float x) { return (V)_mm256_set1_ps(x); }
RTX_TARGET inline VI splati(int32_t x) { return VI{} + x; }
RTX_TARGET inline VI iota() { return VI{0, 1, 2, 3, 4, 5, 6, 7}; }
RTX_TARGET inline V loadu(const float* p) { V v; std::memcpy(&v, p, sizeof v); return v; }
RTX_TARGET inline void storeu(float* p, V v) { std::memcpy(p, &v, sizeof v); }
RTX_TARGET inline V load_part(const float* p, int64_t n, float fill) {
  V v = splat(fill);
  std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(float));
  return v;
}
RTX_TARGET inline void store_part(float* p, V v, int64_t n) { std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(float)); }
RTX_TARGET inline V fma(V a, V b, V c) { return (V)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
RTX_TARGET inline V vmax(V a, V b) { return a > b ? a : b; }
RTX_TARGET inline V vmin(V a, V b) { return a < b ? a : b; }
RTX_TARGET inline V vsel(VI m, V a, V b) { return m ? a : b; }
RTX_TARGET inline VI cvt_i(V a) { return __builtin_convertvector(a, VI); }
RTX_TARGET inline V as_f(VI a) { return (V)a; }
RTX_TARGET inline float hsum(V a) { float s = a[0]; for (int i = 1; i < W; ++i) s += a[i]; return s; }
/// dst[c*dld + r] = src[r*ld + c] for r, c < 8: 32-bit and 64-bit interleaves, then 128-bit lane swaps.
RTX_TARGET inline void transpose_block(float* dst, int64_t dld, const float* src, int64_t ld) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * dld, t[i]);
}
}  // namespace
}  // namespace rtx::kernels::attn::attn_avx2

#include "attention_simd.inc"
