// Matmuls over quantized weights, out (M,N) = inp (M,K) @ W^T + bias, with the weights kept in
// (nearly) their GGUF form, since decode is bound by the weight bytes read per token:
//  Q8_0 (ggml's block_q8_0: per 32 weights an f16 scale d and 32 int8 q, value q*d): W8A32,
//   each block widened to f32 (q*d, exact) and accumulated with FMAs; or W8A8, inputs
//   quantized per 32 values and integer dot products (AVX-512 VNNI or AVX2).
//  K-quants (Q4_K, Q5_K, Q6_K; super-blocks of 256, ggml-common.h), repacked with f32 super-
//   scales: 8-bit activations and integer dot products (as llama.cpp), or f32 activations
//   against the exact weights.
// Tiles: up to 8 rows of inp share each unpacked block; a row's arithmetic is the same whatever
// tile it lands in, so results are batch invariant.
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized in the widening intrinsics (the
// _mm512_undefined_* idiom; GCC PR 105593, fixed in 13), as -Wuninitialized in the 512-bit
// extracts: silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cctype>
#include <string>
#include <vector>
#include <cstring>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/matmul.hpp"

namespace rtx::kernels {

namespace {

/// Software prefetch distance for the weight streams. Decode reads every weight once per token
/// and, for models larger than this VM's share of L3, from DRAM; the hardware prefetchers alone
/// left each core near 6 GB/s. Asking for the bytes 4 KiB ahead doubled GPT-2 124M Q4_K_M
/// decode (127 -> 238 tokens/s, 2 threads; 2 and 8 KiB measured within noise of 4).
constexpr int64_t kPrefetchBytes = 4096;

/// Prefetches the `n` bytes at p + kPrefetchBytes (64-byte lines; a hint: never faults, also
/// past the end of the weights).
inline void prefetch_ahead(const void* p, int64_t n) {
  const char* c = static_cast<const char*>(p) + kPrefetchBytes;
  for (int64_t l = 0; l < n; l += 64) _mm_prefetch(c + l, _MM_HINT_T0);
}

#define RTX_Q8_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define RTX_Q8_AVX2 __attribute__((target("avx2,fma")))
#define RTX_KQ_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")))

/// Keeps v in a vector register at this point of a sum chain (an empty asm that "changes" it).
/// Without it GCC 12 reassociates an x8 tile's integer adds into a tree that keeps every
/// product alive, which spills 20-35 ymm values per sub-block to the stack; with it the chain
/// stays a chain. Integer adds: the results are the same bits either way.
#define RTX_KEEP_IN_REG(v) __asm__("" : "+x"(v))

/// Weights of block b (32 values) as f32. Q8_0 (KQ false): q * d[b]. K-quants (KQ true): per
/// half of 16 values h, q * s[2b+h] + o[2b+h] (one rounding; q * s is exact, see kquant()).
/// res[i] = sum over blocks b of x_i[32b..32b+32) . w_b, i < MT; x_i = x + i*ldx.
template <int MT>
RTX_Q8_AVX512 void tile_avx512(const float* x, int64_t ldx, const int8_t* q, const float* d, int64_t nb, float* res) {
  __m512 acc[MT][2];
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (b % 2 == 0) prefetch_ahead(q + 32 * b, 64);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b + 16));
    const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1));
    const __m512 sc = _mm512_set1_ps(d[b]);
    const __m512 w0 = _mm512_mul_ps(f0, sc), w1 = _mm512_mul_ps(f1, sc);
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

template <int MT>
RTX_Q8_AVX2 void tile_avx2(const float* x, int64_t ldx, const int8_t* q, const float* d, int64_t nb, float* res) {
  __m256 acc[MT][2];
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (b % 2 == 0) prefetch_ahead(q + 32 * b, 64);
    __m256 w[4];
    for (int j = 0; j < 4; ++j) {
      const __m128i qj = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 32 * b + 8 * j));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(qj));
      w[j] = _mm256_mul_ps(f, _mm256_set1_ps(d[b]));
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

void row_scalar(const float* x, const int8_t* q, const float* d, int64_t nb, float* res) {
  float acc = 0;
  for (int64_t b = 0; b < nb; ++b) {
    float s = 0;
    for (int j = 0; j < 32; ++j) {
      s += x[32 * b + j] * (static_cast<float>(q[32 * b + j]) * d[b]);
    }
    acc += s;
  }
  *res = acc;
}

using TileFn = void (*)(const float*, int64_t, const int8_t*, const float*, int64_t, float*);

/// The Q8_0 tile function for `rows` (1..8) rows on `isa` (nullptr: scalar).
TileFn tile_fn(Isa isa, int rows) {
  if (isa == Isa::Avx512) {
    static const TileFn t[8] = {tile_avx512<1>, tile_avx512<2>, tile_avx512<3>, tile_avx512<4>,
                                tile_avx512<5>, tile_avx512<6>, tile_avx512<7>, tile_avx512<8>};
    return t[rows - 1];
  }
  if (isa == Isa::Avx2) {
    static const TileFn t[8] = {tile_avx2<1>, tile_avx2<2>, tile_avx2<3>, tile_avx2<4>,
                                tile_avx2<5>, tile_avx2<6>, tile_avx2<7>, tile_avx2<8>};
    return t[rows - 1];
  }
  return nullptr;
}

int interleave_source(uint32_t type, int P);
constexpr int64_t kc_bytes(uint32_t type);

constexpr int kRowTile = 8;   // rows of inp sharing one widened weight block
constexpr int kRowTileX8 = 4; // rows of the Q8_0 8-column tile (2 accumulators each: 16 registers)
constexpr int kColChunk = 16; // weight rows a thread takes at a time (their quants stay in L1)

}  // namespace

PackedMatmulWeight PackedMatmulWeight::q8_0(const uint8_t* blocks, int N, int K, bool int8_activations) {
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
  q8->type = "Q8_0";
  q8->ggml_type = 8;
  const int64_t nb = K / 32;
  // W8A8: columns in groups of W, the last padded with zero columns; per group and block of 32
  // values, q holds 8 steps of 4W bytes (step t: quants 4t..4t+3 of each column in turn) and d
  // the W columns' scales. W 16 on AVX-512 VNNI, the quants + 128 as bytes (tile_q8x16_i8_avx512);
  // W 8 on AVX2 or AVX-512 without VNNI, signed (tile_q8x8_i8_avx2). Elsewhere (scalar) W8A32
  // on the natural layout: q row-major, d per row and block.
  const int W = !int8_activations ? 0
                : w.isa_ == Isa::Avx512 && cpu_has_avx512_vnni() ? 16
                : w.isa_ == Isa::Avx2 || w.isa_ == Isa::Avx512 ? 8 : 0;
  q8->a8 = W != 0;
  q8->xw = W;
  const int64_t ncols = W ? (N + W - 1) / W * W : N;
  q8->q.assign(static_cast<size_t>(ncols * K), W == 16 ? static_cast<int8_t>(-128) : 0);  // zero columns: 0 + 128 as u8
  q8->d.assign(static_cast<size_t>(ncols * nb), 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = blocks + (n * nb + b) * 34;
      const float dv = f16_to_f32(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
      if (!W) {
        q8->d[static_cast<size_t>(n * nb + b)] = dv;
        std::memcpy(q8->q.data() + n * K + 32 * b, blk + 2, 32);
        continue;
      }
      const int64_t G = n / W, c = n % W;
      q8->d[static_cast<size_t>((G * nb + b) * W + c)] = dv;
      int8_t* qb = q8->q.data() + (G * nb + b) * 32 * W + 4 * c;
      for (int t = 0; t < 8; ++t)
        for (int j = 0; j < 4; ++j) {
          const int v = static_cast<int8_t>(blk[2 + 4 * t + j]);
          qb[4 * W * t + j] = static_cast<int8_t>(static_cast<uint8_t>(W == 16 ? v + 128 : v));
        }
    }
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


// ---- K-quants with f32 activations: the file's super-blocks, unpacked in registers ----------
// Repacked layout per 256 values (PackedMatmulWeight::Q8::sb): Q4_K [f32 d][f32 dmin][u8 sc[8]]
// [u8 m[8]][qs 128]; Q5_K the same with [qh 32] before qs; Q6_K [f32 d][i8 sc[16]][ql 128]
// [qh 64]. qs/ql/qh are the file's bytes in the file's order (ggml-common.h).

/// Bytes per 256 weights of the repacked K-quant layouts (type 12 Q4_K, 13 Q5_K, 14 Q6_K).
constexpr int64_t kc_bytes(uint32_t type) { return type == 12 ? 152 : type == 13 ? 184 : 212; }

/// Repacks one file super-block `in` of `type` into `out` (kc_bytes(type) bytes).
void repack_kquant(uint32_t type, const uint8_t* in, uint8_t* out) {
  if (type == 14) {
    const float d = f16_to_f32(le16(in + 208));
    std::memcpy(out, &d, 4);
    std::memcpy(out + 4, in + 192, 16);  // int8 scales
    std::memcpy(out + 20, in, 192);      // ql[128], qh[64]
    return;
  }
  const float d = f16_to_f32(le16(in)), dmin = f16_to_f32(le16(in + 2));
  std::memcpy(out, &d, 4);
  std::memcpy(out + 4, &dmin, 4);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, in + 4, &sc, &m);
    out[8 + j] = static_cast<uint8_t>(sc);
    out[16 + j] = static_cast<uint8_t>(m);
  }
  std::memcpy(out + 24, in + 16, type == 13 ? 160 : 128);  // [qh[32]] qs[128]
}

