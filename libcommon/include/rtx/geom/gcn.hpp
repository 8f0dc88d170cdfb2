// GCN (Kipf & Welling, ICLR 2017) for node classification, written thinly over the registry ops
// (kernels/sparse.hpp SpMM, matmul, cross-entropy, Adam): two layers Z = A_hat relu(A_hat X W1^T
// + b1) W2^T + b2, A_hat = D^-1/2 (A + I) D^-1/2, as PyG's GCNConv (linear, then propagate, then
// bias). Forward and backward are hand-written for now; the model moves onto the Polygraph IR
// when it lands. Shape letters: N nodes, F features, H hidden, C classes.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rtx/geom/planetoid.hpp"
#include "rtx/kernels/sparse.hpp"

namespace rtx::geom {

/// Hyperparameters; the defaults are Kipf & Welling's Cora setup (and PyG's examples/gcn.py).
struct GcnConfig {
  int64_t hidden = 16;          ///< H
  float dropout = 0.5f;         ///< on the input features and on the hidden layer (training only)
  float lr = 0.01f;             ///< Adam
  float weight_decay = 5e-4f;   ///< L2 added to the gradient of layer 1 only (W1, b1), as the paper
  int epochs = 200;
  uint64_t seed = 0;            ///< weights (Glorot) and dropout masks (Philox: thread-count free)
};

/// The normalised propagation matrix, made once per graph: A_hat (self loops added, entries in
/// CSR by destination), its values, and its transpose for the backward.
struct GcnGraph {
  kernels::CsrMatrix a_hat;   ///< (N,N) with self loops
  std::vector<float> norm;    ///< (nnz) D^-1/2 (A+I) D^-1/2 values
  kernels::CsrMatrix a_hat_t; ///< transpose; perm maps to norm
};
/// A_hat from a CSR adjacency (rows = destinations). Throws rtx::Error(Input) when not square.
GcnGraph gcn_prepare(const kernels::CsrMatrix& adj);

/// Node features as CSR (Planetoid's bag-of-words rows are ~1% non-zero, so layer 1's X W1 is an
/// SpMM, and input dropout draws one mask value per stored entry), with the transpose for dW1.
struct SparseFeatures {
  int64_t rows = 0, cols = 0;      ///< N, F
  kernels::CsrMatrix x;            ///< (N,F) pattern of the non-zeros
  std::vector<float> values;       ///< (nnz)
  kernels::CsrMatrix xt;           ///< (F,N) transpose; perm maps to values
};
/// The non-zeros of a dense (N,F) matrix. Throws rtx::Error(Input) when x.size() != N*F.
SparseFeatures sparse_features(const std::vector<float>& x, int64_t N, int64_t F);

/// Parameters, gradients and Adam moments carved from one allocation each:
/// W1 (F,H) (stored input-major for the SpMM: PyG's lin.weight transposed), b1 (H), W2 (C,H),
/// b2 (C), in that order.
class Gcn {
 public:
  /// Glorot-uniform weights (PyG's reset_parameters), zero biases, from cfg.seed.
  Gcn(int64_t F, int64_t C, const GcnConfig& cfg);
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  float* params() { return params_.data(); }
  const float* grads() const { return grads_.data(); }
  float* W1() { return params_.data(); }
  float* b1() { return W1() + H_ * F_; }
  float* W2() { return b1() + H_; }
  float* b2() { return W2() + C_ * H_; }
  /// Forward over all N nodes: logits (N,C) kept for backward(). `train` applies dropout with
  /// masks from (seed, `step`). Returns the mean cross-entropy over `nodes` (labels y).
  /// Throws rtx::Error(Input) for an x of the wrong size or a label outside [0, C).
  float forward(const GcnGraph& g, const SparseFeatures& x, const std::vector<int32_t>& y,
                const std::vector<int32_t>& nodes, bool train, uint64_t step);
  /// Gradients of the last forward's loss into grads() (overwritten).
  void backward(const GcnGraph& g, const SparseFeatures& x, const std::vector<int32_t>& y,
                const std::vector<int32_t>& nodes);
  /// One Adam step (t = 1, 2, ...) with the config's lr and layer-1 L2 weight decay.
  void adam_step(int t);
  const std::vector<float>& logits() const { return Z_; }
  /// Fraction of `nodes` whose argmax logit is the label (ties: the lowest class).
  double accuracy(const std::vector<int32_t>& y, const std::vector<int32_t>& nodes) const;

 private:
  int64_t F_, C_, H_, N_ = 0;
  GcnConfig cfg_;
  std::vector<float> params_, grads_, m_, v_;
  // activations: Xv the input's values after dropout (nnz), T1 = X W1 (N,H), H1 = A T1 + b1 (N,H),
  // A1 = dropout(relu(H1)) (N,H), T2 = A1 W2^T (N,C), Z = A T2 + b2 (N,C); masks keep 0 or 1/(1-p)
  std::vector<float> Xv_, T1_, H1_, A1_, T2_, Z_, mask1_;
  bool last_train_ = false;        // the last forward applied dropout
};

/// One epoch's record.
struct GcnEpoch {
  int epoch = 0;
  float train_loss = 0, val_loss = 0;
  double val_acc = 0, test_acc = 0;
};
struct GcnResult {
  std::vector<GcnEpoch> epochs;
  double final_test_acc = 0, final_val_acc = 0;
  double best_val_test_acc = 0;  ///< test accuracy at the epoch of the best validation accuracy
  double train_seconds = 0;      ///< wall time of the epochs (forward, backward, Adam, evaluation)
};
/// Trains cfg.epochs epochs on the dataset's train nodes, evaluating val/test after each.
/// `on_epoch` (optional) sees each record; returning false stops early.
GcnResult train_gcn(const GraphDataset& d, const GcnConfig& cfg,
                    const std::function<bool(const GcnEpoch&)>& on_epoch = nullptr);

/// Training over seeds cfg.seed, cfg.seed+1, ...: each run and the mean and sample standard
/// deviation (n-1) of the final test accuracy; `on_run` (optional) sees each run as it ends.
struct GcnSeedsResult {
  std::vector<uint64_t> seeds;
  std::vector<GcnResult> runs;
  double mean_test_acc = 0, std_test_acc = 0, mean_seconds = 0;
};
GcnSeedsResult train_gcn_seeds(const GraphDataset& d, const GcnConfig& cfg, int num_seeds,
                               const std::function<void(uint64_t seed, const GcnResult&)>& on_run = nullptr);

}  // namespace rtx::geom
