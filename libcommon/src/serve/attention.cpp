// Paged causal attention of query rows over a sequence's cached keys (rtx/serve/attention.hpp).
#include "rtx/serve/attention.hpp"

// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized in the 256-bit extract (the
// _mm512_undefined_* idiom; GCC PR 105593, fixed in 13): silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "rtx/core/dtype.hpp"
#include "rtx/kernels/cpu_features.hpp"

namespace rtx::serve {

namespace {

/// Keys / values of (layer, block) in the pool's element type E: float (f32 pool) or uint16_t
/// (binary16 bits, f16 pool).
template <class E>
const E* keys(const KvCache& kv, int layer, int block) {
  if constexpr (std::is_same_v<E, float>) return kv.k(layer, block);
  else return kv.k16(layer, block);
}
template <class E>
const E* values(const KvCache& kv, int layer, int block) {
  if constexpr (std::is_same_v<E, float>) return kv.v(layer, block);
  else return kv.v16(layer, block);
}
/// One element as f32 (binary16 widened exactly).
inline float elem(float x) { return x; }
inline float elem(uint16_t h) { return f16_to_f32(h); }

/// q . k over n floats with L partial sums (lane j: elements j, j+L, ...) folded pairwise in a
/// fixed order. The lane loop vectorises; the order depends only on n, never on the batch.
template <int L, class E>
inline float dot_lanes(const float* __restrict a, const E* __restrict b, int n) {
  float acc[L] = {};
  int d = 0;
  for (; d + L <= n; d += L)
    for (int j = 0; j < L; ++j) acc[j] += a[d + j] * elem(b[d + j]);
  for (int j = 0; d + j < n; ++j) acc[j] += a[d + j] * elem(b[d + j]);
  for (int w = L / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

/// scores[t] = exp(scores[t] - mx) for t < n; returns their sum (in key order).
inline float exp_shifted(float* scores, int n, float mx) {
  float sum = 0.f;
  for (int t = 0; t < n; ++t) {
    const float e = std::exp(scores[t] - mx);
    scores[t] = e;
    sum += e;
  }
  return sum;
}

/// 16 lanes for head sizes >= 16 (GPT-2: 64), fewer for small heads (stories260k: 8), so the
/// fold does not cost more than the products.
template <class E>
inline float dot_head(const float* a, const E* b, int n) {
  if (n >= 16) return dot_lanes<16>(a, b, n);
  if (n >= 8) return dot_lanes<8>(a, b, n);
  return dot_lanes<4>(a, b, n);
}

#define RTX_ATT_AVX2 __attribute__((target("avx2,fma,f16c")))

/// e^x for 8 floats, Cephes' expf: n = round(x log2 e), r = x - n ln 2 (in two parts), a
/// degree-5 polynomial for e^r on [-ln2/2, ln2/2], times 2^n from the exponent bits (about 1 ulp
/// for the x <= 0 of a softmax). x is clamped to +-88.376 first (e^-88.376 is 0 or subnormal,
/// negligible beside the softmax's max term, which is 1); NaN stays NaN (the clamps keep the
/// NaN operand: max/min return their second one when either is NaN).
RTX_ATT_AVX2 inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), _mm256_max_ps(_mm256_set1_ps(-88.3762626647949f), x));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/// exp_shifted with exp256 over whole vectors of 8 (std::exp for the last n % 8); the sum is
/// per lane in key order, then folded in a fixed order: it depends only on n, so the result is
/// still batch invariant. For the AVX2 and AVX-512 kernels: a scalar expf per key cost about as
/// much as the key's dot product and value FMAs together.
RTX_ATT_AVX2 float exp_shifted_avx2(float* scores, int n, float mx) {
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(scores + t), vmx));
    _mm256_storeu_ps(scores + t, e);
    acc = _mm256_add_ps(acc, e);
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float sum = _mm_cvtss_f32(h);
  for (; t < n; ++t) {
    const float e = std::exp(scores[t] - mx);
    scores[t] = e;
    sum += e;
  }
  return sum;
}

