// Gate decisions on generated timing distributions: A/A never passes (>= 20 seeds), a planted
// 20% speedup passes, a planted 20% slowdown fails, borderline detection, memory gate, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "rtx/core/error.hpp"
#include "rtx/evolve/gates.hpp"
#include "rtx/stats/stats.hpp"

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
  // The absolute RSS slack: the trial that failed on noise (26.3 MB -> 27.9 MB, +6%) passes;
  // 4 MiB more than the baseline is the edge; a large process keeps its 5%.
  const double MB = 1e6, MiB = 1024.0 * 1024;
  GateResult n = judge_memory(26.3 * MB, 27.9 * MB, 0, 0, 0.05, "peak_rss_bytes", kRssSlackBytes);
  CHECK(n.passed);
  CHECK(n.threshold == 26.3 * MB + 4 * MiB);
  CHECK(n.detail["slack_bytes"] == 4 * MiB);
  CHECK(judge_memory(26.3 * MB, 26.3 * MB + 4 * MiB, 0, 0, 0.05, "peak_rss_bytes", kRssSlackBytes).passed);
  CHECK_FALSE(judge_memory(26.3 * MB, 26.3 * MB + 4 * MiB + 1, 0, 0, 0.05, "peak_rss_bytes", kRssSlackBytes).passed);
  CHECK(judge_memory(1000 * MB, 1049 * MB, 0, 0, 0.05, "peak_rss_bytes", kRssSlackBytes).threshold == 1050 * MB);
  CHECK_FALSE(judge_memory(1000 * MB, 1051 * MB, 0, 0, 0.05, "peak_rss_bytes", kRssSlackBytes).passed);
}

TEST_CASE("evolve gates: bad input is an error; too few samples fail", "[cpu]") {
  CHECK_THROWS_AS(judge_performance({{1.0}}, {}, PerfRule{}), rtx::Error);
  CHECK_THROWS_AS(judge_performance({{}}, {{1.0}}, PerfRule{}), rtx::Error);
  CHECK_THROWS_AS(judge_performance({{0.0, 0.0}}, {{1.0}}, PerfRule{}), rtx::Error);
  const PerfJudgement j = judge_performance({{1, 1.1, 0.9}}, {{0.5, 0.5, 0.5}}, PerfRule{});
  CHECK(j.outcome == PerfOutcome::Fail);
  CHECK(j.too_few);
  CHECK(j.reason.find("too few samples") != std::string::npos);
}

TEST_CASE("evolve gates: ci_attainable is exactly when the Moses CI reaches its level", "[cpu]") {
  // Independent reference: the coverage stats::hodges_lehmann achieves (exact U distribution
  // for n <= 20) on tie-free data of those sizes; the gate's rule must agree for every size.
  for (double level : {0.90, 0.95, 0.99})
    for (size_t n1 = 1; n1 <= 12; ++n1)
      for (size_t n2 = 1; n2 <= 12; ++n2) {
        std::vector<double> x, y;
        for (size_t i = 0; i < n1; ++i) x.push_back(1.0 + 0.01 * static_cast<double>(i));
        for (size_t i = 0; i < n2; ++i) y.push_back(2.0 + 0.013 * static_cast<double>(i));
        const double coverage = rtx::stats::hodges_lehmann(x, y, level).ci.coverage;
        INFO("level " << level << " n1 " << n1 << " n2 " << n2 << " coverage " << coverage);
        CHECK(ci_attainable(n1, n2, level) == (coverage >= level));
      }
  // By hand at 95% (C(n1+n2, n1) >= 40): 2+2 (6), 3+3 (20), 2+7 (36), 1+38 (39) no;
  // 4+4 (70), 3+5 (56), 2+8 (45), 1+39 (40: 1/40 is exactly the 2.5% tail) yes.
  CHECK_FALSE(ci_attainable(2, 2));
  CHECK_FALSE(ci_attainable(3, 3));
  CHECK_FALSE(ci_attainable(2, 7));
  CHECK_FALSE(ci_attainable(1, 38));
  CHECK(ci_attainable(4, 4));
  CHECK(ci_attainable(5, 3));
  CHECK(ci_attainable(2, 8));
  CHECK(ci_attainable(1, 39));
  CHECK(ci_attainable(1000, 1000));
  CHECK_FALSE(ci_attainable(0, 10));
  CHECK_FALSE(ci_attainable(4, 4, 1.0));
  CHECK(min_rounds_for_ci(0.95) == 4);
  CHECK(min_rounds_for_ci(0.90) == 3);  // C(6,3) = 20 = 2/0.1
  CHECK(min_rounds_for_ci(0.99) == 5);  // C(8,4) = 70 < 200 <= C(10,5) = 252
}

