// Causal multi-head self-attention on CPU (llm.c layout): the naive path, which materialises each
// head's (T,T) probabilities with plain loops, and the flash path (FlashAttention, Dao et al. 2022),
// which walks Br x Bc tiles with a running max and sum and never holds more than one tile row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::kernels {
namespace {

#define RTX_INLINE inline __attribute__((always_inline))

/// Head geometry: qkv rows hold [q | k | v], each NH*HS wide.
struct Dims {
  int64_t B, T, NH, HS, C, C3;
};

/// Branchless Cephes expf (same scheme as ops_simd.inc), so tile loops auto-vectorise; x < -87 -> 0.
RTX_INLINE float fexp(float x) {
  const bool under = x < -87.0f;
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float p2;
  std::memcpy(&p2, &bits, 4);
  return under ? 0.0f : y * p2;
}

/// Max / sum of x[0..n) with 16 interleaved partials (a fixed order, vectorisable).
RTX_INLINE float row_max(const float* x, int64_t n, float init) {
  float a[16];
  for (int k = 0; k < 16; ++k) a[k] = init;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; ++k) a[k] = a[k] > x[j + k] ? a[k] : x[j + k];
  for (; j < n; ++j) a[0] = a[0] > x[j] ? a[0] : x[j];
  float m = a[0];
  for (int k = 1; k < 16; ++k) m = m > a[k] ? m : a[k];
  return m;
}
RTX_INLINE float row_sum(const float* x, int64_t n) {
  float a[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; ++k) a[k] += x[j + k];
  for (; j < n; ++j) a[0] += x[j];
  float s = 0;
  for (int k = 0; k < 16; ++k) s += a[k];
  return s;
}

/// Scratch of one flash forward tile: Qs (Br,HS) scaled queries, O (Br,HS), m, l (Br), Kt (HS,Bc), srow (Bc).
struct FwdScratch {
  std::vector<float> qs, o, m, l, kt, srow;
  void size(int64_t Br, int64_t Bc, int64_t HS) {
    qs.resize(Br * HS);
    o.resize(Br * HS);
    m.resize(Br);
    l.resize(Br);
    kt.resize(HS * Bc);
    srow.resize(Bc);
  }
};

/// Flash forward of queries [i0,i1) of head (b,h): writes out rows (stride ostride) and lse (may be null).
RTX_INLINE void flash_fwd_block_impl(float* out, int64_t ostride, float* lse, const float* qkv, const Dims& d,
                                     int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t Bc, FwdScratch& s) {
  const int64_t HS = d.HS, nq = i1 - i0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float* base = qkv + b * d.T * d.C3 + h * HS;
  float* __restrict qs = s.qs.data();
  float* __restrict o = s.o.data();
  float* __restrict kt = s.kt.data();
  float* __restrict srow = s.srow.data();
  for (int64_t ii = 0; ii < nq; ++ii) {
    const float* q = base + (i0 + ii) * d.C3;
    for (int64_t e = 0; e < HS; ++e) qs[ii * HS + e] = q[e] * scale;
    for (int64_t e = 0; e < HS; ++e) o[ii * HS + e] = 0.0f;
    s.m[ii] = -std::numeric_limits<float>::infinity();
    s.l[ii] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < i1; j0 += Bc) {
    const int64_t j1 = std::min(j0 + Bc, i1), nk = j1 - j0;
    for (int64_t jj = 0; jj < nk; ++jj) {
      const float* k = base + (j0 + jj) * d.C3 + d.C;
      for (int64_t e = 0; e < HS; ++e) kt[e * Bc + jj] = k[e];
    }
    for (int64_t ii = 0; ii < nq; ++ii) {
      const int64_t i = i0 + ii;
      const int64_t nv = std::min(j1, i + 1) - j0;  // causal: keys j <= i
      if (nv <= 0) continue;
      for (int64_t jj = 0; jj < nv; ++jj) srow[jj] = 0.0f;
      for (int64_t e = 0; e < HS; ++e) {
        const float qe = qs[ii * HS + e];
        const float* kr = kt + e * Bc;
        for (int64_t jj = 0; jj < nv; ++jj) srow[jj] += qe * kr[jj];
      }
      const float mold = s.m[ii];
      const float mnew = row_max(srow, nv, mold);
      const float alpha = fexp(mold - mnew);
      for (int64_t jj = 0; jj < nv; ++jj) srow[jj] = fexp(srow[jj] - mnew);
      s.l[ii] = s.l[ii] * alpha + row_sum(srow, nv);
      s.m[ii] = mnew;
      float* __restrict orow = o + ii * HS;
      for (int64_t e = 0; e < HS; ++e) orow[e] *= alpha;
      for (int64_t jj = 0; jj < nv; ++jj) {
        const float pj = srow[jj];
        const float* v = base + (j0 + jj) * d.C3 + 2 * d.C;
        for (int64_t e = 0; e < HS; ++e) orow[e] += pj * v[e];
      }
    }
  }
  for (int64_t ii = 0; ii < nq; ++ii) {
    const float inv = 1.0f / s.l[ii];
    float* dst = out + (i0 + ii) * ostride;
    for (int64_t e = 0; e < HS; ++e) dst[e] = o[ii * HS + e] * inv;
    if (lse) lse[i0 + ii] = s.m[ii] + std::log(s.l[ii]);
  }
}

