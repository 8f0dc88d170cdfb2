// Robust statistics for benchmark timings: order statistics, a distribution-free CI for
// the median, the Mann-Whitney U test and the Hodges-Lehmann shift estimator with its CI.
// Pure functions over std::vector<double>; no I/O. Compare verdicts live in compare.hpp.
#pragma once
#include <cstddef>
#include <vector>

namespace rtx::stats {

/// Median of x (mean of the two middle order statistics for even n).
/// Throws rtx::Error(Input) when x is empty.
double median(std::vector<double> x);

/// q-quantile, q in [0,1], by linear interpolation between closest ranks: with x sorted and
/// h = (n-1) q, result = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]).
/// This is Hyndman & Fan (1996) definition 7, the default of numpy.percentile and R.
/// Throws rtx::Error(Input) when x is empty or q is outside [0,1].
double percentile(std::vector<double> x, double q);

/// Median absolute deviation from the median, unscaled: median_i |x_i - median(x)|
/// (multiply by 1.4826 for a normal-consistent sigma). Throws rtx::Error(Input) when empty.
double mad(const std::vector<double>& x);

/// A confidence interval [lo, hi] with its actual coverage (>= the requested level when
/// achievable; order-statistic intervals have discrete coverage).
struct Interval {
  double lo = 0, hi = 0;
  double coverage = 0;  ///< achieved confidence level, e.g. 0.9611 for n=20 at 95%
};

/// Distribution-free CI for the median from order statistics (Conover, "Practical
/// Nonparametric Statistics", 3rd ed., section 3.2): [x_(j), x_(n+1-j)] (1-based) with j
/// the largest index such that P(Bin(n, 1/2) <= j-1) <= (1-level)/2; coverage
/// 1 - 2 P(Bin(n,1/2) <= j-1). For n < 6 no such j exists at 95%: returns [min, max]
/// with its (lower) coverage. Throws rtx::Error(Input) when x is empty or level not in (0,1).
Interval median_ci(std::vector<double> x, double level = 0.95);

/// Result of a two-sided Mann-Whitney U test of samples x (size n1) and y (size n2).
struct MannWhitney {
  double u1 = 0;        ///< U statistic of x: #pairs (x_i > y_j) + 0.5 #ties
  double u2 = 0;        ///< n1 n2 - u1
  double z = 0;         ///< normal score (0 when the exact distribution was used)
  double p = 1;         ///< two-sided p-value
  bool exact = false;   ///< true: exact null distribution; false: normal approximation
};

/// Two-sided Mann-Whitney U test (Mann & Whitney, Ann. Math. Statist. 18(1), 1947).
/// Exact null distribution (the frequency recursion f(m,n,u) = f(m-1,n,u-n) + f(m,n-1,u)
/// of the same paper) when there are no ties and n1, n2 <= 20; otherwise the normal
/// approximation with tie-corrected variance n1 n2/12 ((N+1) - sum(t^3-t)/(N(N-1)))
/// and a 0.5 continuity correction (Lehmann, "Nonparametrics", 1975, ch. 1.4). Matches
/// scipy.stats.mannwhitneyu(x, y, alternative='two-sided', method='exact'|'asymptotic').
/// Throws rtx::Error(Input) when either sample is empty.
MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);

/// P(U <= u) under H0 for sample sizes m, n without ties (exact, Mann-Whitney recursion).
/// m, n <= 50. Throws rtx::Error(Input) outside that range.
double mann_whitney_cdf(int m, int n, int u);

/// Hodges-Lehmann estimate of the shift of y relative to x with its CI.
struct Shift {
  double estimate = 0;  ///< median over all pairs of (y_j - x_i)
  Interval ci;          ///< Moses' CI from order statistics of the pairwise differences
};

/// Hodges-Lehmann shift estimate (Hodges & Lehmann, Ann. Math. Statist. 34(2), 1963) of
/// y - x and Moses' distribution-free CI (Hollander & Wolfe, "Nonparametric Statistical
/// Methods", 2nd ed., section 4.3): with D_(1..N) the sorted n1 n2 differences,
/// [D_(C), D_(N+1-C)] where C - 1 is the largest u with P(U <= u) <= (1-level)/2 (exact U
/// distribution for n1, n2 <= 20, else C = round(N/2 - z sqrt(n1 n2 (n1+n2+1)/12))).
/// Throws rtx::Error(Input) when either sample is empty or level not in (0,1).
Shift hodges_lehmann(const std::vector<double>& x, const std::vector<double>& y, double level = 0.95);

/// Hodges-Lehmann on log values: the ratio y/x (e.g. new time / base time) as
/// exp(HL(log x, log y)) with the CI mapped the same way. All values must be > 0
/// (rtx::Error(Input) otherwise).
Shift hodges_lehmann_ratio(const std::vector<double>& x, const std::vector<double>& y, double level = 0.95);

/// Standard normal CDF and its upper-tail quantile helper: normal_quantile(p) = Phi^-1(p),
/// p in (0,1) (Acklam's rational approximation refined by one Halley step; |err| < 1e-12).
double normal_cdf(double z);
double normal_quantile(double p);

}  // namespace rtx::stats