TEST_CASE("evolve gates: too few rounds give no CI and no pass, however large the effect", "[cpu]") {
  // 2 rounds of 5 samples a case, the candidate twice as fast: the old gate reported a "95% CI"
  // that was the range of the 4 pairwise ratios (67% coverage) beside p = 1/3.
  PerfRule rule = default_rule("tuner");
  rule.rounds = 2;
  const auto base = timings(1, 1.0, 2, 10), fast = timings(2, 0.5, 2, 10);
  const PerfJudgement j = judge_performance(base, fast, rule);
  CHECK(j.outcome == PerfOutcome::Fail);
  CHECK(j.too_few);
  CHECK(j.min_rounds == 4);
  CHECK(j.n_base == 2);
  CHECK(j.n_cand == 2);
  CHECK(j.p == Approx(1.0 / 3));  // 2 / C(4, 2): the floor of the exact two-sided p
  CHECK(j.improvement == Approx(0.5).margin(0.1));
  INFO(j.reason);
  CHECK_THAT(j.reason, Catch::StartsWith("too few rounds for a 95% CI (n=2+2 round medians; needs 4 rounds per arm: "
                                         "--rounds 4 or more): no verdict; estimate +"));
  CHECK(j.reason.find("CI -") == std::string::npos);  // no interval printed as a number
  const GateResult g = j.gate();
  CHECK_FALSE(g.passed);
  CHECK(g.metric == "improvement_estimate");
  CHECK(g.value == Approx(j.improvement));
  CHECK(g.detail["ci"].is_null());
  CHECK(g.detail["too_few_rounds"] == true);
  CHECK(g.detail["undecided"] == true);
  CHECK(g.detail["min_rounds"] == 4);
  // 3 rounds: still too few (C(6,3) = 20 < 40); 4 rounds of the same effect pass.
  rule.rounds = 3;
  CHECK(judge_performance(timings(3, 1.0, 2, 15), timings(4, 0.5, 2, 15), rule).too_few);
  rule.rounds = 4;
  const PerfJudgement four = judge_performance(timings(5, 1.0, 2, 20), timings(6, 0.5, 2, 20), rule);
  CHECK_FALSE(four.too_few);
  CHECK(four.outcome == PerfOutcome::Pass);
  CHECK(four.gate().detail["ci"].is_array());
  CHECK_FALSE(four.gate().detail.contains("too_few_rounds"));
  // One round: its samples share one process, so they are one observation, not 21 (the pooled
  // comparison would have passed this).
  rule.rounds = 1;
  const PerfJudgement one = judge_performance(timings(7, 1.0), timings(8, 0.5), rule);
  CHECK(one.too_few);
  CHECK(one.n_base == 1);
  CHECK(judge_performance(timings(7, 1.0), timings(8, 0.5), default_rule("tuner")).outcome == PerfOutcome::Pass);
  // The no-regression rule (memory) cannot pass on too few rounds either.
  PerfRule nr = default_rule("memory");
  nr.rounds = 2;
  CHECK(judge_performance(timings(9, 1.0, 1, 10), timings(10, 1.0, 1, 10), nr).outcome == PerfOutcome::Fail);
}