/// Prefetch hints for the block walk of the AVX2 / AVX-512 kernels: while slot s of key block t
/// is read, the lines of slot s of key block t+1 (`next_k`, nullptr at the last block) and of
/// value block t (`v`) are requested, so that the next run of keys (one head's slots of a block
/// are contiguous, 2-4 KiB; the blocks are not) and the value pass come from cache, not DRAM.
/// An f32 pool asks for L2 (4 lines a slot at head size 64), an f16 pool for L1 (2 lines): the
/// better hint of each in docs/perf-history.md's attention_bench rounds (32 sequences from DRAM on
/// Zen 4: f32 1.17-1.26x; f16 1.10-1.34x at 512 keys, mixed at 68). A hint: never faults
/// (a next block's slots past the last key are still pool memory), changes no arithmetic
/// (same bits, still batch invariant).
template <class E>
inline void prefetch_slot(const E* next_k, const E* v, int HS) {
  constexpr int locality = std::is_same_v<E, float> ? 2 : 3;
  const int bytes = HS * static_cast<int>(sizeof(E));
  for (int b = 0; b < bytes; b += 64) {
    if (next_k) __builtin_prefetch(reinterpret_cast<const char*>(next_k) + b, 0, locality);
    __builtin_prefetch(reinterpret_cast<const char*>(v) + b, 0, locality);
  }
}

#define RTX_ATT_AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma,f16c")))

/// 16 / 8 consecutive elements as f32 (binary16 widened exactly by vcvtph2ps).
RTX_ATT_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
RTX_ATT_AVX512 inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
RTX_ATT_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
RTX_ATT_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

/// The dots of 16 keys at once: lane k of the result is the sum of the 16 lanes of a[k], added
/// in the tree of the one-key fold fold1_16 (lanes j + (j + 8), then
/// j + (j + 4), j + (j + 2), j + (j + 1)), so each dot is the same bits as one key's fold. Four
/// rounds of pairwise shuffles and adds do for 16 keys what 16 one-key folds (8 operations
/// each, the key pass's largest cost) did: 30 shuffles and 15 adds, then one permute.
RTX_ATT_AVX512 inline __m512 fold16(const __m512 (&a)[16]) {
  __m512 c[8], e[4], g[2];
  for (int i = 0; i < 8; ++i)  // lanes 0-7: key 2i's a_j + a_(j+8); lanes 8-15: key 2i + 1's
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)  // quarter r: key 4i + r's h_j + h_(j+4), j < 4
    e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i) {  // quarter r: lanes 0-1 key 8i + r, lanes 2-3 key 8i + 4 + r (x_0 + x_2, x_1 + x_3)
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(e[2 * i]), _mm512_castps_pd(e[2 * i + 1]));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(e[2 * i]), _mm512_castps_pd(e[2 * i + 1]));
    g[i] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  }
  // lane 4r + j: key r + 4j (x_0 + x_1); the permute puts key k in lane k
  const __m512 d = _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), d);
}

