// W8A32 matmul for Q8_0 weights (ggml's block_q8_0: per 32 weights an f16 scale d and 32 int8 q,
// value q*d): out (M,N) = inp (M,K) @ W^T + bias. Weights stay int8 in memory (decode is bound by
// weight bytes: ~1.06 B per weight instead of 4); each block is widened to f32 (q*d, exact in
// f32) and accumulated with FMAs. Tiles: up to 8 rows of inp share each widened block; a row's
// arithmetic is the same whatever tile it lands in, so results are batch invariant.
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized in the widening intrinsics (the
// _mm512_undefined_* idiom; GCC PR 105593, fixed in 13): silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cctype>
#include <string>
#include <vector>
#include <cstring>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/matmul.hpp"

namespace rtx::kernels {

namespace {

#define RTX_Q8_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define RTX_Q8_AVX2 __attribute__((target("avx2,fma")))

/// Weights of block b (32 values) as f32. Q8_0 (KQ false): q * d[b]. K-quants (KQ true): per
/// half of 16 values h, q * s[2b+h] + o[2b+h] (one rounding; q * s is exact, see kquant()).
/// res[i] = sum over blocks b of x_i[32b..32b+32) . w_b, i < MT; x_i = x + i*ldx.
template <int MT, bool KQ>
RTX_Q8_AVX512 void tile_avx512(const float* x, int64_t ldx, const int8_t* q, const float* d, const float* o, int64_t nb,
                               float* res) {
  __m512 acc[MT][2];
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b + 16));
    const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1));
    __m512 w0, w1;
    if constexpr (KQ) {
      w0 = _mm512_fmadd_ps(f0, _mm512_set1_ps(d[2 * b]), _mm512_set1_ps(o[2 * b]));
      w1 = _mm512_fmadd_ps(f1, _mm512_set1_ps(d[2 * b + 1]), _mm512_set1_ps(o[2 * b + 1]));
    } else {
      const __m512 sc = _mm512_set1_ps(d[b]);
      w0 = _mm512_mul_ps(f0, sc);
      w1 = _mm512_mul_ps(f1, sc);
    }
    for (int i = 0; i < MT; ++i) {
      const float* xi = x + i * ldx + 32 * b;
      acc[i][0] = _mm512_fmadd_ps(_mm512_loadu_ps(xi), w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(_mm512_loadu_ps(xi + 16), w1, acc[i][1]);
    }
  }
  for (int i = 0; i < MT; ++i) {
    alignas(64) float t[16];
    _mm512_store_ps(t, _mm512_add_ps(acc[i][0], acc[i][1]));
    float sum = 0;
    for (float v : t) sum += v;  // fixed order
    res[i] = sum;
  }
}

RTX_Q8_AVX2 inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <int MT, bool KQ>
RTX_Q8_AVX2 void tile_avx2(const float* x, int64_t ldx, const int8_t* q, const float* d, const float* o, int64_t nb,
                           float* res) {
  __m256 acc[MT][2];
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256 w[4];
    for (int j = 0; j < 4; ++j) {
      const __m128i qj = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 32 * b + 8 * j));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(qj));
      if constexpr (KQ) w[j] = _mm256_fmadd_ps(f, _mm256_set1_ps(d[2 * b + j / 2]), _mm256_set1_ps(o[2 * b + j / 2]));
      else w[j] = _mm256_mul_ps(f, _mm256_set1_ps(d[b]));
    }
    for (int i = 0; i < MT; ++i) {
      const float* xi = x + i * ldx + 32 * b;
      acc[i][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xi), w[0], acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 8), w[1], acc[i][1]);
      acc[i][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 16), w[2], acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 24), w[3], acc[i][1]);
    }
  }
  for (int i = 0; i < MT; ++i) res[i] = hsum256(_mm256_add_ps(acc[i][0], acc[i][1]));
}

void row_scalar(const float* x, const int8_t* q, const float* d, const float* o, int64_t nb, float* res) {
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    float s = 0;
    for (int j = 0; j < 32; ++j) {
      const float f = static_cast<float>(q[32 * b + j]);
      const float w = o ? f * d[2 * b + j / 16] + o[2 * b + j / 16] : f * d[b];
      s += x[32 * b + j] * w;
    }
    acc += s;
  }
  *res = acc;
}

using TileFn = void (*)(const float*, int64_t, const int8_t*, const float*, const float*, int64_t, float*);

