// A/B verdicts from Mann-Whitney significance and a Hodges-Lehmann ratio CI (compare.hpp).
#include "rtx/stats/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "rtx/core/error.hpp"
#include "rtx/stats/stats.hpp"

namespace rtx::stats {
namespace {

constexpr size_t kMaxSide = 2000;

std::vector<double> thin(const std::vector<double>& v) {
  if (v.size() <= kMaxSide) return v;
  const size_t k = (v.size() + kMaxSide - 1) / kMaxSide;
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); i += k) out.push_back(v[i]);
  return out;
}

}  // namespace

const char* verdict_name(Verdict v) noexcept {
  switch (v) {
    case Verdict::Same: return "same";
    case Verdict::Faster: return "faster";
    case Verdict::Slower: return "slower";
    case Verdict::Ambiguous: return "ambiguous";
  }
  return "?";
}

Comparison compare_samples(const std::vector<double>& base, const std::vector<double>& fresh, const CompareOptions& o) {
  if (!(o.threshold >= 0 && o.threshold < 1))
    throw_usage("threshold " + std::to_string(o.threshold) + " is not in [0,1)", "--threshold", "e.g. 5% or 0.05");
  Comparison c;
  c.n_base = base.size();
  c.n_new = fresh.size();
  if (base.empty() || fresh.empty()) {
    c.reason = "no samples on one side";
    return c;
  }
  const auto b = thin(base), f = thin(fresh);
  const Shift s = hodges_lehmann_ratio(b, f, o.level);
  c.ratio = s.estimate;
  c.lo = s.ci.lo;
  c.hi = s.ci.hi;
  c.p = mann_whitney_u(b, f).p;
  const double up = 1 + o.threshold, down = 1 - o.threshold;
  const std::string ci = std::string(kTimeRatioLabel) + " " + format_change(c);
  if (c.n_base < o.min_samples || c.n_new < o.min_samples) {
    c.verdict = Verdict::Ambiguous;
    c.reason = "too few samples (" + std::to_string(c.n_base) + " base, " + std::to_string(c.n_new) + " new; need " +
               std::to_string(o.min_samples) + ")";
  } else if (c.lo >= down && c.hi <= up) {
    c.verdict = Verdict::Same;
    c.reason = ci + " within [" + format_time_ratio(down) + ", " + format_time_ratio(up) + "]";
  } else if (c.p < o.alpha && c.lo > up) {
    c.verdict = Verdict::Slower;
    c.reason = ci + " above " + format_time_ratio(up) + ", p=" + std::to_string(c.p);
  } else if (c.p < o.alpha && c.hi < down) {
    c.verdict = Verdict::Faster;
    c.reason = ci + " below " + format_time_ratio(down) + ", p=" + std::to_string(c.p);
  } else {
    c.verdict = Verdict::Ambiguous;
    c.reason = ci + (c.p < o.alpha ? " straddles the threshold" : " not significant but too wide to rule out a change") +
               ", p=" + std::to_string(c.p);
  }
  return c;
}

std::string format_time_ratio(double ratio) {
  if (!std::isfinite(ratio) || !(ratio > 0)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, ratio < 0.1 ? "%.3g" : ratio < 10 ? "%.3f" : "%.4g", ratio);
  return b;
}

std::string format_time_ratio_ci(double ratio, double lo, double hi) {
  const std::string r = format_time_ratio(ratio);
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo > 0) || !(hi > 0)) return r;
  return r + " [" + format_time_ratio(lo) + ", " + format_time_ratio(hi) + "]";
}

std::string format_saving_as_time_ratio(double saved, double lo, double hi) {
  return format_time_ratio_ci(1 - saved, 1 - hi, 1 - lo);
}

std::string format_change(const Comparison& c) { return format_time_ratio_ci(c.ratio, c.lo, c.hi); }

CommonMode common_mode_shift(const std::vector<Comparison>& cs) {
  CommonMode m;
  m.of = cs.size();
  if (cs.empty()) return m;
  size_t slower = 0, faster = 0;
  std::vector<double> ratios;
  for (const Comparison& c : cs) {
    slower += c.verdict == Verdict::Slower;
    faster += c.verdict == Verdict::Faster;
    ratios.push_back(c.ratio);
  }
  m.median_ratio = median(ratios);
  m.direction = slower >= faster ? Verdict::Slower : Verdict::Faster;
  m.shifted = std::max(slower, faster);
  m.detected = m.shifted >= kMinCommonModeCases && 2 * m.shifted > m.of;
  if (!m.detected) m.direction = Verdict::Same;
  return m;
}