/// Unsigned quants q[256] and per 16 values a scale s and offset o (value q*s + o, exactly
/// ggml's) of a repacked super-block (scalar paths).
void unpack_kc_q(uint32_t type, const uint8_t* sb, uint8_t* q, float* s, float* o) {
  float d;
  std::memcpy(&d, sb, 4);
  if (type == 14) {
    const auto* sc = reinterpret_cast<const int8_t*>(sb + 4);
    for (int g = 0; g < 16; ++g) {
      s[g] = d * static_cast<float>(sc[g]);
      o[g] = -32.0f * s[g];
    }
    const uint8_t* ql = sb + 20;
    const uint8_t* qh = sb + 148;
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32)
      for (int l = 0; l < 32; ++l) {
        q[128 * n + l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
        q[128 * n + l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
        q[128 * n + l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        q[128 * n + l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    return;
  }
  float dmin;
  std::memcpy(&dmin, sb + 4, 4);
  const uint8_t* qh = sb + 24;
  const uint8_t* qs = sb + (type == 13 ? 56 : 24);
  for (int h = 0; h < 8; ++h) {
    s[2 * h] = s[2 * h + 1] = d * static_cast<float>(sb[8 + h]);
    o[2 * h] = o[2 * h + 1] = -dmin * static_cast<float>(sb[16 + h]);
    for (int l = 0; l < 32; ++l) {
      int v = h % 2 ? qs[32 * (h / 2) + l] >> 4 : qs[32 * (h / 2) + l] & 0x0F;
      if (type == 13 && (qh[l] >> h & 1)) v += 16;
      q[32 * h + l] = static_cast<uint8_t>(v);
    }
  }
}

/// The lane-stable order of the AVX-512 8-bit path: position P = 64c + b of a super-block (chunk
/// c of 64, byte b) holds the natural value interleave_source(type, P), so that int32 lane b/4
/// of every chunk belongs to one sub-block: b/8 of Q4_K/Q5_K (32 values, 8 per chunk), b/4 of
/// Q6_K (16 values, 4 per chunk).
int interleave_source(uint32_t type, int P) {
  const int c = P / 64, b = P % 64;
  return type == 14 ? 16 * (b / 4) + 4 * c + b % 4 : 32 * (b / 8) + 8 * c + b % 8;  // Q6_K; Q4_K, Q5_K
}

/// Rewrites the quant bytes of a repacked super-block `sb` in the lane-stable order, in the
/// byte layout the AVX-512 kernel unpacks (chunk c of Q4_K/Q5_K: low nibbles of qs[32c..32c+31]
/// then high nibbles, qh bits 2c and 2c+1; Q6_K: chunk 2n from ql[64n..] low nibbles, 2n+1
/// high nibbles, 2-bit highs in qh[32n..] as ggml's). Scales are unchanged.
void interleave_kquant(uint32_t type, uint8_t* sb) {
  uint8_t q[256], qp[256];
  float s[16], o[16];
  unpack_kc_q(type, sb, q, s, o);
  for (int P = 0; P < 256; ++P) qp[P] = q[interleave_source(type, P)];
  if (type == 14) {
    uint8_t* ql = sb + 20;
    uint8_t* qh = sb + 148;
    for (int n = 0; n < 2; ++n) {
      const uint8_t* v = qp + 128 * n;
      for (int b = 0; b < 64; ++b) ql[64 * n + b] = static_cast<uint8_t>((v[b] & 0x0F) | ((v[64 + b] & 0x0F) << 4));
      for (int l = 0; l < 32; ++l)
        qh[32 * n + l] = static_cast<uint8_t>((v[l] >> 4) | ((v[32 + l] >> 4) << 2) | ((v[64 + l] >> 4) << 4) | ((v[96 + l] >> 4) << 6));
    }
    return;
  }
  uint8_t* qh = sb + 24;
  uint8_t* qs = sb + (type == 13 ? 56 : 24);
  if (type == 13) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c)
    for (int b = 0; b < 32; ++b) {
      const uint8_t lo = qp[64 * c + b], hi = qp[64 * c + 32 + b];
      qs[32 * c + b] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      if (type == 13) qh[b] = static_cast<uint8_t>(qh[b] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
}

/// acc[i] += rows of x (at xb + i*ldx + off, 32 values) times the 32 weights w0 | w1.
template <int MT>
RTX_Q8_AVX512 inline __attribute__((always_inline)) void fma_rows512(__m512 (&acc)[MT][2], const float* xb, int64_t ldx, int off,
                                                                     __m512 w0, __m512 w1) {
  for (int i = 0; i < MT; ++i) {
    acc[i][0] = _mm512_fmadd_ps(_mm512_loadu_ps(xb + i * ldx + off), w0, acc[i][0]);
    acc[i][1] = _mm512_fmadd_ps(_mm512_loadu_ps(xb + i * ldx + off + 16), w1, acc[i][1]);
  }
}

/// 32 quants v (bytes, signed if SIGNED) -> four vectors of 8 f32 weights: SIGNED q*s (s0 for
/// the first 16, s1 for the last 16), else q*s0 + o (one rounding); then acc[i] += rows of x (at
/// xb + i*ldx + off) times them.
template <int MT, bool SIGNED>
RTX_Q8_AVX2 inline __attribute__((always_inline)) void widen_fma256(__m256 (&acc)[MT][2], const float* xb, int64_t ldx, int off,
                                                                    __m256i v, __m256 s0, __m256 s1, __m256 o) {
  const __m128i halves[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
  __m256 w[4];
  for (int j = 0; j < 4; ++j) {
    const __m128i b8 = j % 2 ? _mm_srli_si128(halves[j / 2], 8) : halves[j / 2];
    if constexpr (SIGNED) w[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b8)), j < 2 ? s0 : s1);
    else w[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b8)), s0, o);
  }
  for (int i = 0; i < MT; ++i) {
    const float* xi = xb + i * ldx + off;
    acc[i][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xi), w[0], acc[i][0]);
    acc[i][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 8), w[1], acc[i][1]);
    acc[i][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 16), w[2], acc[i][0]);
    acc[i][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 24), w[3], acc[i][1]);
  }
}

/// Q6_K, f32-activation tiles: the unsigned quants (0..63) of values 128n .. 128n+127 of a
/// repacked super-block (natural order) as four vectors of 32 (ggml's ql/qh layout).
RTX_Q8_AVX2 inline __attribute__((always_inline)) void unpack_q6k_half(const uint8_t* sb, int n, __m256i (&v)[4]) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 148 + 32 * n));
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 20 + 64 * n));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 52 + 64 * n));
  v[0] = _mm256_or_si256(_mm256_and_si256(l0, lo4), _mm256_slli_epi16(_mm256_and_si256(h, three), 4));
  v[1] = _mm256_or_si256(_mm256_and_si256(l1, lo4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), three), 4));
  v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), three), 4));
  v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), three), 4));
}

/// Q4_K/Q5_K, f32-activation tiles: the scale d*sc and offset -dmin*m of each of the 8
/// sub-blocks of a repacked super-block, into sv and ov (stored: the tiles broadcast from memory).
RTX_Q8_AVX2 inline __attribute__((always_inline)) void q45k_scales(const uint8_t* sb, float d, float dmin, float* sv, float* ov) {
  _mm256_store_ps(sv, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 8)))),
                                    _mm256_set1_ps(d)));
  _mm256_store_ps(ov, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 16)))),
                                    _mm256_set1_ps(-dmin)));
}

/// Q4_K/Q5_K (T 12/13), f32-activation tiles: the unsigned quants of sub-blocks 2p and 2p+1
/// (values 64p .. 64p+63, natural order) of a repacked super-block; Q5_K adds 16 where bit 2p
/// (low nibbles) or 2p+1 (high) of qh is set.
template <uint32_t T>
RTX_Q8_AVX2 inline __attribute__((always_inline)) void unpack_q45k_pair(const uint8_t* sb, int p, __m256i (&v)[2]) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + (T == 13 ? 56 : 24) + 32 * p));
  v[0] = _mm256_and_si256(raw, lo4);
  v[1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4);
  if constexpr (T == 13) {
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i hb = _mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 24)), _mm_cvtsi32_si128(2 * p));
    v[0] = _mm256_or_si256(v[0], _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
    v[1] = _mm256_or_si256(v[1], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
  }
}

/// res[i] = x_i . w over nsb repacked super-blocks of type T, i < MT, x_i = x + i*ldx. Per 32
/// weights: unpack the quants (and/shift/or), widen to f32, one FMA (or multiply) with the
/// broadcast scale and offset, then one FMA per row and 16 lanes.
template <int MT, uint32_t T>
RTX_Q8_AVX512 void tile_kc_avx512(const float* x, int64_t ldx, const uint8_t* sb, int64_t nsb, float* res) {
  __m512 acc[MT][2];
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nsb; ++b, sb += kc_bytes(T)) {
    prefetch_ahead(sb, kc_bytes(T));
    const float* xb = x + 256 * b;
    float d;
    std::memcpy(&d, sb, 4);
    if constexpr (T == 14) {
      alignas(64) float sv[16];
      _mm512_store_ps(sv, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 4)))),
                                        _mm512_set1_ps(d)));
      asm volatile("" ::: "memory");  // broadcast the scales from memory (a load), not by shuffles
      const __m256i k32 = _mm256_set1_epi8(32);
      for (int n = 0; n < 2; ++n) {
        __m256i v[4];
        unpack_q6k_half(sb, n, v);
        for (int j = 0; j < 4; ++j) {
          const __m256i vs = _mm256_sub_epi8(v[j], k32);
          const int g = 8 * n + 2 * j;  // 16-value group
          const __m512 w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(vs))), _mm512_set1_ps(sv[g]));
          const __m512 w1 =
              _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(vs, 1))), _mm512_set1_ps(sv[g + 1]));
          fma_rows512<MT>(acc, xb, ldx, 128 * n + 32 * j, w0, w1);
        }
      }
    } else {
      float dmin;
      std::memcpy(&dmin, sb + 4, 4);
      alignas(32) float sv[8], ov[8];
      q45k_scales(sb, d, dmin, sv, ov);
      asm volatile("" ::: "memory");  // broadcast the scales from memory (a load), not by shuffles
      for (int p = 0; p < 4; ++p) {
        __m256i v[2];
        unpack_q45k_pair<T>(sb, p, v);
        for (int t = 0; t < 2; ++t) {
          const int h = 2 * p + t;  // 32-value sub-block
          const __m512 s = _mm512_set1_ps(sv[h]), o = _mm512_set1_ps(ov[h]);
          const __m512 w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(v[t]))), s, o);
          const __m512 w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(v[t], 1))), s, o);
          fma_rows512<MT>(acc, xb, ldx, 32 * h, w0, w1);
        }
      }
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

