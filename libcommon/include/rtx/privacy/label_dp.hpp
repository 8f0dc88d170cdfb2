// Label differential privacy for classification: randomized response (Warner 1965) and
// RR-with-prior (Ghazi, Golowich, Kumar, Manurangsi & Zhang 2021, "Deep Learning with Label
// Differential Privacy", NeurIPS, Algorithm 2). Each label is randomized once (eps-label-DP for
// the whole training run: training on the noisy labels is post-processing). Not here: DP-SGD.
#pragma once

#include <cstdint>
#include <vector>

namespace rtx::privacy {

/// Probability that RR_eps over K classes keeps the true label: e^eps / (e^eps + K - 1); every
/// other label has 1 / (e^eps + K - 1). eps > 0 (inf keeps the label), K >= 2; else Error(Input).
double rr_keep_probability(double epsilon, int64_t classes);

/// The RR-with-prior output set for a prior over K classes: the k (1..K) largest-prior classes
/// that maximise sum_{top k} prior * e^eps / (e^eps + k - 1) (ties: the smaller k; classes of equal
/// prior in index order). Returns the chosen classes. Error(Input) for a prior that is not a
/// probability vector (negative, or sum off 1 by more than 1e-6) or K < 2.
std::vector<int32_t> rr_prior_top_k(const std::vector<double>& prior, double epsilon);

/// P(output = o | label = y) of RR-with-prior with prior `prior` (RR_eps restricted to the top-k
/// set; a label outside it gets a uniform draw from the set). K x K row-major, rows sum to 1.
/// With a uniform prior and k = K it is plain RR.
std::vector<double> rr_prior_matrix(const std::vector<double>& prior, double epsilon);

/// Randomize labels in [0, K) with RR (prior empty) or RR-with-prior (one prior for every
/// example, or one per example: prior.size() == K or labels.size() * K), from Philox(seed,
/// subseq 2^34): draw 2i and 2i+1 for example i. Error(Input) for a label outside [0, K).
std::vector<int32_t> randomize_labels(const std::vector<int32_t>& labels, int64_t classes, double epsilon,
                                      uint64_t seed, const std::vector<double>& prior = {});

}  // namespace rtx::privacy