/// The tile function for `rows` (1..8) rows on `isa` (nullptr: scalar); kq: K-quant scales.
TileFn tile_fn(Isa isa, int rows, bool kq) {
  if (isa == Isa::Avx512) {
    static const TileFn t[2][8] = {
        {tile_avx512<1, false>, tile_avx512<2, false>, tile_avx512<3, false>, tile_avx512<4, false>,
         tile_avx512<5, false>, tile_avx512<6, false>, tile_avx512<7, false>, tile_avx512<8, false>},
        {tile_avx512<1, true>, tile_avx512<2, true>, tile_avx512<3, true>, tile_avx512<4, true>, tile_avx512<5, true>,
         tile_avx512<6, true>, tile_avx512<7, true>, tile_avx512<8, true>}};
    return t[kq][rows - 1];
  }
  if (isa == Isa::Avx2) {
    static const TileFn t[2][8] = {
        {tile_avx2<1, false>, tile_avx2<2, false>, tile_avx2<3, false>, tile_avx2<4, false>, tile_avx2<5, false>,
         tile_avx2<6, false>, tile_avx2<7, false>, tile_avx2<8, false>},
        {tile_avx2<1, true>, tile_avx2<2, true>, tile_avx2<3, true>, tile_avx2<4, true>, tile_avx2<5, true>,
         tile_avx2<6, true>, tile_avx2<7, true>, tile_avx2<8, true>}};
    return t[kq][rows - 1];
  }
  return nullptr;
}

// ---- 8-bit activations (K-quants): integer dot products per 16 weights -------------------------
// Each row of inp is quantized per 32 values (sx = max|x| / 127, xq = round(x / sx), int8); the
// weights are unsigned quants q (0..63) with a scale s and offset o per 16. Per 16 weights:
//   sum x*w ~= s * sx * sum(q * xq) + o * sx * sum(xq)  (= sum w * xhat, xhat = xq * sx)
// with both integer sums exact (pmaddubsw: u8 x s8 pairs, at most 2*63*127 = 16002, no
// saturation; pmaddwd then sums pairs). The offset term must see the same quantized inputs:
// Q6_K's offset is -32 s, and with f32 sums there the quantization error of s * 32 * xq would
// not cancel. As llama.cpp's Q4_K x Q8_K dot products (which quantize per 256 and use the q8
// block sums the same way), this trades the f32 activations for 8-bit ones.

/// Per 64 weights of a row: 16 int32 lanes of 4 products each; lane k belongs to weight block
/// k/4 (scales s[4c + k/4]) and input block k/8 (scale xsv lane k, precomputed per row).
template <int MT>
RTX_Q8_AVX512 void tile_i8_avx512(const uint8_t* q, const float* s, int64_t nc, const int8_t* xq, int64_t ldq,
                                  const float* xsv, int64_t ldv, float* res) {
  const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i ones = _mm512_set1_epi16(1);
  __m512 acc[MT];
  for (int i = 0; i < MT; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < nc; ++c) {
    const __m512i w = _mm512_loadu_si512(q + 64 * c);
    const __m512 ws = _mm512_permutexvar_ps(idx, _mm512_broadcast_f32x4(_mm_loadu_ps(s + 4 * c)));
    for (int i = 0; i < MT; ++i) {
      const __m512i xv = _mm512_loadu_si512(xq + i * ldq + 64 * c);
      const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(w, xv), ones);
      const __m512 sc = _mm512_mul_ps(ws, _mm512_loadu_ps(xsv + i * ldv + 16 * c));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc[i]);
    }
  }
  for (int i = 0; i < MT; ++i) {
    alignas(64) float t[16];
    _mm512_store_ps(t, acc[i]);
    float sum = 0;
    for (float v : t) sum += v;  // fixed order
    res[i] = sum;
  }
}

/// Per 32 weights: 8 int32 lanes of 4 products; lanes 0-3 weight block 2b, 4-7 block 2b+1; one
/// input scale sx[b] for all.
template <int MT>
RTX_Q8_AVX2 void tile_i8_avx2(const uint8_t* q, const float* s, int64_t nb, const int8_t* xq, int64_t ldq, const float* sx,
                              int64_t lds, float* res) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MT];
  for (int i = 0; i < MT; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
    const __m256 ws = _mm256_set_m128(_mm_set1_ps(s[2 * b + 1]), _mm_set1_ps(s[2 * b]));
    for (int i = 0; i < MT; ++i) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + i * ldq + 32 * b));
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, xv), ones);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(ws, _mm256_set1_ps(sx[i * lds + b])), acc[i]);
    }
  }
  for (int i = 0; i < MT; ++i) res[i] = hsum256(acc[i]);
}