/// AVX2: as tile_kc_avx512 with 8 lanes; 32 weights as four vectors of 8.
template <int MT, uint32_t T>
RTX_Q8_AVX2 void tile_kc_avx2(const float* x, int64_t ldx, const uint8_t* sb, int64_t nsb, float* res) {
  __m256 acc[MT][2];
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nsb; ++b, sb += kc_bytes(T)) {
    prefetch_ahead(sb, kc_bytes(T));
    const float* xb = x + 256 * b;
    float d;
    std::memcpy(&d, sb, 4);
    if constexpr (T == 14) {
      alignas(32) float sv[16];
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 4));
      _mm256_store_ps(sv, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), _mm256_set1_ps(d)));
      _mm256_store_ps(sv + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), _mm256_set1_ps(d)));
      const __m256i k32 = _mm256_set1_epi8(32);
      for (int n = 0; n < 2; ++n) {
        __m256i v[4];
        unpack_q6k_half(sb, n, v);
        for (int j = 0; j < 4; ++j) {
          const int g = 8 * n + 2 * j;
          widen_fma256<MT, true>(acc, xb, ldx, 128 * n + 32 * j, _mm256_sub_epi8(v[j], k32), _mm256_set1_ps(sv[g]),
                                 _mm256_set1_ps(sv[g + 1]), _mm256_setzero_ps());
        }
      }
    } else {
      float dmin;
      std::memcpy(&dmin, sb + 4, 4);
      alignas(32) float sv[8], ov[8];
      q45k_scales(sb, d, dmin, sv, ov);
      for (int p = 0; p < 4; ++p) {
        __m256i v[2];
        unpack_q45k_pair<T>(sb, p, v);
        for (int t = 0; t < 2; ++t) {
          const int h = 2 * p + t;
          const __m256 s = _mm256_set1_ps(sv[h]), o = _mm256_set1_ps(ov[h]);
          widen_fma256<MT, false>(acc, xb, ldx, 32 * h, v[t], s, s, o);
        }
      }
    }
  }
  for (int i = 0; i < MT; ++i) res[i] = hsum256(_mm256_add_ps(acc[i][0], acc[i][1]));
}

/// Scalar: each super-block unpacked to 256 f32 weights, summed per 32 then across blocks.
void row_kc_scalar(uint32_t type, const float* x, const uint8_t* sb, int64_t nsb, float* res) {
  float acc = 0;
  for (int64_t b = 0; b < nsb; ++b, sb += kc_bytes(type)) {
    uint8_t q[256];
    float s[16], o[16];
    unpack_kc_q(type, sb, q, s, o);
    for (int h = 0; h < 8; ++h) {
      float t = 0;
      for (int j = 0; j < 32; ++j) {
        const int g = 2 * h + j / 16;
        t += x[256 * b + 32 * h + j] * std::fma(static_cast<float>(q[32 * h + j]), s[g], o[g]);
      }
      acc += t;
    }
  }
  *res = acc;
}

using TileKcFn = void (*)(const float*, int64_t, const uint8_t*, int64_t, float*);

/// The compact K-quant tile for `rows` (1..8) of type 12/13/14 on `isa` (nullptr: scalar).
TileKcFn tile_kc_fn(Isa isa, int rows, uint32_t type) {
  const int t = static_cast<int>(type) - 12;
#define RTX_KC_ROW(F, T) {F<1, T>, F<2, T>, F<3, T>, F<4, T>, F<5, T>, F<6, T>, F<7, T>, F<8, T>}
  if (isa == Isa::Avx512) {
    static const TileKcFn f[3][8] = {RTX_KC_ROW(tile_kc_avx512, 12), RTX_KC_ROW(tile_kc_avx512, 13), RTX_KC_ROW(tile_kc_avx512, 14)};
    return f[t][rows - 1];
  }
  if (isa == Isa::Avx2) {
    static const TileKcFn f[3][8] = {RTX_KC_ROW(tile_kc_avx2, 12), RTX_KC_ROW(tile_kc_avx2, 13), RTX_KC_ROW(tile_kc_avx2, 14)};
    return f[t][rows - 1];
  }
#undef RTX_KC_ROW
  return nullptr;
}


// ---- K-quants with 8-bit activations: integer dot products on the repacked super-blocks ------
// Each input row is quantized per 32 values (sx = max|x| / 127, xq = round(x / sx), int8), as
// llama.cpp quantizes activations for its K-quant dot products (it uses one scale per 256). With
// unsigned quants q (0..63), a scale s and an offset o per sub-block (32 values for Q4_K/Q5_K,
// 16 for Q6_K, whose o = -32 s):
//   sum x*w ~= sum over sub-blocks of s * sx * sum(q * xq) + o * (sx * sum(xq))
// = sum w * xhat with xhat = xq * sx. Both integer sums are exact (u8 x s8 products, at most
// 4 * 63 * 127 per int32 lane); sx * sum(xq) per sub-block is computed once per row. The offset
// term sees the same quantized inputs, so Q6_K's -32 s cancels exactly against s * q's error.

/// An input block of MT rows quantized for the int8 kernels: xq (row stride K), sx per 32
/// (stride K/32), and sx * sum(xq) per 32 (xs32) and per 16 (xs16).
struct QuantRows {
  const int8_t* xq;
  const float* sx;
  const float* xs32;
  const float* xs16;
  const int32_t* xl;  // 128 x the sum of each 32-value block's xq (stride K/32; read by the Q8_0 x16 tile)
  int64_t K;
};

/// The int8 scale of a 32-value block with max |x| = amax: *inv multiplies x into [-127, 127],
/// the return value sx (xhat = xq * sx). A block below 1e-30 (where 127 / amax would overflow)
/// quantizes to zeros with sx 0: it contributes exactly 0 (its true share is below 1e-28 |w|).
/// NaN or Inf (amax NaN, Inf) give zeros with sx NaN or Inf, so the output is NaN (0 x Inf in
/// the scale FMA) on every 8-bit path and layout alike, never a silently finite number. *inv is
/// 0 exactly when the block quantizes to zeros (callers store zeros then: x * 0 is NaN for an
/// infinite x, which the conversions would turn into -128).
inline float block_scale(float amax, float* inv) {
  const bool usable = amax > 1e-30f && amax <= std::numeric_limits<float>::max();
  *inv = usable ? 127.0f / amax : 0.0f;
  return usable || std::isnan(amax) || amax > 1e-30f ? amax / 127.0f : 0.0f;
}

/// One 32-value block b of the AVX-512 quantize_rows: xq = round-to-nearest-even(x * 127 /
/// max|x|) (cvtps2dq), saturated to int8; the same values as the scalar form but for ties.
RTX_Q8_AVX512 void quantize_block_avx512(const float* xb, int8_t* xq, float* sx, float* xs32, float* xs16, int32_t* xl) {
  const __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16);
  float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  if (_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q))  // max drops NaN
    amax = std::numeric_limits<float>::quiet_NaN();
  float inv;
  const float scale = block_scale(amax, &inv);
  const __m512i qa = inv == 0.0f ? _mm512_setzero_si512() : _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(inv)));
  const __m512i qb = inv == 0.0f ? _mm512_setzero_si512() : _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(inv)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(xq), _mm512_cvtsepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + 16), _mm512_cvtsepi32_epi8(qb));
  const int32_t s0 = _mm512_reduce_add_epi32(qa), s1 = _mm512_reduce_add_epi32(qb);
  *sx = scale;
  *xs32 = static_cast<float>(s0 + s1) * scale;
  xs16[0] = static_cast<float>(s0) * scale;
  xs16[1] = static_cast<float>(s1) * scale;
  *xl = 128 * (s0 + s1);
}

/// One 32-value block b of the AVX2 quantize_rows: as quantize_block_avx512 (ties to even).
RTX_Q8_AVX2 void quantize_block_avx2(const float* xb, int8_t* xq, float* sx, float* xs32, float* xs16, int32_t* xl) {
  __m256 v[4];
  __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(xb + 8 * j);
    m = _mm256_max_ps(m, _mm256_and_ps(v[j], abs_mask));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[j], v[j], _CMP_UNORD_Q));
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float amax = _mm_cvtss_f32(h);
  if (_mm256_movemask_ps(nan)) amax = std::numeric_limits<float>::quiet_NaN();  // max drops NaN
  float inv;
  const float scale = block_scale(amax, &inv);
  __m256i q[4];
  for (int j = 0; j < 4; ++j)
    q[j] = inv == 0.0f ? _mm256_setzero_si256() : _mm256_cvtps_epi32(_mm256_mul_ps(v[j], _mm256_set1_ps(inv)));
  // int32 -> int8 with saturation; packs work per 128-bit lane, the permute restores the order.
  const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
  const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq), p8);
  // The sums of the stored (saturated) quants, per 16.
  const __m256i w = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p8), _mm256_set1_epi16(1));
  alignas(32) int32_t l[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), w);
  const int32_t s0 = l[0] + l[1] + l[2] + l[3], s1 = l[4] + l[5] + l[6] + l[7];
  *sx = scale;
  *xs32 = static_cast<float>(s0 + s1) * scale;
  xs16[0] = static_cast<float>(s0) * scale;
  xs16[1] = static_cast<float>(s1) * scale;
  *xl = 128 * (s0 + s1);
}

