// rtx::evolve gates: pure decisions on measured numbers (performance on timing samples via the
// Hodges-Lehmann CI, held-out regression, determinism, memory). No processes, no store.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rtx/measure/measure.hpp"
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

/// Host contention over the rounds of one A/B comparison (one workload part). Round k of the
/// baseline and of the candidate ran next to each other (ABBA), so a neighbour that slowed one
/// may have slowed the other, or only one: rtx-bench's paired rule (merge_rounds_paired) is
/// applied to the pairs. A pair is busy when either arm's round was judged contended, quiet
/// when both were judged and not contended (a round with no evidence or a window too short to
/// judge is neither). When some pairs are busy and the quiet pairs suffice
/// (measure::quiet_rounds_suffice: at least 3 and at least half), every busy pair is left out
/// of BOTH arms; otherwise the comparison is undecided (a busy host, not the change, decided).
struct BusyRounds {
  size_t rounds = 0;                        ///< pairs compared
  size_t busy = 0;                          ///< pairs with a contended round on either arm
  size_t quiet = 0;                         ///< pairs judged quiet on both arms
  std::vector<size_t> left_out;             ///< 1-based rounds left out of both arms, increasing
  std::vector<std::string> left_out_reason; ///< per left_out: "baseline round 2 busy: <evidence>" (either or both arms)
  /// Busy pairs and too few quiet pairs to leave them out: judged on all rounds, as rtx-bench
  /// compare judges the two sides of one --baseline-exe run (interleaved ABBA rounds put the
  /// same neighbours on both arms; Kalibera & Jones 2013), and said in the reason. Not "no
  /// verdict": a trial's own threads (a server, data-parallel ranks) read as a busy host on an
  /// idle machine, and their pairs are balanced all the same.
  bool balanced = false;
  std::string reason;                       ///< when balanced: the first busy round's evidence and the counts
  /// {"rounds", "busy_rounds", "quiet_rounds", "rounds_left_out": [{"round", "reason"}],
  /// "balanced", "reason"}.
  nlohmann::json to_json() const;
};

/// The paired leave-out decision for round k = 0.. of each arm's host evidence (one entry per
/// round; HostEvidence::measured false: no evidence). Throws rtx::Error(Input) when the arms
/// have different round counts.
BusyRounds pair_busy_rounds(const std::vector<measure::HostEvidence>& base,
                            const std::vector<measure::HostEvidence>& cand);

/// `samples` (per case, `rounds` rounds of equal length concatenated) without the 1-based rounds
/// in `drop`. Throws rtx::Error(Input) when a case's sample count is not a multiple of `rounds`
/// or a round in `drop` is outside [1, rounds].
std::vector<std::vector<double>> without_rounds(const std::vector<std::vector<double>>& samples, size_t rounds,
                                                const std::vector<size_t>& drop);

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
  /// Host contention of the rounds (judge_performance's `host`); rounds 0 when not judged.
  BusyRounds host;
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
/// Host contention (`host`, from pair_busy_rounds over rule.rounds pairs; host.rounds 0: not
/// judged): the rounds in host.left_out are removed from both arms before anything above (the
/// judgement is on rule.rounds - left_out rounds, so few remaining rounds are "too few rounds");
/// when host.balanced, every round is judged and the reason ends with which rounds were busy
/// (the gate's detail has "busy_host_balanced": true).
/// Throws rtx::Error(Input) when the case counts differ, a case has no samples or fewer than
/// case 0, a pass time is not positive, or `host` covers another number of rounds than rule.rounds.
PerfJudgement judge_performance(const std::vector<std::vector<double>>& base,
                                const std::vector<std::vector<double>>& cand, const PerfRule& rule,
                                const BusyRounds& host = {});

/// Held-out shapes must not regress: a no-regression judgement with `tolerance` (default 5%) over
/// the per-round medians when `rounds` >= 1 (as PerfRule::rounds; 0: independent samples);
/// Borderline counts as a pass (no evidence of harm). Too few rounds for a CI does not pass (no
/// evidence either way): failed, detail "too_few_rounds" and "undecided" true. Host contention
/// (`host`) as judge_performance: busy rounds left out of both arms, or, when busy rounds
/// dominate, failed with "undecided" and "busy_host" true (no evidence either way); detail
/// "host" records it. Gate "heldout".
GateResult judge_heldout(const std::vector<std::vector<double>>& base, const std::vector<std::vector<double>>& cand,
                         double tolerance = 0.05, int rounds = 0, const BusyRounds& host = {});

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
