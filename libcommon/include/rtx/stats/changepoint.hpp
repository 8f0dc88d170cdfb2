// Change-point detection in a performance series: E-divisive means (Matteson & James 2014),
// the detector MongoDB's signal-processing-algorithms and Apache Otava use. Pure functions, no I/O.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rtx::stats {

/// How the within-sample terms of the energy statistic are normalised.
enum class EnergyForm {
  /// U-statistic of the paper (Matteson & James 2014, eq. 3): sum_{i<j} |X_i - X_j| / C(m,2).
  U,
  /// V-statistic: sum_{i,j} |X_i - X_j| / m^2, as MongoDB's signal-processing-algorithms 2.x
  /// (energy_statistics.e_divisive, its C and numpy calculators) computes it.
  V,
};

/// Options of e_divisive().
struct EDivisiveOptions {
  EnergyForm form = EnergyForm::U;  ///< normalisation of the within-sample terms
  double pvalue = 0.05;        ///< a candidate is kept when its permutation p-value <= this
  size_t permutations = 100;   ///< permutations per candidate (p = (#{q_perm >= q} + 1) / (R + 1))
  size_t min_size = 1;         ///< smallest segment (points) either side of a change point, >= 1
  uint64_t seed = 0;           ///< seed of the permutation RNG (rtx::Philox stream): reproducible
};

/// One change point found by e_divisive(): the series steps between index-1 and index.
struct ChangePoint {
  size_t index = 0;            ///< first point of the new regime (0 < index < n)
  double q = 0;                ///< q-hat of the split that found it (within its segment)
  double pvalue = 1;           ///< permutation p-value of that split
  size_t window_start = 0;     ///< the segment [window_start, window_end) that was split
  size_t window_end = 0;
  double mean_before = 0, mean_after = 0;      ///< over the adjacent segments (between change points)
  double median_before = 0, median_after = 0;
  double relative_change = 0;  ///< (mean_after - mean_before) / |mean_before| (0 when mean_before == 0)
};

/// q-hat of every split of x[start, end) (Matteson & James 2014, eqs. 3-5 with alpha = 1):
/// for tau in (start, end), X = x[start, tau) (size m), Y = x[tau, end) (size k),
///   form U: E-hat = 2/(m k) sum_{i,j} |X_i - Y_j| - 2/(m(m-1)) sum_{i<j} |X_i - X_j| - 2/(k(k-1)) sum_{i<j} |Y_i - Y_j|
///   form V: E-hat = 2/(m k) sum_{i,j} |X_i - Y_j| - 2/m^2 sum_{i<j} |X_i - X_j| - 2/k^2 sum_{i<j} |Y_i - Y_j|
///   q-hat(tau) = m k / (m + k) * E-hat
/// (a within-sample term is 0 when its sample has fewer than 2 points, form U). Form V equals
/// signal_processing_algorithms 2.x's `_calculate_t_stats`. Returns a vector of size end - start;
/// element tau - start is q-hat(tau); element 0 (no split) is 0.
/// O((end-start)^2) time, O(end-start) memory. Throws rtx::Error(Input) when start > end or end > x.size().
std::vector<double> qhat_values(const std::vector<double>& x, size_t start, size_t end,
                                EnergyForm form = EnergyForm::U);

/// E-divisive means with alpha = 1 (Matteson, D. S. & James, N. A. (2014), "A Nonparametric
/// Approach for Multiple Change Point Analysis of Multivariate Data", JASA 109(505):334-345):
/// recursive bisection. At each step, every segment between the change points found so far
/// proposes its best split tau* = argmax q-hat over tau with both sides >= min_size; the
/// segment with the largest q-hat wins; its significance is a permutation test (the segment's
/// points shuffled R times with rtx::Philox(seed); p = (#{max q-hat of shuffle >= q*} + 1) / (R+1)).
/// It is kept when p <= pvalue, and the search goes on; else it stops (also when the best
/// q-hat is <= 0 or no segment can be split). Like signal-processing-algorithms (and R's ecp),
/// each permutation shuffles every current segment independently and takes the largest
/// q-hat over all of them; ties in argmax keep the first tau. p uses (count + 1)/(R + 1)
/// (Davison & Hinkley 1997, eq. 4.11; the ecp package); signal-processing-algorithms uses
/// count/(R + 1). Change points are returned sorted by index, with the means/medians of the
/// segments either side in the final partition. Complexity: O(n^2) per q-hat scan, O(R n^2) per accepted change point; fine for n <= 1000.
/// Not an error (returns no change points): n < 2 * min_size, or any NaN/inf in x.
/// Throws rtx::Error(Input) when pvalue is not in (0, 1], permutations == 0 or min_size == 0.
std::vector<ChangePoint> e_divisive(const std::vector<double>& x, const EDivisiveOptions& opts = {});

}  // namespace rtx::stats