/// Quantizes M rows of x (M, K) into thread-local buffers (valid until the next call on this
/// thread). `isa` Avx512 and Avx2 round ties to even, Scalar away from zero; with Avx512 each
/// 256-value block of xq is also put in the lane-stable order of K-quant `type`
/// (interleave_source), as its weights are.
QuantRows quantize_rows(const float* x, int64_t M, int64_t K, Isa isa, uint32_t type) {
  static thread_local std::vector<int8_t> xq;
  static thread_local std::vector<float> sx, xs32, xs16;
  static thread_local std::vector<int32_t> xl;
  const int64_t nb = K / 32;
  xq.resize(static_cast<size_t>(M * K));
  sx.resize(static_cast<size_t>(M * nb));
  xs32.resize(sx.size());
  xs16.resize(2 * sx.size());
  xl.resize(sx.size());
  for (int64_t b = 0; b < M * nb; ++b) {
    const float* xb = x + 32 * b;
    if (isa == Isa::Avx512) {
      quantize_block_avx512(xb, xq.data() + 32 * b, sx.data() + b, xs32.data() + b, xs16.data() + 2 * b, xl.data() + b);
      continue;
    }
    if (isa == Isa::Avx2) {
      quantize_block_avx2(xb, xq.data() + 32 * b, sx.data() + b, xs32.data() + b, xs16.data() + 2 * b, xl.data() + b);
      continue;
    }
    float amax = 0;
    for (int j = 0; j < 32; ++j)
      amax = std::isnan(xb[j]) || std::isnan(amax) ? std::numeric_limits<float>::quiet_NaN() : std::max(amax, std::fabs(xb[j]));
    float inv;
    const float scale = block_scale(amax, &inv);
    int32_t sum[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      const auto v = inv == 0.0f ? int8_t{0} : static_cast<int8_t>(std::max(-127L, std::min(127L, std::lround(xb[j] * inv))));
      xq[static_cast<size_t>(32 * b + j)] = v;
      sum[j / 16] += v;
    }
    sx[static_cast<size_t>(b)] = scale;
    xs32[static_cast<size_t>(b)] = static_cast<float>(sum[0] + sum[1]) * scale;
    xs16[static_cast<size_t>(2 * b)] = static_cast<float>(sum[0]) * scale;
    xs16[static_cast<size_t>(2 * b + 1)] = static_cast<float>(sum[1]) * scale;
    xl[static_cast<size_t>(b)] = 128 * (sum[0] + sum[1]);
  }
  if (isa == Isa::Avx512 && type != 8) {
    static const auto table = [] {
      std::array<std::array<uint8_t, 256>, 2> t{};
      for (int P = 0; P < 256; ++P) {
        t[0][P] = static_cast<uint8_t>(interleave_source(12, P));
        t[1][P] = static_cast<uint8_t>(interleave_source(14, P));
      }
      return t;
    }();
    const auto& src = table[type == 14 ? 1 : 0];
    int8_t tmp[256];
    for (int64_t blk = 0; blk < M * K / 256; ++blk) {
      int8_t* v = xq.data() + 256 * blk;
      std::memcpy(tmp, v, 256);
      for (int P = 0; P < 256; ++P) v[P] = tmp[src[P]];
    }
  }
  return {xq.data(), sx.data(), xs32.data(), xs16.data(), xl.data(), K};
}

/// acci[i] += (u8 quants v . s8 inputs of row i at xq + i*ld, 64 values) in 16 int32 lanes
/// (pmaddubsw + pmaddwd: AVX-512 without VNNI).
template <int MT>
RTX_Q8_AVX512 inline __attribute__((always_inline)) void chunk_i8(__m512i (&acci)[MT], __m512i v, const int8_t* xq, int64_t ld) {
  for (int i = 0; i < MT; ++i) {
    const __m512i x = _mm512_loadu_si512(xq + i * ld);
    acci[i] = _mm512_add_epi32(acci[i], _mm512_madd_epi16(_mm512_maddubs_epi16(v, x), _mm512_set1_epi16(1)));
  }
}

/// res[i] = row i of r (i < MT) . the nsb super-blocks of type T at sb, in the lane-stable
/// order (interleave_kquant; r.xq permuted the same way). Every 64 quants of a super-block put
/// sub-block k/2 (Q4_K, Q5_K) or k (Q6_K) in int32 lane k, so each row's four products per
/// lane accumulate in integers over the whole super-block (pmaddubsw + pmaddwd: exact, no pair exceeds 2*63*127, no lane 4*64*63*127); one conversion and one FMA
/// with the lanes' s * sx per super-block and row. The offsets' term is an FMA per super-block.
/// AVX-512 without VNNI only (with VNNI, kquant() builds x16: tile_kc_x16_avx512).
template <int MT, uint32_t T>
RTX_Q8_AVX512 void tile_kc_i8_avx512(const QuantRows& r, int64_t m0, const uint8_t* sb, int64_t nsb, float* res) {
  // One accumulator per row, the offsets' term included (in a fixed order: the result still
  // depends on the row alone). Separate offset accumulators spilled at MT = 8.
  __m512 acc[MT];
  for (int i = 0; i < MT; ++i) acc[i] = _mm512_setzero_ps();
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  const int64_t K = r.K;
  for (int64_t b = 0; b < nsb; ++b, sb += kc_bytes(T)) {
    prefetch_ahead(sb, kc_bytes(T));
    float d;
    std::memcpy(&d, sb, 4);
    __m512i acci[MT];
    for (int i = 0; i < MT; ++i) acci[i] = _mm512_setzero_si512();
    const int8_t* xb = r.xq + m0 * K + 256 * b;
    if constexpr (T == 14) {
      for (int n = 0; n < 2; ++n) {
        const __m512i ql = _mm512_loadu_si512(sb + 20 + 64 * n);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 148 + 32 * n)));
        const __m512i three = _mm512_set1_epi8(3);
        const __m512i sh01 = _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0, 0, 0, 0);
        const __m512i sh23 = _mm512_set_epi64(0x0006000600060006, 0x0006000600060006, 0x0006000600060006, 0x0006000600060006,
                                              0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004);
        const __m512i v01 = _mm512_or_si512(_mm512_and_si512(ql, lo4),
                                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), three), 4));
        const __m512i v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), lo4),
                                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), three), 4));
        chunk_i8<MT>(acci, v01, xb + 128 * n, K);
        chunk_i8<MT>(acci, v23, xb + 128 * n + 64, K);
      }
    } else {
      const uint8_t* qs = sb + (T == 13 ? 56 : 24);
      const __m512i sh = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0, 0, 0, 0);
      __m512i hb = T == 13 ? _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 24))) : _mm512_setzero_si512();
      const __m512i hsh = _mm512_set_epi64(0x0001000100010001, 0x0001000100010001, 0x0001000100010001, 0x0001000100010001, 0, 0, 0, 0);
      for (int p = 0; p < 4; ++p) {
        const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * p)));
        __m512i v = _mm512_and_si512(_mm512_srlv_epi16(raw, sh), lo4);
        if constexpr (T == 13) {  // bit 2p (bytes 0..31) and 2p+1 (bytes 32..63) of qh: +16
          v = _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, hsh), _mm512_set1_epi8(1)), 4));
          hb = _mm512_srli_epi16(hb, 2);
        }
        chunk_i8<MT>(acci, v, xb + 64 * p, K);
      }
    }
    // Lane k's scale: weight scale times input scale of its sub-block; then the offsets.
    const __m512i pairs = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    if constexpr (T == 14) {
      const __m512 s16 = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 4)))), _mm512_set1_ps(d));
      const __m512 o16 = _mm512_mul_ps(s16, _mm512_set1_ps(-32.0f));
      for (int i = 0; i < MT; ++i) {
        const int64_t at = (m0 + i) * (K / 32) + 8 * b;
        const __m512 S = _mm512_mul_ps(s16, _mm512_permutexvar_ps(pairs, _mm512_castps256_ps512(_mm256_loadu_ps(r.sx + at))));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[i]), S, acc[i]);
        acc[i] = _mm512_fmadd_ps(o16, _mm512_loadu_ps(r.xs16 + 2 * at), acc[i]);
      }
    } else {
      float dmin;
      std::memcpy(&dmin, sb + 4, 4);
      const __m256 s8 = _mm256_mul_ps(
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 8)))), _mm256_set1_ps(d));
      const __m256 o8 = _mm256_mul_ps(
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 16)))), _mm256_set1_ps(-dmin));
      for (int i = 0; i < MT; ++i) {
        const int64_t at = (m0 + i) * (K / 32) + 8 * b;
        const __m512 S = _mm512_permutexvar_ps(pairs, _mm512_castps256_ps512(_mm256_mul_ps(s8, _mm256_loadu_ps(r.sx + at))));
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[i]), S, acc[i]);
        acc[i] = _mm512_fmadd_ps(_mm512_zextps256_ps512(o8), _mm512_zextps256_ps512(_mm256_loadu_ps(r.xs32 + at)), acc[i]);
      }
    }
  }
  for (int i = 0; i < MT; ++i)  // a fixed tree: halves, then hsum256
    res[i] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[i]), _mm512_extractf32x8_ps(acc[i], 1)));
}

