// compare_samples verdicts on generated timings with known distributions (seeded Philox):
// A/A must be "same", a 20% slowdown "slower", short or straddling data "ambiguous".
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/stats/compare.hpp"

using namespace rtx::stats;

// Log-normal timings around `center` seconds with multiplicative noise sigma (e.g. 0.03 = 3%).
static std::vector<double> timings(rtx::Philox& rng, size_t n, double center, double sigma) {
  std::vector<double> v(n);
  for (auto& x : v) x = center * std::exp(sigma * rng.next_normal());
  return v;
}

TEST_CASE("A/A comparisons are judged same", "[cpu]") {
  rtx::Philox rng(11);
  int same = 0, slower = 0, faster = 0;
  const int trials = 200;
  for (int t = 0; t < trials; ++t) {
    const auto a = timings(rng, 30, 1e-3, 0.03), b = timings(rng, 30, 1e-3, 0.03);
    const Comparison c = compare_samples(a, b);
    same += c.verdict == Verdict::Same;
    slower += c.verdict == Verdict::Slower;
    faster += c.verdict == Verdict::Faster;
  }
  CHECK(same >= 190);   // >= 95%
  CHECK(slower <= 5);   // never more than alpha/2-ish
  CHECK(faster <= 5);
}

TEST_CASE("a 20% slowdown is judged slower, a 20% speedup faster", "[cpu]") {
  rtx::Philox rng(12);
  int slower = 0, faster = 0;
  const int trials = 200;
  for (int t = 0; t < trials; ++t) {
    const auto a = timings(rng, 20, 1e-3, 0.03);
    const auto b = timings(rng, 20, 1.2e-3, 0.03);
    const Comparison c = compare_samples(a, b);
    slower += c.verdict == Verdict::Slower;
    if (t == 0) {
      CHECK(c.ratio == Approx(1.2).epsilon(0.03));
      CHECK(c.lo < c.ratio);
      CHECK(c.hi > c.ratio);
      CHECK(c.p < 0.05);
    }
    faster += compare_samples(b, a).verdict == Verdict::Faster;
  }
  CHECK(slower >= 190);
  CHECK(faster >= 190);
}

TEST_CASE("ambiguous: too few samples, or a CI straddling the threshold", "[cpu]") {
  rtx::Philox rng(13);
  const auto a = timings(rng, 4, 1e-3, 0.01), b = timings(rng, 4, 1.5e-3, 0.01);
  Comparison c = compare_samples(a, b);
  CHECK(c.verdict == Verdict::Ambiguous);
  CHECK(c.reason.find("too few") != std::string::npos);
  // A 5% change with 10% noise and 10 samples: the CI must straddle +5%.
  int ambiguous = 0;
  for (int t = 0; t < 50; ++t) {
    const auto x = timings(rng, 10, 1e-3, 0.10), y = timings(rng, 10, 1.05e-3, 0.10);
    ambiguous += compare_samples(x, y).verdict == Verdict::Ambiguous;
  }
  CHECK(ambiguous >= 40);
  // A significant 2% change with a tight CI is within the 5% threshold: same.
  const auto p = timings(rng, 200, 1e-3, 0.005), q = timings(rng, 200, 1.02e-3, 0.005);
  c = compare_samples(p, q);
  CHECK(c.p < 1e-6);
  CHECK(c.verdict == Verdict::Same);
  // ... and with a 1% threshold it is slower.
  CompareOptions o;
  o.threshold = 0.01;
  CHECK(compare_samples(p, q, o).verdict == Verdict::Slower);
}

