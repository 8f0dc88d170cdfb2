// rtx::stats against independent references: numpy/scipy values for fixed samples (the
// Python call is quoted next to each), brute-force enumeration, and coverage simulations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/stats/stats.hpp"

using namespace rtx::stats;

TEST_CASE("median, percentile (numpy linear), MAD", "[cpu]") {
  const std::vector<double> x{3, 1, 4, 1, 5, 9, 2, 6};
  CHECK(median(x) == 3.5);
  CHECK(median({7}) == 7);
  CHECK(median({5, 1, 3}) == 3);
  // numpy.percentile([3,1,4,1,5,9,2,6], [10,50,90]) -> [1.0, 3.5, 6.9]
  CHECK(percentile(x, 0.10) == Approx(1.0));
  CHECK(percentile(x, 0.50) == Approx(3.5));
  CHECK(percentile(x, 0.90) == Approx(6.9));
  CHECK(percentile(x, 0.0) == 1);
  CHECK(percentile(x, 1.0) == 9);
  CHECK(percentile({42}, 0.3) == 42);
  // |x - 3.5| = .5 2.5 .5 2.5 1.5 5.5 1.5 2.5 -> median 2.0
  CHECK(mad(x) == Approx(2.0));
  CHECK_THROWS_AS(median({}), rtx::Error);
  CHECK_THROWS_AS(percentile(x, 1.5), rtx::Error);
  CHECK_THROWS_AS(mad({}), rtx::Error);
}

TEST_CASE("normal cdf and quantile", "[cpu]") {
  CHECK(normal_cdf(0) == Approx(0.5));
  CHECK(normal_cdf(1.959963984540054) == Approx(0.975).epsilon(1e-12));
  CHECK(normal_quantile(0.975) == Approx(1.959963984540054).epsilon(1e-10));
  CHECK(normal_quantile(1e-6) == Approx(-4.753424308822899).epsilon(1e-9));  // scipy.stats.norm.ppf(1e-6)
  CHECK_THROWS_AS(normal_quantile(0), rtx::Error);
}

TEST_CASE("median CI uses the binomial order statistics", "[cpu]") {
  // j and coverage from scipy: max j with binom.cdf(j-1, n, .5) <= 0.025; 1 - 2 binom.cdf(j-1, n, .5)
  struct Row { size_t n, j; double cov; };
  for (const Row& r : {Row{6, 1, 0.96875}, Row{20, 6, 0.9586105346679688}, Row{30, 10, 0.9572260547429323},
                       Row{100, 40, 0.9647997997822951}}) {
    std::vector<double> x(r.n);
    for (size_t i = 0; i < r.n; ++i) x[i] = static_cast<double>((i * 7919) % r.n);  // permutation of 0..n-1
    const Interval ci = median_ci(x);
    INFO("n=" << r.n);
    CHECK(ci.lo == static_cast<double>(r.j - 1));       // x_(j) of 0..n-1 is j-1
    CHECK(ci.hi == static_cast<double>(r.n - r.j));     // x_(n+1-j) is n-j
    CHECK(ci.coverage == Approx(r.cov).epsilon(1e-9));
  }
  // n = 5 cannot reach 95%: the full range with coverage 1 - 2/32
  const Interval small = median_ci({5, 4, 3, 2, 1});
  CHECK(small.lo == 1);
  CHECK(small.hi == 5);
  CHECK(small.coverage == Approx(0.9375));
  CHECK_THROWS_AS(median_ci({}), rtx::Error);
  CHECK_THROWS_AS(median_ci({1, 2}, 1.5), rtx::Error);
}

TEST_CASE("median CI covers the true median ~95% (simulation)", "[cpu]") {
  // Exponential(1): true median ln 2. n = 30: exact coverage 0.9572.
  rtx::Philox rng(2024);
  int covered = 0;
  const int trials = 2000;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> x(30);
    for (auto& v : x) v = -std::log(1 - rng.next_double());
    const Interval ci = median_ci(x);
    covered += (ci.lo <= std::log(2.0) && std::log(2.0) <= ci.hi);
  }
  const double cov = static_cast<double>(covered) / trials;
  CHECK(cov > 0.94);  // binomial sd of the estimate ~0.0045
  CHECK(cov < 0.975);
}

