// Tests of KV-cache inference (Gpt2Decoder) against a float64 full-sequence GPT-2 written here with
// naive loops, of the Sampler (greedy, top-k, top-p, seeds, empirical frequencies) and of generate().
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/models/infer.hpp"
#include "models/gpt2_ref.hpp"

using namespace rtx;
using namespace rtx::models;
using rtx::test::make_cfg;
using rtx::test::random_ids;
using rtx::test::random_params;
using rtx::test::reference_logits;
using rtx::test::rel_err;

namespace {

/// The tiny odd configs: the brief's (HS 8) and one whose head size 6 is no multiple of 8.
std::vector<Gpt2Config> tiny_configs() { return {make_cfg(67, 24, 3, 2, 16), make_cfg(7, 30, 5, 1, 9)}; }

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
    SamplerConfig settings;  // temperature, top_k, top_p, seed
    std::vector<double> want;
  };
  // Built one by one: a braced list of these (each holding a vector) trips GCC 12's
  // -Wmaybe-uninitialized on SamplerConfig::logit_bias.
  std::vector<Case> cases;
  const auto add = [&](float t, int k, float top_p, uint64_t seed, std::vector<double> want) {
    Case c;
    c.settings.temperature = t;
    c.settings.top_k = k;
    c.settings.top_p = top_p;
    c.settings.seed = seed;
    c.want = std::move(want);
    cases.push_back(std::move(c));
  };
  add(1.0f, 0, 1.0f, 1, p);
  add(2.0f, 0, 1.0f, 2, normalise(pt2));
  add(1.0f, 2, 1.0f, 3, normalise({0.5, 0.25, 0, 0, 0}));
  add(1.0f, 0, 0.8f, 4, normalise({0.5, 0.25, 0.125, 0, 0}));   // 0.5+0.25 < 0.8 <= 0.875
  add(1.0f, 0, 0.7f, 5, normalise({0.5, 0.25, 0, 0, 0}));
  add(1.0f, 0, 0.4f, 6, {1, 0, 0, 0, 0});
  // top-k 4 (mass 0.9375, id 3 wins the tie with id 4), then 0.9 of that mass = 0.84375 <= 0.875
  add(1.0f, 4, 0.9f, 7, normalise({0.5, 0.25, 0.125, 0, 0}));
  const int N = 40000;
  for (const Case& cs : cases) {
    INFO("temperature " << cs.settings.temperature << " top_k " << cs.settings.top_k << " top_p " << cs.settings.top_p);
    Sampler s(cs.settings);
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

namespace {
/// The adjusted logits, in float64, by the definitions: OpenAI's logit_bias and its penalties
/// ("mu[j] - c[j] * alpha_frequency - (c[j] > 0) * alpha_presence"), CTRL's repetition penalty
/// (x / r for x > 0, x * r otherwise) over the prompt and the tokens drawn so far.
std::vector<double> reference_adjusted(const std::vector<float>& logits, const SamplerConfig& c,
                                       const std::vector<int32_t>& prompt, const std::vector<int32_t>& drawn) {
  const int V = static_cast<int>(logits.size());
  std::vector<double> x(logits.begin(), logits.end());
  for (const auto& [id, b] : c.logit_bias)
    if (id < V) x[id] += b;
  std::vector<int> count(V, 0);
  std::vector<bool> seen(V, false);
  for (int32_t t : drawn) ++count[t], seen[t] = true;
  for (int32_t t : prompt) seen[t] = true;
  for (int v = 0; v < V; ++v) {
    if (seen[v]) x[v] = x[v] > 0 ? x[v] / c.repetition_penalty : x[v] * c.repetition_penalty;
    x[v] -= count[v] * static_cast<double>(c.frequency_penalty) + (count[v] > 0 ? c.presence_penalty : 0.0);
  }
  return x;
}
/// softmax(x / T) in float64.
std::vector<double> reference_softmax(const std::vector<double>& x, double T) {
  const double mx = *std::max_element(x.begin(), x.end());
  std::vector<double> p(x.size());
  double z = 0;
  for (size_t i = 0; i < x.size(); ++i) z += p[i] = std::exp((x[i] - mx) / T);
  for (double& q : p) q /= z;
  return p;
}
}  // namespace

TEST_CASE("sampler: penalties and logit_bias follow OpenAI's and CTRL's definitions", "[cpu]") {
  struct Case {
    int V;
    float freq, pres, rep;
    std::vector<std::pair<int32_t, float>> bias;
  };
  const std::vector<Case> cases = {
      {127, 0.7f, 0.0f, 1.0f, {}},
      {127, 0.0f, 1.3f, 1.0f, {}},
      {7, -0.5f, 0.4f, 1.0f, {}},  // negative penalties encourage repeats
      {127, 0.0f, 0.0f, 1.8f, {}},
      {1, 0.3f, 0.2f, 1.5f, {{0, -100.f}}},
      {127, 0.4f, -0.2f, 1.3f, {{5, 4.5f}, {17, -100.f}, {126, 0.25f}, {500, 50.f}}},  // id 500 >= V: ignored
  };
  for (const Case& cs : cases) {
    INFO("V " << cs.V << " freq " << cs.freq << " pres " << cs.pres << " rep " << cs.rep);
    std::vector<float> logits(cs.V);
    Philox rng(11 + cs.V);
    for (auto& l : logits) l = rng.next_float() * 6.f - 3.f;  // both signs: the repetition penalty's two cases
    SamplerConfig c{1.0f, 0, 1.0f, 5};
    c.frequency_penalty = cs.freq;
    c.presence_penalty = cs.pres;
    c.repetition_penalty = cs.rep;
    c.logit_bias = cs.bias;
    REQUIRE(c.adjusts_logits());
    const std::vector<int32_t> prompt = {0, static_cast<int32_t>(cs.V / 2), static_cast<int32_t>(cs.V / 2)};
    Sampler s(c);
    s.begin_sequence(prompt);
    std::vector<int32_t> drawn;
    for (int step = 0; step < 60; ++step) {
      // The distribution before each draw: the definitions' softmax after `drawn`.
      const auto want = reference_softmax(reference_adjusted(logits, c, prompt, drawn), 1.0);
      const auto got = s.distribution(logits.data(), cs.V);
      double worst = 0;
      for (int v = 0; v < cs.V; ++v) worst = std::max(worst, std::fabs(got[v] - want[v]));
      CHECK(worst <= 1e-6);
      drawn.push_back(s.sample(logits));
    }
    for (int v = 0; v < cs.V; ++v) CHECK(s.sampled_count(v) == std::count(drawn.begin(), drawn.end(), v));
    // A -100 bias is a ban: token 17 is never drawn where it is biased so.
    for (const auto& [id, b] : cs.bias)
      if (b == -100.f && cs.V > 1) CHECK(s.sampled_count(id) == 0);
    // begin_sequence forgets the counts: the first distribution again.
    s.begin_sequence(prompt);
    const auto first = reference_softmax(reference_adjusted(logits, c, prompt, {}), 1.0);
    const auto again = s.distribution(logits.data(), cs.V);
    for (int v = 0; v < cs.V; ++v) CHECK(again[v] == Approx(first[v]).margin(1e-6));
  }
}

TEST_CASE("sampler: greedy decoding takes the argmax of the penalised logits", "[cpu]") {
  // Fixed logits; a frequency penalty walks greedy decoding down the ranking and back, as the
  // float64 definition predicts step by step.
  const std::vector<float> logits = {3.0f, 2.5f, 2.0f, 1.0f, -0.5f, 2.75f, 0.0f};
  for (const float freq : {0.3f, 1.0f, 2.0f})
    for (const float rep : {1.0f, 1.4f}) {
      INFO("freq " << freq << " rep " << rep);
      SamplerConfig c{0.0f, 0, 1.0f, 0};
      c.frequency_penalty = freq;
      c.presence_penalty = 0.1f;
      c.repetition_penalty = rep;
      const std::vector<int32_t> prompt = {2};
      Sampler s(c);
      s.begin_sequence(prompt);
      std::vector<int32_t> drawn;
      for (int step = 0; step < 40; ++step) {
        const auto x = reference_adjusted(logits, c, prompt, drawn);
        const int32_t want = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
        const int32_t got = s.sample(logits);
        REQUIRE(got == want);
        drawn.push_back(got);
      }
      CHECK(s.draws() == 0);  // greedy consumes no randomness
      CHECK(std::set<int32_t>(drawn.begin(), drawn.end()).size() >= 3);  // the penalty moved it
    }
  // A +100 bias forces a token under greedy decoding; a ban on the argmax takes the runner-up.
  SamplerConfig force{0.0f, 0, 1.0f, 0};
  force.logit_bias = {{4, 100.f}};
  CHECK(Sampler(force).sample(logits) == 4);
  force.logit_bias = {{0, -100.f}};
  CHECK(Sampler(force).sample(logits) == 5);
  // vocab_limit still bounds the draw after the bias.
  force.logit_bias = {{6, 100.f}};
  force.vocab_limit = 6;
  CHECK(Sampler(force).sample(logits) == 0);
}

TEST_CASE("sampler: neutral penalties change nothing; bad ones throw Error(Input)", "[cpu]") {
  const int V = 67;
  std::vector<float> logits(V);
  Philox rng(3);
  for (auto& l : logits) l = rng.next_float() * 4.f;
  SamplerConfig plain{0.9f, 20, 0.95f, 77};
  SamplerConfig neutral = plain;
  neutral.frequency_penalty = 0;
  neutral.presence_penalty = 0;
  neutral.repetition_penalty = 1;
  CHECK(!neutral.adjusts_logits());
  Sampler a(plain), b(neutral);
  b.begin_sequence({1, 2, 3});
  for (int i = 0; i < 100; ++i) REQUIRE(a.sample(logits) == b.sample(logits));
  const auto bad = [](auto edit) {
    SamplerConfig c;
    edit(c);
    return category_of([&] { Sampler s(c); });
  };
  CHECK(bad([](SamplerConfig& c) { c.frequency_penalty = 2.01f; }) == ErrorCategory::Input);
  CHECK(bad([](SamplerConfig& c) { c.frequency_penalty = std::nanf(""); }) == ErrorCategory::Input);
  CHECK(bad([](SamplerConfig& c) { c.presence_penalty = -2.5f; }) == ErrorCategory::Input);
  CHECK(bad([](SamplerConfig& c) { c.repetition_penalty = 0.0f; }) == ErrorCategory::Input);
  CHECK(bad([](SamplerConfig& c) { c.repetition_penalty = 10.5f; }) == ErrorCategory::Input);
  CHECK(bad([](SamplerConfig& c) { c.repetition_penalty = INFINITY; }) == ErrorCategory::Input);
  CHECK(bad([](SamplerConfig& c) { c.logit_bias = {{-1, 1.f}}; }) == ErrorCategory::Input);
  CHECK(bad([](SamplerConfig& c) { c.logit_bias = {{3, 100.5f}}; }) == ErrorCategory::Input);
  CHECK(bad([](SamplerConfig& c) { c.logit_bias = {{3, std::nanf("")}}; }) == ErrorCategory::Input);
  SamplerConfig edge;  // the ranges' ends are allowed
  edge.frequency_penalty = 2.0f;
  edge.presence_penalty = -2.0f;
  edge.repetition_penalty = 10.0f;
  edge.logit_bias = {{3, -100.f}, {4, 100.f}};
  CHECK_NOTHROW(Sampler(edge));
  Sampler s(SamplerConfig{});
  CHECK(category_of([&] { s.begin_sequence({0, -4}); }) == ErrorCategory::Input);
  CHECK(category_of([&] { s.begin_sequence(nullptr, 2); }) == ErrorCategory::Input);
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
