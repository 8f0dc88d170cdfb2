// The RDP accountant of the Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019), written
// to give Opacus's numbers (opacus/accountants/analysis/rdp.py, itself from TF Privacy), and the
// inverse (noise multiplier for a target epsilon). Not here: the PLD accountant (pld.cpp).
#include <cmath>
#include <limits>
#include <string>

#include "rtx/core/error.hpp"
#include "rtx/privacy/accountant.hpp"

namespace rtx::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(x) + exp(y)), exact for -inf operands (Opacus's _log_add).
double log_add(double x, double y) {
  const double a = std::min(x, y), b = std::max(x, y);
  if (a == -kInf) return b;
  return std::log1p(std::exp(a - b)) + b;
}

// log(exp(x) - exp(y)) for x >= y (Opacus's _log_sub).
double log_sub(double x, double y) {
  if (x < y) throw_internal("rdp: log-space subtraction would be negative", "privacy::log_sub");
  if (y == -kInf) return x;
  if (x == y) return -kInf;
  const double d = std::expm1(x - y);
  if (!std::isfinite(d)) return x;
  return std::log(d) + y;
}

// log(erfc(x)) accurate for large x (Opacus uses log 2 + scipy's log_ndtr(-x sqrt 2)). erfc is
// exact in relative terms down to its underflow (x ~ 26); beyond, the asymptotic series
// erfc(x) = e^{-x^2}/(x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8) ...).
double log_erfc(double x) {
  if (x < 25.0) return std::log(std::erfc(x));
  const double r = 1.0 / (2.0 * x * x);
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 12; ++k) {
    term *= -(2.0 * k - 1.0) * r;
    sum += term;
  }
  return -x * x - std::log(x) - 0.5 * std::log(M_PI) + std::log(sum);
}

// log|C(a, k)| and its sign for real a >= 0 and integer k >= 0 (scipy.special.binom's value).
double log_abs_binom(double a, double k, int* sign) {
  int s1 = 1, s2 = 1, s3 = 1;
  const double l1 = lgamma_r(a + 1.0, &s1);
  const double l2 = lgamma_r(k + 1.0, &s2);
  const double l3 = lgamma_r(a - k + 1.0, &s3);
  *sign = s1 * s2 * s3;
  return l1 - l2 - l3;
}

// log A_alpha for integer alpha (MTZ 2019 Sec. 3.3): binomial expansion of E[(1-q+q e^{..})^alpha].
double log_a_int(double q, double sigma, int64_t alpha) {
  double log_a = -kInf;
  const double s2 = sigma * sigma;
  for (int64_t i = 0; i <= alpha; ++i) {
    int sign = 1;
    const double log_coef = log_abs_binom(static_cast<double>(alpha), static_cast<double>(i), &sign) +
                            static_cast<double>(i) * std::log(q) + static_cast<double>(alpha - i) * std::log1p(-q);
    const double s = log_coef + static_cast<double>(i * i - i) / (2.0 * s2);
    log_a = log_add(log_a, s);
  }
  return log_a;
}

// log A_alpha for fractional alpha (MTZ 2019 Sec. 3.3, the two series split at z0).
double log_a_frac(double q, double sigma, double alpha) {
  double log_a0 = -kInf, log_a1 = -kInf;
  const double s2 = sigma * sigma;
  const double z0 = s2 * std::log(1.0 / q - 1.0) + 0.5;
  for (int64_t ii = 0;; ++ii) {
    const double i = static_cast<double>(ii);
    int sign = 1;
    const double log_coef = log_abs_binom(alpha, i, &sign);
    const double j = alpha - i;
    const double log_t0 = log_coef + i * std::log(q) + j * std::log1p(-q);
    const double log_t1 = log_coef + j * std::log(q) + i * std::log1p(-q);
    const double log_e0 = std::log(0.5) + log_erfc((i - z0) / (std::sqrt(2.0) * sigma));
    const double log_e1 = std::log(0.5) + log_erfc((z0 - j) / (std::sqrt(2.0) * sigma));
    const double log_s0 = log_t0 + (i * i - i) / (2.0 * s2) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2.0 * s2) + log_e1;
    if (sign > 0) {
      log_a0 = log_add(log_a0, log_s0);
      log_a1 = log_add(log_a1, log_s1);
    } else {
      log_a0 = log_sub(log_a0, log_s0);
      log_a1 = log_sub(log_a1, log_s1);
    }
    if (std::max(log_s0, log_s1) < -30.0) break;
    if (ii > 20000000) throw_internal("rdp: fractional-order series did not converge", "privacy::rdp");
  }
  return log_add(log_a0, log_a1);
}

void check_q_sigma(double q, double sigma, const char* where) {
  if (!(q >= 0.0 && q <= 1.0)) throw_input("sampling rate q = " + std::to_string(q) + " is outside [0, 1]", where);
  if (!(sigma >= 0.0) || std::isinf(sigma))
    throw_input("noise multiplier sigma = " + std::to_string(sigma) + " must be finite and >= 0", where);
}

}  // namespace

const std::vector<double>& default_rdp_orders() {
  static const std::vector<double> orders = [] {
    std::vector<double> o;
    for (int x = 1; x < 100; ++x) o.push_back(1.0 + x / 10.0);
    for (int a = 12; a < 64; ++a) o.push_back(a);
    return o;
  }();
  return orders;
}