/// Scalar: per 16 weights, the exact int32 dot times s * sx, in block order.
void row_i8_scalar(const uint8_t* q, const float* s, int64_t nb, const int8_t* xq, const float* sx, float* res) {
  float acc = 0;
  for (int64_t h = 0; h < 2 * nb; ++h) {
    int32_t dot = 0;
    for (int j = 0; j < 16; ++j) dot += static_cast<int32_t>(q[16 * h + j]) * xq[16 * h + j];
    acc += static_cast<float>(dot) * (s[h] * sx[h / 2]);
  }
  *res = acc;
}

/// sum a[h]*b[h] for n a multiple of 16, lanes then a fixed-order reduction (the order depends
/// on n only: batch invariant).
RTX_Q8_AVX512 float dot16_avx512(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t h = 0; h < n; h += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + h), _mm512_loadu_ps(b + h), acc);
  alignas(64) float t[16];
  _mm512_store_ps(t, acc);
  float s = 0;
  for (float v : t) s += v;
  return s;
}
RTX_Q8_AVX2 float dot16_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t h = 0; h < n; h += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + h), _mm256_loadu_ps(b + h), acc);
  return hsum256(acc);
}

using TileI8Avx512 = void (*)(const uint8_t*, const float*, int64_t, const int8_t*, int64_t, const float*, int64_t, float*);
using TileI8Avx2 = void (*)(const uint8_t*, const float*, int64_t, const int8_t*, int64_t, const float*, int64_t, float*);

constexpr int kRowTile = 8;   // rows of inp sharing one widened weight block
constexpr int kColChunk = 16; // weight rows a thread takes at a time (their quants stay in L1)

}  // namespace

PackedMatmulWeight PackedMatmulWeight::q8_0(const uint8_t* blocks, int N, int K) {
  if (N <= 0 || K <= 0 || K % 32 != 0)
    throw_input("PackedMatmulWeight::q8_0: need N > 0 and K a positive multiple of 32 (got N=" + std::to_string(N) +
                    ", K=" + std::to_string(K) + ")",
                "K");
  if (!blocks) throw_input("PackedMatmulWeight::q8_0: null blocks", "blocks");
  PackedMatmulWeight w;
  w.N_ = N;
  w.K_ = K;
  w.isa_ = cpu_isa_active();
  auto q8 = std::make_shared<Q8>();
  const int64_t nb = K / 32;
  q8->q.resize(static_cast<size_t>(N) * K);
  q8->d.resize(static_cast<size_t>(N) * nb);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = blocks + (n * nb + b) * 34;
      q8->d[static_cast<size_t>(n * nb + b)] = f16_to_f32(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
      std::memcpy(q8->q.data() + n * K + 32 * b, blk + 2, 32);
    }
  q8->type = "Q8_0";
  w.q8_ = std::move(q8);
  return w;
}

