// Randomized response and RR-with-prior for labels (label_dp.hpp).
#include "rtx/privacy/label_dp.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"

namespace rtx::privacy {
namespace {

void check_eps_k(double eps, int64_t k, const char* where) {
  if (!(eps > 0)) throw_input("label-DP epsilon " + std::to_string(eps) + " must be > 0", where);
  if (k < 2) throw_input("label-DP needs at least 2 classes, got " + std::to_string(k), where);
}

// exp(eps) / (exp(eps) + k - 1) without overflow for large eps.
double keep(double eps, int64_t k) {
  if (std::isinf(eps)) return 1.0;
  return 1.0 / (1.0 + static_cast<double>(k - 1) * std::exp(-eps));
}

}  // namespace

double rr_keep_probability(double epsilon, int64_t classes) {
  check_eps_k(epsilon, classes, "privacy::rr_keep_probability");
  return keep(epsilon, classes);
}

std::vector<int32_t> rr_prior_top_k(const std::vector<double>& prior, double epsilon) {
  const char* where = "privacy::rr_prior_top_k";
  const int64_t K = static_cast<int64_t>(prior.size());
  check_eps_k(epsilon, K, where);
  double sum = 0;
  for (double p : prior) {
    if (!(p >= 0)) throw_input("prior has a negative or NaN entry", where);
    sum += p;
  }
  if (std::abs(sum - 1.0) > 1e-6) throw_input("prior sums to " + std::to_string(sum) + ", not 1", where);
  std::vector<int32_t> order(static_cast<size_t>(K));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return prior[a] > prior[b]; });
  double best = -1, mass = 0;
  int64_t best_k = 1;
  for (int64_t k = 1; k <= K; ++k) {
    mass += prior[static_cast<size_t>(order[static_cast<size_t>(k - 1)])];
    const double v = mass * keep(epsilon, k);
    if (v > best + 1e-15) {
      best = v;
      best_k = k;
    }
  }
  order.resize(static_cast<size_t>(best_k));
  return order;
}

std::vector<double> rr_prior_matrix(const std::vector<double>& prior, double epsilon) {
  const int64_t K = static_cast<int64_t>(prior.size());
  const std::vector<int32_t> top = rr_prior_top_k(prior, epsilon);
  const int64_t k = static_cast<int64_t>(top.size());
  std::vector<double> m(static_cast<size_t>(K * K), 0.0);
  std::vector<bool> in(static_cast<size_t>(K), false);
  for (int32_t c : top) in[static_cast<size_t>(c)] = true;
  const double kp = k == 1 ? 1.0 : keep(epsilon, k), other = k == 1 ? 0.0 : (1.0 - kp) / static_cast<double>(k - 1);
  for (int64_t y = 0; y < K; ++y)
    for (int32_t o : top) {
      double p;
      if (in[static_cast<size_t>(y)]) p = o == y ? kp : other;
      else p = 1.0 / static_cast<double>(k);
      m[static_cast<size_t>(y * K + o)] = p;
    }
  return m;
}

std::vector<int32_t> randomize_labels(const std::vector<int32_t>& labels, int64_t classes, double epsilon,
                                      uint64_t seed, const std::vector<double>& prior) {
  const char* where = "privacy::randomize_labels";
  check_eps_k(epsilon, classes, where);
  const size_t K = static_cast<size_t>(classes);
  const bool per_example = prior.size() == labels.size() * K && !labels.empty() && prior.size() != K;
  if (!prior.empty() && prior.size() != K && !per_example)
    throw_input("prior has " + std::to_string(prior.size()) + " entries: give K or (examples x K)", where);
  std::vector<int32_t> out(labels.size());
  std::vector<int32_t> shared_top;
  if (prior.size() == K) shared_top = rr_prior_top_k(prior, epsilon);
  Philox rng(seed, uint64_t{1} << 34);
  for (size_t i = 0; i < labels.size(); ++i) {
    const int32_t y = labels[i];
    if (y < 0 || y >= classes)
      throw_input("label " + std::to_string(y) + " of example " + std::to_string(i) + " outside [0, " + std::to_string(classes) + ")", where);
    const double u = rng.next_double(), v = rng.next_double();
    std::vector<int32_t> top;
    if (prior.empty()) {
      top.resize(K);
      std::iota(top.begin(), top.end(), 0);
    } else if (per_example) {
      top = rr_prior_top_k(std::vector<double>(prior.begin() + static_cast<std::ptrdiff_t>(i * K),
                                               prior.begin() + static_cast<std::ptrdiff_t>((i + 1) * K)), epsilon);
    } else {
      top = shared_top;
    }
    const int64_t k = static_cast<int64_t>(top.size());
    const bool in = std::find(top.begin(), top.end(), y) != top.end();
    if (!in) {
      out[i] = top[static_cast<size_t>(std::min<int64_t>(k - 1, static_cast<int64_t>(v * static_cast<double>(k))))];
    } else if (k == 1 || u < keep(epsilon, k)) {
      out[i] = y;
    } else {
      // uniform over the k - 1 other members of the set
      std::vector<int32_t> others;
      for (int32_t c : top)
        if (c != y) others.push_back(c);
      out[i] = others[static_cast<size_t>(std::min<int64_t>(k - 2, static_cast<int64_t>(v * static_cast<double>(k - 1))))];
    }
  }
  return out;
}

}  // namespace rtx::privacy