TEST_CASE("evolve gates: the held-out gate does not pass on too few rounds", "[cpu]") {
  // A/A over 2 rounds of 10 samples: pooled, the 20 samples would pass; as 2 round medians a
  // side there is no CI, so no pass (and no failure on the evidence: undecided).
  const auto a = timings(11, 1.0, 2, 20), b = timings(12, 1.0, 2, 20);
  const GateResult few = judge_heldout(a, b, 0.05, 2);
  CHECK_FALSE(few.passed);
  CHECK(few.gate == "heldout");
  CHECK(few.detail["too_few_rounds"] == true);
  CHECK(few.detail["undecided"] == true);
  CHECK(few.detail["ci"].is_null());
  CHECK(few.metric == "improvement_estimate");
  CHECK(few.detail["borderline"] == false);
  CHECK(few.threshold == Approx(-0.05));
  CHECK(judge_heldout(a, b).passed);  // pooled (rounds 0), as the gate used to judge it
  // 4 rounds of the same A/A data: passes, with its CI.
  const GateResult enough = judge_heldout(a, b, 0.05, 4);
  CHECK(enough.passed);
  CHECK(enough.detail["ci"].is_array());
  CHECK_FALSE(enough.detail.contains("undecided"));
  // Pooled samples below the 5-sample floor: too few as well.
  const GateResult tiny = judge_heldout({{1.0, 1.01, 0.99}}, {{1.0, 1.02, 0.98}});
  CHECK_FALSE(tiny.passed);
  CHECK(tiny.detail["too_few_rounds"] == true);
}

TEST_CASE("evolve gates: output parity with the baseline, per output, L2 and infinity norms", "[cpu]") {
  // Known answers: base (3, 4) has ||b||_2 = 5 and max|b| = 4; a difference of 5e-6 in one
  // element gives L2 1e-6 and infinity-norm 1.25e-6.
  Parity p = output_parity({{3.0f, 4.0f + 5e-6f}}, {{3.0f, 4.0f}});
  const double d = static_cast<double>(4.0f + 5e-6f) - 4.0;  // the representable difference
  CHECK(p.rel_diff == Approx(d / 5).epsilon(1e-12));
  CHECK(p.max_rel_diff == Approx(d / 4).epsilon(1e-12));
  CHECK(p.worst_output == 0);
  CHECK(p.worst_index == 1);
  // Per output: a small-scale output is not hidden by a large one.
  p = output_parity({{1000.0f, 2000.0f}, {1e-3f, 2e-3f}}, {{1000.0f, 2000.0f}, {1e-3f, 1e-3f}});
  CHECK(p.rel_diff == Approx(std::sqrt(static_cast<double>(1e-3f) * 1e-3f / (2.0 * 1e-3f * 1e-3f))).epsilon(1e-6));
  CHECK(p.worst_output == 1);
  CHECK(p.worst_index == 1);
  // Identical outputs, an odd length and a single element.
  std::vector<float> v(127);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 63.5f;
  p = output_parity({v, {7.0f}}, {v, {7.0f}});
  CHECK(p.rel_diff == 0.0);
  CHECK(p.max_rel_diff == 0.0);
  // An all-zero baseline must match exactly; non-finite values only with the same bits.
  CHECK(output_parity({{0.0f, 0.0f}}, {{0.0f, 0.0f}}).rel_diff == 0.0);
  CHECK(std::isinf(output_parity({{0.0f, 1e-30f}}, {{0.0f, 0.0f}}).rel_diff));
  const float nan = std::nanf("");
  CHECK(output_parity({{1.0f, nan}}, {{1.0f, nan}}).rel_diff == 0.0);
  CHECK(std::isinf(output_parity({{1.0f, nan}}, {{1.0f, 2.0f}}).rel_diff));
  CHECK(std::isinf(output_parity({{1.0f, INFINITY}}, {{1.0f, -INFINITY}}).rel_diff));
  // Not the same problem: counts or sizes differ.
  CHECK_THROWS_AS(output_parity({{1.0f}}, {{1.0f}, {2.0f}}), rtx::Error);
  CHECK_THROWS_AS(output_parity({{1.0f, 2.0f}}, {{1.0f}}), rtx::Error);
  // The bounds: fp32 1e-6, half-precision inputs 1e-3; an unknown dtype is an error.
  CHECK(parity_tolerance("f32") == 1e-6);
  CHECK(parity_tolerance("bf16") == 1e-3);
  CHECK(parity_tolerance("float16") == 1e-3);
  CHECK_THROWS_AS(parity_tolerance("f8"), rtx::Error);
}

// ---- host contention per round (rtx-bench's paired rule on the ABBA pairs) -----------------------