TEST_CASE("Mann-Whitney U p-values match scipy", "[cpu]") {
  // Ties present -> normal approximation with tie and continuity correction.
  // scipy.stats.mannwhitneyu(x, y, alternative='two-sided', method='asymptotic') -> U=58, p=0.13291945818531892
  const std::vector<double> x{1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30};
  const std::vector<double> y{0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29};
  auto r = mann_whitney_u(x, y);
  CHECK(r.u1 == 58);
  CHECK_FALSE(r.exact);
  CHECK(r.p == Approx(0.13291945818531892).epsilon(1e-9));

  // No ties, small: exact. scipy ... method='exact' -> U=1, p=0.0006216006216006216
  const std::vector<double> a{19.1, 21.3, 20.4, 22.8, 18.7, 23.5, 20.0};
  const std::vector<double> b{24.2, 25.1, 22.9, 26.7, 23.8, 27.4, 25.9, 24.6};
  r = mann_whitney_u(a, b);
  CHECK(r.exact);
  CHECK(r.u1 == 1);
  CHECK(r.u2 == 55);
  CHECK(r.p == Approx(0.0006216006216006216).epsilon(1e-9));
  CHECK(mann_whitney_u(b, a).p == Approx(r.p).epsilon(1e-12));  // two-sided: symmetric

  // Heavy ties. scipy ... method='asymptotic' -> U=7.5, p=0.006373133838085873
  r = mann_whitney_u({1, 2, 2, 3, 3, 3, 4, 5}, {3, 4, 4, 5, 5, 6, 7, 7, 8});
  CHECK(r.u1 == 7.5);
  CHECK(r.p == Approx(0.006373133838085873).epsilon(1e-9));

  // 15 x 12, no ties: exact. scipy ... method='exact' -> U=56, p=0.10280029866784478
  const std::vector<double> e{0.3456, 0.8216, 0.3304, -1.3032, 0.9054, 0.4464, -0.537, 0.5811,
                              0.3646, 0.2941, 0.0284, 0.5467, -0.7365, -0.1629, -0.4821};
  const std::vector<double> f{1.3988, 0.8397, 0.5075, 0.0181, 0.5428, 0.8081,
                              0.5244, 2.0941, 1.8067, -1.9112, -1.089, 0.6252};
  r = mann_whitney_u(e, f);
  CHECK(r.exact);
  CHECK(r.u1 == 56);
  CHECK(r.p == Approx(0.10280029866784478).epsilon(1e-9));

  // identical constant samples: no evidence
  CHECK(mann_whitney_u({1, 1, 1}, {1, 1}).p == 1);
  CHECK_THROWS_AS(mann_whitney_u({}, {1.0}), rtx::Error);
}

// P(U <= u) by enumerating every subset of ranks for the first sample.
static double brute_cdf(int m, int n, int u) {
  const int N = m + n;
  long below = 0, total = 0;
  for (unsigned mask = 0; mask < (1u << N); ++mask) {
    if (__builtin_popcount(mask) != m) continue;
    // U of sample 1 = sum of its ranks (1-based) - m(m+1)/2
    int rs = 0;
    for (int i = 0; i < N; ++i)
      if (mask & (1u << i)) rs += i + 1;
    ++total;
    below += (rs - m * (m + 1) / 2) <= u;
  }
  return static_cast<double>(below) / static_cast<double>(total);
}

TEST_CASE("exact U distribution equals enumeration", "[cpu]") {
  for (auto [m, n] : {std::pair{1, 1}, {1, 7}, {4, 5}, {6, 6}, {3, 9}})
    for (int u = -1; u <= m * n; ++u) {
      INFO("m=" << m << " n=" << n << " u=" << u);
      CHECK(mann_whitney_cdf(m, n, u) == Approx(brute_cdf(m, n, u)).epsilon(1e-12));
    }
  CHECK_THROWS_AS(mann_whitney_cdf(0, 3, 1), rtx::Error);
}

TEST_CASE("Hodges-Lehmann equals brute force; CI index from the exact U distribution", "[cpu]") {
  const std::vector<double> x{1.1, 2.3, 0.7, 3.9, 2.2, 1.4};
  const std::vector<double> y{2.0, 3.1, 4.4, 2.9, 5.0, 3.3, 2.5};
  std::vector<double> d;
  for (double b : y)
    for (double a : x) d.push_back(b - a);
  std::sort(d.begin(), d.end());
  const size_t N = d.size();  // 42
  const Shift s = hodges_lehmann(x, y);
  CHECK(s.estimate == Approx(0.5 * (d[N / 2 - 1] + d[N / 2])));
  // C - 1 = largest u with P(U <= u) <= 0.025, by enumeration
  int c = 1;
  for (int u = 0; u <= 21; ++u)
    if (brute_cdf(6, 7, u) <= 0.025) c = u + 1;
  CHECK(s.ci.lo == d[c - 1]);
  CHECK(s.ci.hi == d[N - c]);
  CHECK(s.ci.coverage == Approx(1 - 2 * brute_cdf(6, 7, c - 1)));
  CHECK(s.ci.coverage >= 0.95);

  // ratio form: y = 1.25 x exactly -> ratio 1.25 and a CI containing it
  std::vector<double> t1{1.0, 1.1, 0.9, 1.05, 0.97, 1.2}, t2;
  for (double v : t1) t2.push_back(1.25 * v);
  const Shift r = hodges_lehmann_ratio(t1, t2);
  CHECK(r.estimate == Approx(1.25));
  CHECK(r.ci.lo <= 1.25);
  CHECK(r.ci.hi >= 1.25);
  CHECK_THROWS_AS(hodges_lehmann_ratio({1.0, -1.0}, {1.0}), rtx::Error);
  CHECK_THROWS_AS(hodges_lehmann({}, {1.0}), rtx::Error);
}

