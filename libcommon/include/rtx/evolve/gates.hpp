// rtx::evolve gates: pure decisions on measured numbers (performance on timing samples via the
// Hodges-Lehmann CI, held-out regression, determinism, memory). No processes, no store.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rtx/evolve/proposal.hpp"

namespace rtx::evolve {

/// The performance gate's rule for one domain.
struct PerfRule {
  /// Required improvement (fraction of time saved, 0.10 = 10%) when require_improvement; else
  /// the largest tolerated slowdown (no-regression rule, e.g. the memory planner's 0.05).
  double threshold = 0.10;
  bool require_improvement = true;
  double alpha = 0.05;    ///< Mann-Whitney two-sided level
  double level = 0.95;    ///< Hodges-Lehmann CI level
  /// Sandboxed rounds the samples come from (each round's samples consecutive, the same count
  /// per round in both arms). >= 1: the gate compares the per-round medians (the process is
  /// the unit of replication; pooled samples would overstate the evidence), so a verdict needs
  /// >= 4 rounds at the 95% level (ci_attainable). 0: the samples are independent (generated
  /// distributions, tests).
  int rounds = 0;
};

/// Whether the distribution-free Hodges-Lehmann (Moses) CI and the exact Mann-Whitney test can
/// reach `level` with n1 and n2 observations at all. Both rest on the C(n1+n2, n1) equally likely
/// rank orders; the most extreme order has probability 1/C(n1+n2, n1), and the CI reaches its
/// level only when that is <= (1 - level)/2 (the two-sided p-value's floor is 2/C(n1+n2, n1)).
/// Below it the order-statistic "95%" CI is the whole range of pairwise ratios with a lower,
/// unstated coverage (n1 = n2 = 2: 67%, p >= 1/3; 3 + 3: 90%, p >= 0.1), so no verdict may rest on
/// it. At 95% (C >= 40): 4 + 4 rounds (C = 70) is the fewest with equal arms; 3 + 5 or 2 + 8 also do.
bool ci_attainable(size_t n1, size_t n2, double level = 0.95);

/// The fewest rounds per arm (equal arms) for which ci_attainable holds: 4 at the 95% level.
size_t min_rounds_for_ci(double level = 0.95);

/// Default rule per domain: tuner 10% step time, parallelism 10%, scheduler 15% (time per
/// generated token = 1 / tokens/s), memory no regression beyond 5%.
PerfRule default_rule(const std::string& domain);

/// Outcome of the performance gate before re-measurement.
enum class PerfOutcome { Pass, Fail, Borderline };

/// Performance judgement of one proposal.
struct PerfJudgement {
  PerfOutcome outcome = PerfOutcome::Fail;
  double ratio = 1;            ///< Hodges-Lehmann time ratio candidate/baseline (< 1 faster)
  double improvement = 0;      ///< 1 - ratio
  double lo = 0, hi = 0;       ///< 95% CI of the improvement (1 - ratio CI hi, 1 - ratio CI lo)
  double p = 1;                ///< Mann-Whitney p
  size_t n_base = 0, n_cand = 0;
  /// Too few observations for a CI at the rule's level (ci_attainable false, or fewer than 5
  /// independent samples): lo/hi are then the range of the pairwise ratios, not a CI; the
  /// outcome is Fail, the gate's detail has "ci": null and "too_few_rounds": true, and it is an
  /// undecided failure (detail "undecided"), not evidence against the change.
  bool too_few = false;
  size_t min_rounds = 0;       ///< rounds per arm the CI needs (round medians), else samples
  std::string reason;
  /// As a "performance" gate row: metric improvement_ci_lo, value = lo; with too_few, metric
  /// improvement_estimate and value = the Hodges-Lehmann estimate (there is no CI bound to give).
  GateResult gate() const;
};

/// Judge timing samples (s, or any positive cost) of baseline vs candidate, each a list of cases
/// sampled round-robin: sample i of every case is summed into pass time i (the workload's step
/// time), and the pass times of the two arms are compared. Rules (improvement = 1 - candidate/baseline, CI from stats::compare_samples):
///  too few observations (round medians not ci_attainable at rule.level; independent samples
///   fewer than 5 a side): Fail with too_few, whatever the numbers (no CI, no verdict);
///  require_improvement: Pass when CI lo >= threshold and p < alpha; Borderline when the CI
///   straddles the threshold (lo < threshold <= hi); else Fail.
///  no-regression: Pass when CI lo >= -threshold; Borderline when lo < -threshold <= hi; else Fail.
/// Throws rtx::Error(Input) when the case counts differ, a case has no samples or fewer than
/// case 0, or a pass time is not positive.
PerfJudgement judge_performance(const std::vector<std::vector<double>>& base,
                                const std::vector<std::vector<double>>& cand, const PerfRule& rule);

/// Held-out shapes must not regress: a no-regression judgement with `tolerance` (default 5%) over
/// the per-round medians when `rounds` >= 1 (as PerfRule::rounds; 0: independent samples);
/// Borderline counts as a pass (no evidence of harm). Too few rounds for a CI does not pass (no
/// evidence either way): failed, detail "too_few_rounds" and "undecided" true. Gate "heldout".
GateResult judge_heldout(const std::vector<std::vector<double>>& base, const std::vector<std::vector<double>>& cand,
                         double tolerance = 0.05, int rounds = 0);

/// Output parity of a candidate configuration with the baseline's on the same seeded inputs,
/// per output tensor (so a small-scale output is not hidden by a large one), in float64:
///  rel_diff: ||cand_i - base_i||_2 / ||base_i||_2, the normwise relative difference (Higham,
///   "Accuracy and Stability of Numerical Algorithms", ch. 1), largest over outputs: the gated
///   number. Summing the same products in another order (another K block of a matmul, another
///   split of a reduction) moves it by a few 1e-7 in fp32;
///  max_rel_diff: max_j |cand_i[j] - base_i[j]| / max_j |base_i[j]|, the infinity-norm form,
///   reported: one extreme element of a large output sets it.
/// An output whose baseline is all zero must match exactly (else +inf); a non-finite value in
/// either, unless both carry the same bits, makes both +inf.
struct Parity {
  double rel_diff = 0;      ///< largest per-output L2 relative difference
  double max_rel_diff = 0;  ///< largest per-output infinity-norm relative difference
  size_t worst_output = 0;  ///< the output with the largest rel_diff
  size_t worst_index = 0;   ///< its element where |cand - base| is largest
};
/// Throws rtx::Error(Input) when the output counts or sizes differ (not the same problem).
Parity output_parity(const std::vector<std::vector<float>>& cand, const std::vector<std::vector<float>>& base);

/// The determinism gate's parity bound for a dtype name (as parse_dtype reads it): 1e-3 for
/// bf16/f16 inputs, else 1e-6 (fixed-seed parity with the baseline's outputs). Throws
/// rtx::Error(Input) for an unknown name.
double parity_tolerance(const std::string& dtype);

/// Memory gate: candidate peak <= baseline peak + max(slack * baseline peak, slack_bytes), and
/// fragmentation (percent) <= baseline + 100 * slack. Process peak RSS is noisy (pages, malloc
/// arenas, thread stacks), hence the slacks (both 0 for the allocator's exact counters).
GateResult judge_memory(double base_peak_bytes, double cand_peak_bytes, double base_frag_pct, double cand_frag_pct,
                        double slack, const std::string& metric, double slack_bytes = 0);

/// The memory gate's absolute slack on process peak RSS: 4 MiB. A proposal that only cut the
/// threads from 2 to 1 failed on 26.3 -> 27.9 MB (+6%, beyond 5%): fewer threads do not need
/// more memory, so trials differ by at least 1.6 MB of noise in a 26 MB process.
inline constexpr double kRssSlackBytes = 4.0 * 1024 * 1024;

}  // namespace rtx::evolve
