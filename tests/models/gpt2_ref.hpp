// Test helper: a float64 GPT-2 forward with naive loops (the independent reference of the
// decoder and serving tests), random parameters in the canonical layout, random ids.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "rtx/core/philox.hpp"
#include "rtx/models/gpt2.hpp"

namespace rtx::test {

using models::Gpt2Config;

inline Gpt2Config make_cfg(int V, int C, int NH, int L, int Tm) {
  Gpt2Config c;
  c.vocab_size = V;
  c.n_embd = C;
  c.n_head = NH;
  c.n_layer = L;
  c.block_size = Tm;
  return c;
}

/// Random parameters in the canonical layout (walked here independently of the library):
/// matrices and biases U(-0.3, 0.3), LayerNorm weights 1 + U(-0.2, 0.2), LayerNorm biases U(-0.1, 0.1).
inline std::vector<float> random_params(const Gpt2Config& c, uint64_t seed) {
  const size_t C = c.n_embd, V = c.vocab_size, Tm = c.block_size;
  std::vector<float> p;
  Philox rng(seed);
  const auto put = [&](size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; ++i) p.push_back(lo + (hi - lo) * rng.next_float());
  };
  put(V * C, -0.3f, 0.3f);  // wte
  put(Tm * C, -0.3f, 0.3f);  // wpe
  for (int l = 0; l < c.n_layer; ++l) {
    put(C, 0.8f, 1.2f);            // ln_1.weight
    put(C, -0.1f, 0.1f);           // ln_1.bias
    put(3 * C * C, -0.3f, 0.3f);   // c_attn.weight
    put(3 * C, -0.3f, 0.3f);       // c_attn.bias
    put(C * C, -0.3f, 0.3f);       // attn.c_proj.weight
    put(C, -0.3f, 0.3f);           // attn.c_proj.bias
    put(C, 0.8f, 1.2f);            // ln_2.weight
    put(C, -0.1f, 0.1f);           // ln_2.bias
    put(4 * C * C, -0.3f, 0.3f);   // c_fc.weight
    put(4 * C, -0.3f, 0.3f);       // c_fc.bias
    put(C * 4 * C, -0.3f, 0.3f);   // mlp.c_proj.weight
    put(C, -0.3f, 0.3f);           // mlp.c_proj.bias
  }
  put(C, 0.8f, 1.2f);   // ln_f.weight
  put(C, -0.1f, 0.1f);  // ln_f.bias
  return p;
}

inline std::vector<int32_t> random_ids(int n, int V, uint64_t seed) {
  std::vector<int32_t> ids(n);
  Philox rng(seed, 1);
  for (auto& id : ids) id = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(V));
  return ids;
}

/// GPT-2 forward in float64, naive loops, whole sequence at once: logits (T, V).
inline std::vector<double> reference_logits(const Gpt2Config& c, const std::vector<float>& prm, const std::vector<int32_t>& ids) {
  const int T = static_cast<int>(ids.size()), C = c.n_embd, V = c.vocab_size, NH = c.n_head, HS = C / NH;
  const float* p = prm.data();
  const auto take = [&](size_t n) {
    const float* r = p;
    p += n;
    return r;
  };
  const float* wte = take(static_cast<size_t>(V) * C);
  const float* wpe = take(static_cast<size_t>(c.block_size) * C);
  using Mat = std::vector<double>;
  Mat x(static_cast<size_t>(T) * C);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < C; ++i) x[t * C + i] = double(wte[ids[t] * C + i]) + double(wpe[t * C + i]);
  const auto layernorm = [&](const Mat& in, const float* w, const float* b) {
    Mat out(in.size());
    for (int t = 0; t < T; ++t) {
      double m = 0, v = 0;
      for (int i = 0; i < C; ++i) m += in[t * C + i];
      m /= C;
      for (int i = 0; i < C; ++i) v += (in[t * C + i] - m) * (in[t * C + i] - m);
      v /= C;
      const double rs = 1.0 / std::sqrt(v + 1e-5);
      for (int i = 0; i < C; ++i) out[t * C + i] = (in[t * C + i] - m) * rs * w[i] + b[i];
    }
    return out;
  };
  // out (T,N) = in (T,K) W (N,K)^T + b
  const auto linear = [&](const Mat& in, const float* W, const float* b, int N, int K) {
    Mat out(static_cast<size_t>(T) * N);
    for (int t = 0; t < T; ++t)
      for (int n = 0; n < N; ++n) {
        double s = b ? b[n] : 0.0;
        for (int k = 0; k < K; ++k) s += in[t * K + k] * double(W[static_cast<size_t>(n) * K + k]);
        out[t * N + n] = s;
      }
    return out;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    const float *ln1w = take(C), *ln1b = take(C), *aw = take(3 * C * C), *ab = take(3 * C);
    const float *pw = take(C * C), *pb = take(C), *ln2w = take(C), *ln2b = take(C);
    const float *fw = take(4 * C * C), *fb = take(4 * C), *fpw = take(4 * C * C), *fpb = take(C);
    Mat qkv = linear(layernorm(x, ln1w, ln1b), aw, ab, 3 * C, C);
    Mat y(static_cast<size_t>(T) * C, 0.0);
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < HS; ++i) d += qkv[t * 3 * C + h * HS + i] * qkv[u * 3 * C + C + h * HS + i];
          s[u] = d / std::sqrt(double(HS));
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (int u = 0; u <= t; ++u)
          for (int i = 0; i < HS; ++i) y[t * C + h * HS + i] += s[u] / z * qkv[u * 3 * C + 2 * C + h * HS + i];
      }
    Mat a = linear(y, pw, pb, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
    Mat hdn = linear(layernorm(x, ln2w, ln2b), fw, fb, 4 * C, C);
    for (auto& v : hdn) v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    Mat m = linear(hdn, fpw, fpb, C, 4 * C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
  }
  const float *lfw = take(C), *lfb = take(C);
  REQUIRE(static_cast<size_t>(p - prm.data()) == prm.size());
  return linear(layernorm(x, lfw, lfb), wte, nullptr, V, C);
}

/// max |got - want| / max |want| over row t of want (T, V).
inline double rel_err(const std::vector<float>& got, const std::vector<double>& want, int t, int V) {
  double num = 0, den = 0;
  for (int v = 0; v < V; ++v) {
    num = std::max(num, std::fabs(double(got[v]) - want[static_cast<size_t>(t) * V + v]));
    den = std::max(den, std::fabs(want[static_cast<size_t>(t) * V + v]));
  }
  return num / den;
}

}  // namespace rtx::test
