// Tests of KV-cache inference (Gpt2Decoder) against a float64 full-sequence GPT-2 written here with
// naive loops, of the Sampler (greedy, top-k, top-p, seeds, empirical frequencies) and of generate().
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/models/infer.hpp"

using namespace rtx;
using namespace rtx::models;

namespace {

Gpt2Config make_cfg(int V, int C, int NH, int L, int Tm) {
  Gpt2Config c;
  c.vocab_size = V;
  c.n_embd = C;
  c.n_head = NH;
  c.n_layer = L;
  c.block_size = Tm;
  return c;
}

/// The tiny odd configs: the brief's (HS 8) and one whose head size 6 is no multiple of 8.
std::vector<Gpt2Config> tiny_configs() { return {make_cfg(67, 24, 3, 2, 16), make_cfg(7, 30, 5, 1, 9)}; }

/// Random parameters in the canonical layout (walked here independently of the library):
/// matrices and biases U(-0.3, 0.3), LayerNorm weights 1 + U(-0.2, 0.2), LayerNorm biases U(-0.1, 0.1).
std::vector<float> random_params(const Gpt2Config& c, uint64_t seed) {
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

std::vector<int32_t> random_ids(int n, int V, uint64_t seed) {
  std::vector<int32_t> ids(n);
  Philox rng(seed, 1);
  for (auto& id : ids) id = static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(V));
  return ids;
}

/// GPT-2 forward in float64, naive loops, whole sequence at once: logits (T, V).
std::vector<double> reference_logits(const Gpt2Config& c, const std::vector<float>& prm, const std::vector<int32_t>& ids) {
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
double rel_err(const std::vector<float>& got, const std::vector<double>& want, int t, int V) {
  double num = 0, den = 0;
  for (int v = 0; v < V; ++v) {
    num = std::max(num, std::fabs(double(got[v]) - want[static_cast<size_t>(t) * V + v]));
    den = std::max(den, std::fabs(want[static_cast<size_t>(t) * V + v]));
  }
  return num / den;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <class F>
ErrorCategory category_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.category();
  }
  return ErrorCategory::Internal;  // no throw: the caller's CHECK fails
}

}  // namespace

TEST_CASE("decoder: prefill and every step match a float64 full-sequence forward", "[cpu]") {
  for (const Gpt2Config& c : tiny_configs()) {
    const int V = c.vocab_size, Tm = c.block_size;
    INFO("config V=" << V << " C=" << c.n_embd << " NH=" << c.n_head << " L=" << c.n_layer << " Tm=" << Tm);
    const auto prm = random_params(c, 11);
    const auto ids = random_ids(Tm, V, 5);
    const auto ref = reference_logits(c, prm, ids);
    // The reference is not degenerate: logits spread over more than a unit.
    const auto mm = std::minmax_element(ref.begin(), ref.end());
    REQUIRE(*mm.second - *mm.first > 1.0);

    Gpt2Decoder dec(c, prm.data());
    CHECK(dec.position() == 0);
    CHECK(dec.capacity() == Tm);
    // Incremental: one position per step, every position checked.
    CHECK(rel_err(dec.prefill(ids.data(), 1), ref, 0, V) <= 1e-5);
    for (int t = 1; t < Tm; ++t) {
      INFO("step to position " << t);
      CHECK(rel_err(dec.step(ids[t]), ref, t, V) <= 1e-5);
      CHECK(dec.position() == t + 1);
    }
    // Prefill of every prefix length (odd lengths included).
    for (int n = 1; n <= Tm; ++n) {
      INFO("prefill n = " << n);
      dec.reset();
      CHECK(rel_err(dec.prefill(ids.data(), n), ref, n - 1, V) <= 1e-5);
      CHECK(dec.position() == n);
    }
  }
}