/// Scratch of one flash backward head.
struct BwdScratch {
  FwdScratch fwd;
  std::vector<float> o, L, D, qs, dq, kt, vt, dk, dv, sp, dp;
};

/// Flash backward of head (b,h), accumulated into dqkv. Recomputes O and L when `out`/`lse` are null.
/// Key blocks of Bc outer, queries inner (FlashAttention-2 order); dS = P (dP - D), D_i = dO_i . O_i.
RTX_INLINE void flash_bwd_head_impl(float* dqkv, const float* dout, const float* qkv, const float* out,
                                    const float* lse, const Dims& d, int64_t b, int64_t h, int64_t Br, int64_t Bc,
                                    BwdScratch& s) {
  const int64_t T = d.T, HS = d.HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float* base = qkv + b * T * d.C3 + h * HS;
  float* dbase = dqkv + b * T * d.C3 + h * HS;
  const float* dobase = dout + b * T * d.C + h * HS;
  s.D.resize(T);
  s.qs.resize(T * HS);
  s.dq.assign(T * HS, 0.0f);
  s.kt.resize(HS * Bc);
  s.vt.resize(HS * Bc);
  s.dk.resize(Bc * HS);
  s.dv.resize(Bc * HS);
  s.sp.resize(Bc);
  s.dp.resize(Bc);
  const float* O;
  const float* L;
  int64_t ostride;
  if (out && lse) {
    O = out + b * T * d.C + h * HS;
    ostride = d.C;
    L = lse + (b * d.NH + h) * T;
  } else {
    s.o.resize(T * HS);
    s.L.resize(T);
    s.fwd.size(Br, Bc, HS);
    for (int64_t i0 = 0; i0 < T; i0 += Br)
      flash_fwd_block_impl(s.o.data(), HS, s.L.data(), qkv, d, b, h, i0, std::min(i0 + Br, T), Bc, s.fwd);
    O = s.o.data();
    ostride = HS;
    L = s.L.data();
  }
  float* __restrict qs = s.qs.data();
  float* __restrict dq = s.dq.data();
  float* __restrict kt = s.kt.data();
  float* __restrict vt = s.vt.data();
  float* __restrict dk = s.dk.data();
  float* __restrict dv = s.dv.data();
  float* __restrict sp = s.sp.data();
  float* __restrict dp = s.dp.data();
  for (int64_t i = 0; i < T; ++i) {
    const float* q = base + i * d.C3;
    const float* go = dobase + i * d.C;
    const float* oi = O + i * ostride;
    float acc = 0;
    for (int64_t e = 0; e < HS; ++e) {
      qs[i * HS + e] = q[e] * scale;
      acc += go[e] * oi[e];
    }
    s.D[i] = acc;
  }
  for (int64_t j0 = 0; j0 < T; j0 += Bc) {
    const int64_t j1 = std::min(j0 + Bc, T), nk = j1 - j0;
    for (int64_t jj = 0; jj < nk; ++jj) {
      const float* k = base + (j0 + jj) * d.C3 + d.C;
      const float* v = k + d.C;
      for (int64_t e = 0; e < HS; ++e) {
        kt[e * Bc + jj] = k[e];
        vt[e * Bc + jj] = v[e];
      }
    }
    std::fill(dk, dk + nk * HS, 0.0f);
    std::fill(dv, dv + nk * HS, 0.0f);
    for (int64_t i = j0; i < T; ++i) {
      const int64_t nv = std::min(j1, i + 1) - j0;
      const float* go = dobase + i * d.C;
      const float* qi = qs + i * HS;
      for (int64_t jj = 0; jj < nv; ++jj) sp[jj] = dp[jj] = 0.0f;
      for (int64_t e = 0; e < HS; ++e) {
        const float qe = qi[e], ge = go[e];
        const float* kr = kt + e * Bc;
        const float* vr = vt + e * Bc;
        for (int64_t jj = 0; jj < nv; ++jj) {
          sp[jj] += qe * kr[jj];
          dp[jj] += ge * vr[jj];
        }
      }
      const float Li = L[i], Di = s.D[i];
      for (int64_t jj = 0; jj < nv; ++jj) {
        const float p = fexp(sp[jj] - Li);
        sp[jj] = p;
        dp[jj] = p * (dp[jj] - Di);  // dS
      }
      float* __restrict dqi = dq + i * HS;
      for (int64_t jj = 0; jj < nv; ++jj) {
        const float p = sp[jj], ds = dp[jj];
        const float* k = base + (j0 + jj) * d.C3 + d.C;
        float* __restrict dvr = dv + jj * HS;
        float* __restrict dkr = dk + jj * HS;
        for (int64_t e = 0; e < HS; ++e) {
          dvr[e] += p * go[e];
          dkr[e] += ds * qi[e];
          dqi[e] += ds * k[e];
        }
      }
    }
    for (int64_t jj = 0; jj < nk; ++jj) {
      float* dkd = dbase + (j0 + jj) * d.C3 + d.C;
      float* dvd = dkd + d.C;
      for (int64_t e = 0; e < HS; ++e) {
        dkd[e] += dk[jj * HS + e];
        dvd[e] += dv[jj * HS + e];
      }
    }
  }
  for (int64_t i = 0; i < T; ++i) {
    float* dqd = dbase + i * d.C3;
    for (int64_t e = 0; e < HS; ++e) dqd[e] += scale * dq[i * HS + e];
  }
}

