// E-divisive means change-point detection (see rtx/stats/changepoint.hpp for the formula,
// its source and the permutation test). O(n^2) per q-hat scan; no I/O.
#include "rtx/stats/changepoint.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/stats/stats.hpp"

namespace rtx::stats {
namespace {

/// q-hat from the three pair sums (each over unordered pairs) and the sample sizes.
double qhat_from_sums(double xy, double xx, double yy, size_t m, size_t k, EnergyForm form) {
  if (m == 0 || k == 0) return 0.0;
  const double dm = static_cast<double>(m), dk = static_cast<double>(k);
  const double cross = 2.0 * xy / (dm * dk);
  double wx = 0, wy = 0;
  if (form == EnergyForm::U) {
    wx = m < 2 ? 0.0 : 2.0 * xx / (dm * (dm - 1.0));
    wy = k < 2 ? 0.0 : 2.0 * yy / (dk * (dk - 1.0));
  } else {
    wx = 2.0 * xx / (dm * dm);
    wy = 2.0 * yy / (dk * dk);
  }
  return dm * dk / (dm + dk) * (cross - wx - wy);
}

/// q-hat(tau) for tau = 0..L-1 of the L values at v (the incremental scan of
/// signal-processing-algorithms' calculators: move one point from Y to X per step).
std::vector<double> scan(const double* v, size_t len, EnergyForm form) {
  std::vector<double> q(len, 0.0);
  double xy = 0, xx = 0, yy = 0;
  for (size_t i = 0; i < len; ++i)
    for (size_t j = i + 1; j < len; ++j) yy += std::fabs(v[i] - v[j]);
  for (size_t tau = 0; tau < len; ++tau) {
    q[tau] = qhat_from_sums(xy, xx, yy, tau, len - tau, form);
    double col = 0, row = 0;  // distances of v[tau] to X (before it) and to the rest of Y
    for (size_t i = 0; i < tau; ++i) col += std::fabs(v[i] - v[tau]);
    for (size_t j = tau + 1; j < len; ++j) row += std::fabs(v[tau] - v[j]);
    xy = xy - col + row;
    xx += col;
    yy -= row;
  }
  return q;
}

/// Best split of the L values at v with both sides >= min_size: (tau, q) or tau = 0 if none.
std::pair<size_t, double> best_split(const double* v, size_t len, size_t min_size, EnergyForm form) {
  if (len < 2 * min_size) return {0, 0.0};
  const std::vector<double> q = scan(v, len, form);
  size_t best = 0;
  double best_q = 0;
  for (size_t tau = min_size; tau + min_size <= len; ++tau)
    if (best == 0 || q[tau] > best_q) {
      best = tau;
      best_q = q[tau];
    }
  return {best, best_q};
}

/// Uniform integer in [0, bound) from the Philox stream (64 bits, modulo; bias < 2^-40 for n <= 2^24).
size_t uniform_index(Philox& rng, size_t bound) {
  const uint64_t hi = rng.next_u32(), lo = rng.next_u32();
  return static_cast<size_t>(((hi << 32) | lo) % static_cast<uint64_t>(bound));
}

double mean_of(const std::vector<double>& x, size_t a, size_t b) {
  double s = 0;
  for (size_t i = a; i < b; ++i) s += x[i];
  return s / static_cast<double>(b - a);
}

}  // namespace

std::vector<double> qhat_values(const std::vector<double>& x, size_t start, size_t end, EnergyForm form) {
  if (start > end || end > x.size())
    throw_input("qhat_values: window [" + std::to_string(start) + ", " + std::to_string(end) +
                    ") is outside the series of " + std::to_string(x.size()) + " points",
                "start/end", "pass 0 <= start <= end <= x.size()");
  return scan(x.data() + start, end - start, form);
}

std::vector<ChangePoint> e_divisive(const std::vector<double>& x, const EDivisiveOptions& o) {
  if (!(o.pvalue > 0 && o.pvalue <= 1))
    throw_input("e_divisive: pvalue " + std::to_string(o.pvalue) + " is not in (0, 1]", "pvalue", "use e.g. 0.05");
  if (o.permutations == 0)
    throw_input("e_divisive: permutations must be >= 1", "permutations", "use e.g. 100");
  if (o.min_size == 0) throw_input("e_divisive: min_size must be >= 1", "min_size", "use e.g. 3");
  const size_t n = x.size();
  std::vector<ChangePoint> found;
  if (n < 2 * o.min_size) return found;
  for (double v : x)
    if (!std::isfinite(v)) return found;

  std::vector<size_t> cps;                                           // accepted, sorted
  std::map<std::pair<size_t, size_t>, std::pair<size_t, double>> memo;  // window -> (tau, q)
  std::vector<double> work(n);
  for (uint64_t iter = 0;; ++iter) {
    std::vector<size_t> bounds{0};
    bounds.insert(bounds.end(), cps.begin(), cps.end());
    bounds.push_back(n);
    // The best split over all current windows.
    size_t best_tau = 0, best_a = 0, best_b = 0;
    double best_q = 0;
    for (size_t w = 0; w + 1 < bounds.size(); ++w) {
      const auto key = std::make_pair(bounds[w], bounds[w + 1]);
      auto it = memo.find(key);
      if (it == memo.end()) {
        auto s = best_split(x.data() + key.first, key.second - key.first, o.min_size, o.form);
        it = memo.emplace(key, s).first;
      }
      const auto [tau, q] = it->second;
      if (tau != 0 && (best_tau == 0 || q > best_q)) {
        best_tau = key.first + tau;
        best_q = q;
        best_a = key.first;
        best_b = key.second;
      }
    }
    if (best_tau == 0 || !(best_q > 0)) break;
    // Permutation test: shuffle every window independently, take the largest q-hat over all.
    Philox rng(o.seed, iter);
    size_t at_least = 0;
    for (size_t r = 0; r < o.permutations; ++r) {
      double perm_best = 0;
      bool any = false;
      for (size_t w = 0; w + 1 < bounds.size(); ++w) {
        const size_t a = bounds[w], b = bounds[w + 1], len = b - a;
        std::copy(x.begin() + static_cast<std::ptrdiff_t>(a), x.begin() + static_cast<std::ptrdiff_t>(b),
                  work.begin());
        for (size_t i = len; i > 1; --i) std::swap(work[i - 1], work[uniform_index(rng, i)]);  // Fisher-Yates
        const auto [tau, q] = best_split(work.data(), len, o.min_size, o.form);
        if (tau != 0 && (!any || q > perm_best)) {
          perm_best = q;
          any = true;
        }
      }
      if (any && perm_best >= best_q) ++at_least;
    }
    const double p = static_cast<double>(at_least + 1) / static_cast<double>(o.permutations + 1);
    if (p > o.pvalue) break;
    ChangePoint cp;
    cp.index = best_tau;
    cp.q = best_q;
    cp.pvalue = p;
    cp.window_start = best_a;
    cp.window_end = best_b;
    found.push_back(cp);
    cps.insert(std::upper_bound(cps.begin(), cps.end(), best_tau), best_tau);
  }
  std::sort(found.begin(), found.end(), [](const ChangePoint& a, const ChangePoint& b) { return a.index < b.index; });
  for (size_t i = 0; i < found.size(); ++i) {
    const size_t lo = i == 0 ? 0 : found[i - 1].index, c = found[i].index,
                 hi = i + 1 == found.size() ? n : found[i + 1].index;
    ChangePoint& cp = found[i];
    cp.mean_before = mean_of(x, lo, c);
    cp.mean_after = mean_of(x, c, hi);
    cp.median_before = median(std::vector<double>(x.begin() + static_cast<std::ptrdiff_t>(lo),
                                                  x.begin() + static_cast<std::ptrdiff_t>(c)));
    cp.median_after = median(std::vector<double>(x.begin() + static_cast<std::ptrdiff_t>(c),
                                                 x.begin() + static_cast<std::ptrdiff_t>(hi)));
    cp.relative_change = cp.mean_before == 0 ? 0.0 : (cp.mean_after - cp.mean_before) / std::fabs(cp.mean_before);
  }
  return found;
}

}  // namespace rtx::stats
