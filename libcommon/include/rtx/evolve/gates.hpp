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
  /// per round in both arms). >= 2: the gate compares the per-round medians (the process is
  /// the unit of replication; pooled samples would overstate the evidence), so an improvement
  /// needs >= 4 rounds. 0: the samples are independent (generated distributions, tests).
  int rounds = 0;
};

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
  std::string reason;
  GateResult gate() const;     ///< as a "performance" gate row (value = lo, threshold)
};

/// Judge timing samples (s, or any positive cost) of baseline vs candidate, each a list of cases
/// sampled round-robin: sample i of every case is summed into pass time i (the workload's step
/// time), and the pass times of the two arms are compared. Rules (improvement = 1 - candidate/baseline, CI from stats::compare_samples):
///  require_improvement: Pass when CI lo >= threshold and p < alpha; Borderline when the CI
///   straddles the threshold (lo < threshold <= hi); else Fail.
///  no-regression: Pass when CI lo >= -threshold; Borderline when lo < -threshold <= hi; else Fail.
/// Throws rtx::Error(Input) when the case counts differ, a case has no samples or fewer than
/// case 0, or a pass time is not positive.
PerfJudgement judge_performance(const std::vector<std::vector<double>>& base,
                                const std::vector<std::vector<double>>& cand, const PerfRule& rule);

/// Held-out shapes must not regress: a no-regression judgement with `tolerance` (default 5%);
/// Borderline counts as a pass (no evidence of harm). Gate "heldout".
GateResult judge_heldout(const std::vector<std::vector<double>>& base, const std::vector<std::vector<double>>& cand,
                         double tolerance = 0.05);

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
