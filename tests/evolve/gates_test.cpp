// Gate decisions on generated timing distributions: A/A never passes (>= 20 seeds), a planted
// 20% speedup passes, a planted 20% slowdown fails, borderline detection, memory gate, bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "rtx/core/error.hpp"
#include "rtx/evolve/gates.hpp"

using namespace rtx::evolve;

namespace {
// Per-case lognormal timings (sigma 5%) with a few outliers (noisy machines), scaled by `factor`.
std::vector<std::vector<double>> timings(uint64_t seed, double factor, size_t cases = 3, size_t n = 21) {
  std::mt19937_64 g(seed);
  std::lognormal_distribution<double> ln(0.0, 0.05);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::vector<double>> v(cases);
  for (size_t c = 0; c < cases; ++c) {
    const double base = 1e-4 * static_cast<double>(c + 1) * (c == 2 ? 37.0 : 1.0);  // cases of very different size
    for (size_t i = 0; i < n; ++i) {
      double x = base * factor * ln(g);
      if (u(g) < 0.05) x *= 1.5;  // an occasional interruption
      v[c].push_back(x);
    }
  }
  return v;
}
}  // namespace

TEST_CASE("evolve gates: 40 A/A validations never pass the performance gate", "[cpu]") {
  int passes = 0, borderline = 0;
  for (uint64_t s = 0; s < 40; ++s) {
    const PerfJudgement j = judge_performance(timings(2 * s, 1.0), timings(2 * s + 1, 1.0), default_rule("tuner"));
    passes += j.outcome == PerfOutcome::Pass;
    borderline += j.outcome == PerfOutcome::Borderline;
    CHECK(std::fabs(j.improvement) < 0.05);
    CHECK(j.lo <= j.improvement);
    CHECK(j.improvement <= j.hi);
  }
  CHECK(passes == 0);
  CHECK(borderline == 0);  // a 10% bar is far above 5% noise: A/A is not even borderline
}

TEST_CASE("evolve gates: planted 20% speedup passes, planted 20% slowdown fails", "[cpu]") {
  for (uint64_t s = 0; s < 20; ++s) {
    const PerfJudgement fast = judge_performance(timings(100 + s, 1.0), timings(200 + s, 0.8), default_rule("tuner"));
    CHECK(fast.outcome == PerfOutcome::Pass);
    CHECK(fast.improvement == Approx(0.2).margin(0.04));
    CHECK(fast.lo >= 0.10);
    const PerfJudgement slow = judge_performance(timings(300 + s, 1.0), timings(400 + s, 1.2), default_rule("tuner"));
    CHECK(slow.outcome == PerfOutcome::Fail);
    CHECK(slow.improvement == Approx(-0.2).margin(0.08));
    CHECK(slow.hi < 0.10);
    const GateResult g = slow.gate();
    CHECK(g.gate == "performance");
    CHECK_FALSE(g.passed);
    CHECK(g.value == Approx(slow.lo));
  }
}

TEST_CASE("evolve gates: a gain near the threshold is borderline; no-regression rule", "[cpu]") {
  // 10% improvement with 10% threshold: the CI straddles it.
  const PerfJudgement j = judge_performance(timings(7, 1.0), timings(8, 0.9), default_rule("tuner"));
  CHECK(j.outcome == PerfOutcome::Borderline);
  PerfRule nr = default_rule("memory");
  CHECK_FALSE(nr.require_improvement);
  for (uint64_t s = 0; s < 20; ++s)  // A/A is never judged a regression (at worst re-measured)
    CHECK(judge_performance(timings(500 + 2 * s, 1.0), timings(501 + 2 * s, 1.0), nr).outcome != PerfOutcome::Fail);
  CHECK(judge_performance(timings(9, 1.0, 1, 60), timings(10, 1.0, 1, 60), nr).outcome == PerfOutcome::Pass);
  CHECK(judge_performance(timings(11, 1.0), timings(12, 1.3), nr).outcome == PerfOutcome::Fail);
  CHECK(default_rule("scheduler").threshold == Approx(0.15));
  // Held-out: a 30% slowdown fails, A/A passes.
  CHECK_FALSE(judge_heldout(timings(13, 1.0), timings(14, 1.3)).passed);
  CHECK(judge_heldout(timings(15, 1.0), timings(16, 1.0)).passed);
}

TEST_CASE("evolve gates: memory gate numbers", "[cpu]") {
  GateResult g = judge_memory(100, 100, 10, 10, 0, "peak_reserved_bytes");
  CHECK(g.passed);
  CHECK(g.threshold == 100);
  CHECK_FALSE(judge_memory(100, 101, 10, 10, 0, "b").passed);
  CHECK_FALSE(judge_memory(100, 90, 10, 10.5, 0, "b").passed);
  CHECK(judge_memory(100, 104, 0, 0, 0.05, "peak_rss_bytes").passed);
  CHECK_FALSE(judge_memory(100, 106, 0, 0, 0.05, "peak_rss_bytes").passed);
}

TEST_CASE("evolve gates: bad input is an error; too few samples fail", "[cpu]") {
  CHECK_THROWS_AS(judge_performance({{1.0}}, {}, PerfRule{}), rtx::Error);
  CHECK_THROWS_AS(judge_performance({{}}, {{1.0}}, PerfRule{}), rtx::Error);
  CHECK_THROWS_AS(judge_performance({{0.0, 0.0}}, {{1.0}}, PerfRule{}), rtx::Error);
  const PerfJudgement j = judge_performance({{1, 1.1, 0.9}}, {{0.5, 0.5, 0.5}}, PerfRule{});
  CHECK(j.outcome == PerfOutcome::Fail);
  CHECK(j.reason.find("too few samples") != std::string::npos);
}