TEST_CASE("decoder: prefill(n) then steps == one prefill of the whole sequence, any chunk", "[cpu]") {
  const Gpt2Config c = make_cfg(67, 24, 3, 2, 16);
  const auto prm = random_params(c, 12);
  const auto ids = random_ids(c.block_size, c.vocab_size, 6);
  Gpt2Decoder full(c, prm.data());
  const std::vector<float> want = full.prefill(ids.data(), c.block_size);
  for (int n : {1, 7, 15}) {
    INFO("prefill " << n << " then steps");
    Gpt2Decoder dec(c, prm.data());
    dec.prefill(ids.data(), n);
    std::vector<float> got;
    for (int t = n; t < c.block_size; ++t) got = dec.step(ids[t]);
    // The blocked matmul reduces each row alike whatever M: identical bits, not just close.
    CHECK(same_bits(got, want));
  }
  for (int chunk : {1, 5, 16, 100}) {
    INFO("chunk " << chunk);
    Gpt2Decoder dec(c, prm.data(), DecoderParams{}, chunk);
    CHECK(same_bits(dec.prefill(ids.data(), c.block_size), want));
    // Prefill in two calls (appending at position 9).
    dec.reset();
    dec.prefill(ids.data(), 9);
    CHECK(same_bits(dec.prefill(ids.data() + 9, c.block_size - 9), want));
  }
  // The BLAS matmul path agrees within the bound.
  DecoderParams blas;
  blas.matmul.impl = kernels::MatmulImpl::Blas;
  Gpt2Decoder b(c, prm.data(), blas);
  const auto ref = reference_logits(c, prm, ids);
  CHECK(rel_err(b.prefill(ids.data(), c.block_size), ref, c.block_size - 1, c.vocab_size) <= 1e-5);
}

TEST_CASE("decoder: logits do not depend on the thread count", "[cpu]") {
  const Gpt2Config c = make_cfg(67, 24, 3, 2, 16);
  const auto prm = random_params(c, 13);
  const auto ids = random_ids(c.block_size, c.vocab_size, 7);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> outs;
  for (int nt : {1, 2, 3}) {
    omp_set_num_threads(nt);
    Gpt2Decoder dec(c, prm.data());
    dec.prefill(ids.data(), 10);
    std::vector<float> all = dec.step(ids[10]);
    const auto& pre = dec.prefill(ids.data() + 11, 5);
    all.insert(all.end(), pre.begin(), pre.end());
    outs.push_back(all);
  }
  omp_set_num_threads(saved);
  CHECK(same_bits(outs[0], outs[1]));
  CHECK(same_bits(outs[0], outs[2]));
}

#ifdef RTX_INFER_HAVE_GPT2
TEST_CASE("decoder: logits match Gpt2::forward at every position", "[cpu]") {
  const Gpt2Config c = make_cfg(67, 24, 3, 2, 16);
  const auto prm = random_params(c, 14);
  REQUIRE(prm.size() == gpt2_num_params(c));
  const auto ids = random_ids(c.block_size, c.vocab_size, 8);
  Gpt2 model(c, 1, c.block_size);
  model.set_params(prm.data());
  model.forward(ids.data(), nullptr, 1, c.block_size);
  std::vector<float> all(static_cast<size_t>(c.block_size) * c.vocab_size);
  model.get_logits(all.data());
  const std::vector<double> want(all.begin(), all.end());
  Gpt2Decoder dec(c, prm.data());
  CHECK(rel_err(dec.prefill(ids.data(), 3), want, 2, c.vocab_size) <= 1e-5);
  for (int t = 3; t < c.block_size; ++t) {
    INFO("position " << t);
    CHECK(rel_err(dec.step(ids[t]), want, t, c.vocab_size) <= 1e-5);
  }
}
#endif

