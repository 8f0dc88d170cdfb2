// DP-SGD (Abadi et al. 2016) for an MLP classifier built as a Polygraph IR graph: per-example
// gradient norms by ghost clipping through the IR (Goodfellow 2015; Li et al. 2022), clipping to
// C, Gaussian noise sigma*C from Philox, Poisson sampling with rate q (variable batch sizes,
// split into physical chunks whose clipped sums accumulate before the one noise draw), and the
// privacy ledger. Not here: the accountants (accountant.hpp), convolutional models.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rtx/ir/graph.hpp"
#include "rtx/privacy/accountant.hpp"

namespace rtx::privacy {

/// An image classification dataset: x (N, D) f32 in [0, 1], labels in [0, classes).
struct ImageDataset {
  int64_t n = 0, dim = 0, classes = 0;
  std::vector<float> x;
  std::vector<int32_t> y;
};

/// Fashion-MNIST (or MNIST) from `dir`: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz], pixels
/// scaled to [0, 1]. Error(Input) naming the file on a bad file or images/labels count mismatch.
ImageDataset load_fashion_mnist(const std::string& dir, bool train);

/// MLP layer sizes, e.g. {784, 256, 10}: linear -> relu -> ... -> linear, cross-entropy loss.
struct MlpShape {
  std::vector<int64_t> sizes;
};

/// The graphs DP-SGD runs, over a symbolic batch B.
/// `step`: inputs "x" (B, D) and "y" i32 (B); params "l<k>.w" (N_k, K_k), "l<k>.b" (N_k); outputs
/// [losses (B), a_0, dz_0, a_1, dz_1, ...] where a_k (B, K_k) is layer k's input and dz_k (B, N_k)
/// the gradient of sum(losses) wrt its output z_k (from ir::backward): per example it is that
/// example's own gradient, so ||g_i||^2 = sum_k ||dz_k[i]||^2 (||a_k[i]||^2 + 1) (ghost norm).
/// `clipped_sum`: inputs "c" (B, 1), "a<k>", "dz<k>"; outputs per layer [(dz_k*c)^T a_k (N_k,K_k),
/// sum_B dz_k*c (N_k)]: the sum of clipped per-example gradients without materialising them.
/// `per_sample`: inputs "a<k>", "dz<k>"; outputs per layer dz_k (B,N_k,1) * a_k (B,1,K_k) -> (B,N_k,K_k):
/// the materialised per-example weight gradients (the memory-hungry alternative; for tests and the
/// memory comparison). `forward`: "x" -> logits (B, classes).
struct MlpGraphs {
  MlpShape shape;
  ir::Graph step{"dp_mlp_step"}, clipped_sum{"dp_clipped_sum"}, per_sample{"dp_per_sample"}, forward{"dp_mlp_forward"};
};
MlpGraphs build_mlp_graphs(const MlpShape& shape);

/// Parameters by name ("l0.w", "l0.b", ...), f32 row-major.
using Params = std::vector<std::pair<std::string, std::vector<float>>>;

/// PyTorch nn.Linear's default init (uniform +-1/sqrt(K) for weights and biases) from Philox(seed).
Params init_mlp(const MlpShape& shape, uint64_t seed);

/// DP-SGD settings. Noise: sigma * clip per coordinate; the noisy sum is divided by the expected
/// batch size q*N (Opacus's convention for Poisson sampling).
struct DpConfig {
  double clip = 1.0;         ///< C, L2 bound of each example's whole gradient
  double sigma = 1.0;        ///< noise multiplier
  double q = 0.01;           ///< Poisson sampling rate
  int64_t steps = 100;       ///< optimizer steps
  int64_t max_physical = 256;  ///< examples per graph run (a logical batch is split into chunks)
  double lr = 0.1, momentum = 0.9;
  uint64_t seed = 0;
  Accountant accountant = Accountant::Rdp;
  double delta = 1e-5;
};

/// What one logical step computed (for tests and the log).
struct DpStepInfo {
  int64_t batch = 0;          ///< Poisson sample size
  double mean_loss = 0;       ///< over the sample (0 for an empty one)
  double clipped_fraction = 0;  ///< share of examples with norm > C
};

/// The sum over `idx` of per-example gradients clipped to C (ghost clipping through the IR), run
/// in chunks of at most max_physical; `grads` (same layout as params) is overwritten. Returns the
/// per-example norms (before clipping) in `norms` when given, and the summed loss.
double clipped_grad_sum(const MlpGraphs& g, const Params& params, const ImageDataset& d, const std::vector<int64_t>& idx,
                        double clip, int64_t max_physical, Params& grads, std::vector<double>* norms = nullptr);

/// The Poisson sample of step `step`: example i is in when Philox(seed, subseq 2^32 + step) draw i
/// (as a double in [0,1)) is < q.
std::vector<int64_t> poisson_sample(int64_t n, double q, uint64_t seed, int64_t step);

/// Add N(0, (sigma*C)^2) to every coordinate of `grads` from Philox(seed, subseq 2^33 + step)
/// (draws in parameter order).
void add_noise(Params& grads, double sigma_c, uint64_t seed, int64_t step);

/// The privacy ledger: what the run spent and how it was accounted.
struct Ledger {
  double epsilon = 0, delta = 0, sigma = 0, q = 0, clip = 0;
  int64_t steps = 0, dataset_size = 0;
  std::string accountant;
  std::string to_json() const;  ///< one-line JSON object with these fields
};

/// Trains with DP-SGD; calls `on_epoch(step, ledger, test_accuracy)` about once per epoch (1/q
/// steps) and at the end. Returns the final ledger.
struct DpRun {
  Params params;
  Ledger ledger;
  double test_accuracy = 0;
};
DpRun train_dp_mlp(const MlpShape& shape, const ImageDataset& train, const ImageDataset& test, const DpConfig& cfg,
                   const std::function<void(int64_t, const Ledger&, double, const DpStepInfo&)>& on_epoch = {});

/// Ledger from its JSON (Ledger::to_json); Error(Input) naming `where` and the field when wrong.
Ledger ledger_from_json(const std::string& text, const std::string& where);

/// Write the run as safetensors: "l<k>.w" (N_k, K_k), "l<k>.b" (N_k) f32, metadata
/// "rtx.privacy_ledger" (Ledger::to_json) and "rtx.model" = "mlp" (atomic, with SHA-256).
void save_dp_checkpoint(const std::string& path, const MlpShape& shape, const DpRun& run);
/// Read one back (parameters in `shape`'s order and the ledger); Error(Input) naming the file
/// when a tensor, its shape or the ledger is missing or wrong.
DpRun load_dp_checkpoint(const std::string& path, const MlpShape& shape);

/// Accuracy of `params` on `d` (forward graph in f32, chunks of 1024).
double accuracy(const MlpGraphs& g, const Params& params, const ImageDataset& d);

}  // namespace rtx::privacy