// Per-ISA instantiations: the same loops auto-vectorised for AVX-512, AVX2 and baseline x86-64.
#define RTX_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,prefer-vector-width=512")))
#define RTX_T256 __attribute__((target("avx2")))
RTX_T512 void flash_fwd_block_avx512(float* out, int64_t os, float* lse, const float* qkv, const Dims& d, int64_t b,
                                     int64_t h, int64_t i0, int64_t i1, int64_t Bc, FwdScratch& s) {
  flash_fwd_block_impl(out, os, lse, qkv, d, b, h, i0, i1, Bc, s);
}
RTX_T256 void flash_fwd_block_avx2(float* out, int64_t os, float* lse, const float* qkv, const Dims& d, int64_t b,
                                   int64_t h, int64_t i0, int64_t i1, int64_t Bc, FwdScratch& s) {
  flash_fwd_block_impl(out, os, lse, qkv, d, b, h, i0, i1, Bc, s);
}
void flash_fwd_block_scalar(float* out, int64_t os, float* lse, const float* qkv, const Dims& d, int64_t b, int64_t h,
                            int64_t i0, int64_t i1, int64_t Bc, FwdScratch& s) {
  flash_fwd_block_impl(out, os, lse, qkv, d, b, h, i0, i1, Bc, s);
}
RTX_T512 void flash_bwd_head_avx512(float* dqkv, const float* dout, const float* qkv, const float* out,
                                    const float* lse, const Dims& d, int64_t b, int64_t h, int64_t Br, int64_t Bc,
                                    BwdScratch& s) {
  flash_bwd_head_impl(dqkv, dout, qkv, out, lse, d, b, h, Br, Bc, s);
}
RTX_T256 void flash_bwd_head_avx2(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                  const Dims& d, int64_t b, int64_t h, int64_t Br, int64_t Bc, BwdScratch& s) {
  flash_bwd_head_impl(dqkv, dout, qkv, out, lse, d, b, h, Br, Bc, s);
}
void flash_bwd_head_scalar(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                           const Dims& d, int64_t b, int64_t h, int64_t Br, int64_t Bc, BwdScratch& s) {
  flash_bwd_head_impl(dqkv, dout, qkv, out, lse, d, b, h, Br, Bc, s);
}

