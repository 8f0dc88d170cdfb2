// A/B verdicts for benchmark timings (as nvbench's robust compare and asv continuous):
// ratio new/base with a Hodges-Lehmann CI, Mann-Whitney significance, a noise threshold.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace rtx::stats {

/// What a comparison concluded. Slower/Faster: a real change beyond the threshold;
/// Same: any change is within the threshold; Ambiguous: the data cannot tell.
enum class Verdict { Same, Faster, Slower, Ambiguous };
/// "same", "faster", "slower", "ambiguous".
const char* verdict_name(Verdict v) noexcept;

/// Knobs of compare_samples.
struct CompareOptions {
  double threshold = 0.05;   ///< relative change that matters (0.05 = 5%)
  double alpha = 0.05;       ///< two-sided significance level of the Mann-Whitney test
  double level = 0.95;       ///< confidence level of the ratio CI
  size_t min_samples = 5;    ///< fewer samples on either side: ambiguous
};

/// One comparison of two timing samples (seconds; any positive unit works).
struct Comparison {
  Verdict verdict = Verdict::Ambiguous;
  double ratio = 1;          ///< Hodges-Lehmann ratio new/base (> 1: new is slower)
  double lo = 0, hi = 0;     ///< CI of the ratio
  double p = 1;              ///< Mann-Whitney two-sided p-value
  size_t n_base = 0, n_new = 0;
  std::string reason;        ///< one line: why this verdict
};

/// Judge `fresh` against `base` (positive timings). Rules, in order:
///  1. fewer than min_samples on either side                           -> ambiguous
///  2. ratio CI inside [1 - threshold, 1 + threshold]                  -> same
///  3. p < alpha and CI entirely above 1 + threshold                   -> slower
///     p < alpha and CI entirely below 1 - threshold                   -> faster
///  4. otherwise (CI straddles a threshold, or not significant but
///     too wide to rule a change out)                                  -> ambiguous
/// Samples larger than 2000 are thinned to 2000 (every k-th in recorded order) to bound
/// the n1 n2 pairwise differences. Throws rtx::Error(Input) on empty or non-positive input.
Comparison compare_samples(const std::vector<double>& base, const std::vector<double>& fresh,
                           const CompareOptions& o = {});

// ---- one notation for a change -----------------------------------------------------------
// Every tool of the suite writes a performance change the same way: the time ratio new/base
// (candidate/baseline, tuned/default) with its CI, asv's "ratio" and nvbench's compare column.
// Below 1 the new code is faster (0.50 = takes half the time = 2x speedup), above 1 slower.
// A ratio is never negative and its CI stays finite whatever the spread (a gain 1 - t_c/t_b
// read "95% CI -34312% .. +99.7%" for time ratios 0.003 .. 344), and a Hodges-Lehmann ratio
// CI is computed in this form (compare_samples).

/// Label naming the notation, for table headers and prose: "time new/base".
inline constexpr const char* kTimeRatioLabel = "time new/base";

/// A time ratio as text: 3 decimals in [0.1, 10) ("0.934", "1.070"), 3 significant digits
/// below ("0.000713"), 4 above ("344.1", "1.235e+04"); "-" for a non-finite or non-positive
/// value (nothing measured).
std::string format_time_ratio(double ratio);

/// A time ratio with its CI: "0.934 [0.901, 0.968]"; only the ratio ("0.934") when the CI is
/// not a finite positive interval (lo <= 0 or hi <= 0: no CI was computed).
std::string format_time_ratio_ci(double ratio, double lo, double hi);

/// A saving (rtx-evolve's improvement, 1 - t_new/t_base) and its CI [lo, hi] written in the
/// common notation: format_time_ratio_ci(1 - saved, 1 - hi, 1 - lo), e.g. saved 0.12 [0.05,
/// 0.19] -> "0.880 [0.810, 0.950]".
std::string format_saving_as_time_ratio(double saved, double lo, double hi);

/// The change of `c` in the common notation, "0.934 [0.901, 0.968]" (format_time_ratio_ci of
/// c.ratio, c.lo, c.hi).
std::string format_change(const Comparison& c);

/// A set of per-case comparisons from ONE process per side whose changes move together: the
/// whole process ran at another speed (core placement, clock, the VM's neighbours), which the
/// per-case statistics cannot tell from a change of the code.
struct CommonMode {
  bool detected = false;
  Verdict direction = Verdict::Same;  ///< Slower or Faster when detected
  size_t shifted = 0;                 ///< comparisons with a verdict in `direction`
  size_t of = 0;                      ///< comparisons looked at (all verdicts)
  double median_ratio = 1;            ///< median of their ratios (the process-wide factor)
};

