// The accountants vs their references: Opacus's RDPAccountant (its own test value and a 50-point
// grid) and dp-accounting's PLDAccountant (same grid), both from tests/privacy/data/dp_golden.json
// written by make_dp_golden.py; the inverse vs Opacus's get_noise_multiplier; closed forms and bad input.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "rtx/core/error.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/privacy/accountant.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::privacy;

namespace {
nlohmann::json golden() {
  const std::string path = rtx::test::source_dir() + "/tests/privacy/data/dp_golden.json";
  return io::parse_json(io::read_text_file(path), path);
}
double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }
}  // namespace

TEST_CASE("rdp: Opacus's accountants_test value", "[cpu]") {
  // opacus/tests/accountants_test.py test_rdp_accountant: sigma 1.5, q 0.04, int(90/0.04) steps.
  const EpsilonResult r = rdp_epsilon({{1.5, 0.04, 2250}}, 1e-5);
  INFO("eps " << r.epsilon << " at alpha " << r.order);
  CHECK(rel(r.epsilon, 7.32911117143) < 1e-10);
  // Split history composes additively: 1000 + 1250 steps give the same.
  CHECK(rel(rdp_epsilon({{1.5, 0.04, 1000}, {1.5, 0.04, 1250}}, 1e-5).epsilon, r.epsilon) < 1e-12);
}

// PLD within dp-accounting's own discretisation (both pessimistic connect-the-dots at h = 1e-4 on
// the same grid; they differ in the loss range kept and in tail truncation during composition):
// |eps - golden| <= 1e-4 relative and <= 4 h absolute (measured worst over the 50 points: 2.7e-5
// relative, 3.8e-4 absolute at sigma 1.55, q 0.21, 2,679 steps, delta 1e-8; median ~1e-9).
void check_pld_point(const nlohmann::json& p) {
  const SgmStep s{p.at("sigma").get<double>(), p.at("q").get<double>(), p.at("steps").get<int64_t>()};
  const double delta = p.at("delta").get<double>();
  const double e = pld_epsilon({s}, delta).epsilon, g = p.at("eps_pld").get<double>();
  INFO("pld sigma " << s.sigma << " q " << s.q << " steps " << s.steps << " delta " << delta << ": " << e << " vs " << g);
  CHECK(std::abs(e - g) <= 4e-4);
  CHECK(std::abs(e - g) <= 1e-4 * g);
  // Never far below the reference: both are upper bounds of the same true epsilon.
  CHECK(e >= g - 1e-6 * std::max(1.0, g));
}

TEST_CASE("rdp: the 50-point grid vs Opacus (<= 1e-6 relative, same optimal order)", "[cpu]") {
  const auto g = golden();
  REQUIRE(g.at("grid").size() == 50);
  double worst = 0;
  for (const auto& p : g.at("grid")) {
    const SgmStep s{p.at("sigma").get<double>(), p.at("q").get<double>(), p.at("steps").get<int64_t>()};
    const double delta = p.at("delta").get<double>();
    const EpsilonResult r = rdp_epsilon({s}, delta);
    const double ge = p.at("eps_rdp").get<double>();
    INFO("sigma " << s.sigma << " q " << s.q << " steps " << s.steps << " delta " << delta << ": " << r.epsilon << " vs " << ge);
    CHECK(rel(r.epsilon, ge) <= 1e-6);
    CHECK(r.order == p.at("rdp_order").get<double>());
    worst = std::max(worst, rel(r.epsilon, ge));
  }
  WARN("rdp worst relative error over the grid: " << worst);  // 1.3e-12 when written
}

TEST_CASE("pld: grid points with sigma >= 2 vs dp-accounting", "[cpu]") {
  int n = 0;
  const auto g = golden();
  for (const auto& p : g.at("grid"))
    if (p.at("sigma").get<double>() >= 2.0) {
      check_pld_point(p);
      ++n;
    }
  CHECK(n >= 15);
}

// The whole grid takes ~1-2 min (small sigma means a wide loss range): run by hand with
//   ./build/tests/privacy_accountant_test "[pld_full]"
TEST_CASE("pld: the full 50-point grid vs dp-accounting", "[.][slow][pld_full]") {
  const auto g = golden();
  for (const auto& p : g.at("grid")) check_pld_point(p);
}

TEST_CASE("pld: q = 1 is the Gaussian mechanism (Balle & Wang 2018, Theorem 8)", "[cpu]") {
  // delta(eps) = Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s) for sensitivity 1; k steps of
  // sigma equal one step of sigma / sqrt(k). Independent of the connect-the-dots code.
  const auto Phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  for (const auto& [sigma, k] : std::vector<std::pair<double, int64_t>>{{1.0, 1}, {2.0, 1}, {4.0, 16}, {1.5, 3}}) {
    const double s = sigma / std::sqrt(static_cast<double>(k));
    for (double eps : {0.1, 0.5, 1.0, 2.0}) {
      const double exact = Phi(0.5 / s - eps * s) - std::exp(eps) * Phi(-0.5 / s - eps * s);
      const Pld p = self_compose(pld_sampled_gaussian(1.0, sigma, true), k);
      const double d = p.delta_for_epsilon(eps);
      INFO("sigma " << sigma << " k " << k << " eps " << eps << ": " << d << " vs " << exact);
      CHECK(d >= exact - 1e-12);              // pessimistic
      CHECK(d <= exact + 1e-4 * exact + 1e-9);  // and tight at h = 1e-4
      // eps for that delta comes back within a grid step or two.
      if (exact > 1e-9) CHECK(std::abs(p.epsilon_for_delta(exact) - eps) <= 3e-4);
    }
  }
}