TEST_CASE("compare rejects bad input", "[cpu]") {
  CHECK_THROWS_AS(compare_samples({1.0, 0.0, 1.0, 1.0, 1.0}, {1, 1, 1, 1, 1}), rtx::Error);
  CompareOptions o;
  o.threshold = 2;
  CHECK_THROWS_AS(compare_samples({1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, o), rtx::Error);
  CHECK(compare_samples({}, {1.0}).verdict == Verdict::Ambiguous);
  CHECK(std::string(verdict_name(Verdict::Slower)) == "slower");
}

TEST_CASE("format_time_ratio: one notation for a change, the time ratio new/base with its CI", "[cpu]") {
  CHECK(format_time_ratio(1.0) == "1.000");
  CHECK(format_time_ratio(0.9344) == "0.934");
  CHECK(format_time_ratio(1.0704) == "1.070");
  CHECK(format_time_ratio(9.9994) == "9.999");
  CHECK(format_time_ratio(344.12) == "344.1");  // a gain "-34312%" as a time ratio
  CHECK(format_time_ratio(12346.0) == "1.235e+04");
  CHECK(format_time_ratio(0.00290) == "0.0029");
  CHECK(format_time_ratio(5.7 / 7995.9) == "0.000713");
  CHECK(format_time_ratio(0.1) == "0.100");
  CHECK(format_time_ratio(0) == "-");
  CHECK(format_time_ratio(-1) == "-");
  CHECK(format_time_ratio(std::nan("")) == "-");
  CHECK(format_time_ratio(INFINITY) == "-");
  CHECK(format_time_ratio_ci(0.934, 0.901, 0.968) == "0.934 [0.901, 0.968]");
  CHECK(format_time_ratio_ci(0.934, 0, 0) == "0.934");  // no CI computed
  CHECK(format_time_ratio_ci(0.934, 0.9, std::nan("")) == "0.934");
  Comparison c;
  c.ratio = 1.2;
  c.lo = 1.15;
  c.hi = 1.25;
  CHECK(format_change(c) == "1.200 [1.150, 1.250]");
  CHECK(std::string(kTimeRatioLabel) == "time new/base");
}

TEST_CASE("common_mode_shift: most comparisons moving one way are the process's", "[cpu]") {
  auto cmp = [](Verdict v, double ratio) {
    Comparison c;
    c.verdict = v;
    c.ratio = ratio;
    return c;
  };
  const Comparison s = cmp(Verdict::Slower, 1.2), f = cmp(Verdict::Faster, 0.8), same = cmp(Verdict::Same, 1.0),
                   amb = cmp(Verdict::Ambiguous, 1.04);
  CommonMode m = common_mode_shift({s, s, s, same, same});
  CHECK(m.detected);
  CHECK(m.direction == Verdict::Slower);
  CHECK(m.shifted == 3);
  CHECK(m.of == 5);
  CHECK(m.median_ratio == Approx(1.2));
  m = common_mode_shift({f, f, f, amb, same});
  CHECK(m.detected);
  CHECK(m.direction == Verdict::Faster);
  CHECK(m.median_ratio == Approx(0.8));
  // Half is not most: 2 of 4, and mixed directions (2 slower, 2 faster of 5) are not one shift.
  CHECK_FALSE(common_mode_shift({s, s, same, amb}).detected);
  m = common_mode_shift({s, s, f, f, same});
  CHECK_FALSE(m.detected);
  CHECK(m.direction == Verdict::Same);
  CHECK(m.shifted == 2);
  // One comparison alone is never a common mode (kMinCommonModeCases); two of two are.
  CHECK_FALSE(common_mode_shift({s}).detected);
  CHECK(common_mode_shift({s, s}).detected);
  CHECK_FALSE(common_mode_shift({s, same}).detected);
  CHECK_FALSE(common_mode_shift({}).detected);
  CHECK(common_mode_shift({}).of == 0);
}

TEST_CASE("normalize_process_speed: covariate adjustment on the other cases' speed, by hand", "[cpu]") {
  // Three cases, two rounds a side. Base round 2 ran at half speed (every case x2); new case C
  // is 10% slower than base in both rounds. Pooled medians M: A 1, B 10, C 110.
  std::vector<RoundSeries> base{{{1, 2}, {1.0, 2.0}}, {{1, 2}, {10.0, 20.0}}, {{1, 2}, {100.0, 200.0}}};
  std::vector<RoundSeries> fresh{{{1, 2}, {1.0, 1.0}}, {{1, 2}, {10.0, 10.0}}, {{1, 2}, {110.0, 110.0}}};
  const ProcessNormalized n = normalize_process_speed(base, fresh);
  REQUIRE(n.base.size() == 3);
  // C: its factor (the median of A's and B's m/M) is 1 and 2 in base, 1 and 1 in new; log m
  // moves 1:1 with it inside base, so theta = 1; the mean log factor over the four rounds is
  // log(2)/4, so each corrected median is m / factor * 2^(1/4).
  CHECK(n.sensitivity[2] == Approx(1.0).epsilon(1e-12));
  const double q = std::pow(2.0, 0.25);
  CHECK(n.base[2].median[0] == Approx(100 * q).epsilon(1e-12));
  CHECK(n.base[2].median[1] == Approx(100 * q).epsilon(1e-12));
  CHECK(n.fresh[2].median[0] == Approx(110 * q).epsilon(1e-12));
  CHECK(n.base[2].round == std::vector<uint64_t>{1, 2});
  // A: factor = mean of B's and C's m/M (two others): base (1 + 100/110)/2, (2 + 200/110)/2;
  // new 1, 1. theta = 1; with two others C's own +10% leaks half into A's factor.
  const double f1 = (1 + 100.0 / 110) / 2, f2 = (2 + 200.0 / 110) / 2;
  const double xbar = (std::log(f1) + std::log(f2)) / 4;
  CHECK(n.sensitivity[0] == Approx(1.0).epsilon(1e-12));
  CHECK(n.base[0].median[0] == Approx(1.0 / f1 * std::exp(xbar)).epsilon(1e-12));
  CHECK(n.base[0].median[1] == Approx(2.0 / f2 * std::exp(xbar)).epsilon(1e-12));
  CHECK(n.fresh[0].median[0] == Approx(std::exp(xbar)).epsilon(1e-12));
  // The whole process: base rounds at 1x and 2x (median of A, B, C ratios), new at 1x.
  REQUIRE(n.base_factor.size() == 2);
  CHECK(n.base_factor[0] == Approx(1.0).epsilon(1e-12));
  CHECK(n.base_factor[1] == Approx(2.0).epsilon(1e-12));
  CHECK(n.fresh_factor == std::vector<double>{1.0, 1.0});

  // A case the process does not move (a single-threaded kernel beside OpenMP ones) gets theta
  // lambda / (Sxx + lambda) ~ 0 and stays (nearly) raw; a case moving twice as much gets ~2.
  std::vector<RoundSeries> b3{{{1, 2}, {1.0, 2.0}}, {{1, 2}, {10.0, 20.0}}, {{1, 2}, {5.0, 5.0}}, {{1, 2}, {3.0, 12.0}}};
  std::vector<RoundSeries> f3{{{1, 2}, {1.0, 1.0}}, {{1, 2}, {10.0, 10.0}}, {{1, 2}, {5.5, 5.5}}, {{1, 2}, {3.0, 3.0}}};
  const ProcessNormalized m = normalize_process_speed(b3, f3);
  CHECK(m.sensitivity[2] < 0.01);
  CHECK(m.base[2].median[0] == Approx(5.0).epsilon(0.005));
  CHECK(m.fresh[2].median[0] / m.base[2].median[0] == Approx(1.1).epsilon(0.005));
  CHECK(m.sensitivity[3] == Approx(2.0).margin(0.02));
  // No process variation inside the sides: nothing to learn theta from, the prior says 1 (a
  // shift between the runs is the process's).
  const ProcessNormalized flat = normalize_process_speed({{{1, 2}, {1.0, 1.0}}, {{1, 2}, {2.0, 2.0}}, {{1, 2}, {3.0, 3.0}}},
                                                         {{{1, 2}, {1.3, 1.3}}, {{1, 2}, {2.6, 2.6}}, {{1, 2}, {3.9, 3.9}}});
  CHECK(flat.sensitivity[0] == Approx(1.0).epsilon(1e-12));
  CHECK(flat.fresh[0].median[0] == Approx(flat.base[0].median[0]).epsilon(1e-12));

  // A round where a case has fewer than kMinNormalizeOthers others is dropped for it.
  base.push_back({{3}, {5.0}});
  fresh.push_back({{1}, {5.0}});
  const ProcessNormalized d = normalize_process_speed(base, fresh);
  CHECK(d.base[3].median.empty());          // alone in base round 3
  CHECK(d.fresh[3].median.size() == 1);     // new round 1 has A, B, C beside it
  CHECK(d.base_factor.size() == 3);         // round 3 still has a factor (its own case)

  // Bad input names what is wrong.
  CHECK_THROWS_AS(normalize_process_speed(base, {}), rtx::Error);
  CHECK_THROWS_AS(normalize_process_speed({{{1, 2}, {1.0}}}, {{{1}, {1.0}}}), rtx::Error);
  CHECK_THROWS_AS(normalize_process_speed({{{1}, {0.0}}}, {{{1}, {1.0}}}), rtx::Error);
  CHECK_THROWS_AS(normalize_process_speed({{{1}, {NAN}}}, {{{1}, {1.0}}}), rtx::Error);
}