TEST_CASE("decoder: bad input throws Error(Input) and leaves the sequence as it was", "[cpu]") {
  const Gpt2Config c = make_cfg(67, 24, 3, 2, 16);
  const auto prm = random_params(c, 15);
  const auto ids = random_ids(c.block_size + 1, c.vocab_size, 9);
  const auto ref = reference_logits(c, prm, std::vector<int32_t>(ids.begin(), ids.end() - 1));

  CHECK(category_of([&] { Gpt2Decoder d(c, nullptr); }) == ErrorCategory::Input);
  CHECK(category_of([&] { Gpt2Decoder d(c, prm.data(), DecoderParams{}, 0); }) == ErrorCategory::Input);
  CHECK(category_of([&] { Gpt2Decoder d(make_cfg(67, 24, 5, 2, 16), prm.data()); }) == ErrorCategory::Input);

  Gpt2Decoder dec(c, prm.data());
  CHECK(category_of([&] { dec.prefill(ids.data(), 0); }) == ErrorCategory::Input);
  CHECK(category_of([&] { dec.prefill(nullptr, 3); }) == ErrorCategory::Input);
  CHECK(category_of([&] { dec.prefill(ids.data(), c.block_size + 1); }) == ErrorCategory::Input);
  CHECK(dec.position() == 0);
  dec.prefill(ids.data(), 4);
  CHECK(category_of([&] { dec.step(c.vocab_size); }) == ErrorCategory::Input);
  CHECK(category_of([&] { dec.step(-1); }) == ErrorCategory::Input);
  std::vector<int32_t> bad = {ids[4], ids[5], 67};
  CHECK(category_of([&] { dec.prefill(bad.data(), 3); }) == ErrorCategory::Input);
  CHECK(category_of([&] { dec.prefill(ids.data() + 4, c.block_size - 3); }) == ErrorCategory::Input);
  CHECK(dec.position() == 4);
  // Still the right sequence after the failures; then the block fills and one more overflows.
  for (int t = 4; t < c.block_size; ++t) CHECK(rel_err(dec.step(ids[t]), ref, t, c.vocab_size) <= 1e-5);
  CHECK(dec.position() == c.block_size);
  try {
    dec.step(ids[c.block_size]);
    FAIL("step past block_size did not throw");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(e.where() == "block_size");
  }
  CHECK(dec.position() == c.block_size);
  dec.reset();
  CHECK(dec.position() == 0);
  CHECK(rel_err(dec.prefill(ids.data(), 2), ref, 1, c.vocab_size) <= 1e-5);
}

TEST_CASE("sampler: greedy is argmax and top-k 1 is greedy", "[cpu]") {
  const int V = 127;
  for (uint64_t s = 0; s < 20; ++s) {
    std::vector<float> logits(V);
    Philox rng(100 + s);
    for (auto& l : logits) l = rng.next_float() * 8.f - 4.f;
    int32_t want = 0;  // first index of the maximum, computed here
    for (int v = 0; v < V; ++v)
      if (logits[v] > logits[want]) want = v;
    Sampler greedy(SamplerConfig{0.0f, 0, 1.0f, s});
    CHECK(greedy.sample(logits) == want);
    CHECK(greedy.draws() == 0);
    Sampler k1(SamplerConfig{1.0f, 1, 1.0f, s});
    Sampler k1hot(SamplerConfig{5.0f, 1, 0.3f, s + 1});
    for (int i = 0; i < 5; ++i) {
      CHECK(k1.sample(logits) == want);
      CHECK(k1hot.sample(logits) == want);
    }
  }
  // Ties: the lowest id wins, for greedy and for top-k.
  std::vector<float> tie = {0.f, 3.f, 1.f, 3.f, 3.f};
  CHECK(argmax(tie.data(), 5) == 1);
  CHECK(Sampler(SamplerConfig{0.0f, 0, 1.0f, 0}).sample(tie) == 1);
  const auto d = Sampler(SamplerConfig{1.0f, 2, 1.0f, 0}).distribution(tie.data(), 5);
  CHECK(d[1] == Approx(0.5).margin(1e-15));
  CHECK(d[3] == Approx(0.5).margin(1e-15));
  CHECK(d[4] == 0.0);
  // V = 1: the only token.
  const float one = 2.5f;
  CHECK(Sampler(SamplerConfig{1.0f, 0, 0.5f, 3}).sample(&one, 1) == 0);
}

TEST_CASE("sampler: the same seed gives the same tokens, another seed others", "[cpu]") {
  const int V = 67;
  std::vector<float> logits(V);
  Philox rng(7);
  for (auto& l : logits) l = rng.next_float();
  for (const SamplerConfig& base : {SamplerConfig{1.0f, 0, 1.0f, 42}, SamplerConfig{0.7f, 10, 0.9f, 42}}) {
    SamplerConfig other = base;
    other.seed = 43;
    Sampler a(base), b(base), o(other);
    std::vector<int32_t> ta, tb, to;
    for (int i = 0; i < 200; ++i) {
      ta.push_back(a.sample(logits));
      tb.push_back(b.sample(logits));
      to.push_back(o.sample(logits));
    }
    CHECK(ta == tb);
    CHECK(ta != to);
    CHECK(a.draws() == 400);  // two u32 per sample
  }
}