namespace {

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

/// Scale and min j (0..7) of a Q4_K/Q5_K super-block's 12 packed 6-bit bytes (ggml-common.h).
void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/// One super-block (256 values) as quants q[256] and, per 16 values, scale s and offset o with
/// value = q*s + o equal to ggml's dequantize_row_* result (see kquant()).
void decode_kquant(uint32_t type, const uint8_t* b, int8_t* q, float* s, float* o) {
  if (type == 12 || type == 13) {  // Q4_K (144 B) / Q5_K (176 B): d, dmin, scales[12], [qh[32]], qs[128]
    const float d = f16_to_f32(le16(b)), dmin = f16_to_f32(le16(b + 2));
    const uint8_t* scales = b + 4;
    const bool five = type == 13;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = five ? b + 48 : b + 16;
    for (int pair = 0; pair < 4; ++pair, ql += 32) {
      for (int half = 0; half < 2; ++half) {
        int sc, m;
        scale_min_k4(2 * pair + half, scales, &sc, &m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        const int sub = 2 * pair + half;  // 32 values
        s[2 * sub] = s[2 * sub + 1] = d1;
        o[2 * sub] = o[2 * sub + 1] = -m1;
        const int bit = 2 * pair + half;
        for (int l = 0; l < 32; ++l) {
          int v = half ? ql[l] >> 4 : ql[l] & 0x0F;
          if (five && (qh[l] >> bit & 1)) v += 16;
          q[32 * sub + l] = static_cast<int8_t>(v);
        }
      }
    }
    return;
  }
  // Q6_K (210 B): ql[128], qh[64], int8 scales[16], d; value d * scale * (q - 32) per 16. Held
  // as the unsigned q (0..63) with offset -32 s: s*q is exact (s has 18 significant bits, q 6)
  // and so is s*q - 32 s (= s*(q-32), representable), so the value is ggml's exactly.
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_to_f32(le16(b + 208));
  for (int i = 0; i < 16; ++i) {
    s[i] = d * static_cast<float>(sc[i]);
    o[i] = -32.0f * s[i];
  }
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      q[n + l] = static_cast<int8_t>((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4));
      q[n + l + 32] = static_cast<int8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
      q[n + l + 64] = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      q[n + l + 96] = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

}  // namespace

PackedMatmulWeight PackedMatmulWeight::kquant(uint32_t ggml_type, const uint8_t* blocks, int N, int K, bool int8_activations) {
  size_t block_bytes = 0;
  const char* name = "";
  switch (ggml_type) {
    case 12: block_bytes = 144, name = "Q4_K"; break;
    case 13: block_bytes = 176, name = "Q5_K"; break;
    case 14: block_bytes = 210, name = "Q6_K"; break;
    default:
      throw_input("PackedMatmulWeight::kquant: ggml type " + std::to_string(ggml_type) + " is not Q4_K (12), Q5_K (13) or Q6_K (14)",
                  "type");
  }
  if (N <= 0 || K <= 0 || K % 256 != 0)
    throw_input(std::string("PackedMatmulWeight::kquant: ") + name + " needs N > 0 and K a positive multiple of 256 (got N=" +
                    std::to_string(N) + ", K=" + std::to_string(K) + ")",
                "K");
  if (!blocks) throw_input("PackedMatmulWeight::kquant: null blocks", "blocks");
  PackedMatmulWeight w;
  w.N_ = N;
  w.K_ = K;
  w.isa_ = cpu_isa_active();
  auto qk = std::make_shared<Q8>();
  qk->type = name;
  qk->a8 = int8_activations;
  const int64_t nsb = K / 256;
  qk->q.resize(static_cast<size_t>(N) * K);
  qk->d.resize(static_cast<size_t>(N) * (K / 16));
  qk->o.resize(qk->d.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < nsb; ++b) {
      const int64_t at = n * K + 256 * b;
      decode_kquant(ggml_type, blocks + static_cast<size_t>(n * nsb + b) * block_bytes, qk->q.data() + at,
                    qk->d.data() + at / 16, qk->o.data() + at / 16);
    }
  w.q8_ = std::move(qk);
  return w;
}

std::string weight_formats_summary(const std::vector<const PackedMatmulWeight*>& ws) {
  std::vector<std::pair<std::string, int>> counts;  // first-seen order
  for (const PackedMatmulWeight* w : ws) {
    if (!w || !w->is_quantized()) continue;
    std::string f = w->format();
    for (char& c : f) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& p) { return p.first == f; });
    if (it == counts.end()) counts.emplace_back(f, 1);
    else ++it->second;
  }
  if (counts.empty()) return "f32";
  std::string s;
  for (const auto& [f, n] : counts) s += (s.empty() ? "" : ", ") + f + " " + std::to_string(n) + "/" + std::to_string(ws.size());
  return s;
}

