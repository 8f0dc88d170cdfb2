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
#include <cstring>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/matmul.hpp"

namespace rtx::kernels {

namespace {

#define RTX_Q8_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define RTX_Q8_AVX2 __attribute__((target("avx2,fma")))

/// res[i] = sum over blocks b of x_i[32b..32b+32) . (q[32b..] * d[b]), i < MT; x_i = x + i*ldx.
template <int MT>
RTX_Q8_AVX512 void tile_avx512(const float* x, int64_t ldx, const int8_t* q, const float* d, int64_t nb, float* res) {
  __m512 acc[MT][2];
  for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 s = _mm512_set1_ps(d[b]);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b + 16));
    const __m512 w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), s);
    const __m512 w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), s);
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
    const __m256 s = _mm256_set1_ps(d[b]);
    __m256 w[4];
    for (int j = 0; j < 4; ++j) {
      const __m128i qj = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 32 * b + 8 * j));
      w[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(qj)), s);
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
    for (int j = 0; j < 32; ++j) s += x[32 * b + j] * (static_cast<float>(q[32 * b + j]) * d[b]);
    acc += s;
  }
  *res = acc;
}

using TileFn = void (*)(const float*, int64_t, const int8_t*, const float*, int64_t, float*);

/// The tile function for `rows` (1..8) rows on `isa` (nullptr: scalar).
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
  w.q8_ = std::move(q8);
  return w;
}

/// The Q8_0 branch of matmul_forward_packed.
void matmul_forward_q8(float* out, const float* inp, const int8_t* q, const float* d, const float* bias, int M, int N,
                       int K, Isa isa) {
  const int64_t nb = K / 32;
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
        if (f) {
          f(inp + m0 * K, K, qn, dn, nb, res);
        } else {
          for (int i = 0; i < rows; ++i) row_scalar(inp + (m0 + i) * K, qn, dn, nb, res + i);
        }
        const float b = bias ? bias[n] : 0.0f;
        for (int i = 0; i < rows; ++i) out[(m0 + i) * N + n] = res[i] + b;
      }
    }
  }
}

}  // namespace rtx::kernels
