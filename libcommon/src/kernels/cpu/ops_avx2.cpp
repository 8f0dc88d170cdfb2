// AVX2+FMA instantiation of the bandwidth-bound op bodies in ops_simd.inc: 8 float lanes.
#include <immintrin.h>

#include <cstring>

#include "ops_simd.hpp"

#define RTX_TARGET __attribute__((target("avx2,fma")))
#define RTX_SIMD_NS simd_avx2
#define RTX_SIMD_TABLE kSimdAvx2

namespace rtx::kernels::simd_avx2 {
namespace {
constexpr int W = 8;
typedef float V __attribute__((vector_size(32)));
typedef int32_t VI __attribute__((vector_size(32)));
RTX_TARGET inline V splat(float x) { return V{} + x; }
RTX_TARGET inline V loadu(const float* p) { V v; std::memcpy(&v, p, sizeof v); return v; }
RTX_TARGET inline void storeu(float* p, V v) { std::memcpy(p, &v, sizeof v); }
// Non-temporal store of a full vector; p must be W*4-byte aligned. Followed by stream_fence() before return.
RTX_TARGET inline void stream(float* p, V v) { _mm256_stream_ps(p, (__m256)v); }
RTX_TARGET inline void stream_fence() { _mm_sfence(); }
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
RTX_TARGET inline V vsqrt(V a) { return (V)_mm256_sqrt_ps((__m256)a); }
RTX_TARGET inline VI cvt_i(V a) { return __builtin_convertvector(a, VI); }
RTX_TARGET inline V as_f(VI a) { return (V)a; }
RTX_TARGET inline float hsum(V a) { float s = a[0]; for (int i = 1; i < W; ++i) s += a[i]; return s; }
RTX_TARGET inline float hmax(V a) { float s = a[0]; for (int i = 1; i < W; ++i) s = a[i] > s ? a[i] : s; return s; }
constexpr int WD = 4;
typedef double VD __attribute__((vector_size(32)));
typedef float VH __attribute__((vector_size(16)));
RTX_TARGET inline VD splatd(double x) { return VD{} + x; }
RTX_TARGET inline VD loadd(const float* p) { VH h; std::memcpy(&h, p, sizeof h); return __builtin_convertvector(h, VD); }
RTX_TARGET inline VD loadd_part(const float* p, int64_t n, float fill) {
  VH h = VH{} + fill;
  std::memcpy(&h, p, static_cast<size_t>(n) * sizeof(float));
  return __builtin_convertvector(h, VD);
}
RTX_TARGET inline double hsumd(VD a) { double s = a[0]; for (int i = 1; i < WD; ++i) s += a[i]; return s; }
}  // namespace
}  // namespace rtx::kernels::simd_avx2

#include "ops_simd.inc"