/// The quantized branch of matmul_forward_packed: Q8_0 (o null: d per 32 values) or K-quants
/// (d and o per 16 values).
/// The K-quant branch with 8-bit activations (see tile_i8_*).
void matmul_forward_kq_i8(float* out, const float* inp, const uint8_t* q, const float* s, const float* o, const float* bias,
                          int M, int N, int K, Isa isa) {
  const int64_t nb = K / 32, nh = K / 16;
  // Quantize every row once: int8 values, a scale per 32, its 16-lane expansion per 64 (AVX-512)
  // and the f32 sums per 16 (the offsets' term).
  static thread_local std::vector<int8_t> xq;
  static thread_local std::vector<float> sx, xsv, xsum;
  xq.resize(static_cast<size_t>(M) * K);
  sx.resize(static_cast<size_t>(M) * nb);
  xsv.resize(static_cast<size_t>(M) * (K / 4));
  xsum.resize(static_cast<size_t>(M) * nh);
  for (int64_t m = 0; m < M; ++m) {
    const float* x = inp + m * K;
    for (int64_t b = 0; b < nb; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
      const float scale = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      sx[m * nb + b] = scale;
      for (int j = 0; j < 32; ++j)
        xq[m * K + 32 * b + j] = static_cast<int8_t>(std::max(-127L, std::min(127L, std::lround(x[32 * b + j] * inv))));
      for (int j = 0; j < 8; ++j) xsv[m * (K / 4) + 8 * b + j] = scale;
    }
    for (int64_t h = 0; h < nh; ++h) {
      int32_t t = 0;
      for (int j = 0; j < 16; ++j) t += xq[m * K + 16 * h + j];
      xsum[m * nh + h] = static_cast<float>(t) * sx[m * nb + h / 2];
    }
  }
  // This thread's buffers, by pointer: inside the parallel region a thread_local name would be
  // each worker's own (empty) copy.
  const int8_t* const xqp = xq.data();
  const float *const sxp = sx.data(), *const xsvp = xsv.data(), *const xsump = xsum.data();
  const int64_t nchunks = (N + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && static_cast<int64_t>(M) * N * K > (1 << 16))
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t n0 = c * kColChunk, n1 = std::min<int64_t>(N, n0 + kColChunk);
    float res[kRowTile];
    for (int64_t m0 = 0; m0 < M; m0 += kRowTile) {
      const int rows = static_cast<int>(std::min<int64_t>(kRowTile, M - m0));
      static const TileI8Avx512 t512[8] = {tile_i8_avx512<1>, tile_i8_avx512<2>, tile_i8_avx512<3>, tile_i8_avx512<4>,
                                           tile_i8_avx512<5>, tile_i8_avx512<6>, tile_i8_avx512<7>, tile_i8_avx512<8>};
      static const TileI8Avx2 t256[8] = {tile_i8_avx2<1>, tile_i8_avx2<2>, tile_i8_avx2<3>, tile_i8_avx2<4>,
                                         tile_i8_avx2<5>, tile_i8_avx2<6>, tile_i8_avx2<7>, tile_i8_avx2<8>};
      for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* qn = q + n * K;
        const float* sn = s + n * nh;
        const float* on = o + n * nh;
        if (isa == Isa::Avx512)
          t512[rows - 1](qn, sn, K / 64, xqp + m0 * K, K, xsvp + m0 * (K / 4), K / 4, res);
        else if (isa == Isa::Avx2)
          t256[rows - 1](qn, sn, nb, xqp + m0 * K, K, sxp + m0 * nb, nb, res);
        else
          for (int i = 0; i < rows; ++i) row_i8_scalar(qn, sn, nb, xqp + (m0 + i) * K, sxp + (m0 + i) * nb, res + i);
        const float b = bias ? bias[n] : 0.0f;
        for (int i = 0; i < rows; ++i) {
          const float* xs = xsump + (m0 + i) * nh;
          float off = 0;
          if (isa == Isa::Avx512) off = dot16_avx512(on, xs, nh);
          else if (isa == Isa::Avx2) off = dot16_avx2(on, xs, nh);
          else
            for (int64_t h = 0; h < nh; ++h) off += on[h] * xs[h];  // fixed order
          out[(m0 + i) * N + n] = res[i] + off + b;
        }
      }
    }
  }
}

void matmul_forward_q8(float* out, const float* inp, const int8_t* q, const float* d, const float* o, const float* bias,
                       int M, int N, int K, Isa isa) {
  const int64_t nb = K / 32;
  const int64_t ns = o ? 2 * nb : nb;  // scales per weight row
  const int64_t nchunks = (N + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && static_cast<int64_t>(M) * N * K > (1 << 16))
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t n0 = c * kColChunk, n1 = std::min<int64_t>(N, n0 + kColChunk);
    float res[kRowTile];
    for (int64_t m0 = 0; m0 < M; m0 += kRowTile) {
      const int rows = static_cast<int>(std::min<int64_t>(kRowTile, M - m0));
      const TileFn f = tile_fn(isa, rows, o != nullptr);
      for (int64_t n = n0; n < n1; ++n) {
        const int8_t* qn = q + n * K;
        const float* dn = d + n * ns;
        const float* on = o ? o + n * ns : nullptr;
        if (f) {
          f(inp + m0 * K, K, qn, dn, on, nb, res);
        } else {
          for (int i = 0; i < rows; ++i) row_scalar(inp + (m0 + i) * K, qn, dn, on, nb, res + i);
        }
        const float b = bias ? bias[n] : 0.0f;
        for (int i = 0; i < rows; ++i) out[(m0 + i) * N + n] = res[i] + b;
      }
    }
  }
}

}  // namespace rtx::kernels
