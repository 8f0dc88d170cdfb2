// The PLD accountant of the Poisson-subsampled Gaussian: connect-the-dots discretisation of one
// step (Doroshenko et al. 2022) from the exact hockey-stick divergence, composition by FFT, and
// eps for delta on the composed distribution. Reference: Google's dp-accounting (pld/), whose
// PLDAccountant gives the golden values. Not here: RDP (rdp.cpp).
#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <string>

#include "rtx/core/error.hpp"
#include "rtx/privacy/accountant.hpp"

namespace rtx::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Upper tail of the standard normal, P(Z > z), accurate in relative terms far out.
double norm_sf(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

// Hockey-stick divergence delta(eps) = P(L > eps) - e^eps Q(L > eps) of one step.
// remove: P = (1-q) N(0,s^2) + q N(1,s^2), Q = N(0,s^2); L(x) = log(1-q + q e^{(2x-1)/(2 s^2)}) rises in x.
// add:    P = N(0,s^2), Q = (1-q) N(0,s^2) + q N(1,s^2);  L(x) = -log(1-q + q e^{(2x-1)/(2 s^2)}) falls in x.
double hockey_stick(double q, double s, bool remove, double eps) {
  if (remove) {
    if (q < 1.0 && eps <= std::log1p(-q)) return -std::expm1(eps);  // L > eps everywhere
    const double xs = s * s * std::log((std::exp(eps) - (1.0 - q)) / q) + 0.5;  // L(x) > eps <=> x > xs
    const double p = (1.0 - q) * norm_sf(xs / s) + q * norm_sf((xs - 1.0) / s);
    const double qq = norm_sf(xs / s);
    return std::max(0.0, p - std::exp(eps) * qq);
  }
  if (q < 1.0 && eps >= -std::log1p(-q)) return 0.0;
  const double xs = s * s * std::log((std::exp(-eps) - (1.0 - q)) / q) + 0.5;  // L(x) > eps <=> x < xs
  const double p = norm_sf(-xs / s);
  const double qq = (1.0 - q) * norm_sf(-xs / s) + q * norm_sf(-(xs - 1.0) / s);
  return std::max(0.0, p - std::exp(eps) * qq);
}

double loss_at(double q, double s, bool remove, double x) {
  const double l = std::log((1.0 - q) + q * std::exp((2.0 * x - 1.0) / (2.0 * s * s)));
  return remove ? l : -l;
}

// In-place iterative radix-2 FFT; n a power of two; inverse without the 1/n.
void fft(std::vector<std::complex<double>>& a, bool inverse) {
  const size_t n = a.size();
  for (size_t i = 1, j = 0; i < n; ++i) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (size_t len = 2; len <= n; len <<= 1) {
    const size_t half = len / 2;
    std::vector<std::complex<double>> w(half);
    for (size_t k = 0; k < half; ++k) {
      const double ang = (inverse ? 2.0 : -2.0) * M_PI * static_cast<double>(k) / static_cast<double>(len);
      w[k] = {std::cos(ang), std::sin(ang)};
    }
    for (size_t i = 0; i < n; i += len)
      for (size_t k = 0; k < half; ++k) {
        const std::complex<double> u = a[i + k], v = a[i + k + half] * w[k];
        a[i + k] = u + v;
        a[i + k + half] = u - v;
      }
  }
}

// Cut the tails holding < tail mass: the lower tail moves up to the lowest kept loss, the upper
// tail goes to +inf (both pessimistic: they can only raise delta(eps)).
void truncate(Pld& p, double tail) {
  size_t lo = 0, hi = p.probs.size();
  double low_mass = 0, high_mass = 0;
  while (lo < hi && low_mass + p.probs[lo] < tail) low_mass += p.probs[lo++];
  while (hi > lo && high_mass + p.probs[hi - 1] < tail) high_mass += p.probs[--hi];
  if (lo == hi) return;  // keep as is: nothing above the tail bound
  std::vector<double> kept(p.probs.begin() + static_cast<std::ptrdiff_t>(lo), p.probs.begin() + static_cast<std::ptrdiff_t>(hi));
  kept[0] += low_mass;
  p.probs = std::move(kept);
  p.offset += static_cast<int64_t>(lo);
  p.infinity_mass += high_mass;
}

Pld compose(const Pld& a, const Pld& b, double tail) {
  if (a.discretization != b.discretization) throw_internal("pld compose: different discretizations", "privacy::compose");
  Pld r;
  r.discretization = a.discretization;
  r.offset = a.offset + b.offset;
  r.infinity_mass = 1.0 - (1.0 - a.infinity_mass) * (1.0 - b.infinity_mass);
  const size_t n = a.probs.size() + b.probs.size() - 1;
  size_t m = 1;
  while (m < n) m <<= 1;
  std::vector<std::complex<double>> fa(m), fb(m);
  for (size_t i = 0; i < a.probs.size(); ++i) fa[i] = a.probs[i];
  for (size_t i = 0; i < b.probs.size(); ++i) fb[i] = b.probs[i];
  fft(fa, false);
  fft(fb, false);
  for (size_t i = 0; i < m; ++i) fa[i] *= fb[i];
  fft(fa, true);
  r.probs.resize(n);
  for (size_t i = 0; i < n; ++i) r.probs[i] = std::max(0.0, fa[i].real() / static_cast<double>(m));
  truncate(r, tail);
  return r;
}

}  // namespace

