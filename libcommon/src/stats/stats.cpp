// Order statistics, the median CI, Mann-Whitney U and Hodges-Lehmann (see stats.hpp for
// the definitions and their sources).
#include "rtx/stats/stats.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "rtx/core/error.hpp"

namespace rtx::stats {
namespace {

void require_nonempty(const std::vector<double>& x, const char* what) {
  if (x.empty()) throw_input(std::string(what) + ": empty sample", "samples", "pass at least one value");
}

void require_level(double level, const char* what) {
  if (!(level > 0 && level < 1))
    throw_input(std::string(what) + ": confidence level " + std::to_string(level) + " is not in (0,1)", "level",
                "use e.g. 0.95");
}

/// Value at 1-based order statistic k of sorted x.
double order_stat(const std::vector<double>& sorted, size_t k) { return sorted[k - 1]; }

/// Exact counts of U = 0..m n for sample sizes m, n (no ties), Mann & Whitney (1947):
/// f(i, j, u) = f(i-1, j, u-j) + f(i, j-1, u), f(i, 0, 0) = f(0, j, 0) = 1.
std::vector<double> mw_counts(int m, int n) {
  // prev[j] = f(i-1, j, .), cur[j] = f(i, j, .)
  std::vector<std::vector<double>> prev(n + 1), cur(n + 1);
  for (int j = 0; j <= n; ++j) prev[j] = {1.0};  // i = 0
  for (int i = 1; i <= m; ++i) {
    cur[0] = {1.0};
    for (int j = 1; j <= n; ++j) {
      std::vector<double> f(static_cast<size_t>(i) * j + 1, 0.0);
      for (size_t u = 0; u < prev[j].size(); ++u) f[u + j] += prev[j][u];
      for (size_t u = 0; u < cur[j - 1].size(); ++u) f[u] += cur[j - 1][u];
      cur[j] = std::move(f);
    }
    std::swap(prev, cur);
  }
  return prev[n];
}

/// Lower critical count C (1-based) of an order-statistic interval: C - 1 is the largest u
/// with cdf(u) <= tail; C = 1 when even cdf(0) exceeds tail. Returns {C, cdf(C-1)}.
template <class Cdf>
std::pair<size_t, double> lower_critical(size_t max_c, double tail, Cdf cdf) {
  size_t c = 1;
  double at = cdf(0);
  for (size_t u = 0; u + 1 <= max_c; ++u) {
    const double v = cdf(static_cast<double>(u));
    if (v <= tail) {
      c = u + 1;
      at = v;
    } else {
      break;
    }
  }
  return {c, at};
}

}  // namespace

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) throw_input("normal_quantile: p=" + std::to_string(p) + " is not in (0,1)", "p");
  // P. J. Acklam's rational approximation (relative error 1.15e-9), then one Halley step.
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double plow = 0.02425, phigh = 1 - plow;
  double x;
  if (p < plow) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= phigh) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double e = normal_cdf(x) - p;
  const double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

double median(std::vector<double> x) {
  require_nonempty(x, "median");
  const size_t n = x.size();
  std::sort(x.begin(), x.end());
  return (n % 2) ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double percentile(std::vector<double> x, double q) {
  require_nonempty(x, "percentile");
  if (!(q >= 0 && q <= 1)) throw_input("percentile: q=" + std::to_string(q) + " is not in [0,1]", "q");
  std::sort(x.begin(), x.end());
  const double h = (static_cast<double>(x.size()) - 1) * q;
  const size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= x.size()) return x.back();
  return x[lo] + (h - static_cast<double>(lo)) * (x[lo + 1] - x[lo]);
}

double mad(const std::vector<double>& x) {
  require_nonempty(x, "mad");
  const double m = median(x);
  std::vector<double> d(x.size());
  for (size_t i = 0; i < x.size(); ++i) d[i] = std::fabs(x[i] - m);
  return median(std::move(d));
}

Interval median_ci(std::vector<double> x, double level) {
  require_nonempty(x, "median_ci");
  require_level(level, "median_ci");
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  // Binomial(n, 1/2) CDF, accumulated in log space so large n does not underflow.
  std::vector<double> cdf(n / 2 + 1);
  double acc = 0, logc = 0;  // log C(n, i)
  const double log2n = static_cast<double>(n) * std::log(2.0);
  for (size_t i = 0; i <= n / 2; ++i) {
    if (i > 0) logc += std::log(static_cast<double>(n - i + 1)) - std::log(static_cast<double>(i));
    acc += std::exp(logc - log2n);
    cdf[i] = acc;
  }
  const double tail = (1 - level) / 2;
  auto [j, at] = lower_critical(n / 2, tail, [&](double u) { return cdf[static_cast<size_t>(u)]; });
  if (n / 2 == 0) at = 0.5;  // n = 1: the "interval" [x1, x1] has no coverage guarantee
  Interval r;
  r.lo = order_stat(x, j);
  r.hi = order_stat(x, n + 1 - j);
  r.coverage = n == 1 ? 0.0 : 1 - 2 * at;
  return r;
}

