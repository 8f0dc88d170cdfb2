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
