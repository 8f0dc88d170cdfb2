// Tests of rtx::stats E-divisive change points: golden values from MongoDB's
// signal-processing-algorithms 2.1.6 (tests/stats/golden/), a brute-force float64 q-hat, edge cases.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/stats/changepoint.hpp"
#include "test_util.hpp"

using rtx::stats::EnergyForm;

namespace {

/// q-hat(tau) straight from Matteson & James (2014) eqs. 3-5 (alpha = 1), double sums over pairs.
double brute_qhat(const std::vector<double>& x, size_t a, size_t tau, size_t b, EnergyForm form) {
  const double m = static_cast<double>(tau - a), k = static_cast<double>(b - tau);
  if (tau == a || tau == b) return 0.0;
  double cross = 0, wx = 0, wy = 0;
  for (size_t i = a; i < tau; ++i)
    for (size_t j = tau; j < b; ++j) cross += std::fabs(x[i] - x[j]);
  for (size_t i = a; i < tau; ++i)
    for (size_t j = a; j < tau; ++j) wx += std::fabs(x[i] - x[j]);  // ordered pairs: 2 sum_{i<j}
  for (size_t i = tau; i < b; ++i)
    for (size_t j = tau; j < b; ++j) wy += std::fabs(x[i] - x[j]);
  double e = 2.0 * cross / (m * k);
  if (form == EnergyForm::U) {
    if (m >= 2) e -= wx / (m * (m - 1));
    if (k >= 2) e -= wy / (k * (k - 1));
  } else {
    e -= wx / (m * m) + wy / (k * k);
  }
  return m * k / (m + k) * e;
}

std::vector<double> noisy(size_t n, double level, double sigma, uint64_t seed) {
  rtx::Philox rng(seed);
  std::vector<double> x(n);
  for (auto& v : x) v = level + sigma * static_cast<double>(rng.next_normal());
  return x;
}

nlohmann::json load_golden() {
  const std::string path = rtx::test::source_dir() + "/tests/stats/golden/changepoint_golden.json";
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::vector<size_t> indices(const std::vector<rtx::stats::ChangePoint>& cps) {
  std::vector<size_t> out;
  for (const auto& c : cps) out.push_back(c.index);
  return out;
}

}  // namespace

TEST_CASE("qhat_values matches a brute-force float64 reference (both forms, odd sizes)", "[cpu]") {
  for (size_t n : {1, 2, 3, 7, 12, 31}) {
    const auto x = noisy(n, 5.0, 1.0, 100 + n);
    for (EnergyForm form : {EnergyForm::U, EnergyForm::V}) {
      const auto q = rtx::stats::qhat_values(x, 0, n, form);
      REQUIRE(q.size() == n);
      for (size_t tau = 0; tau < n; ++tau) {
        INFO("n=" << n << " tau=" << tau << " form=" << (form == EnergyForm::U ? "U" : "V"));
        CHECK(q[tau] == Approx(brute_qhat(x, 0, tau, n, form)).margin(1e-12).epsilon(1e-12));
      }
      if (n >= 7) {  // a sub-window is scanned on its own
        const auto qw = rtx::stats::qhat_values(x, 2, n - 1, form);
        for (size_t tau = 2; tau < n - 1; ++tau)
          CHECK(qw[tau - 2] == Approx(brute_qhat(x, 2, tau, n - 1, form)).margin(1e-12).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("q-hat, candidates and change points match signal-processing-algorithms 2.1.6", "[cpu]") {
  const auto g = load_golden();
  REQUIRE(g.at("schema") == "rtx.golden.changepoint.v1");
  REQUIRE(g.at("cases").size() >= 7);
  for (const auto& c : g.at("cases")) {
    const std::string name = c.at("name");
    INFO("golden series " << name);
    const auto x = c.at("series").get<std::vector<double>>();
    REQUIRE(x.size() == c.at("n").get<size_t>());
    // 1. q-hat of every split of the whole series (the package's t-statistic, V form).
    const auto q = rtx::stats::qhat_values(x, 0, x.size(), EnergyForm::V);
    const auto gq = c.at("qhat_full").get<std::vector<double>>();
    REQUIRE(q.size() == gq.size());
    double max_rel = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      // Both scans update running sums (rtx in a different order): ~1e-10 relative at n = 200.
      CHECK(q[i] == Approx(gq[i]).epsilon(1e-9).margin(1e-12));
      if (gq[i] != 0) max_rel = std::max(max_rel, std::fabs(q[i] - gq[i]) / std::fabs(gq[i]));
    }
    INFO("max relative q-hat difference " << max_rel);
    // 2. the first candidate (argmax, first on ties).
    size_t am = 0;
    for (size_t i = 1; i < q.size(); ++i)
      if (q[i] > q[am]) am = i;
    CHECK(am == c.at("argmax_full").get<size_t>());
    // 3. with the package's final change points as the partition: each window's candidate.
    for (const auto& w : c.at("final_windows")) {
      const size_t a = w.at("start"), b = w.at("end");
      const auto qw = rtx::stats::qhat_values(x, a, b, EnergyForm::V);
      size_t wa = 0;
      for (size_t i = 1; i < qw.size(); ++i)
        if (qw[i] > qw[wa]) wa = i;
      CHECK(a + wa == w.at("argmax").get<size_t>());
      CHECK(qw[wa] == Approx(w.at("q").get<double>()).epsilon(1e-9).margin(1e-12));
    }
    // 4. change points where the steps are unambiguous: the package found every planted step,
    //    and rtx (V form, min_size 1, same pvalue and permutation count, its own RNG) finds
    //    exactly the package's change points (two_steps_noise_n200: both also flag index 2,
    //    where the first two points lie 2 sigma low).
    const auto steps = c.at("steps").get<std::vector<size_t>>();
    const auto gcp = c.at("change_points").get<std::vector<size_t>>();
    rtx::stats::EDivisiveOptions o;
    o.form = EnergyForm::V;
    o.pvalue = g.at("pvalue");
    o.permutations = g.at("permutations");
    o.min_size = 1;
    o.seed = 7;
    const auto mine = indices(rtx::stats::e_divisive(x, o));
    if (c.at("unambiguous").get<bool>()) {
      for (size_t s : steps) CHECK(std::find(gcp.begin(), gcp.end(), s) != gcp.end());
      CHECK(mine == gcp);
      // The paper's U form with a minimum segment of 3 finds every planted step too.
      o.form = EnergyForm::U;
      o.min_size = 3;
      const auto u = indices(rtx::stats::e_divisive(x, o));
      for (size_t s : steps) CHECK(std::find(u.begin(), u.end(), s) != u.end());
    }
  }
}

TEST_CASE("e_divisive reports segment statistics and is reproducible", "[cpu]") {
  std::vector<double> x(40, 1.0);
  for (size_t i = 25; i < 40; ++i) x[i] = 1.25;
  x[3] = 1.1;  // mean before = (24 + 1.1) / 25
  rtx::stats::EDivisiveOptions o;
  o.min_size = 3;
  o.permutations = 199;
  const auto cps = rtx::stats::e_divisive(x, o);
  REQUIRE(cps.size() == 1);
  const auto& c = cps[0];
  CHECK(c.index == 25);
  CHECK(c.mean_before == Approx(25.1 / 25.0).epsilon(1e-14));
  CHECK(c.mean_after == Approx(1.25).epsilon(1e-14));
  CHECK(c.median_before == 1.0);
  CHECK(c.median_after == 1.25);
  CHECK(c.relative_change == Approx((1.25 - 25.1 / 25.0) / (25.1 / 25.0)).epsilon(1e-12));
  CHECK(c.q == Approx(brute_qhat(x, 0, 25, 40, EnergyForm::U)).epsilon(1e-12));
  CHECK(c.pvalue == Approx(1.0 / 200.0));
  CHECK(c.window_start == 0);
  CHECK(c.window_end == 40);
  // Same seed, same answer; the p-value floor is 1/(R+1).
  const auto again = rtx::stats::e_divisive(x, o);
  REQUIRE(again.size() == 1);
  CHECK(again[0].pvalue == c.pvalue);
}

TEST_CASE("e_divisive finds no change point in flat noise and respects min_size", "[cpu]") {
  rtx::stats::EDivisiveOptions o;
  o.min_size = 3;
  o.permutations = 199;
  size_t false_alarms = 0;
  for (uint64_t s = 0; s < 10; ++s) {
    o.seed = s;
    false_alarms += rtx::stats::e_divisive(noisy(60, 1.0, 0.05, 1000 + s), o).empty() ? 0 : 1;
  }
  CHECK(false_alarms <= 2);  // 10 series at pvalue 0.05: P(>2 alarms) < 0.012 if calibrated
  // A step right at the edge is not reported inside min_size.
  std::vector<double> edge(30, 1.0);
  edge[29] = 50.0;
  edge[28] = 50.0;
  for (const auto& c : rtx::stats::e_divisive(edge, o)) {
    CHECK(c.index >= 3);
    CHECK(c.index <= 27);
  }
}

TEST_CASE("e_divisive edge cases and bad input", "[cpu]") {
  rtx::stats::EDivisiveOptions o;
  CHECK(rtx::stats::e_divisive({}, o).empty());
  CHECK(rtx::stats::e_divisive({1.0}, o).empty());
  CHECK(rtx::stats::e_divisive(std::vector<double>(50, 3.0), o).empty());  // constant: q-hat 0
  std::vector<double> step(20, 1.0);
  for (size_t i = 10; i < 20; ++i) step[i] = 2.0;
  CHECK(indices(rtx::stats::e_divisive(step, o)) == std::vector<size_t>{10});
  auto with_nan = step;
  with_nan[4] = std::numeric_limits<double>::quiet_NaN();
  CHECK(rtx::stats::e_divisive(with_nan, o).empty());
  auto with_inf = step;
  with_inf[4] = std::numeric_limits<double>::infinity();
  CHECK(rtx::stats::e_divisive(with_inf, o).empty());
  o.min_size = 11;  // n = 20 < 2 * 11: nothing to split, not an error
  CHECK(rtx::stats::e_divisive(step, o).empty());
  o.min_size = 0;
  CHECK_THROWS_AS(rtx::stats::e_divisive(step, o), rtx::Error);
  o.min_size = 1;
  o.pvalue = 0;
  CHECK_THROWS_AS(rtx::stats::e_divisive(step, o), rtx::Error);
  o.pvalue = 1.5;
  CHECK_THROWS_AS(rtx::stats::e_divisive(step, o), rtx::Error);
  o.pvalue = 0.05;
  o.permutations = 0;
  CHECK_THROWS_AS(rtx::stats::e_divisive(step, o), rtx::Error);
  CHECK_THROWS_AS(rtx::stats::qhat_values(step, 5, 3), rtx::Error);
  CHECK_THROWS_AS(rtx::stats::qhat_values(step, 0, 21), rtx::Error);
  CHECK(rtx::stats::qhat_values(step, 4, 4).empty());
}