double rdp_sampled_gaussian(double q, double sigma, double alpha) {
  check_q_sigma(q, sigma, "privacy::rdp_sampled_gaussian");
  if (!(alpha > 1.0)) throw_input("RDP order alpha = " + std::to_string(alpha) + " must be > 1", "privacy::rdp_sampled_gaussian");
  if (q == 0.0) return 0.0;
  if (sigma == 0.0) return kInf;
  if (q == 1.0) return alpha / (2.0 * sigma * sigma);
  if (std::isinf(alpha)) return kInf;
  const double log_a = (alpha == std::floor(alpha) && alpha < 1e9) ? log_a_int(q, sigma, static_cast<int64_t>(alpha))
                                                                   : log_a_frac(q, sigma, alpha);
  return log_a / (alpha - 1.0);
}

std::vector<double> compute_rdp(const std::vector<SgmStep>& history, const std::vector<double>& orders) {
  std::vector<double> rdp(orders.size(), 0.0);
  for (const SgmStep& s : history) {
    if (s.steps < 0) throw_input("steps = " + std::to_string(s.steps) + " is negative", "privacy::compute_rdp");
    for (size_t k = 0; k < orders.size(); ++k)
      rdp[k] += rdp_sampled_gaussian(s.q, s.sigma, orders[k]) * static_cast<double>(s.steps);
  }
  return rdp;
}

EpsilonResult rdp_to_epsilon(const std::vector<double>& orders, const std::vector<double>& rdp, double delta) {
  if (orders.size() != rdp.size() || orders.empty())
    throw_input("orders (" + std::to_string(orders.size()) + ") and rdp (" + std::to_string(rdp.size()) +
                    ") must have the same, non-zero length", "privacy::rdp_to_epsilon");
  if (!(delta > 0.0 && delta < 1.0)) throw_input("delta = " + std::to_string(delta) + " is outside (0, 1)", "privacy::rdp_to_epsilon");
  EpsilonResult best{kInf, std::nan("")};
  bool any = false;
  for (size_t k = 0; k < orders.size(); ++k) {
    const double a = orders[k];
    const double eps = rdp[k] - (std::log(delta) + std::log(a)) / (a - 1.0) + std::log((a - 1.0) / a);
    if (std::isnan(eps)) continue;
    if (!any || eps < best.epsilon) best = {eps, a};  // first minimum, as numpy's nanargmin
    any = true;
  }
  return best;
}

EpsilonResult rdp_epsilon(const std::vector<SgmStep>& history, double delta, const std::vector<double>& orders) {
  if (history.empty()) return {0.0, 0.0};
  return rdp_to_epsilon(orders, compute_rdp(history, orders), delta);
}

Accountant parse_accountant(const std::string& name) {
  if (name == "rdp") return Accountant::Rdp;
  if (name == "pld") return Accountant::Pld;
  throw_input("unknown accountant '" + name + "'", "accountant", "use rdp or pld");
}

const char* accountant_name(Accountant a) { return a == Accountant::Rdp ? "rdp" : "pld"; }

double epsilon(Accountant a, const std::vector<SgmStep>& history, double delta) {
  return a == Accountant::Rdp ? rdp_epsilon(history, delta).epsilon : pld_epsilon(history, delta).epsilon;
}

double noise_multiplier_for_epsilon(double target_epsilon, double delta, double q, int64_t steps, Accountant a,
                                    double epsilon_tolerance) {
  const char* where = "privacy::noise_multiplier_for_epsilon";
  if (!(target_epsilon > 0.0) || std::isinf(target_epsilon))
    throw_input("target epsilon = " + std::to_string(target_epsilon) + " must be finite and > 0", where);
  if (!(epsilon_tolerance > 0.0)) throw_input("epsilon tolerance must be > 0", where);
  if (steps < 1) throw_input("steps = " + std::to_string(steps) + " must be >= 1", where);
  check_q_sigma(q, 0.0, where);
  const auto eps_of = [&](double sigma) { return epsilon(a, {SgmStep{sigma, q, steps}}, delta); };
  double sigma_low = 0.0, sigma_high = 10.0, eps_high = kInf;
  while (eps_high > target_epsilon) {
    sigma_high *= 2.0;
    // Opacus computes eps at sigma_high and then raises when sigma_high > 1e6; the outcome is the
    // same without the (slow, for huge sigma) evaluation.
    if (sigma_high > 1e6)
      throw_input("the privacy budget is too small: epsilon " + std::to_string(target_epsilon) +
                      " needs a noise multiplier above 1e6", where, "raise --dp-epsilon or lower the sampling rate or steps");
    eps_high = eps_of(sigma_high);
  }
  while (target_epsilon - eps_high > epsilon_tolerance) {
    const double sigma = 0.5 * (sigma_low + sigma_high);
    const double eps = eps_of(sigma);
    if (eps < target_epsilon) {
      sigma_high = sigma;
      eps_high = eps;
    } else {
      sigma_low = sigma;
    }
  }
  return sigma_high;
}

}  // namespace rtx::privacy
