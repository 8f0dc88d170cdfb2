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

}  // namespace rtx::stats
