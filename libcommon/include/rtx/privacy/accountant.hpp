// Privacy accounting for the Poisson-subsampled Gaussian mechanism (DP-SGD): an RDP accountant
// that matches Opacus's numbers, the RDP -> (eps, delta) conversion Opacus uses, a PLD accountant
// (connect-the-dots discretisation as in Google's dp-accounting), and the inverse (noise for a
// target epsilon). Pure math on doubles: no tensors, no I/O. See docs/privacy.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rtx::privacy {

/// One homogeneous run of the mechanism: `steps` steps, each adding N(0, (sigma*C)^2) to the sum
/// of per-example gradients clipped to norm C, over a Poisson sample with rate q (each example in
/// independently with probability q). sigma is the noise multiplier (unitless, >= 0), q in [0, 1].
struct SgmStep {
  double sigma = 0;
  double q = 0;
  int64_t steps = 0;
};

/// Opacus's default RDP orders (RDPAccountant.DEFAULT_ALPHAS): 1.1, 1.2, ..., 10.9, then 12..63.
const std::vector<double>& default_rdp_orders();

/// RDP of one step of the sampled Gaussian mechanism at order alpha > 1 (Mironov, Talwar & Zhang
/// 2019, "Renyi Differential Privacy of the Sampled Gaussian Mechanism", arXiv:1908.10530, Sec. 3.3):
/// rdp = log(A_alpha) / (alpha - 1), with
///   integer alpha:    A_alpha = sum_{i=0}^{alpha} C(alpha,i) q^i (1-q)^(alpha-i) exp((i^2-i)/(2 sigma^2))  (Sec. 3.3, Eq. for integer orders)
///   fractional alpha: A_alpha = A0 + A1 split at z0 = sigma^2 log(1/q - 1) + 1/2 (Sec. 3.3, Eqs. 4-5;
///                     series summed until both terms fall below e^-30, as Opacus/TF Privacy do).
/// Edge cases as Opacus: q = 0 -> 0; sigma = 0 -> +inf; q = 1 -> alpha / (2 sigma^2) (Mironov 2017,
/// Prop. 7, the plain Gaussian). Throws rtx::Error(Input) on alpha <= 1, q outside [0,1], sigma < 0.
double rdp_sampled_gaussian(double q, double sigma, double alpha);

/// Total RDP at each order of a sequence of runs (RDP composes additively: Mironov 2017, Prop. 1).
std::vector<double> compute_rdp(const std::vector<SgmStep>& history, const std::vector<double>& orders);

/// Result of a conversion: epsilon and the order (RDP) that achieved it.
struct EpsilonResult {
  double epsilon = 0;
  double order = 0;  ///< RDP: the optimal alpha; PLD: 0
};

/// RDP -> (eps, delta): Balle, Barthe, Gaboardi, Hsu & Sato 2020, "Hypothesis testing
/// interpretations and Renyi DP", Theorem 21 (arXiv:1905.09982), the conversion of Opacus's
/// get_privacy_spent:  eps(alpha) = rdp - (log delta + log alpha)/(alpha-1) + log((alpha-1)/alpha),
/// minimised over the given orders (NaNs skipped; all NaN -> +inf). delta in (0, 1).
EpsilonResult rdp_to_epsilon(const std::vector<double>& orders, const std::vector<double>& rdp, double delta);

/// eps for delta of `history` with the RDP accountant at `orders` (default: Opacus's).
EpsilonResult rdp_epsilon(const std::vector<SgmStep>& history, double delta,
                          const std::vector<double>& orders = default_rdp_orders());

/// Options of the PLD accountant (defaults as dp-accounting's PLDAccountant).
struct PldOptions {
  double discretization = 1e-4;         ///< grid step of privacy-loss values (nats)
  double tail_mass_truncation = 1e-15;  ///< mass dropped at each composition's tails (upper tail -> +inf: pessimistic)
  double noise_tail_sigmas = 10.0;      ///< the single-step loss grid covers x in [-k sigma, 1 + k sigma]
};

/// Privacy loss distribution: probability mass on losses (offset + i) * discretization, plus mass
/// at +infinity. Pessimistic (its hockey-stick curve upper-bounds the true one).
struct Pld {
  double discretization = 1e-4;
  int64_t offset = 0;          ///< loss index of probs[0]
  std::vector<double> probs;   ///< masses on the grid
  double infinity_mass = 0;
  /// delta(eps) = inf_mass + sum_l p_l (1 - e^(eps - l))_+  (the eps-hockey-stick divergence).
  double delta_for_epsilon(double epsilon) const;
  /// Smallest eps >= 0 with delta_for_epsilon(eps) <= delta (exact on the piecewise curve);
  /// +inf when infinity_mass > delta.
  double epsilon_for_delta(double delta) const;
};

/// One step of the Poisson-subsampled Gaussian as two PLDs, for removal (the example present vs
/// absent) and addition: Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, "Connect the Dots"
/// (arXiv:2207.04380), Algorithm 1 on a fixed grid, using the exact hockey-stick divergence of the
/// mixture (1-q) N(0, sigma^2) + q N(1, sigma^2) vs N(0, sigma^2).
Pld pld_sampled_gaussian(double q, double sigma, bool remove, const PldOptions& opt = {});

/// The PLD of `times` compositions of `p` (FFT convolution by repeated squaring; tail mass below
/// opt.tail_mass_truncation is cut: the upper tail goes to +inf, the lower to the lowest kept loss).
Pld self_compose(const Pld& p, int64_t times, const PldOptions& opt = {});

/// eps for delta of `history` with the PLD accountant: max over the remove and add relations
/// (as dp-accounting's PLDAccountant under ADD_OR_REMOVE_ONE).
EpsilonResult pld_epsilon(const std::vector<SgmStep>& history, double delta, const PldOptions& opt = {});

/// Which accountant: "rdp" or "pld"; other names throw rtx::Error(Input).
enum class Accountant { Rdp, Pld };
Accountant parse_accountant(const std::string& name);
const char* accountant_name(Accountant a);

/// eps for delta with the chosen accountant.
double epsilon(Accountant a, const std::vector<SgmStep>& history, double delta);

/// The noise multiplier sigma that gives at most `target_epsilon` after `steps` steps at rate q:
/// Opacus's get_noise_multiplier bisection (sigma_high doubled from 20 until eps <= target, then
/// bisection on [0, sigma_high] until target - eps(sigma_high) <= epsilon_tolerance). Returns
/// sigma_high, so eps(result) <= target_epsilon. Throws rtx::Error(Input) when sigma would
/// exceed 1e6 (budget too small) or arguments are out of range.
double noise_multiplier_for_epsilon(double target_epsilon, double delta, double q, int64_t steps,
                                    Accountant a = Accountant::Rdp, double epsilon_tolerance = 0.01);

}  // namespace rtx::privacy