/// Naive forward of head (b,h), llm.c-style loops: att (T,T) holds the probabilities (row i, cols <= i).
/// Output row i goes to out + i*ostride; lse (T) may be null.
void naive_fwd_head(float* out, int64_t ostride, float* lse, const float* qkv, const Dims& d, int64_t b, int64_t h,
                    std::vector<float>& att) {
  const int64_t T = d.T, HS = d.HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float* base = qkv + b * T * d.C3 + h * HS;
  att.resize(T * T);
  for (int64_t i = 0; i < T; ++i) {
    const float* q = base + i * d.C3;
    float* a = att.data() + i * T;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j <= i; ++j) {
      const float* k = base + j * d.C3 + d.C;
      float dot = 0;
      for (int64_t e = 0; e < HS; ++e) dot += q[e] * k[e];
      a[j] = dot * scale;
      mx = std::max(mx, a[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      a[j] = std::exp(a[j] - mx);
      sum += a[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j <= i; ++j) a[j] *= inv;
    if (lse) lse[i] = mx + std::log(sum);
    float* o = out + i * ostride;
    for (int64_t e = 0; e < HS; ++e) o[e] = 0;
    for (int64_t j = 0; j <= i; ++j) {
      const float* v = base + j * d.C3 + 2 * d.C;
      for (int64_t e = 0; e < HS; ++e) o[e] += a[j] * v[e];
    }
  }
}

/// Naive backward of head (b,h): recompute att, then dP = dO V^T, dS = P (dP - sum_j P dP), accumulate.
void naive_bwd_head(float* dqkv, const float* dout, const float* qkv, const Dims& d, int64_t b, int64_t h,
                    std::vector<float>& att, std::vector<float>& obuf) {
  const int64_t T = d.T, HS = d.HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  obuf.resize(T * HS);
  naive_fwd_head(obuf.data(), HS, nullptr, qkv, d, b, h, att);
  const float* base = qkv + b * T * d.C3 + h * HS;
  float* dbase = dqkv + b * T * d.C3 + h * HS;
  std::vector<float> dp(T);
  for (int64_t i = 0; i < T; ++i) {
    const float* a = att.data() + i * T;
    const float* go = dout + (b * T + i) * d.C + h * HS;
    float D = 0;
    for (int64_t j = 0; j <= i; ++j) {
      const float* v = base + j * d.C3 + 2 * d.C;
      float dot = 0;
      for (int64_t e = 0; e < HS; ++e) dot += go[e] * v[e];
      dp[j] = dot;
      D += a[j] * dot;
    }
    const float* q = base + i * d.C3;
    float* dq = dbase + i * d.C3;
    for (int64_t j = 0; j <= i; ++j) {
      const float ds = a[j] * (dp[j] - D) * scale;
      const float* k = base + j * d.C3 + d.C;
      float* dk = dbase + j * d.C3 + d.C;
      float* dv = dk + d.C;
      for (int64_t e = 0; e < HS; ++e) {
        dq[e] += ds * k[e];
        dk[e] += ds * q[e];
        dv[e] += a[j] * go[e];
      }
    }
  }
}

Dims check_dims(const float* a, const float* b, int64_t B, int64_t T, int64_t NH, int64_t HS, const AttentionParams& p,
                const char* fn) {
  for (auto [v, n] : {std::pair<int64_t, const char*>{B, "B"}, {T, "T"}, {NH, "NH"}, {HS, "HS"}})
    if (v <= 0)
      throw_input(std::string(fn) + ": dimension " + n + " = " + std::to_string(v) + " must be positive", n,
                  "pass a positive size");
  if (!a || !b) throw_input(std::string(fn) + ": null tensor pointer", "qkv/out", "pass allocated buffers");
  if (p.Br < 1 || p.Br > 512 || p.Bc < 1 || p.Bc > 512)
    throw_input(std::string(fn) + ": tile Br=" + std::to_string(p.Br) + " Bc=" + std::to_string(p.Bc) +
                    " outside [1,512]",
                "AttentionParams", "use tiles between 1 and 512");
  return Dims{B, T, NH, HS, NH * HS, 3 * NH * HS};
}

}  // namespace

void attention_forward(float* out, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t HS,
                       const AttentionParams* params, float* lse) {
  const AttentionParams p = params ? *params : AttentionParams{};
  const Dims d = check_dims(out, qkv, B, T, NH, HS, p, "attention_forward");
  if (p.algo == AttentionParams::Algo::Naive) {
#pragma omp parallel
    {
      std::vector<float> att;
#pragma omp for schedule(dynamic)
      for (int64_t bh = 0; bh < B * NH; ++bh) {
        const int64_t b = bh / NH, h = bh % NH;
        naive_fwd_head(out + b * T * d.C + h * HS, d.C, lse ? lse + bh * T : nullptr, qkv, d, b, h, att);
      }
    }
    return;
  }
  const Isa isa = cpu_isa_active();
  const auto fn = isa == Isa::Avx512 ? flash_fwd_block_avx512
                  : isa == Isa::Avx2 ? flash_fwd_block_avx2
                                     : flash_fwd_block_scalar;
  const int64_t nqb = (T + p.Br - 1) / p.Br;
#pragma omp parallel
  {
    FwdScratch s;
    s.size(p.Br, p.Bc, HS);
    // Longest blocks (last query blocks, causal) first; each task's output is independent of scheduling.
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * NH * nqb; ++task) {
      const int64_t qb = nqb - 1 - task % nqb, bh = task / nqb, b = bh / NH, h = bh % NH;
      const int64_t i0 = qb * p.Br, i1 = std::min(i0 + p.Br, T);
      fn(out + b * T * d.C + h * HS, d.C, lse ? lse + bh * T : nullptr, qkv, d, b, h, i0, i1, p.Bc, s);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, int64_t B, int64_t T, int64_t NH,
                        int64_t HS, const AttentionParams* params, const float* out, const float* lse) {
  const AttentionParams p = params ? *params : AttentionParams{};
  const Dims d = check_dims(dqkv, qkv, B, T, NH, HS, p, "attention_backward");
  if (!dout) throw_input("attention_backward: null dout", "dout", "pass the output gradient (B,T,C)");
  if (p.algo == AttentionParams::Algo::Naive) {
#pragma omp parallel
    {
      std::vector<float> att, obuf;
#pragma omp for schedule(dynamic)
      for (int64_t bh = 0; bh < B * NH; ++bh) naive_bwd_head(dqkv, dout, qkv, d, bh / NH, bh % NH, att, obuf);
    }
    return;
  }
  const Isa isa = cpu_isa_active();
  const auto fn = isa == Isa::Avx512 ? flash_bwd_head_avx512
                  : isa == Isa::Avx2 ? flash_bwd_head_avx2
                                     : flash_bwd_head_scalar;
#pragma omp parallel
  {
    BwdScratch s;
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < B * NH; ++bh) fn(dqkv, dout, qkv, out, lse, d, bh / NH, bh % NH, p.Br, p.Bc, s);
  }
}

}  // namespace rtx::kernels