/// As fold16 for 8 keys of 8 lanes, in the tree of the one-key fold fold1_8
/// (j + (j + 4), j + (j + 2), j + (j + 1)).
RTX_ATT_AVX2 inline __m256 fold8(const __m256 (&a)[8]) {
  __m256 c[4], g[2];
  for (int i = 0; i < 4; ++i)  // lanes 0-3: key 2i's a_j + a_(j+4); lanes 4-7: key 2i + 1's
    c[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
  for (int i = 0; i < 2; ++i) {  // half r: lanes 0-1 key 4i + r, lanes 2-3 key 4i + 2 + r
    const __m256d lo = _mm256_unpacklo_pd(_mm256_castps_pd(c[2 * i]), _mm256_castps_pd(c[2 * i + 1]));
    const __m256d hi = _mm256_unpackhi_pd(_mm256_castps_pd(c[2 * i]), _mm256_castps_pd(c[2 * i + 1]));
    g[i] = _mm256_add_ps(_mm256_castpd_ps(lo), _mm256_castpd_ps(hi));
  }
  // lane 4r + j: key r + 2j
  const __m256 d = _mm256_add_ps(_mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// The largest lane, for a vector that holds no NaN: the kernels' running maximum, which
/// max(v, mv) keeps free of NaN (a NaN v leaves mv), so the result is the largest non-NaN score
/// (-inf when all are NaN), as the one-key loop's `v > m ? v : m` keeps it. Which of +0 and -0 it
/// returns may differ from that loop; the softmax's exp(s - max) is the same bits either way.
RTX_ATT_AVX512 inline float hmax16(__m512 v) { return _mm512_reduce_max_ps(v); }
RTX_ATT_AVX2 inline float hmax8(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

/// The most lanes one kernel call walks together (their maxima and sums live on its stack);
/// paged_attention_tile splits larger tiles.
constexpr int kMaxLanes = 64;

/// The KV head slice offset (elements) of query head h in a block: KV head h / q_per_kv.
inline size_t kv_slice(int h, int q_per_kv, int BT, int HS) {
  return static_cast<size_t>(h / q_per_kv) * BT * HS;
}

/// One query row and head of a kernel call: q and out (head_dim floats), its key count, and the
/// element offset of its KV head's slots in a block.
struct Lane {
  const float* q;
  float* out;
  int n_keys;
  size_t kv_off;
};

/// Whether lane i asks for the next block's keys of its KV head: the first lane of a run of
/// lanes on one KV head that still has a next block (the others find them in cache).
inline bool lane_prefetches(const Lane* ln, int i, int t0, int BT) {
  return t0 + BT < ln[i].n_keys && (i == 0 || ln[i - 1].kv_off != ln[i].kv_off || t0 + BT >= ln[i - 1].n_keys);
}

/// One key's accumulator folded to its dot, lanes j + (j + 8), then j + (j + 4), j + (j + 2),
/// j + (j + 1) (AVX-512); the same from j + (j + 4) on 8 lanes (AVX2).
RTX_ATT_AVX512 inline float fold1_16(__m512 acc) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
RTX_ATT_AVX2 inline float fold1_8(__m256 acc) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

/// The AVX-512 path for head sizes that are multiples of 16, up to 128 (GPT-2 and most Llamas:
/// 64 or 128), and the AVX2 path for multiples of 8 up to 128 (NV <= 16 vectors of q; above 8
/// the compiler keeps some in L1): one body, attention_kernel.inc, which says how they walk.
#define ATT_NAME paged_attention_avx512
#define ATT_TARGET RTX_ATT_AVX512
#define ATT_W 16
#define ATT_VEC __m512
#define ATT_LOADU _mm512_loadu_ps
#define ATT_STOREU _mm512_storeu_ps
#define ATT_SET1 _mm512_set1_ps
#define ATT_MUL _mm512_mul_ps
#define ATT_FMA _mm512_fmadd_ps
#define ATT_MAX _mm512_max_ps
#define ATT_LOADE load16
#define ATT_FOLD fold16
#define ATT_FOLD1 fold1_16
#define ATT_HMAX hmax16
#include "attention_kernel.inc"

#define ATT_NAME paged_attention_avx2
#define ATT_TARGET RTX_ATT_AVX2
#define ATT_W 8
#define ATT_VEC __m256
#define ATT_LOADU _mm256_loadu_ps
#define ATT_STOREU _mm256_storeu_ps
#define ATT_SET1 _mm256_set1_ps
#define ATT_MUL _mm256_mul_ps
#define ATT_FMA _mm256_fmadd_ps
#define ATT_MAX _mm256_max_ps
#define ATT_LOADE load8
#define ATT_FOLD fold8
#define ATT_FOLD1 fold1_8
#define ATT_HMAX hmax8
#include "attention_kernel.inc"

using AttnFn = void (*)(const Lane*, int, const KvCache&, int, const int32_t*, float, float*, size_t);

/// The AVX2 kernel for head size 8 * nv (1 <= nv <= 16) over a pool of E.
template <class E>
AttnFn avx2_kernel(int nv) {
  static const AttnFn f[16] = {paged_attention_avx2<1, E>,  paged_attention_avx2<2, E>,  paged_attention_avx2<3, E>,
                               paged_attention_avx2<4, E>,  paged_attention_avx2<5, E>,  paged_attention_avx2<6, E>,
                               paged_attention_avx2<7, E>,  paged_attention_avx2<8, E>,  paged_attention_avx2<9, E>,
                               paged_attention_avx2<10, E>, paged_attention_avx2<11, E>, paged_attention_avx2<12, E>,
                               paged_attention_avx2<13, E>, paged_attention_avx2<14, E>, paged_attention_avx2<15, E>,
                               paged_attention_avx2<16, E>};
  return f[nv - 1];
}

/// The AVX-512 kernel for head size 16 * nv (1 <= nv <= 8) over a pool of E.
template <class E>
AttnFn avx512_kernel(int nv) {
  static const AttnFn f[8] = {paged_attention_avx512<1, E>, paged_attention_avx512<2, E>, paged_attention_avx512<3, E>,
                              paged_attention_avx512<4, E>, paged_attention_avx512<5, E>, paged_attention_avx512<6, E>,
                              paged_attention_avx512<7, E>, paged_attention_avx512<8, E>};
  return f[nv - 1];
}

/// The generic path (any head size, any ISA): per lane, dot_head, exp_shifted, values in key
/// order; lanes walked together block by block as in paged_attention_avx512.
template <class E>
void paged_attention_generic(const Lane* ln, int nl, const KvCache& kv, int layer, const int32_t* blocks, float scale,
                             float* scratch, size_t stride) {
  const int HS = kv.head_dim(), BT = kv.block_tokens();
  float mx[kMaxLanes];
  int n_max = 0;
  for (int i = 0; i < nl; ++i) mx[i] = -INFINITY, n_max = ln[i].n_keys > n_max ? ln[i].n_keys : n_max;
  for (int t0 = 0; t0 < n_max; t0 += BT) {
    const E* kb0 = keys<E>(kv, layer, blocks[t0 / BT]);
    for (int i = 0; i < nl; ++i) {
      if (ln[i].n_keys <= t0) continue;
      const int nt = ln[i].n_keys - t0 < BT ? ln[i].n_keys - t0 : BT;
      const E* kb = kb0 + ln[i].kv_off;
      float* sc = scratch + static_cast<size_t>(i) * stride + t0;
      float m = mx[i];
      for (int s = 0; s < nt; ++s) {
        const float v = scale * dot_head(ln[i].q, kb + static_cast<size_t>(s) * HS, HS);
        sc[s] = v;
        m = v > m ? v : m;
      }
      mx[i] = m;
    }
  }
  float sum[kMaxLanes];
  for (int i = 0; i < nl; ++i) {
    sum[i] = exp_shifted(scratch + static_cast<size_t>(i) * stride, ln[i].n_keys, mx[i]);
    std::memset(ln[i].out, 0, sizeof(float) * HS);
  }
  for (int t0 = 0; t0 < n_max; t0 += BT) {
    const E* vb0 = values<E>(kv, layer, blocks[t0 / BT]);
    for (int i = 0; i < nl; ++i) {
      if (ln[i].n_keys <= t0) continue;
      const int nt = ln[i].n_keys - t0 < BT ? ln[i].n_keys - t0 : BT;
      const E* vb = vb0 + ln[i].kv_off;
      const float* w = scratch + static_cast<size_t>(i) * stride + t0;
      float* oi = ln[i].out;
      for (int s = 0; s < nt; ++s) {
        const E* vr = vb + static_cast<size_t>(s) * HS;
        for (int d = 0; d < HS; ++d) oi[d] += w[s] * elem(vr[d]);
      }
    }
  }
  for (int i = 0; i < nl; ++i) {
    const float inv = 1.f / sum[i];
    for (int d = 0; d < HS; ++d) ln[i].out[d] *= inv;
  }
}

template <class E>
AttnFn pick_kernel(int HS) {
  // vcvtph2ps (F16C) widens an f16 pool; every AVX2 CPU so far has it, but it is checked.
  const bool f16c = std::is_same_v<E, float> || kernels::cpu_has_f16c();
  if (kernels::cpu_isa_active() == kernels::Isa::Avx512 && HS % 16 == 0 && HS <= 128 && f16c)
    return avx512_kernel<E>(HS / 16);
  if (kernels::cpu_isa_active() == kernels::Isa::Avx2 && HS % 8 == 0 && HS <= 128 && f16c)
    return avx2_kernel<E>(HS / 8);
  return paged_attention_generic<E>;
}

/// dst[i] = binary16 of src[i], i < n, by vcvtps2ph with round to nearest even: the same bits as
/// f32_to_f16 for every non-NaN value (a NaN stays a NaN).
__attribute__((target("avx,f16c"))) void to_f16_f16c(uint16_t* dst, const float* src, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace

void paged_attention_tile(float* out, size_t out_stride, const float* q, size_t q_stride, int n_rows, int n_keys,
                          const KvCache& kv, int layer, int h0, int n_heads, int q_per_kv, const int32_t* blocks,
                          float scale, float* scratch) {
  const int HS = kv.head_dim(), BT = kv.block_tokens();
  const AttnFn f = kv.type() == KvType::F16 ? pick_kernel<uint16_t>(HS) : pick_kernel<float>(HS);
  const size_t stride = static_cast<size_t>(n_keys) + n_rows - 1;  // the last row's keys
  Lane ln[kMaxLanes];
  int nl = 0;
  for (int i = 0; i < n_heads; ++i)  // head by head, rows inside: a head's blocks stay in L1 for its rows
    for (int r = 0; r < n_rows; ++r) {
      const size_t hd = static_cast<size_t>(i) * HS;
      ln[nl++] = {q + r * q_stride + hd, out + r * out_stride + hd, n_keys + r, kv_slice(h0 + i, q_per_kv, BT, HS)};
      if (nl == kMaxLanes) f(ln, nl, kv, layer, blocks, scale, scratch, stride), nl = 0;
    }
  if (nl > 0) f(ln, nl, kv, layer, blocks, scale, scratch, stride);
}

void paged_attention_heads(float* out, const float* q, int n_keys, const KvCache& kv, int layer, int h0, int n_heads,
                           int q_per_kv, const int32_t* blocks, float scale, float* scratch) {
  paged_attention_tile(out, 0, q, 0, 1, n_keys, kv, layer, h0, n_heads, q_per_kv, blocks, scale, scratch);
}

int attention_heads_per_call(int units, int n_heads, int threads) {
  if (units < 1 || n_heads < 1) return 1;
  const long want = 4L * (threads < 1 ? 1 : threads);                       // calls wanted in all
  const long per_unit = std::min<long>(n_heads, (want + units - 1) / units);  // calls per tile
  return static_cast<int>((n_heads + per_unit - 1) / per_unit);
}

size_t plan_attention_calls(std::vector<AttentionCall>& calls, const std::vector<SeqBatch>& batch, int n_heads,
                            int threads, int context) {
  calls.clear();
  int tiles = 0;
  for (const SeqBatch& b : batch) tiles += (b.n + kAttentionRowTile - 1) / kAttentionRowTile;
  const int g = attention_heads_per_call(tiles, n_heads, threads);
  size_t most = 1;  // scratch floats of the largest call: its lanes (<= kMaxLanes) x its last row's keys
  int r0 = 0;
  for (const SeqBatch& b : batch) {
    for (int r = 0; r < b.n; r += kAttentionRowTile) {
      const int nr = std::min(kAttentionRowTile, b.n - r);
      const size_t keys = static_cast<size_t>(std::min(b.pos + r + nr, context));
      for (int h = 0; h < n_heads; h += g) {
        calls.push_back({r0 + r, nr, h, std::min(g, n_heads - h)});
        most = std::max(most, static_cast<size_t>(std::min(nr * calls.back().n_heads, kMaxLanes)) * keys);
      }
    }
    r0 += b.n;
  }
  return most;
}

void paged_attention(float* out, const float* q, int n_keys, const KvCache& kv, int layer, int kv_head,
                     const int32_t* blocks, float scale, float* scratch) {
  paged_attention_heads(out, q, n_keys, kv, layer, kv_head, 1, 1, blocks, scale, scratch);
}

void kv_store(KvCache& kv, int layer, const int32_t* blocks, int pos, const float* k_row, const float* v_row) {
  const int HS = kv.head_dim(), BT = kv.block_tokens(), H = kv.n_kv_head();
  const int block = blocks[pos / BT], slot = pos % BT;
  if (kv.type() == KvType::F16) {
    uint16_t* kb = kv.k16(layer, block);
    uint16_t* vb = kv.v16(layer, block);
    static const bool f16c = kernels::cpu_has_f16c();
    for (int h = 0; h < H; ++h) {
      const size_t off = (static_cast<size_t>(h) * BT + slot) * HS, in = static_cast<size_t>(h) * HS;
      if (f16c) {
        to_f16_f16c(kb + off, k_row + in, HS);
        to_f16_f16c(vb + off, v_row + in, HS);
      } else {
        for (int d = 0; d < HS; ++d) {
          kb[off + d] = f32_to_f16(k_row[in + d]);
          vb[off + d] = f32_to_f16(v_row[in + d]);
        }
      }
    }
    return;
  }
  float* kb = kv.k(layer, block);
  float* vb = kv.v(layer, block);
  for (int h = 0; h < H; ++h) {
    const size_t off = (static_cast<size_t>(h) * BT + slot) * HS;
    std::memcpy(kb + off, k_row + static_cast<size_t>(h) * HS, sizeof(float) * HS);
    std::memcpy(vb + off, v_row + static_cast<size_t>(h) * HS, sizeof(float) * HS);
  }
}

}  // namespace rtx::serve