TEST_CASE("rdp: closed forms and edge cases", "[cpu]") {
  // q = 1: alpha / (2 sigma^2) (Mironov 2017, Prop. 7); q = 0: no loss; sigma = 0: infinite.
  CHECK(rdp_sampled_gaussian(1.0, 2.0, 3.5) == Approx(3.5 / 8.0).epsilon(1e-15));
  CHECK(rdp_sampled_gaussian(0.0, 1.0, 5) == 0.0);
  CHECK(std::isinf(rdp_sampled_gaussian(0.5, 0.0, 5)));
  // Integer order 2 by hand: A_2 = (1-q)^2 + 2q(1-q) + q^2 e^{1/sigma^2}.
  const double q = 0.1, s = 1.3;
  const double a2 = (1 - q) * (1 - q) + 2 * q * (1 - q) + q * q * std::exp(1 / (s * s));
  CHECK(rel(rdp_sampled_gaussian(q, s, 2.0), std::log(a2)) < 1e-13);
  // Fractional orders sit between their integer neighbours (RDP is non-decreasing in alpha).
  CHECK(rdp_sampled_gaussian(q, s, 2.0) <= rdp_sampled_gaussian(q, s, 2.5));
  CHECK(rdp_sampled_gaussian(q, s, 2.5) <= rdp_sampled_gaussian(q, s, 3.0));
  // No steps: nothing spent.
  CHECK(rdp_epsilon({}, 1e-5).epsilon == 0.0);
  CHECK(pld_epsilon({{1.0, 0.01, 0}}, 1e-5).epsilon == 0.0);
}

TEST_CASE("noise multiplier for a target epsilon vs Opacus's get_noise_multiplier", "[cpu]") {
  // Opacus's own test: eps 8, delta 1e-5, q 0.04, 2000 steps -> 1.3562 (places=4).
  CHECK(std::abs(noise_multiplier_for_epsilon(8.0, 1e-5, 0.04, 2000) - 1.3562) < 5e-5);
  const auto g = golden();
  for (const auto& p : g.at("inverse")) {
    const double target = p.at("target_epsilon").get<double>(), q = p.at("q").get<double>();
    const int64_t steps = p.at("steps").get<int64_t>();
    const double delta = p.at("delta").get<double>();
    const double sigma = noise_multiplier_for_epsilon(target, delta, q, steps);
    INFO("target " << target << " q " << q << " steps " << steps << ": sigma " << sigma);
    CHECK(rel(sigma, p.at("sigma_rdp").get<double>()) < 1e-12);  // same bisection, same numbers
    const double eps = rdp_epsilon({{sigma, q, steps}}, delta).epsilon;
    CHECK(eps <= target);
    CHECK(target - eps <= 0.01);  // the stated tolerance
  }
  // A tighter tolerance lands closer.
  const double sigma = noise_multiplier_for_epsilon(3.0, 1e-5, 0.01, 1000, Accountant::Rdp, 1e-6);
  const double eps = rdp_epsilon({{sigma, 0.01, 1000}}, 1e-5).epsilon;
  CHECK(eps <= 3.0);
  CHECK(3.0 - eps <= 1e-6);
}

TEST_CASE("accountants: bad input names what is wrong", "[cpu]") {
  CHECK_THROWS_WITH(rdp_sampled_gaussian(1.5, 1.0, 2), Catch::Contains("outside [0, 1]"));
  CHECK_THROWS_WITH(rdp_sampled_gaussian(0.1, -1.0, 2), Catch::Contains("sigma"));
  CHECK_THROWS_WITH(rdp_sampled_gaussian(0.1, 1.0, 1.0), Catch::Contains("must be > 1"));
  CHECK_THROWS_WITH(rdp_epsilon({{1.0, 0.1, 10}}, 0.0), Catch::Contains("delta"));
  CHECK_THROWS_WITH(pld_epsilon({{1.0, 0.1, 10}}, 1.5), Catch::Contains("delta"));
  CHECK_THROWS_WITH(rdp_to_epsilon({2.0, 3.0}, {0.1}, 1e-5), Catch::Contains("same"));
  CHECK_THROWS_WITH(parse_accountant("gdp"), Catch::Contains("unknown accountant"));
  CHECK_THROWS_WITH(noise_multiplier_for_epsilon(1e-6, 1e-5, 1.0, 100000), Catch::Contains("too small"));
  CHECK_THROWS_WITH(noise_multiplier_for_epsilon(3.0, 1e-5, 0.01, 0), Catch::Contains("steps"));
  CHECK_THROWS_AS(rdp_epsilon({{1.0, 0.1, -1}}, 1e-5), rtx::Error);
}