namespace {
using rtx::measure::HostEvidence;
using rtx::measure::HostSample;

/// One trial window of 1 s judged from injected readings: quiet (thread ran 99%, PSI 1%) or busy
/// (PSI cpu stall 50% of the window, thread ran 60%).
HostEvidence window(bool busy) {
  HostSample a, b;
  a.wall_s = 100;
  b.wall_s = 101;
  a.psi_valid = b.psi_valid = true;
  a.psi_some_total_us = 5'000'000;
  b.psi_some_total_us = a.psi_some_total_us + (busy ? 500'000 : 10'000);
  b.thread_cpu_s = busy ? 0.6 : 0.99;
  b.process_cpu_s = b.thread_cpu_s;
  b.involuntary_switches = busy ? 40 : 3;
  return rtx::measure::contention_evidence(a, b, 1, rtx::kernels::Backend::CPU);
}

std::vector<HostEvidence> rounds_host(size_t n, std::vector<size_t> busy_rounds /* 1-based */) {
  std::vector<HostEvidence> v;
  for (size_t k = 1; k <= n; ++k) v.push_back(window(std::find(busy_rounds.begin(), busy_rounds.end(), k) != busy_rounds.end()));
  return v;
}
}  // namespace

TEST_CASE("evolve gates: a busy round on one arm leaves round k out of both arms", "[cpu]") {
  REQUIRE(window(true).contended);
  REQUIRE_FALSE(window(false).contended);
  REQUIRE(window(false).judged_on == "case");
  // 5 rounds of 10 samples per case; the candidate is 20% faster. Baseline round 2 was busy and
  // its samples 3x slow (what a busy host does to them): left out, and the candidate's round 2
  // (quiet on its own) with it, so both arms are judged on rounds 1, 3, 4, 5.
  PerfRule rule = default_rule("tuner");
  rule.rounds = 5;
  auto base = timings(21, 1.0, 2, 50), cand = timings(22, 0.8, 2, 50);
  for (auto& c : base)
    for (size_t i = 10; i < 20; ++i) c[i] *= 3;
  const BusyRounds b = pair_busy_rounds(rounds_host(5, {2}), rounds_host(5, {}));
  CHECK(b.rounds == 5);
  CHECK(b.busy == 1);
  CHECK(b.quiet == 4);
  CHECK_FALSE(b.balanced);
  REQUIRE(b.left_out == std::vector<size_t>{2});
  CHECK_THAT(b.left_out_reason[0], Catch::StartsWith("baseline round 2 busy: ") && Catch::Contains("PSI cpu stall 50%"));
  const PerfJudgement j = judge_performance(base, cand, rule, b);
  CHECK(j.n_base == 4);
  CHECK(j.n_cand == 4);
  CHECK_FALSE(j.too_few);
  CHECK(j.outcome == PerfOutcome::Pass);
  CHECK(j.improvement == Approx(0.2).margin(0.05));  // not inflated by the busy round's 3x samples
  CHECK_THAT(j.reason, Catch::Contains("[busy round 2 left out of both arms: baseline round 2 busy: "));
  const GateResult g = j.gate();
  CHECK(g.passed);
  CHECK(g.detail["host"]["rounds_left_out"].size() == 1);
  CHECK(g.detail["host"]["rounds_left_out"][0]["round"] == 2);
  CHECK(g.detail["host"]["busy_rounds"] == 1);
  CHECK(g.detail["host"]["quiet_rounds"] == 4);
  CHECK_FALSE(g.detail.contains("busy_host_balanced"));
  // without_rounds removes the same index from every case.
  const auto kept = without_rounds({{1, 2, 3, 4, 5, 6}}, 3, {2});
  CHECK(kept == std::vector<std::vector<double>>{{1, 2, 5, 6}});
  // The same round busy on both arms: one pair, both reasons named.
  const BusyRounds both = pair_busy_rounds(rounds_host(5, {3}), rounds_host(5, {3}));
  REQUIRE(both.left_out == std::vector<size_t>{3});
  CHECK_THAT(both.left_out_reason[0], Catch::Contains("baseline round 3 busy") && Catch::Contains("; candidate round 3 busy"));
  // No busy round: nothing is left out, and the host record says so.
  const PerfJudgement q = judge_performance(timings(21, 1.0, 2, 50), cand, rule, pair_busy_rounds(rounds_host(5, {}), rounds_host(5, {})));
  CHECK(q.n_base == 5);
  CHECK(q.gate().detail["host"]["rounds_left_out"].empty());
}