double mann_whitney_cdf(int m, int n, int u) {
  if (m < 1 || n < 1 || m > 50 || n > 50)
    throw_input("mann_whitney_cdf: sample sizes " + std::to_string(m) + ", " + std::to_string(n) +
                    " outside 1..50", "n", "use the normal approximation for larger samples");
  if (u < 0) return 0;
  if (u >= m * n) return 1;
  const auto f = mw_counts(m, n);
  double total = 0, below = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    total += f[k];
    if (static_cast<int>(k) <= u) below += f[k];
  }
  return below / total;
}

MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  require_nonempty(x, "mann_whitney_u (x)");
  require_nonempty(y, "mann_whitney_u (y)");
  const size_t n1 = x.size(), n2 = y.size(), n = n1 + n2;
  // Midranks of the pooled sample; tie groups for the variance correction.
  std::vector<std::pair<double, int>> all;
  all.reserve(n);
  for (double v : x) all.push_back({v, 0});
  for (double v : y) all.push_back({v, 1});
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double r1 = 0, tie_term = 0;
  bool ties = false;
  for (size_t i = 0; i < n;) {
    size_t k = i;
    while (k < n && all[k].first == all[i].first) ++k;
    const double t = static_cast<double>(k - i);
    const double rank = (static_cast<double>(i + 1) + static_cast<double>(k)) / 2;  // mean of ranks i+1..k
    for (size_t q = i; q < k; ++q)
      if (all[q].second == 0) r1 += rank;
    if (t > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    i = k;
  }
  MannWhitney r;
  const double dn1 = static_cast<double>(n1), dn2 = static_cast<double>(n2), dn = static_cast<double>(n);
  r.u1 = r1 - dn1 * (dn1 + 1) / 2;
  r.u2 = dn1 * dn2 - r.u1;
  const double umax = std::max(r.u1, r.u2), umin = std::min(r.u1, r.u2);
  if (!ties && n1 <= 20 && n2 <= 20) {
    r.exact = true;
    r.p = std::min(1.0, 2 * mann_whitney_cdf(static_cast<int>(n1), static_cast<int>(n2),
                                             static_cast<int>(std::lround(umin))));
    return r;
  }
  const double mu = dn1 * dn2 / 2;
  const double var = dn1 * dn2 / 12 * ((dn + 1) - tie_term / (dn * (dn - 1)));
  if (!(var > 0)) {  // every value equal: no evidence of a difference
    r.p = 1;
    return r;
  }
  r.z = (umax - mu - 0.5) / std::sqrt(var);
  r.p = std::min(1.0, 2 * normal_cdf(-r.z));
  return r;
}

Shift hodges_lehmann(const std::vector<double>& x, const std::vector<double>& y, double level) {
  require_nonempty(x, "hodges_lehmann (x)");
  require_nonempty(y, "hodges_lehmann (y)");
  require_level(level, "hodges_lehmann");
  const size_t n1 = x.size(), n2 = y.size(), N = n1 * n2;
  std::vector<double> d;
  d.reserve(N);
  for (double b : y)
    for (double a : x) d.push_back(b - a);
  std::sort(d.begin(), d.end());
  Shift s;
  s.estimate = (N % 2) ? d[N / 2] : 0.5 * (d[N / 2 - 1] + d[N / 2]);
  const double tail = (1 - level) / 2;
  size_t c;
  double at;
  if (n1 <= 20 && n2 <= 20) {
    const auto f = mw_counts(static_cast<int>(n1), static_cast<int>(n2));
    double total = 0;
    for (double v : f) total += v;
    std::vector<double> cdf(f.size());
    double acc = 0;
    for (size_t k = 0; k < f.size(); ++k) cdf[k] = (acc += f[k]) / total;
    std::tie(c, at) = lower_critical(N / 2, tail, [&](double u) { return cdf[static_cast<size_t>(u)]; });
  } else {
    const double dN = static_cast<double>(N);
    const double sd = std::sqrt(static_cast<double>(n1) * static_cast<double>(n2) * static_cast<double>(n1 + n2 + 1) / 12);
    const double cr = std::round(dN / 2 - normal_quantile(1 - tail) * sd);
    c = static_cast<size_t>(std::clamp(cr, 1.0, std::max(1.0, std::floor(dN / 2))));
    at = normal_cdf((static_cast<double>(c) - 1 + 0.5 - dN / 2) / sd);
  }
  s.ci.lo = order_stat(d, c);
  s.ci.hi = order_stat(d, N + 1 - c);
  s.ci.coverage = N == 1 ? 0.0 : 1 - 2 * at;
  return s;
}

Shift hodges_lehmann_ratio(const std::vector<double>& x, const std::vector<double>& y, double level) {
  auto logs = [](const std::vector<double>& v, const char* which) {
    std::vector<double> l(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (!(v[i] > 0))
        throw_input(std::string("hodges_lehmann_ratio: ") + which + "[" + std::to_string(i) + "] = " +
                        std::to_string(v[i]) + " is not positive", which, "timings must be > 0");
      l[i] = std::log(v[i]);
    }
    return l;
  };
  Shift s = hodges_lehmann(logs(x, "x"), logs(y, "y"), level);
  s.estimate = std::exp(s.estimate);
  s.ci.lo = std::exp(s.ci.lo);
  s.ci.hi = std::exp(s.ci.hi);
  return s;
}

}  // namespace rtx::stats