/// Q8_0 W8A8 on AVX2, 8 weight rows (output columns) at a time, on q8_0()'s column-interleaved
/// layout: per block of 32 values, 8 steps of 4 values; one 32-byte vector holds those 4 quants
/// of each of the 8 columns. Per step and input row: the row's 4 int8 inputs broadcast, ggml's
/// signed product pmaddubsw(|q|, sign(x, q)) and pmaddwd against ones put each column's 4-product
/// sum in its int32 lane; the block's 8 steps add exactly (a lane stays below 32 * 128 * 127),
/// then one conversion and one FMA with the columns' d times the row's sx. Against a column at a
/// time (a vector of 32 values per row, converted and scaled every block, summed across lanes at
/// the end), this drops the per-step conversion, FMA and scale load: 1.3-1.4x per core on Zen 3.
/// res[i][c] = row m0 + i of r . column c of the group at (qg, dg), i < MT, c < 8. Each row's
/// operations are the same whatever MT is (batch invariant).
template <int MT>
RTX_Q8_AVX2 void tile_q8x8_i8_avx2(const QuantRows& r, int64_t m0, const int8_t* qg, const float* dg, int64_t nb,
                                   float (*res)[8]) {
  __m256 acc[MT];
  _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t K = r.K;
  const int8_t* xr = r.xq + m0 * K;
  const float* sxr = r.sx + m0 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* qb = qg + 256 * b;
    prefetch_ahead(qb, 256);
    if (b % 2 == 0) prefetch_ahead(dg + 8 * b, 64);
    __m256i ia[MT];
    _Pragma("GCC unroll 8") for (int g = 0; g < 8; ++g) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + 32 * g));
      const __m256i aw = _mm256_sign_epi8(w, w);
      _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) {
        int32_t x4;
        std::memcpy(&x4, xr + i * K + 32 * b + 4 * g, 4);
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(x4), w)), ones);
        ia[i] = g == 0 ? p : _mm256_add_epi32(ia[i], p);
        RTX_KEEP_IN_REG(ia[i]);
      }
    }
    const __m256 dv = _mm256_loadu_ps(dg + 8 * b);
    _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i)
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i]), _mm256_mul_ps(dv, _mm256_broadcast_ss(sxr + i * nb + b)), acc[i]);
  }
  _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) _mm256_storeu_ps(res[i], acc[i]);
}

constexpr int kRowTileX16 = 8;  // rows of the x16 tiles (2 zmm each: 16 of the 32 registers)

/// Q8_0 W8A8 on AVX-512 VNNI, 16 weight rows (output columns) at a time, on q8_0()'s x16
/// layout: per block of 32 values, 8 steps of 64 bytes (4 quants + 128 of each of the 16
/// columns). Per step and input row: the row's 4 int8 inputs broadcast and one vpdpbusd (u8
/// quants + 128 x s8 inputs, at most 32 * 255 * 127 per lane); per block and row, 128 x the
/// block's input sum (r.xl) subtracted in int32, which leaves each column's exact signed dot,
/// then one conversion and one FMA with the columns' d times the row's sx: the same operations
/// per column as tile_q8x8_i8_avx2, so the same bits. res[i][c], i < MT, c < 16; each row's
/// operations are the same whatever MT is (batch invariant).
template <int MT>
RTX_KQ_VNNI void tile_q8x16_i8_avx512(const QuantRows& r, int64_t m0, const int8_t* qg, const float* dg, int64_t nb,
                                      float (*res)[16]) {
  __m512 acc[MT];
  _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t K = r.K;
  const int8_t* xr = r.xq + m0 * K;
  const float* sxr = r.sx + m0 * nb;
  const int32_t* xlr = r.xl + m0 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* qb = qg + 512 * b;
    prefetch_ahead(qb, 512);
    prefetch_ahead(dg + 16 * b, 64);
    __m512i ia[MT];
    _Pragma("GCC unroll 8") for (int g = 0; g < 8; ++g) {
      const __m512i w = _mm512_loadu_si512(qb + 64 * g);
      _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) {
        int32_t x4;
        std::memcpy(&x4, xr + i * K + 32 * b + 4 * g, 4);
        ia[i] = _mm512_dpbusd_epi32(g == 0 ? _mm512_setzero_si512() : ia[i], w, _mm512_set1_epi32(x4));
      }
    }
    const __m512 dv = _mm512_loadu_ps(dg + 16 * b);
    _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) {
      const __m512i dot = _mm512_sub_epi32(ia[i], _mm512_set1_epi32(xlr[i * nb + b]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dv, _mm512_set1_ps(sxr[i * nb + b])), acc[i]);
    }
  }
  _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) _mm512_storeu_ps(res[i], acc[i]);
}

// ---- 8 (AVX2) or 16 (AVX-512 VNNI) columns at a time: the "x8" / "x16" layouts of kquant() --
// Per group of W weight rows (output columns; W 8 or 16; the last group padded with zero columns)
// and super-block, kc_xw_bytes(T, W) bytes (W x kc_bytes(T)); offsets for W = 8 (x16: twice):
//  Q4_K: [f32 d[8]][f32 dmin[8]][u8 sc[8 sub-blocks][8]][u8 m[8][8]][qs 1024]
//  Q5_K: as Q4_K, then [qh 256] after qs
//  Q6_K: [f32 d[8]][i8 sc[16 groups of 16][8]][ql 1024][qh 512]
// Quants: sub-block h (32 values) in 8 steps t of 4 values; one 4W-byte vector holds a step's 4
// values of each of the W columns (byte 4c + j: value 4t + j of column c). qs / ql at
// 32W(h/2) + 4Wt: low nibbles sub-block h even, high nibbles h odd (Q6_K: the low 4 bits);
// Q5_K qh at 152W + 4Wt: bit h of each byte is the value's bit 4; Q6_K qh at 148W + 32W(h/4) +
// 4Wt: bits 2(h%4), 2(h%4)+1 of each byte are the value's high 2 bits.
// AVX2 (x8): with 4 inputs of a row broadcast, pmaddubsw puts 2 products' sums of each column in
// its two int16 lanes; those add up in int16 over a sub-block's steps (Q4_K: 8 steps, at most
// 8 * 2 * 15 * 127 = 30480; Q5_K: 4 steps, 4 * 2 * 31 * 127 = 31496; Q6_K: 2 steps,
// 2 * 2 * 63 * 127 = 32004), so the widening pmaddwd runs once per sub-block (Q4_K, against
// ones), per 4 steps (Q5_K) or per 2 steps (Q6_K, against the columns' int16 scales), and the
// conversion and FMA once per sub-block and row.
// AVX-512 VNNI (x16): vpdpbusd adds each column's 4 products straight into its int32 lane, 64
// MACs an instruction; the same exact integer sums and then the same f32 operations per column
// as x8, so the two give the same bits.

constexpr int64_t kc_xw_bytes(uint32_t type, int W) { return W * kc_bytes(type); }
constexpr int64_t kc_x8_bytes(uint32_t type) { return kc_xw_bytes(type, 8); }

/// Writes the x8 (W 8) or x16 (W 16) layout of columns n0..n0+W-1 (those < N) of super-block b
/// from the repacked rows at sb (row stride nsb * kc_bytes(type)) into out (kc_xw_bytes(type, W)
/// bytes, zeroed).
void pack_kc_xw(uint32_t type, int W, const uint8_t* sb, int64_t nsb, int64_t N, int64_t n0, int64_t b, uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>(kc_xw_bytes(type, W)));
  for (int64_t c = 0; c < W && n0 + c < N; ++c) {
    const uint8_t* in = sb + ((n0 + c) * nsb + b) * kc_bytes(type);
    uint8_t q[256];
    float s[16], o[16];
    unpack_kc_q(type, in, q, s, o);
    std::memcpy(out + 4 * c, in, 4);  // d
    if (type != 14) {
      std::memcpy(out + 4 * W + 4 * c, in + 4, 4);  // dmin
      for (int h = 0; h < 8; ++h) {
        out[8 * W + W * h + c] = in[8 + h];
        out[16 * W + W * h + c] = in[16 + h];
      }
    } else {
      for (int g = 0; g < 16; ++g) out[4 * W + W * g + c] = in[4 + g];
    }
    uint8_t* qs = out + (type == 14 ? 20 : 24) * W;
    uint8_t* qh = out + 148 * W;
    for (int h = 0; h < 8; ++h)
      for (int t = 0; t < 8; ++t)
        for (int j = 0; j < 4; ++j) {
          const uint8_t v = q[32 * h + 4 * t + j];
          const int64_t at = 4 * W * t + 4 * c + j;
          qs[32 * W * (h / 2) + at] |= static_cast<uint8_t>((v & 15) << (4 * (h % 2)));
          if (type == 13) out[152 * W + at] |= static_cast<uint8_t>((v >> 4) << h);
          if (type == 14) qh[32 * W * (h / 4) + at] |= static_cast<uint8_t>((v >> 4) << (2 * (h % 4)));
        }
  }
}

/// Step t of sub-block h of an x8 super-block at sb (T 12 Q4_K, 13 Q5_K, 14 Q6_K): 4 unsigned quants of
/// each of the 8 columns (byte 4c + j: value 4t + j of column c).
template <uint32_t T>
RTX_Q8_AVX2 inline __attribute__((always_inline)) __m256i x8_quants(const uint8_t* sb, int h, int t) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + (T == 14 ? 160 : 192) + 256 * (h / 2) + 32 * t));
  __m256i q = h % 2 ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4) : _mm256_and_si256(raw, lo4);
  if constexpr (T == 13) {  // 16-bit shifts: each byte's result is masked before it moves up
    const __m256i rh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 1216 + 32 * t));
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(rh, _mm_cvtsi32_si128(h)), _mm256_set1_epi8(1));
    q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 4));
  }
  if constexpr (T == 14) {
    const __m256i rh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 1184 + 256 * (h / 4) + 32 * t));
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(rh, _mm_cvtsi32_si128(2 * (h % 4))), _mm256_set1_epi8(3));
    q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 4));
  }
  return q;
}