TEST_CASE("Hodges-Lehmann CI covers the true shift ~95% (simulation)", "[cpu]") {
  rtx::Philox rng(7);
  for (size_t n : {10, 40}) {  // exact branch and normal-approximation branch
    int covered = 0;
    const int trials = 1000;
    for (int t = 0; t < trials; ++t) {
      std::vector<double> x(n), y(n);
      for (auto& v : x) v = rng.next_normal();
      for (auto& v : y) v = 0.7 + rng.next_normal();
      const Shift s = hodges_lehmann(x, y);
      covered += (s.ci.lo <= 0.7 && 0.7 <= s.ci.hi);
    }
    const double cov = static_cast<double>(covered) / trials;
    INFO("n=" << n);
    CHECK(cov > 0.93);
    CHECK(cov < 0.98);
  }
}

TEST_CASE("percentile at q = p/100 matches numpy.percentile at p (linear) and a float64 reference", "[cpu]") {
  // Was rtx::serve::percentile (p in [0, 100]); its callers now use stats::percentile (q in [0, 1]).
  const auto percentile = [](std::vector<double> v, double p) { return rtx::stats::percentile(std::move(v), p / 100); };
  // Known answers from numpy 2.4: np.percentile([15,20,35,40,50], [0,25,50,95,99,100]).
  const std::vector<double> v = {50, 15, 40, 20, 35};
  CHECK(percentile(v, 0) == Approx(15).epsilon(1e-12));
  CHECK(percentile(v, 25) == Approx(20).epsilon(1e-12));
  CHECK(percentile(v, 50) == Approx(35).epsilon(1e-12));
  CHECK(percentile(v, 95) == Approx(48).epsilon(1e-12));
  CHECK(percentile(v, 99) == Approx(49.6).epsilon(1e-12));
  CHECK(percentile(v, 100) == Approx(50).epsilon(1e-12));
  // np.percentile([0.3,-1.25,7.5,2.0,2.0,11.0,4.75], [50,95,99]) = [2.0, 9.95, 10.79]
  const std::vector<double> w = {0.3, -1.25, 7.5, 2.0, 2.0, 11.0, 4.75};
  CHECK(percentile(w, 50) == Approx(2.0).epsilon(1e-12));
  CHECK(percentile(w, 95) == Approx(9.95).epsilon(1e-12));
  CHECK(percentile(w, 99) == Approx(10.79).epsilon(1e-12));
  CHECK(percentile({42.0}, 99) == 42.0);

  // Sizes 1, 7, 127, 1000 against an independent float64 reference (Hyndman-Fan type 7 with
  // 1-based rank h = (n-1) p + 1, computed in long double).
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd(5.0, 3.0);
  for (size_t n : {1u, 2u, 7u, 127u, 1000u}) {
    std::vector<double> x(n);
    for (auto& e : x) e = nd(rng);
    std::vector<double> s = x;
    std::sort(s.begin(), s.end());
    for (double p : {0.0, 1.0, 33.3, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0}) {
      const long double h = static_cast<long double>(n - 1) * p / 100.0L + 1.0L;
      const size_t fl = static_cast<size_t>(std::floor(h));
      const long double lo = s[fl - 1], hi = s[std::min(fl, n - 1)];
      const double ref = static_cast<double>(lo + (h - fl) * (hi - lo));
      INFO("n=" << n << " p=" << p);
      CHECK(percentile(x, p) == Approx(ref).epsilon(1e-12).margin(1e-12));
    }
  }
  CHECK_THROWS_AS(percentile({}, 50), rtx::Error);
  CHECK_THROWS_AS(percentile({1.0}, 100.5), rtx::Error);
  CHECK_THROWS_AS(percentile({1.0}, -1), rtx::Error);
  CHECK_THROWS_AS(percentile({1.0}, std::nan("")), rtx::Error);
}