double Pld::delta_for_epsilon(double eps) const {
  double d = infinity_mass;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double l = static_cast<double>(offset + static_cast<int64_t>(i)) * discretization;
    if (l > eps) d += probs[i] * -std::expm1(eps - l);
  }
  return std::min(1.0, d);
}

double Pld::epsilon_for_delta(double delta) const {
  if (infinity_mass > delta) return kInf;
  // Walk down from the largest loss; on [l_{i-1}, l_i) delta(eps) = inf + S1 - e^eps S2 with
  // S1 = sum_{j>=i} p_j, S2 = sum_{j>=i} p_j e^{-l_j}: solve for eps on the first segment it lands in.
  double s1 = 0, s2 = 0;
  for (size_t k = probs.size(); k-- > 0;) {
    const double l = static_cast<double>(offset + static_cast<int64_t>(k)) * discretization;
    s1 += probs[k];
    s2 += probs[k] * std::exp(-l);
    const double lower = k == 0 ? -kInf : static_cast<double>(offset + static_cast<int64_t>(k) - 1) * discretization;
    const double num = infinity_mass + s1 - delta;
    if (num <= 0 || s2 <= 0) continue;  // delta(eps) <= delta on the whole segment: go lower
    const double eps = std::log(num / s2);
    if (eps >= lower) return std::max(0.0, std::min(eps, l));
  }
  return 0.0;
}

Pld pld_sampled_gaussian(double q, double sigma, bool remove, const PldOptions& opt) {
  const char* where = "privacy::pld_sampled_gaussian";
  if (!(q > 0.0 && q <= 1.0)) throw_input("sampling rate q = " + std::to_string(q) + " must be in (0, 1]", where);
  if (!(sigma > 0.0) || std::isinf(sigma)) throw_input("noise multiplier sigma = " + std::to_string(sigma) + " must be finite and > 0", where);
  if (!(opt.discretization > 0.0)) throw_input("PLD discretization must be > 0", where);
  const double h = opt.discretization;
  const double x_lo = -opt.noise_tail_sigmas * sigma, x_hi = 1.0 + opt.noise_tail_sigmas * sigma;
  double e_lo = loss_at(q, sigma, remove, remove ? x_lo : x_hi);
  double e_hi = loss_at(q, sigma, remove, remove ? x_hi : x_lo);
  const int64_t k_lo = static_cast<int64_t>(std::floor(e_lo / h));
  const int64_t k_hi = static_cast<int64_t>(std::ceil(e_hi / h));
  if (k_hi - k_lo > 200000000) throw_input("PLD grid too large: raise the discretization", where);
  const size_t n = static_cast<size_t>(k_hi - k_lo + 1);
  std::vector<double> deltas(n);
  for (size_t i = 0; i < n; ++i) deltas[i] = hockey_stick(q, sigma, remove, static_cast<double>(k_lo + static_cast<int64_t>(i)) * h);
  for (size_t i = 1; i < n; ++i) deltas[i] = std::min(deltas[i], deltas[i - 1]);  // non-increasing
  // Connect the dots (Doroshenko et al. 2022, Algorithm 1) on a fixed gap h, delta_0 = 1 at -inf:
  //   p_1 = (1 - delta_1) + (delta_2 - delta_1)/(e^h - 1),
  //   p_i = (delta_i - delta_{i-1})/(e^-h - 1) + (delta_{i+1} - delta_i)/(e^h - 1),
  //   p_n = (delta_n - delta_{n-1})/(e^-h - 1), mass at +inf = delta_n.
  Pld p;
  p.discretization = h;
  p.offset = k_lo;
  p.probs.assign(n, 0.0);
  const double em = std::expm1(-h), ep = std::expm1(h);
  for (size_t i = 0; i < n; ++i) {
    double v = i == 0 ? 1.0 - deltas[0] : (deltas[i] - deltas[i - 1]) / em;
    if (i + 1 < n) v += (deltas[i + 1] - deltas[i]) / ep;
    p.probs[i] = std::max(0.0, v);
  }
  p.infinity_mass = deltas[n - 1];
  return p;
}

Pld self_compose(const Pld& p, int64_t times, const PldOptions& opt) {
  if (times < 1) throw_input("self_compose: times = " + std::to_string(times) + " must be >= 1", "privacy::self_compose");
  Pld result, base = p;
  bool have = false;
  for (int64_t t = times; t > 0; t >>= 1) {
    if (t & 1) {
      result = have ? compose(result, base, opt.tail_mass_truncation) : base;
      have = true;
    }
    if (t > 1) base = compose(base, base, opt.tail_mass_truncation);
  }
  return result;
}

EpsilonResult pld_epsilon(const std::vector<SgmStep>& history, double delta, const PldOptions& opt) {
  if (!(delta > 0.0 && delta < 1.0)) throw_input("delta = " + std::to_string(delta) + " is outside (0, 1)", "privacy::pld_epsilon");
  double eps = 0.0;
  for (bool remove : {true, false}) {
    Pld total;
    bool have = false;
    for (const SgmStep& s : history) {
      if (s.steps < 0) throw_input("steps = " + std::to_string(s.steps) + " is negative", "privacy::pld_epsilon");
      if (s.steps == 0 || s.q == 0.0) continue;
      if (s.sigma == 0.0) return {kInf, 0.0};
      const Pld one = self_compose(pld_sampled_gaussian(s.q, s.sigma, remove, opt), s.steps, opt);
      total = have ? compose(total, one, opt.tail_mass_truncation) : one;
      have = true;
    }
    if (have) eps = std::max(eps, total.epsilon_for_delta(delta));
  }
  return {eps, 0.0};
}

}  // namespace rtx::privacy