/// The nsb x8 super-blocks of a group at sb with their quants unpacked to bytes, into u (2048
/// bytes per super-block, 32 per step: x8_quants(sb, h, t) at 2048 b + 256 h + 32 t; 32-byte
/// aligned), for inputs of more than one row tile.
template <uint32_t T>
RTX_Q8_AVX2 void unpack_kc_x8_avx2(const uint8_t* sb, int64_t nsb, uint8_t* u) {
  for (int64_t b = 0; b < nsb; ++b, sb += kc_x8_bytes(T)) {
    prefetch_ahead(sb, kc_x8_bytes(T));
    for (int h = 0; h < 8; ++h)
      for (int t = 0; t < 8; ++t) _mm256_store_si256(reinterpret_cast<__m256i*>(u + 2048 * b + 256 * h + 32 * t), x8_quants<T>(sb, h, t));
  }
}

/// res[i][c] = row m0 + i of r . column c of the group's nsb x8 super-blocks at sb (T 12 Q4_K,
/// 13 Q5_K, 14 Q6_K), i < MT. Per sub-block h and row: the int16 sums above, pmaddwd, one conversion and
/// an FMA with the columns' d * sc (Q4_K d * sc per sub-block; Q6_K d, sc inside pmaddwd) times
/// the row's sx, and the offsets (Q4_K -dmin * m times sx * sum(xq) per 32, Q6_K -32 d sc per 16)
/// as FMAs. PRE: the quants come unpacked from u (unpack_kc_x8_avx2), the same bytes. Each row's
/// operations are the same whatever MT and PRE are (batch invariant).
template <int MT, uint32_t T, bool PRE>
RTX_Q8_AVX2 void tile_kc_x8_avx2(const QuantRows& r, int64_t m0, const uint8_t* sb, int64_t nsb, const uint8_t* u,
                                 float (*res)[8]) {
  __m256 acc[MT];
  _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t K = r.K, nb = K / 32;
  const int8_t* xr = r.xq + m0 * K;
  for (int64_t b = 0; b < nsb; ++b, sb += kc_x8_bytes(T)) {
    if (!PRE) prefetch_ahead(sb, kc_x8_bytes(T));
    const __m256 dv = _mm256_loadu_ps(reinterpret_cast<const float*>(sb));
    for (int h = 0; h < 8; ++h) {
      const int64_t blk = 8 * b + h;  // the rows' 32-value input block
      const int8_t* xh = xr + 32 * blk;
      alignas(32) int16_t sc16[2][16];  // Q6_K: groups 2h, 2h+1, each column's scale in both its int16 lanes
      if constexpr (T == 14)
        for (int g = 0; g < 2; ++g) {
          const __m256i s32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 32 + 8 * (2 * h + g))));
          _mm256_store_si256(reinterpret_cast<__m256i*>(sc16[g]),
                             _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s32, 16)));
        }
      __m256i a16[MT], ia[MT];
      _Pragma("GCC unroll 8") for (int t = 0; t < 8; ++t) {
        const __m256i q = PRE ? _mm256_load_si256(reinterpret_cast<const __m256i*>(u + 2048 * b + 256 * h + 32 * t))
                              : x8_quants<T>(sb, h, t);
        _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) {
          int32_t x4;
          std::memcpy(&x4, xh + i * K + 4 * t, 4);
          const __m256i p = _mm256_maddubs_epi16(q, _mm256_set1_epi32(x4));
          a16[i] = t % (T == 12 ? 8 : T == 13 ? 4 : 2) == 0 ? p : _mm256_add_epi16(a16[i], p);
          RTX_KEEP_IN_REG(a16[i]);
          if constexpr (T == 13) {
            if (t == 3) ia[i] = _mm256_madd_epi16(a16[i], ones);
            if (t == 7) ia[i] = _mm256_add_epi32(ia[i], _mm256_madd_epi16(a16[i], ones));
            if (t == 3 || t == 7) RTX_KEEP_IN_REG(ia[i]);
          }
          if constexpr (T == 14) {
            if (t % 2 == 1) {
              const __m256i w = _mm256_madd_epi16(a16[i], _mm256_load_si256(reinterpret_cast<const __m256i*>(sc16[t / 4])));
              ia[i] = t == 1 ? w : _mm256_add_epi32(ia[i], w);
              RTX_KEEP_IN_REG(ia[i]);
            }
          }
        }
      }
      // The columns' scales and offsets, after the integer loop (fewer values live across it).
      __m256 sv, ov0, ov1;
      if constexpr (T != 14) {
        sv = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 64 + 8 * h)))));
        ov0 = _mm256_mul_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(sb + 32)),
                            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 128 + 8 * h)))));
        ov0 = _mm256_sub_ps(_mm256_setzero_ps(), ov0);
        ov1 = ov0;
      } else {
        sv = dv;
        const __m256 m32d = _mm256_mul_ps(dv, _mm256_set1_ps(-32.0f));
        ov0 = _mm256_mul_ps(m32d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 32 + 8 * (2 * h))))));
        ov1 = _mm256_mul_ps(m32d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 32 + 8 * (2 * h + 1))))));
      }
      _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) {
        if constexpr (T == 12) ia[i] = _mm256_madd_epi16(a16[i], ones);
        const int64_t at = (m0 + i) * nb + blk;
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i]), _mm256_mul_ps(sv, _mm256_broadcast_ss(r.sx + at)), acc[i]);
        if constexpr (T != 14) {
          acc[i] = _mm256_fmadd_ps(ov0, _mm256_broadcast_ss(r.xs32 + at), acc[i]);
        } else {
          acc[i] = _mm256_fmadd_ps(ov0, _mm256_broadcast_ss(r.xs16 + 2 * at), acc[i]);
          acc[i] = _mm256_fmadd_ps(ov1, _mm256_broadcast_ss(r.xs16 + 2 * at + 1), acc[i]);
        }
      }
    }
  }
  _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) _mm256_storeu_ps(res[i], acc[i]);
}

/// Step t of sub-block h of an x16 super-block at sb (T 12 Q4_K, 13 Q5_K, 14 Q6_K): 4 unsigned
/// quants of each of the 16 columns (byte 4c + j: value 4t + j of column c); as x8_quants.
template <uint32_t T>
RTX_KQ_VNNI inline __attribute__((always_inline)) __m512i x16_quants(const uint8_t* sb, int h, int t) {
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  const __m512i raw = _mm512_loadu_si512(sb + (T == 14 ? 320 : 384) + 512 * (h / 2) + 64 * t);
  __m512i q = h % 2 ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4) : _mm512_and_si512(raw, lo4);
  if constexpr (T == 13) {  // 16-bit shifts: each byte's result is masked before it moves up
    const __m512i rh = _mm512_loadu_si512(sb + 2432 + 64 * t);
    const __m512i hb = _mm512_and_si512(_mm512_srl_epi16(rh, _mm_cvtsi32_si128(h)), _mm512_set1_epi8(1));
    q = _mm512_or_si512(q, _mm512_slli_epi16(hb, 4));
  }
  if constexpr (T == 14) {
    const __m512i rh = _mm512_loadu_si512(sb + 2368 + 512 * (h / 4) + 64 * t);
    const __m512i hb = _mm512_and_si512(_mm512_srl_epi16(rh, _mm_cvtsi32_si128(2 * (h % 4))), _mm512_set1_epi8(3));
    q = _mm512_or_si512(q, _mm512_slli_epi16(hb, 4));
  }
  return q;
}

/// The nsb x16 super-blocks of a group at sb with their quants unpacked to bytes, into u (4096
/// bytes per super-block, 64 per step: x16_quants(sb, h, t) at 4096 b + 512 h + 64 t; 64-byte
/// aligned), for inputs of more than one row tile.
template <uint32_t T>
RTX_KQ_VNNI void unpack_kc_x16_avx512(const uint8_t* sb, int64_t nsb, uint8_t* u) {
  for (int64_t b = 0; b < nsb; ++b, sb += kc_xw_bytes(T, 16)) {
    prefetch_ahead(sb, kc_xw_bytes(T, 16));
    for (int h = 0; h < 8; ++h)
      for (int t = 0; t < 8; ++t) _mm512_store_si512(u + 4096 * b + 512 * h + 64 * t, x16_quants<T>(sb, h, t));
  }
}

