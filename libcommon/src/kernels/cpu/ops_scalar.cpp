// Scalar (one lane, baseline x86-64) instantiation of the bandwidth-bound op bodies in ops_simd.inc:
// the fallback for CPUs without AVX2 and the path tests force with set_cpu_isa(Isa::Scalar).
#include <cmath>
#include <cstring>

#include "ops_simd.hpp"

#define RTX_TARGET
#define RTX_SIMD_NS simd_scalar
#define RTX_SIMD_TABLE kSimdScalar

namespace rtx::kernels::simd_scalar {
namespace {
constexpr int W = 1;
typedef float V;
typedef int32_t VI;
inline V splat(float x) { return x; }
inline V loadu(const float* p) { return *p; }
inline void storeu(float* p, V v) { *p = v; }
inline void stream(float* p, V v) { *p = v; }  // no non-temporal path: a plain store
inline void stream_fence() {}
inline V load_part(const float* p, int64_t n, float fill) { return n > 0 ? *p : fill; }
inline void store_part(float* p, V v, int64_t n) { if (n > 0) *p = v; }
inline V fma(V a, V b, V c) { return a * b + c; }  // baseline x86-64 has no FMA; two roundings
inline V vmax(V a, V b) { return a > b ? a : b; }
inline V vmin(V a, V b) { return a < b ? a : b; }
inline V vsel(bool m, V a, V b) { return m ? a : b; }
inline V vsqrt(V a) { return std::sqrt(a); }
inline VI cvt_i(V a) { return static_cast<VI>(a); }
inline V as_f(VI a) { V f; std::memcpy(&f, &a, sizeof f); return f; }
inline float hsum(V a) { return a; }
inline float hmax(V a) { return a; }
constexpr int WD = 1;
typedef double VD;
inline VD splatd(double x) { return x; }
inline VD loadd(const float* p) { return *p; }
inline VD loadd_part(const float* p, int64_t n, float fill) { return n > 0 ? *p : fill; }
inline double hsumd(VD a) { return a; }
}  // namespace
}  // namespace rtx::kernels::simd_scalar

#include "ops_simd.inc"