ProcessNormalized normalize_process_speed(const std::vector<RoundSeries>& base, const std::vector<RoundSeries>& fresh) {
  if (base.size() != fresh.size())
    throw_input("normalize_process_speed: " + std::to_string(base.size()) + " base series but " + std::to_string(fresh.size()) +
                " new ones (one per case on each side)");
  const size_t n = base.size();
  auto check = [](const RoundSeries& s, size_t c, const char* side) {
    if (s.round.size() != s.median.size())
      throw_input(std::string("normalize_process_speed: ") + side + " case " + std::to_string(c) + " has " +
                  std::to_string(s.round.size()) + " round numbers for " + std::to_string(s.median.size()) + " medians");
    for (double m : s.median)
      if (!std::isfinite(m) || !(m > 0))
        throw_input(std::string("normalize_process_speed: ") + side + " case " + std::to_string(c) + " has a median of " +
                    std::to_string(m) + " (must be finite and positive)");
  };
  std::vector<double> pooled(n);
  for (size_t c = 0; c < n; ++c) {
    check(base[c], c, "base");
    check(fresh[c], c, "new");
    std::vector<double> all = base[c].median;
    all.insert(all.end(), fresh[c].median.begin(), fresh[c].median.end());
    pooled[c] = all.empty() ? 0 : median(all);
  }
  ProcessNormalized out;
  out.base.resize(n);
  out.fresh.resize(n);
  out.sensitivity.assign(n, 0.0);
  // Per side and case: the rounds kept and log of (median, leave-one-out factor).
  struct Point {
    uint64_t round;
    double m, y, x;  // median (s), log median, log factor
  };
  auto points = [&](const std::vector<RoundSeries>& in, std::vector<double>& factors) {
    std::map<uint64_t, std::vector<std::pair<size_t, double>>> by_round;  // round -> (case, m / M_case)
    for (size_t c = 0; c < n; ++c)
      for (size_t k = 0; k < in[c].round.size(); ++k) by_round[in[c].round[k]].push_back({c, in[c].median[k] / pooled[c]});
    for (const auto& [round, rel] : by_round) {
      std::vector<double> all;
      for (const auto& [c, q] : rel) all.push_back(q);
      factors.push_back(median(all));
    }
    std::vector<std::vector<Point>> pts(n);
    for (size_t c = 0; c < n; ++c)
      for (size_t k = 0; k < in[c].round.size(); ++k) {
        std::vector<double> others;
        for (const auto& [c2, q] : by_round[in[c].round[k]])
          if (c2 != c) others.push_back(q);
        if (others.size() < kMinNormalizeOthers) continue;
        pts[c].push_back({in[c].round[k], in[c].median[k], std::log(in[c].median[k]), std::log(median(others))});
      }
    return pts;
  };
  const auto pb = points(base, out.base_factor), pf = points(fresh, out.fresh_factor);
  for (size_t c = 0; c < n; ++c) {
    // theta: the slope of log median on log factor within each side (pooled), so a difference
    // between the sides (the change under test) cannot leak into it. Clamped to [0, kMaxSensitivity].
    double sxy = 0, sxx = 0, xsum = 0;
    size_t xn = 0;
    for (const auto* side : {&pb[c], &pf[c]}) {
      if (side->empty()) continue;
      double mx = 0, my = 0;
      for (const Point& p : *side) {
        mx += p.x;
        my += p.y;
        xsum += p.x;
        ++xn;
      }
      mx /= static_cast<double>(side->size());
      my /= static_cast<double>(side->size());
      for (const Point& p : *side) {
        sxy += (p.x - mx) * (p.y - my);
        sxx += (p.x - mx) * (p.x - mx);
      }
    }
    // Shrunk toward 1 (common mode) by a prior worth kSensitivityPriorRounds rounds of a
    // kSensitivityPriorSpread process spread: with no process variation inside the sides there
    // is nothing to learn theta from, and a shift between the runs is taken as the process's.
    const double lambda = kSensitivityPriorRounds * kSensitivityPriorSpread * kSensitivityPriorSpread;
    const double theta = std::clamp((sxy + lambda) / (sxx + lambda), 0.0, kMaxSensitivity);
    const double xbar = xn ? xsum / static_cast<double>(xn) : 0.0;
    out.sensitivity[c] = theta;
    for (auto [in, o] : {std::pair{&pb[c], &out.base[c]}, std::pair{&pf[c], &out.fresh[c]}})
      for (const Point& p : *in) {
        o->round.push_back(p.round);
        o->median.push_back(theta == 0 ? p.m : std::exp(p.y - theta * (p.x - xbar)));  // theta 0: exactly raw
      }
  }
  return out;
}

}  // namespace rtx::stats
