// Scalar (one lane, baseline x86-64) instantiation of the flash attention bodies in attention_simd.inc:
// the fallback for CPUs without AVX2 and the path tests force with set_cpu_isa(Isa::Scalar).
#include <cstring>

#include "attention_simd.hpp"

#define RTX_TARGET
#define RTX_ATTN_NS attn_scalar
#define RTX_ATTN_TABLE kAttnScalar

namespace rtx::kernels::attn::attn_scalar {
namespace {
constexpr int W = 1;
constexpr int R = 4;
typedef float V;
typedef int32_t VI;
inline V splat(float x) { return x; }
inline VI splati(int32_t x) { return x; }
inline VI iota() { return 0; }
inline V loadu(const float* p) { return *p; }
inline void storeu(float* p, V v) { *p = v; }
inline V load_part(const float* p, int64_t n, float fill) { return n > 0 ? *p : fill; }
inline void store_part(float* p, V v, int64_t n) { if (n > 0) *p = v; }
inline V fma(V a, V b, V c) { return a * b + c; }  // baseline x86-64 has no FMA; two roundings
inline V vmax(V a, V b) { return a > b ? a : b; }
inline V vmin(V a, V b) { return a < b ? a : b; }
inline V vsel(bool m, V a, V b) { return m ? a : b; }
inline VI cvt_i(V a) { return static_cast<VI>(a); }
inline V as_f(VI a) { V f; std::memcpy(&f, &a, sizeof f); return f; }
inline float hsum(V a) { return a; }
/// dst[0] = src[0]: the 1x1 block transpose.
inline void transpose_block(float* dst, int64_t, const float* src, int64_t) { *dst = *src; }
}  // namespace
}  // namespace rtx::kernels::attn::attn_scalar

#include "attention_simd.inc"