TEST_CASE("evolve gates: busy rounds that dominate are judged on all rounds (ABBA-balanced), said in the reason", "[cpu]") {
  // 4 rounds: baseline round 1 and candidate round 4 busy -> 2 quiet pairs of 4 (need 3), so none
  // can be left out; as rtx-bench compare of one --baseline-exe pair, every round is judged.
  PerfRule rule = default_rule("tuner");
  rule.rounds = 4;
  const auto base = timings(31, 1.0, 2, 40), fast = timings(32, 0.5, 2, 40);  // a clear 50% gain
  const BusyRounds b = pair_busy_rounds(rounds_host(4, {1}), rounds_host(4, {4}));
  CHECK(b.balanced);
  CHECK(b.left_out.empty());
  CHECK(b.busy == 2);
  CHECK(b.quiet == 2);
  INFO(b.reason);
  CHECK_THAT(b.reason, Catch::StartsWith("baseline round 1 busy: ") &&
                           Catch::Contains("2 of 4 round pairs busy, 2 judged quiet on both arms: too few to leave the busy "
                                           "ones out (need 3 and at least half); judged on all rounds, which the interleaved "
                                           "ABBA order balances"));
  const PerfJudgement j = judge_performance(base, fast, rule, b);
  CHECK(j.outcome == PerfOutcome::Pass);  // the same verdict as without host evidence
  CHECK(j.outcome == judge_performance(base, fast, rule).outcome);
  CHECK(j.n_base == 4);  // every round stays in
  CHECK_THAT(j.reason, Catch::EndsWith("[busy host: " + b.reason + "]"));
  const GateResult g = j.gate();
  CHECK(g.passed);
  CHECK_FALSE(g.detail.contains("undecided"));
  CHECK(g.detail["busy_host_balanced"] == true);
  CHECK(g.detail["host"]["balanced"] == true);
  // Held out: judged on all rounds too (equal timings: no regression).
  const GateResult h = judge_heldout(timings(33, 1.0, 2, 40), timings(34, 1.0, 2, 40), 0.05, 4, b);
  CHECK(h.detail["busy_host_balanced"] == true);
  CHECK_FALSE(h.detail.value("undecided", false));
  // Rounds with no evidence (a child of an earlier build) are neither busy nor quiet.
  const BusyRounds none = pair_busy_rounds(std::vector<HostEvidence>(4), std::vector<HostEvidence>(4));
  CHECK(none.busy == 0);
  CHECK(none.quiet == 0);
  CHECK_FALSE(none.balanced);
  // 4 rounds with one busy: 3 quiet pairs suffice, round left out, 3 + 3 round medians are too
  // few for a 95% CI: undecided by too_few_rounds, and the host record says which round went.
  const PerfJudgement three = judge_performance(base, fast, rule, pair_busy_rounds(rounds_host(4, {}), rounds_host(4, {2})));
  CHECK(three.too_few);
  CHECK(three.n_base == 3);
  CHECK(three.gate().detail["undecided"] == true);
  CHECK(three.gate().detail["host"]["rounds_left_out"][0]["round"] == 2);
  CHECK_THAT(three.gate().detail["host"]["rounds_left_out"][0]["reason"].get<std::string>(), Catch::StartsWith("candidate round 2 busy: "));
  // Bad input: arms of different round counts; host over another number of rounds than the rule.
  CHECK_THROWS_AS(pair_busy_rounds(rounds_host(4, {}), rounds_host(3, {})), rtx::Error);
  rule.rounds = 5;
  CHECK_THROWS_AS(judge_performance(timings(1, 1.0, 2, 40), timings(2, 1.0, 2, 40), rule, b), rtx::Error);
  CHECK_THROWS_AS(without_rounds({{1, 2, 3}}, 2, {1}), rtx::Error);
  CHECK_THROWS_AS(without_rounds({{1, 2, 3, 4}}, 2, {3}), rtx::Error);
}
