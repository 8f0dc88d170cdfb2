// Label-DP: randomized response and RR-with-prior vs their definitions: the output distribution
// of every label (exact matrix and empirical frequencies), the eps-DP ratio bound on every
// output, the top-k choice by brute force, determinism and bad input.
#include <catch2/catch.hpp>

#include <cmath>

#include "rtx/core/error.hpp"
#include "rtx/privacy/label_dp.hpp"

using namespace rtx::privacy;

TEST_CASE("label-DP: randomized response frequencies and the eps bound", "[cpu]") {
  const double eps = 1.2;
  const int64_t K = 10;
  CHECK(rr_keep_probability(eps, K) == Approx(std::exp(eps) / (std::exp(eps) + 9)).epsilon(1e-14));
  CHECK(rr_keep_probability(INFINITY, K) == 1.0);
  std::vector<int32_t> labels(200000);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % K);
  const auto out = randomize_labels(labels, K, eps, 7);
  CHECK(out == randomize_labels(labels, K, eps, 7));
  CHECK(out != randomize_labels(labels, K, eps, 8));
  std::vector<double> cnt(K * K, 0);
  for (size_t i = 0; i < labels.size(); ++i) cnt[labels[i] * K + out[i]]++;
  const double n = labels.size() / double(K), pk = rr_keep_probability(eps, K), po = (1 - pk) / 9;
  for (int64_t y = 0; y < K; ++y)
    for (int64_t o = 0; o < K; ++o) {
      const double p = y == o ? pk : po, f = cnt[y * K + o] / n;
      INFO("y " << y << " o " << o << ": " << f << " vs " << p);
      CHECK(std::abs(f - p) < 5 * std::sqrt(p * (1 - p) / n));
    }
  // The mechanism's ratio bound: P(o|y) / P(o|y') <= e^eps for all o, y, y'.
  CHECK(pk / po == Approx(std::exp(eps)).epsilon(1e-12));
}

TEST_CASE("label-DP: RR-with-prior picks the best k and stays eps-DP", "[cpu]") {
  const double eps = 0.8;
  const std::vector<double> prior{0.05, 0.5, 0.02, 0.3, 0.13};
  const auto top = rr_prior_top_k(prior, eps);
  // Brute force over k on the sorted prior.
  std::vector<double> s = prior;
  std::sort(s.rbegin(), s.rend());
  double best = -1, mass = 0;
  size_t bk = 0;
  for (size_t k = 1; k <= s.size(); ++k) {
    mass += s[k - 1];
    const double v = mass * std::exp(eps) / (std::exp(eps) + k - 1);
    if (v > best) best = v, bk = k;
  }
  REQUIRE(top.size() == bk);
  CHECK(top[0] == 1);
  CHECK(top[1] == 3);
  const auto m = rr_prior_matrix(prior, eps);
  const int64_t K = 5;
  for (int64_t y = 0; y < K; ++y) {
    double row = 0;
    for (int64_t o = 0; o < K; ++o) row += m[y * K + o];
    CHECK(row == Approx(1.0).epsilon(1e-12));
  }
  for (int64_t o = 0; o < K; ++o)
    for (int64_t y = 0; y < K; ++y)
      for (int64_t y2 = 0; y2 < K; ++y2)
        if (m[y2 * K + o] > 0) CHECK(m[y * K + o] <= std::exp(eps) * m[y2 * K + o] * (1 + 1e-12));
  // Empirical frequencies match the matrix.
  std::vector<int32_t> labels(100000);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % K);
  const auto out = randomize_labels(labels, K, eps, 3, prior);
  std::vector<double> cnt(K * K, 0);
  for (size_t i = 0; i < labels.size(); ++i) cnt[labels[i] * K + out[i]]++;
  for (int64_t y = 0; y < K; ++y)
    for (int64_t o = 0; o < K; ++o) {
      const double p = m[y * K + o], f = cnt[y * K + o] / (labels.size() / double(K));
      CHECK(std::abs(f - p) < 5 * std::sqrt(p * (1 - p) / (labels.size() / double(K))) + 1e-12);
    }
  // A uniform prior at large eps is plain RR over all classes.
  const auto uni = rr_prior_top_k(std::vector<double>(4, 0.25), 5.0);
  CHECK(uni.size() == 4);
}

TEST_CASE("label-DP: bad input", "[cpu]") {
  CHECK_THROWS_AS(rr_keep_probability(0.0, 10), rtx::Error);
  CHECK_THROWS_AS(rr_keep_probability(1.0, 1), rtx::Error);
  CHECK_THROWS_WITH(rr_prior_top_k({0.5, 0.6}, 1.0), Catch::Contains("sums to"));
  CHECK_THROWS_WITH(rr_prior_top_k({-0.5, 1.5}, 1.0), Catch::Contains("negative"));
  CHECK_THROWS_WITH(randomize_labels({0, 3}, 3, 1.0, 0), Catch::Contains("outside [0, 3)"));
  CHECK_THROWS_WITH(randomize_labels({0, 1}, 3, 1.0, 0, {0.5, 0.5}), Catch::Contains("prior has 2"));
}