/// res[i][c] = row m0 + i of r . column c of the group's nsb x16 super-blocks at sb (T 12 Q4_K,
/// 13 Q5_K, 14 Q6_K), i < MT, c < 16; AVX-512 VNNI. Per step and row: the row's 4 int8 inputs
/// broadcast and one vpdpbusd (u8 quants x s8 inputs, exact int32 per column). Per sub-block h
/// and row, the same operations as tile_kc_x8_avx2 per column: Q4_K/Q5_K one conversion and an
/// FMA with d * sc times the row's sx, then -dmin * m times sx * sum(xq); Q6_K the two groups'
/// sums times their int8 scales in int32 (at most 2 * 16 * 63 * 127 * 128, exact), one
/// conversion and FMA with d * sx, then -32 d sc times sx * sum(xq) per 16. Each row's
/// operations are the same whatever MT and PRE are (batch invariant), and the same bits as x8 on
/// AVX2. PRE: the quants come unpacked from u (unpack_kc_x16_avx512), the same bytes.
template <int MT, uint32_t T, bool PRE>
RTX_KQ_VNNI void tile_kc_x16_avx512(const QuantRows& r, int64_t m0, const uint8_t* sb, int64_t nsb, const uint8_t* u,
                                    float (*res)[16]) {
  __m512 acc[MT];
  _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t K = r.K, nb = K / 32;
  const int8_t* xr = r.xq + m0 * K;
  for (int64_t b = 0; b < nsb; ++b, sb += kc_xw_bytes(T, 16)) {
    const __m512 dv = _mm512_loadu_ps(reinterpret_cast<const float*>(sb));
    for (int h = 0; h < 8; ++h) {
      // An eighth of the super-block's lines per sub-block: one burst of 38-53 prefetches per
      // super-block made the 8 MB Q6_K LM head at one row 1.4x slower (fill buffers full).
      constexpr int64_t pf_step = (kc_xw_bytes(T, 16) / 8 + 63) / 64 * 64;
      if (!PRE) prefetch_ahead(sb + pf_step * h, pf_step);
      const int64_t blk = 8 * b + h;  // the rows' 32-value input block
      const int8_t* xh = xr + 32 * blk;
      __m512i ia[MT], ib[MT];  // Q6_K: ia group 2h (steps 0-3), ib group 2h+1 (steps 4-7)
      _Pragma("GCC unroll 8") for (int t = 0; t < 8; ++t) {
        const __m512i q = PRE ? _mm512_load_si512(u + 4096 * b + 512 * h + 64 * t) : x16_quants<T>(sb, h, t);
        _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) {
          int32_t x4;
          std::memcpy(&x4, xh + i * K + 4 * t, 4);
          const __m512i xv = _mm512_set1_epi32(x4);
          if (T == 14 && t >= 4) ib[i] = _mm512_dpbusd_epi32(t == 4 ? _mm512_setzero_si512() : ib[i], q, xv);
          else ia[i] = _mm512_dpbusd_epi32(t == 0 ? _mm512_setzero_si512() : ia[i], q, xv);
        }
      }
      __m512 sv, ov0, ov1;
      if constexpr (T != 14) {
        sv = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 128 + 16 * h)))));
        ov0 = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(sb + 64)),
                            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 256 + 16 * h)))));
        ov0 = _mm512_sub_ps(_mm512_setzero_ps(), ov0);
        ov1 = ov0;
      } else {
        sv = dv;
        const __m512 m32d = _mm512_mul_ps(dv, _mm512_set1_ps(-32.0f));
        const __m512i sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 64 + 16 * (2 * h))));
        const __m512i sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 64 + 16 * (2 * h + 1))));
        ov0 = _mm512_mul_ps(m32d, _mm512_cvtepi32_ps(sc0));
        ov1 = _mm512_mul_ps(m32d, _mm512_cvtepi32_ps(sc1));
        _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i)
          ia[i] = _mm512_add_epi32(_mm512_mullo_epi32(ia[i], sc0), _mm512_mullo_epi32(ib[i], sc1));
      }
      _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) {
        const int64_t at = (m0 + i) * nb + blk;
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i]), _mm512_mul_ps(sv, _mm512_set1_ps(r.sx[at])), acc[i]);
        if constexpr (T != 14) {
          acc[i] = _mm512_fmadd_ps(ov0, _mm512_set1_ps(r.xs32[at]), acc[i]);
        } else {
          acc[i] = _mm512_fmadd_ps(ov0, _mm512_set1_ps(r.xs16[2 * at]), acc[i]);
          acc[i] = _mm512_fmadd_ps(ov1, _mm512_set1_ps(r.xs16[2 * at + 1]), acc[i]);
        }
      }
    }
  }
  _Pragma("GCC unroll 8") for (int i = 0; i < MT; ++i) _mm512_storeu_ps(res[i], acc[i]);
}

/// Scalar: per 16 values, the exact int32 dot times s * sx, plus o * (sx * sum(xq)).
void row_kc_i8_scalar(uint32_t type, const QuantRows& r, int64_t m, const uint8_t* sb, int64_t nsb, float* res) {
  float acc = 0, off = 0;
  const int64_t K = r.K;
  for (int64_t b = 0; b < nsb; ++b, sb += kc_bytes(type)) {
    uint8_t q[256];
    float s[16], o[16];
    unpack_kc_q(type, sb, q, s, o);
    const int8_t* xq = r.xq + m * K + 256 * b;
    for (int g = 0; g < 16; ++g) {
      int32_t dot = 0;
      for (int j = 0; j < 16; ++j) dot += static_cast<int32_t>(q[16 * g + j]) * xq[16 * g + j];
      const int64_t blk = m * (K / 32) + 8 * b + g / 2;
      acc += static_cast<float>(dot) * (s[g] * r.sx[blk]);
      off += o[g] * r.xs16[2 * blk + g % 2];
    }
  }
  *res = acc + off;
}

using TileKcI8Fn = void (*)(const QuantRows&, int64_t, const uint8_t*, int64_t, float*);

/// The one-column 8-bit-activation tile for `rows` (1..8) of type 12/13/14 on `isa` (AVX-512
/// without VNNI: the lane-stable order; with VNNI kquant() builds x16 instead; nullptr: scalar).
TileKcI8Fn tile_kc_i8_fn(Isa isa, int rows, uint32_t type) {
  const int t = static_cast<int>(type) - 12;
#define RTX_KC_ROW(F, T) {F<1, T>, F<2, T>, F<3, T>, F<4, T>, F<5, T>, F<6, T>, F<7, T>, F<8, T>}
  if (isa == Isa::Avx512) {
    static const TileKcI8Fn f[3][8] = {RTX_KC_ROW(tile_kc_i8_avx512, 12), RTX_KC_ROW(tile_kc_i8_avx512, 13),
                                       RTX_KC_ROW(tile_kc_i8_avx512, 14)};
    return f[t][rows - 1];
  }
#undef RTX_KC_ROW
  return nullptr;
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
  qk->ggml_type = ggml_type;
  const int64_t nsb = K / 256;
  const int64_t out_bytes = kc_bytes(ggml_type);
  qk->sb.resize(static_cast<size_t>(N * nsb * out_bytes));
  // 8-bit activations: W columns at a time (x8 on AVX2, x16 on AVX-512 VNNI; tile_kc_x8_avx2,
  // tile_kc_x16_avx512); AVX-512 without VNNI keeps a column at a time in the lane-stable order.
  qk->xw = !int8_activations ? 0 : w.isa_ == Isa::Avx2 ? 8 : w.isa_ == Isa::Avx512 && cpu_has_avx512_vnni() ? 16 : 0;
  const bool interleave = int8_activations && w.isa_ == Isa::Avx512 && qk->xw == 0;  // the lane-stable order
  for (int64_t i = 0; i < N * nsb; ++i) {
    repack_kquant(ggml_type, blocks + static_cast<size_t>(i) * block_bytes, qk->sb.data() + i * out_bytes);
    if (interleave) interleave_kquant(ggml_type, qk->sb.data() + i * out_bytes);
  }
  if (qk->xw) {
    const int W = qk->xw;
    const int64_t ngroups = (N + W - 1) / W, gb = kc_xw_bytes(ggml_type, W);
    std::vector<uint8_t> xw(static_cast<size_t>(ngroups * nsb * gb));
    for (int64_t G = 0; G < ngroups; ++G)
      for (int64_t b = 0; b < nsb; ++b) pack_kc_xw(ggml_type, W, qk->sb.data(), nsb, N, W * G, b, xw.data() + (G * nsb + b) * gb);
    qk->sb = std::move(xw);
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
  int a8 = 0, quantized = 0;
  for (const PackedMatmulWeight* w : ws)
    if (w && w->is_quantized()) ++quantized, a8 += w->int8_activations();
  return s + (a8 == 0 ? ", f32 activations" : a8 == quantized ? ", 8-bit activations" : ", 8-bit activations " + std::to_string(a8) + "/" + std::to_string(quantized));
}

namespace {

/// The driver of the column-group tiles (x8, x16): out (M,N) = tile results + bias (nullptr: 0).
/// Groups of W output columns (the last one partial) are split over the OpenMP threads
/// (static), each group once; per group, before(G) runs once (e.g. unpacking its quants into
/// the thread's buffer), then tile(G, m0, rows, res) fills res[i][c] = row m0 + i, column
/// W*G + c, for i < rows <= MT, so that the group's quants stay in L1 across its row tiles.
template <int W, int MT, class Before, class Tile>
void run_column_groups(float* out, const float* bias, int M, int N, int K, Before before, Tile tile) {
  const int64_t ngroups = (N + W - 1) / W;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && static_cast<int64_t>(M) * N * K > (1 << 16))
  for (int64_t G = 0; G < ngroups; ++G) {
    alignas(64) float res[MT][W];
    const int cols = static_cast<int>(std::min<int64_t>(W, N - W * G));
    before(G);
    for (int64_t m0 = 0; m0 < M; m0 += MT) {
      const int rows = static_cast<int>(std::min<int64_t>(MT, M - m0));
      tile(G, m0, rows, res);
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) out[(m0 + i) * N + W * G + j] = res[i][j] + (bias ? bias[W * G + j] : 0.0f);
    }
  }
}

/// A thread's buffer for a group's unpacked quants (64-byte aligned lines), reused across calls.
struct alignas(64) QuantLine { uint8_t b[64]; };
thread_local std::vector<QuantLine> t_unpacked;

}  // namespace