TEST_CASE("sampler: empirical frequencies follow temperature, top-k and top-p", "[cpu]") {
  // p = (1/2, 1/4, 1/8, 1/16, 1/16) as logits log p + 3 (the shift must not matter).
  const std::vector<double> p = {0.5, 0.25, 0.125, 0.0625, 0.0625};
  const int V = 5;
  std::vector<float> logits(V);
  for (int v = 0; v < V; ++v) logits[v] = static_cast<float>(std::log(p[v]) + 3.0);
  const auto normalise = [](std::vector<double> w) {
    double s = 0;
    for (double x : w) s += x;
    for (double& x : w) x /= s;
    return w;
  };
  std::vector<double> pt2(V);  // temperature 2: p^(1/2), renormalised
  for (int v = 0; v < V; ++v) pt2[v] = std::sqrt(p[v]);
  struct Case {
    SamplerConfig cfg;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {{1.0f, 0, 1.0f, 1}, p},
      {{2.0f, 0, 1.0f, 2}, normalise(pt2)},
      {{1.0f, 2, 1.0f, 3}, normalise({0.5, 0.25, 0, 0, 0})},
      {{1.0f, 0, 0.8f, 4}, normalise({0.5, 0.25, 0.125, 0, 0})},   // 0.5+0.25 < 0.8 <= 0.875
      {{1.0f, 0, 0.7f, 5}, normalise({0.5, 0.25, 0, 0, 0})},
      {{1.0f, 0, 0.4f, 6}, {1, 0, 0, 0, 0}},
      // top-k 4 (mass 0.9375, id 3 wins the tie with id 4), then 0.9 of that mass = 0.84375 <= 0.875
      {{1.0f, 4, 0.9f, 7}, normalise({0.5, 0.25, 0.125, 0, 0})},
  };
  const int N = 40000;
  for (const Case& cs : cases) {
    INFO("temperature " << cs.cfg.temperature << " top_k " << cs.cfg.top_k << " top_p " << cs.cfg.top_p);
    Sampler s(cs.cfg);
    const auto dist = s.distribution(logits.data(), V);
    for (int v = 0; v < V; ++v) CHECK(dist[v] == Approx(cs.want[v]).margin(1e-6));
    std::vector<int> count(V, 0);
    for (int i = 0; i < N; ++i) ++count[s.sample(logits)];
    double chi2 = 0;
    for (int v = 0; v < V; ++v) {
      const double f = double(count[v]) / N;
      if (cs.want[v] == 0) {
        CHECK(count[v] == 0);
        continue;
      }
      // Each frequency within 5 standard deviations of its probability.
      CHECK(std::fabs(f - cs.want[v]) <= 5 * std::sqrt(cs.want[v] * (1 - cs.want[v]) / N) + 1e-12);
      chi2 += (count[v] - N * cs.want[v]) * (count[v] - N * cs.want[v]) / (N * cs.want[v]);
    }
    // Pearson chi-square, <= 4 degrees of freedom: P(chi2 > 25) < 1e-4 for a right sampler.
    CHECK(chi2 < 25.0);
  }
}

TEST_CASE("sampler: bad settings and logits throw Error(Input)", "[cpu]") {
  CHECK(category_of([] { Sampler s(SamplerConfig{-0.1f, 0, 1.0f, 0}); }) == ErrorCategory::Input);
  CHECK(category_of([] { Sampler s(SamplerConfig{std::nanf(""), 0, 1.0f, 0}); }) == ErrorCategory::Input);
  CHECK(category_of([] { Sampler s(SamplerConfig{INFINITY, 0, 1.0f, 0}); }) == ErrorCategory::Input);
  CHECK(category_of([] { Sampler s(SamplerConfig{1.0f, -1, 1.0f, 0}); }) == ErrorCategory::Input);
  CHECK(category_of([] { Sampler s(SamplerConfig{1.0f, 0, 0.0f, 0}); }) == ErrorCategory::Input);
  CHECK(category_of([] { Sampler s(SamplerConfig{1.0f, 0, -0.5f, 0}); }) == ErrorCategory::Input);
  CHECK(category_of([] { Sampler s(SamplerConfig{1.0f, 0, 1.01f, 0}); }) == ErrorCategory::Input);
  CHECK(category_of([] { Sampler s(SamplerConfig{1.0f, 0, std::nanf(""), 0}); }) == ErrorCategory::Input);
  Sampler s(SamplerConfig{});
  std::vector<float> l = {0.f, std::nanf(""), 1.f};
  CHECK(category_of([&] { s.sample(l); }) == ErrorCategory::Input);
  l[1] = -INFINITY;
  CHECK(category_of([&] { s.sample(l); }) == ErrorCategory::Input);
  CHECK(category_of([&] { s.sample(l.data(), 0); }) == ErrorCategory::Input);
  CHECK(category_of([&] { s.sample(nullptr, 3); }) == ErrorCategory::Input);
  CHECK(category_of([&] { argmax(nullptr, 3); }) == ErrorCategory::Input);
  // top_k larger than V is allowed (keeps everything).
  const std::vector<float> ok = {0.f, 1.f};
  CHECK(Sampler(SamplerConfig{1.0f, 10, 1.0f, 0}).distribution(ok.data(), 2)[1] ==
        Approx(std::exp(1.0) / (1.0 + std::exp(1.0))));
}

