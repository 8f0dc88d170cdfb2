// Causal multi-head self-attention on CPU (llm.c layout): the public entry points, the naive path
// (each head's (T,T) probabilities with plain loops, the oracle-like variant) and the OpenMP split and ISA
// dispatch of the flash path, whose tile kernels live in attention_simd.inc (attention_{avx512,avx2,scalar}.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention_simd.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::kernels {
namespace attn {
namespace {
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

void FwdScratch::prepare(const Dims& d, int64_t Br, int64_t Bc, int W, int R) {
  const int64_t qcols = round_up(Br, W), qrows = round_up(Br, R);
  s.resize(round_up(Bc, R) * qcols);
  o.resize(qrows * round_up(d.HS, W));
  m.resize(qcols);
  l.resize(qcols);
  alpha.resize(qcols);
  qt.resize(d.HS * qcols);
}

void BwdScratch::prepare(const Dims& d, int64_t Br, int64_t Bc, int W, int R) {
  const int64_t Tp = round_up(d.T, W) + W, keys = round_up(Bc, R), HSp = round_up(d.HS, W);
  fwd.prepare(d, Br, Bc, W, R);
  o.resize(d.T * d.HS);
  lrec.resize(d.T);
  qt.resize(d.HS * Tp);
  dot.resize(d.HS * Tp);
  lp.resize(Tp);
  dp.resize(Tp);
  dq.resize(d.T * HSp);
  st.resize(keys * round_up(Br, W));
  dpt.resize(keys * round_up(Br, W));
  dk.resize(keys * HSp);
  dv.resize(keys * HSp);
}
}  // namespace attn

namespace {

using attn::Dims;

const attn::Kernels& attn_kernels() {
  switch (cpu_isa_active()) {
    case Isa::Avx512: return attn::kAttnAvx512;
    case Isa::Avx2: return attn::kAttnAvx2;
    case Isa::Scalar: break;
  }
  return attn::kAttnScalar;
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
  core::KernelRun run("attention_forward", p.algo == AttentionParams::Algo::Naive ? "cpu.naive" : "cpu.flash",
                      {{"B", B}, {"T", T}, {"NH", NH}, {"HS", HS}});
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
  const attn::Kernels& k = attn_kernels();
  const int64_t nqb = (T + p.Br - 1) / p.Br;
#pragma omp parallel
  {
    attn::FwdScratch s;
    s.prepare(d, p.Br, p.Bc, k.lanes, k.rows);
    // Longest blocks (last query blocks, causal) first; each task's output is independent of scheduling.
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * NH * nqb; ++task) {
      const int64_t qb = nqb - 1 - task % nqb, bh = task / nqb, b = bh / NH, h = bh % NH;
      const int64_t i0 = qb * p.Br, i1 = std::min<int64_t>(i0 + p.Br, T);
      k.fwd_block(out + b * T * d.C + h * HS, d.C, lse ? lse + bh * T : nullptr, qkv, d, b, h, i0, i1, p.Bc, s);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, int64_t B, int64_t T, int64_t NH,
                        int64_t HS, const AttentionParams* params, const float* out, const float* lse) {
  const AttentionParams p = params ? *params : AttentionParams{};
  const Dims d = check_dims(dqkv, qkv, B, T, NH, HS, p, "attention_backward");
  core::KernelRun run("attention_backward", p.algo == AttentionParams::Algo::Naive ? "cpu.naive" : "cpu.flash",
                      {{"B", B}, {"T", T}, {"NH", NH}, {"HS", HS}});
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
  const attn::Kernels& k = attn_kernels();
#pragma omp parallel
  {
    attn::BwdScratch s;
    s.prepare(d, p.Br, p.Bc, k.lanes, k.rows);
    // One head per task: every sum of a head runs in one thread, in a fixed order.
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < B * NH; ++bh) k.bwd_head(dqkv, dout, qkv, out, lse, d, bh / NH, bh % NH, p.Br, p.Bc, s);
  }
}

}  // namespace rtx::kernels