/// Whether the comparisons `cs` (one per case, each from one process per side) show a common
/// mode: at least kMinCommonModeCases of them and more than half of all of them (a strict
/// majority, so one planted change among 2 cases is not taken for the process) share a slower
/// (or faster) verdict. Measured on the 2-CPU development VM (docs/tools/rtx-bench.md): in A/A
/// pairs of smoke.json that the host judge did not catch, a shifted process moved 5-9 of 9
/// cases the same way (+14..+29%); a one-kernel change moves one.
CommonMode common_mode_shift(const std::vector<Comparison>& cs);
/// Fewest comparisons sharing a direction for common_mode_shift to call it the process's.
inline constexpr size_t kMinCommonModeCases = 2;

/// One case's round medians on one side: `median[k]` (s, > 0) was measured in the fresh process
/// `round[k]` (1-based, strictly increasing; rounds may be missing).
struct RoundSeries {
  std::vector<uint64_t> round;
  std::vector<double> median;
};

/// The process-speed correction of rtx-bench compare's default path (issue 36). All cases of
/// one round ran in one fresh process, so a process-wide speed change (core placement, clock,
/// the VM's neighbours) moves them together while a code change moves its own cases. It is a
/// covariate adjustment (CUPED: Deng et al., WSDM 2013; ANCOVA) on the log scale:
///  - M_c: the median of case c's round medians over both sides;
///  - x: in round r of a side, the process factor seen by c, the log of the median over the
///    *other* cases c' of that round of m_{c',r} / M_{c'} (leave-one-out, so c's own change
///    cannot move it; a median, so a minority of changed cases cannot either);
///  - theta_c: c's sensitivity to the process, the least-squares slope of log m on x within
///    each side (pooled; the between-side difference under test cannot leak into it), shrunk
///    toward 1 by a prior (kSensitivityPriorRounds rounds of kSensitivityPriorSpread spread:
///    theta = (Sxy + lambda) / (Sxx + lambda)) and clamped to [0, kMaxSensitivity]: a
///    single-threaded kernel that the processes' shifts leave alone gets ~0 and stays raw, an
///    OpenMP kernel that moves with its process gets ~1, and without process variation inside
///    the sides (nothing to learn from) theta is ~1: a shift between the runs is the process's;
///  - the corrected median: exp(log m - theta_c (x - mean x over both sides)).
/// Measured on the 2-vCPU VM: outlier processes slowed the two-thread OpenMP cases by 10-45%
/// and left gelu and OpenBLAS's cases alone, so a fixed theta = 1 pushed gelu 10% off.
struct ProcessNormalized {
  /// Per case, the corrected series of each side (rounds where fewer than
  /// kMinNormalizeOthers other cases ran are dropped). Same order as the input.
  std::vector<RoundSeries> base, fresh;
  /// Per case, theta_c (0 = left raw).
  std::vector<double> sensitivity;
  /// Per side, each round's process factor over all cases (median of m/M), in round order:
  /// compare_samples(base_factor, fresh_factor) is the whole-process shift between the runs.
  std::vector<double> base_factor, fresh_factor;
};
/// Normalise `base[c]`, `fresh[c]` (one entry per case, both sides, same length >= 1).
/// Throws rtx::Error(Input) when the sides' lengths differ, a series' round and median counts
/// differ, or a median is not finite and positive.
ProcessNormalized normalize_process_speed(const std::vector<RoundSeries>& base, const std::vector<RoundSeries>& fresh);
/// Largest sensitivity theta normalize_process_speed applies.
inline constexpr double kMaxSensitivity = 2.0;
/// The prior on theta (1, the common mode) weighs as much as this many rounds whose log process
/// factor spreads by kSensitivityPriorSpread (2%: the within-process noise of a round median of
/// a microsecond kernel on the 2-vCPU VM); lambda = rounds x spread^2.
inline constexpr double kSensitivityPriorRounds = 4;
inline constexpr double kSensitivityPriorSpread = 0.02;
/// Fewest other cases in a round for normalize_process_speed to correct a case's median there.
inline constexpr size_t kMinNormalizeOthers = 2;

}  // namespace rtx::stats