TEST_CASE("generate: streams the decoder's tokens and stops for each reason", "[cpu]") {
  const Gpt2Config c = make_cfg(67, 24, 3, 2, 16);
  const auto prm = random_params(c, 16);
  const auto prompt = random_ids(5, c.vocab_size, 10);
  Gpt2Decoder dec(c, prm.data());

  // Greedy by hand: prefill, argmax, step...
  std::vector<int32_t> manual;
  {
    Gpt2Decoder d(c, prm.data());
    const std::vector<float>* lg = &d.prefill(prompt.data(), 5);
    for (;;) {
      manual.push_back(argmax(lg->data(), c.vocab_size));
      if (d.position() == c.block_size) break;
      lg = &d.step(manual.back());
    }
  }
  REQUIRE(manual.size() == 12);  // 16 - 5 + 1

  Sampler greedy(SamplerConfig{0.0f, 0, 1.0f, 0});
  std::vector<int32_t> streamed;
  GenerateResult r = generate(dec, prompt, 6, greedy, -1, [&](int32_t t) {
    streamed.push_back(t);
    return true;
  });
  CHECK(r.stop == StopReason::MaxTokens);
  CHECK(r.prompt_tokens == 5);
  CHECK(r.tokens == std::vector<int32_t>(manual.begin(), manual.begin() + 6));
  CHECK(streamed == r.tokens);
  CHECK(r.decode_steps == 5);
  CHECK(dec.position() == 10);

  r = generate(dec, prompt, 100, greedy);  // cache full after 12 tokens (the last is not fed back)
  CHECK(r.stop == StopReason::ContextFull);
  CHECK(r.tokens == manual);
  CHECK(dec.position() == c.block_size);

  // Stop at the first occurrence of the 4th greedy token; that token is not emitted.
  const int32_t stop = manual[3];
  const size_t first = std::find(manual.begin(), manual.end(), stop) - manual.begin();
  r = generate(dec, prompt, 100, greedy, stop);
  CHECK(r.stop == StopReason::StopToken);
  CHECK(r.tokens == std::vector<int32_t>(manual.begin(), manual.begin() + first));

  int calls = 0;
  r = generate(dec, prompt, 100, greedy, -1, [&](int32_t) { return ++calls < 3; });
  CHECK(r.stop == StopReason::Callback);
  CHECK(r.tokens.size() == 3);
  CHECK(std::string(stop_reason_name(r.stop)) == "callback");

  r = generate(dec, prompt, 0, greedy);
  CHECK(r.tokens.empty());
  CHECK(dec.position() == 5);

  // Sampling is deterministic for a seed and differs across seeds.
  Sampler s1(SamplerConfig{1.5f, 0, 1.0f, 9}), s2(SamplerConfig{1.5f, 0, 1.0f, 9}), s3(SamplerConfig{1.5f, 0, 1.0f, 10});
  const auto a = generate(dec, prompt, 11, s1).tokens;
  const auto b = generate(dec, prompt, 11, s2).tokens;
  const auto o = generate(dec, prompt, 11, s3).tokens;
  CHECK(a.size() == 11);
  CHECK(a == b);
  CHECK(a != o);

  CHECK(category_of([&] { generate(dec, {}, 3, greedy); }) == ErrorCategory::Input);
  CHECK(category_of([&] { generate(dec, random_ids(17, c.vocab_size, 1), 3, greedy); }) == ErrorCategory::Input);
  CHECK(category_of([&] { generate(dec, prompt, -1, greedy); }) == ErrorCategory::Input);
  CHECK(category_of([&] { generate(dec, {1, 67}, 3, greedy); }) == ErrorCategory::Input);
}
