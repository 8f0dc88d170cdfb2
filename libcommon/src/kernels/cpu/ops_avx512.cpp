// AVX-512 (F/BW/VL/DQ) instantiation of the bandwidth-bound op bodies in ops_simd.inc: 16 float lanes.
#include <immintrin.h>

#include <cstring>

#include "ops_simd.hpp"

#define RTX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,prefer-vector-width=512")))
#define RTX_SIMD_NS simd_avx512
#define RTX_SIMD_TABLE kSimdAvx512

namespace rtx::kernels::simd_avx512 {
namespace {
constexpr int W = 16;
typedef float V __attribute__((vector_size(64)));
typedef int32_t VI __attribute__((vector_size(64)));
RTX_TARGET inline V splat(float x) { return V{} + x; }
RTX_TARGET inline V loadu(const float* p) { V v; std::memcpy(&v, p, sizeof v); return v; }
RTX_TARGET inline void storeu(float* p, V v) { std::memcpy(p, &v, sizeof v); }
// Non-temporal store of a full vector; p must be W*4-byte aligned. Followed by stream_fence() before return.
RTX_TARGET inline void stream(float* p, V v) { _mm512_stream_ps(p, (__m512)v); }
RTX_TARGET inline void stream_fence() { _mm_sfence(); }
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
RTX_TARGET inline V vsqrt(V a) { return (V)_mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xffff), (__m512)a); }
RTX_TARGET inline VI cvt_i(V a) { return __builtin_convertvector(a, VI); }
RTX_TARGET inline V as_f(VI a) { return (V)a; }
RTX_TARGET inline float hsum(V a) { float s = a[0]; for (int i = 1; i < W; ++i) s += a[i]; return s; }
RTX_TARGET inline float hmax(V a) { float s = a[0]; for (int i = 1; i < W; ++i) s = a[i] > s ? a[i] : s; return s; }
constexpr int WD = 8;
typedef double VD __attribute__((vector_size(64)));
typedef float VH __attribute__((vector_size(32)));
RTX_TARGET inline VD splatd(double x) { return VD{} + x; }
RTX_TARGET inline VD loadd(const float* p) { VH h; std::memcpy(&h, p, sizeof h); return __builtin_convertvector(h, VD); }
RTX_TARGET inline VD loadd_part(const float* p, int64_t n, float fill) {
  VH h = VH{} + fill;
  std::memcpy(&h, p, static_cast<size_t>(n) * sizeof(float));
  return __builtin_convertvector(h, VD);
}
RTX_TARGET inline double hsumd(VD a) { double s = a[0]; for (int i = 1; i < WD; ++i) s += a[i]; return s; }
}  // namespace
}  // namespace rtx::kernels::simd_avx512

#include "ops_simd.inc"