/// The Q8_0 branch of matmul_forward_packed: W8A32 on the natural layout, or a8 W8A8 on
/// q8_0()'s column groups (xw 16: tile_q8x16_i8_avx512, AVX-512 VNNI; xw 8: tile_q8x8_i8_avx2),
/// inputs quantized per 32 values.
void matmul_forward_q8(float* out, const float* inp, const int8_t* q, const float* d, bool a8, int xw, const float* bias, int M,
                       int N, int K, Isa isa) {
  const int64_t nb = K / 32;
  if (a8 && xw == 16) {  // q8_0() builds x16 only on AVX-512 with VNNI
    if (isa != Isa::Avx512 || !cpu_has_avx512_vnni())
      throw_internal("matmul_forward_packed: a Q8_0 x16 weight on a CPU without AVX-512 VNNI", "weight");
    const QuantRows qr = quantize_rows(inp, M, K, Isa::Avx2, 8);  // natural order, ties to even; xl
    using TileX16 = void (*)(const QuantRows&, int64_t, const int8_t*, const float*, int64_t, float (*)[16]);
    static const TileX16 tiles[kRowTileX16] = {tile_q8x16_i8_avx512<1>, tile_q8x16_i8_avx512<2>, tile_q8x16_i8_avx512<3>,
                                               tile_q8x16_i8_avx512<4>, tile_q8x16_i8_avx512<5>, tile_q8x16_i8_avx512<6>,
                                               tile_q8x16_i8_avx512<7>, tile_q8x16_i8_avx512<8>};
    run_column_groups<16, kRowTileX16>(out, bias, M, N, K, [](int64_t) {}, [&](int64_t G, int64_t m0, int rows, float (*res)[16]) {
      tiles[rows - 1](qr, m0, q + G * nb * 512, d + G * nb * 16, nb, res);
    });
    return;
  }
  if (a8 && isa != Isa::Avx2 && isa != Isa::Avx512)  // q8_0() sets a8 only where it runs
    throw_internal("matmul_forward_packed: a Q8_0 W8A8 weight on a CPU without AVX2", "weight");
  if (a8) {
    // Natural order (isa Avx2: no lane-stable permutation), by this thread before the region.
    const QuantRows qr = quantize_rows(inp, M, K, Isa::Avx2, 8);
    using TileX8 = void (*)(const QuantRows&, int64_t, const int8_t*, const float*, int64_t, float (*)[8]);
    static const TileX8 tx8[kRowTileX8] = {tile_q8x8_i8_avx2<1>, tile_q8x8_i8_avx2<2>, tile_q8x8_i8_avx2<3>,
                                           tile_q8x8_i8_avx2<4>};
    run_column_groups<8, kRowTileX8>(out, bias, M, N, K, [](int64_t) {}, [&](int64_t G, int64_t m0, int rows, float (*res)[8]) {
      tx8[rows - 1](qr, m0, q + G * nb * 256, d + G * nb * 8, nb, res);
    });
    return;
  }
  const int64_t nchunks = (N + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && static_cast<int64_t>(M) * N * K > (1 << 16))
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t n0 = c * kColChunk, n1 = std::min<int64_t>(N, n0 + kColChunk);
    float res[kRowTile];
    for (int64_t m0 = 0; m0 < M; m0 += kRowTile) {
      const int rows = static_cast<int>(std::min<int64_t>(kRowTile, M - m0));
      const TileFn f = tile_fn(isa, rows);
      for (int64_t n = n0; n < n1; ++n) {
        const int8_t* qn = q + n * K;
        const float* dn = d + n * nb;
        if (f) f(inp + m0 * K, K, qn, dn, nb, res);
        else
          for (int i = 0; i < rows; ++i) row_scalar(inp + (m0 + i) * K, qn, dn, nb, res + i);
        const float b = bias ? bias[n] : 0.0f;
        for (int i = 0; i < rows; ++i) out[(m0 + i) * N + n] = res[i] + b;
      }
    }
  }
}

/// The K-quant branch of matmul_forward_packed over repacked super-blocks: f32 activations
/// (tile_kc_*) or, a8, 8-bit ones: column groups (xw 16: tile_kc_x16_avx512; xw 8:
/// tile_kc_x8_avx2), or a row at a time (tile_kc_i8_avx512 without VNNI, else scalar).
void matmul_forward_kc(float* out, const float* inp, const uint8_t* sb, uint32_t type, bool a8, int xw, const float* bias, int M,
                       int N, int K, Isa isa) {
  const int64_t nsb = K / 256;
  if (xw == 16) {  // kquant() builds the x16 layout only for AVX-512 with VNNI
    if (isa != Isa::Avx512 || !cpu_has_avx512_vnni() || type < 12 || type > 14)
      throw_internal("matmul_forward_packed: a K-quant x16 weight on a CPU without AVX-512 VNNI", "weight");
    const QuantRows qr = quantize_rows(inp, M, K, Isa::Avx2, type);  // natural order, ties to even
    using TileX16 = void (*)(const QuantRows&, int64_t, const uint8_t*, int64_t, const uint8_t*, float (*)[16]);
#define RTX_X16_ROW(T, P) {tile_kc_x16_avx512<1, T, P>, tile_kc_x16_avx512<2, T, P>, tile_kc_x16_avx512<3, T, P>, \
                           tile_kc_x16_avx512<4, T, P>, tile_kc_x16_avx512<5, T, P>, tile_kc_x16_avx512<6, T, P>, \
                           tile_kc_x16_avx512<7, T, P>, tile_kc_x16_avx512<8, T, P>}
    static const TileX16 tiles_all[3][2][kRowTileX16] = {{RTX_X16_ROW(12, false), RTX_X16_ROW(12, true)},
                                                          {RTX_X16_ROW(13, false), RTX_X16_ROW(13, true)},
                                                          {RTX_X16_ROW(14, false), RTX_X16_ROW(14, true)}};
#undef RTX_X16_ROW
    // More than one row tile: each group's quants are unpacked to bytes once, for all of them
    // (Q5_K and Q6_K only: Q4_K's nibbles cost one and per step, less than the buffer's reload).
    const bool pre = M > kRowTileX16 && type != 12;
    const TileX16* tiles = tiles_all[type - 12][pre ? 1 : 0];
    void (*const unpack)(const uint8_t*, int64_t, uint8_t*) =
        type == 12 ? unpack_kc_x16_avx512<12> : type == 13 ? unpack_kc_x16_avx512<13> : unpack_kc_x16_avx512<14>;
    const int64_t group_bytes = nsb * kc_xw_bytes(type, 16);
    run_column_groups<16, kRowTileX16>(
        out, bias, M, N, K,
        [&](int64_t G) {
          if (!pre) return;
          t_unpacked.resize(static_cast<size_t>(64 * nsb));
          unpack(sb + G * group_bytes, nsb, t_unpacked.data()->b);
        },
        [&](int64_t G, int64_t m0, int rows, float (*res)[16]) {
          tiles[rows - 1](qr, m0, sb + G * group_bytes, nsb, pre ? t_unpacked.data()->b : nullptr, res);
        });
    return;
  }
  if (xw == 8) {  // kquant() builds the x8 layout only for AVX2
    if (isa != Isa::Avx2 || type < 12 || type > 14)
      throw_internal("matmul_forward_packed: a K-quant x8 weight on an ISA other than AVX2", "weight");
    const QuantRows qr = quantize_rows(inp, M, K, Isa::Avx2, type);
    using TileX8 = void (*)(const QuantRows&, int64_t, const uint8_t*, int64_t, const uint8_t*, float (*)[8]);
#define RTX_X8_ROW(T, P) {tile_kc_x8_avx2<1, T, P>, tile_kc_x8_avx2<2, T, P>, tile_kc_x8_avx2<3, T, P>, tile_kc_x8_avx2<4, T, P>}
    static const TileX8 tiles_all[3][2][kRowTileX8] = {{RTX_X8_ROW(12, false), RTX_X8_ROW(12, true)},
                                                        {RTX_X8_ROW(13, false), RTX_X8_ROW(13, true)},
                                                        {RTX_X8_ROW(14, false), RTX_X8_ROW(14, true)}};
#undef RTX_X8_ROW
    // More than one row tile: each group's quants are unpacked to bytes once, for all of them.
    const bool pre = M > kRowTileX8;
    const TileX8* tiles = tiles_all[type - 12][pre ? 1 : 0];
    void (*const unpack)(const uint8_t*, int64_t, uint8_t*) =
        type == 12 ? unpack_kc_x8_avx2<12> : type == 13 ? unpack_kc_x8_avx2<13> : unpack_kc_x8_avx2<14>;
    const int64_t group_bytes = nsb * kc_x8_bytes(type);
    run_column_groups<8, kRowTileX8>(
        out, bias, M, N, K,
        [&](int64_t G) {
          if (!pre) return;
          t_unpacked.resize(static_cast<size_t>(32 * nsb));  // 2048 bytes per super-block
          unpack(sb + G * group_bytes, nsb, t_unpacked.data()->b);
        },
        [&](int64_t G, int64_t m0, int rows, float (*res)[8]) {
          tiles[rows - 1](qr, m0, sb + G * group_bytes, nsb, pre ? t_unpacked.data()->b : nullptr, res);
        });
    return;
  }
  const int64_t row_bytes = nsb * kc_bytes(type);
  const int64_t nchunks = (N + kColChunk - 1) / kColChunk;
  // Rows quantized once, by this thread, before the parallel region (the workers read them).
  const QuantRows qr = a8 ? quantize_rows(inp, M, K, isa, type) : QuantRows{};
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && static_cast<int64_t>(M) * N * K > (1 << 16))
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t n0 = c * kColChunk, n1 = std::min<int64_t>(N, n0 + kColChunk);
    float res[kRowTile];
    for (int64_t m0 = 0; m0 < M; m0 += kRowTile) {
      const int rows = static_cast<int>(std::min<int64_t>(kRowTile, M - m0));
      const TileKcFn f = a8 ? nullptr : tile_kc_fn(isa, rows, type);
      const TileKcI8Fn fi = a8 ? tile_kc_i8_fn(isa, rows, type) : nullptr;
      for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* wn = sb + n * row_bytes;
        if (fi) fi(qr, m0, wn, nsb, res);
        else if (f) f(inp + m0 * K, K, wn, nsb, res);
        else if (a8)
          for (int i = 0; i < rows; ++i) row_kc_i8_scalar(type, qr, m0 + i, wn, nsb, res + i);
        else
          for (int i = 0; i < rows; ++i) row_kc_scalar(type, inp + (m0 + i) * K, wn, nsb, res + i);
        const float b = bias ? bias[n] : 0.0f;
        for (int i = 0; i < rows; ++i) out[(m0 + i) * N + n] = res[i] + b;
      }
    }
  }
}

}  // namespace rtx::kernels
