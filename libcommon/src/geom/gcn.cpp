// GCN forward/backward/Adam over the registry ops (gcn.hpp). Every op is deterministic (no
// atomics), dropout masks come from Philox(seed, step, layer): same seed and thread count,
// same bits (and the masks do not depend on the thread count at all).
#include "rtx/geom/gcn.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/kernels/matmul.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::geom {
namespace {

using kernels::Csr;

void dropout_mask(std::vector<float>& mask, size_t n, float p, uint64_t seed, uint64_t subseq) {
  mask.resize(n);
  const float keep = 1.f / (1.f - p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i)
    mask[i] = philox_uniform(seed, subseq, static_cast<uint64_t>(i), 0.f, 1.f) < p ? 0.f : keep;
}

void add_bias(float* y, const float* b, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) y[n * C + c] += b[c];
}

// db (C) = column sums of dy (N,C), rows in order (one thread: the order fixes the bits).
void bias_grad(float* db, const float* dy, int64_t N, int64_t C) {
  std::vector<double> acc(C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) acc[c] += dy[n * C + c];
  for (int64_t c = 0; c < C; ++c) db[c] = static_cast<float>(acc[c]);
}

}  // namespace

SparseFeatures sparse_features(const std::vector<float>& x, int64_t N, int64_t F) {
  if (N < 1 || F < 1 || static_cast<int64_t>(x.size()) != N * F)
    throw_input("sparse_features: x has " + std::to_string(x.size()) + " values, N x F = " + std::to_string(N) + " x " +
                    std::to_string(F),
                "x", "pass (N,F) row-major features");
  SparseFeatures s;
  s.rows = N;
  s.cols = F;
  s.x.rows = N;
  s.x.cols = F;
  s.x.row_ptr.assign(N + 1, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f)
      if (x[n * F + f] != 0.f) {
        s.x.col_idx.push_back(static_cast<int32_t>(f));
        s.values.push_back(x[n * F + f]);
      }
    if (s.x.col_idx.size() > 2147483647u) throw_input("sparse_features: more than 2^31-1 non-zeros", "x");
    s.x.row_ptr[n + 1] = static_cast<int32_t>(s.x.col_idx.size());
  }
  s.xt = kernels::csr_transpose(s.x.view());
  return s;
}

GcnGraph gcn_prepare(const kernels::CsrMatrix& adj) {
  GcnGraph g;
  g.a_hat = kernels::csr_add_self_loops(adj.view());
  g.norm.resize(g.a_hat.col_idx.size());
  kernels::gcn_norm(g.norm.data(), g.a_hat.view(), nullptr);
  g.a_hat_t = kernels::csr_transpose(g.a_hat.view());
  return g;
}

Gcn::Gcn(int64_t F, int64_t C, const GcnConfig& cfg) : F_(F), C_(C), H_(cfg.hidden), cfg_(cfg) {
  if (F < 1 || C < 1 || H_ < 1)
    throw_input("Gcn: F = " + std::to_string(F) + ", C = " + std::to_string(C) + ", hidden = " + std::to_string(H_) +
                    " must all be positive",
                "gcn", "check the dataset and --hidden");
  if (!(cfg.dropout >= 0.f && cfg.dropout < 1.f))
    throw_input("Gcn: dropout " + std::to_string(cfg.dropout) + " outside [0, 1)", "dropout", "use e.g. 0.5");
  const size_t n = static_cast<size_t>(H_ * F_ + H_ + C_ * H_ + C_);
  params_.assign(n, 0.f);
  grads_.assign(n, 0.f);
  m_.assign(n, 0.f);
  v_.assign(n, 0.f);
  const float a1 = std::sqrt(6.f / static_cast<float>(F_ + H_)), a2 = std::sqrt(6.f / static_cast<float>(H_ + C_));
  for (int64_t i = 0; i < H_ * F_; ++i) W1()[i] = philox_uniform(cfg.seed, 1, static_cast<uint64_t>(i), -a1, a1);
  for (int64_t i = 0; i < C_ * H_; ++i) W2()[i] = philox_uniform(cfg.seed, 2, static_cast<uint64_t>(i), -a2, a2);
}

float Gcn::forward(const GcnGraph& g, const SparseFeatures& x, const std::vector<int32_t>& y,
                   const std::vector<int32_t>& nodes, bool train, uint64_t step) {
  const int64_t N = g.a_hat.rows;
  if (x.rows != N || x.cols != F_)
    throw_input("Gcn::forward: features are " + std::to_string(x.rows) + " x " + std::to_string(x.cols) +
                    ", the model needs " + std::to_string(N) + " x " + std::to_string(F_),
                "x", "pass (N,F) features of the graph's nodes");
  if (static_cast<int64_t>(y.size()) != N) throw_input("Gcn::forward: y has " + std::to_string(y.size()) + " labels, N = " + std::to_string(N), "y");
  for (int32_t n : nodes)
    if (n < 0 || n >= N || y[n] < 0 || y[n] >= C_)
      throw_input("Gcn::forward: node " + std::to_string(n) + " or its label is out of range", "nodes");
  if (nodes.empty()) throw_input("Gcn::forward: no nodes to compute the loss on", "nodes");
  N_ = N;
  const Csr A = g.a_hat.view();
  const bool drop = train && cfg_.dropout > 0.f;
  // Input dropout on the stored entries (the zeros stay zero either way).
  Xv_ = x.values;
  if (drop) {
    std::vector<float> mask0;
    dropout_mask(mask0, Xv_.size(), cfg_.dropout, cfg_.seed, 1000 + 2 * step);
    for (size_t i = 0; i < Xv_.size(); ++i) Xv_[i] *= mask0[i];
  }
  T1_.resize(N * H_);
  H1_.resize(N * H_);
  A1_.resize(N * H_);
  T2_.resize(N * C_);
  Z_.resize(N * C_);
  kernels::spmm_forward(T1_.data(), x.x.view(), Xv_.data(), nullptr, W1(), H_);  // X (N,F) W1 (F,H)
  kernels::spmm_forward(H1_.data(), A, g.norm.data(), nullptr, T1_.data(), H_);
  add_bias(H1_.data(), b1(), N, H_);
  if (drop) dropout_mask(mask1_, N * H_, cfg_.dropout, cfg_.seed, 1001 + 2 * step);
  for (int64_t i = 0; i < N * H_; ++i) A1_[i] = std::max(H1_[i], 0.f) * (drop ? mask1_[i] : 1.f);
  kernels::matmul_forward(T2_.data(), A1_.data(), W2(), nullptr, static_cast<int>(N), static_cast<int>(C_), static_cast<int>(H_));
  kernels::spmm_forward(Z_.data(), A, g.norm.data(), nullptr, T2_.data(), C_);
  add_bias(Z_.data(), b2(), N, C_);
  // Mean cross-entropy over `nodes`: gather their logits, then the registry's loss.
  const int64_t L = static_cast<int64_t>(nodes.size());
  std::vector<float> zl(L * C_), losses(L);
  std::vector<int32_t> yl(L);
  kernels::gather_rows(zl.data(), nodes.data(), L, Z_.data(), N, C_);
  for (int64_t i = 0; i < L; ++i) yl[i] = y[nodes[i]];
  kernels::crossentropy_forward(losses.data(), zl.data(), yl.data(), L, C_);
  double s = 0;
  for (float l : losses) s += l;
  last_train_ = drop;
  return static_cast<float>(s / static_cast<double>(L));
}

void Gcn::backward(const GcnGraph& g, const SparseFeatures& x, const std::vector<int32_t>& y,
                   const std::vector<int32_t>& nodes) {
  const int64_t N = N_;
  if (N == 0) throw_input("Gcn::backward before forward", "gcn");
  const Csr A = g.a_hat.view(), AT = g.a_hat_t.view();
  const int64_t L = static_cast<int64_t>(nodes.size());
  std::vector<float> zl(L * C_), dzl(L * C_);
  std::vector<int32_t> yl(L);
  kernels::gather_rows(zl.data(), nodes.data(), L, Z_.data(), N, C_);
  for (int64_t i = 0; i < L; ++i) yl[i] = y[nodes[i]];
  kernels::crossentropy_backward(dzl.data(), zl.data(), yl.data(), L, C_);  // (softmax - onehot) / L
  std::vector<float> dZ(N * C_, 0.f), dT2(N * C_), dA1(N * H_), dH1(N * H_), dT1(N * H_);
  kernels::scatter_add_rows(dZ.data(), nodes.data(), L, dzl.data(), N, C_);
  std::fill(grads_.begin(), grads_.end(), 0.f);
  float* gW1 = grads_.data();
  float* gb1 = gW1 + H_ * F_;
  float* gW2 = gb1 + H_;
  float* gb2 = gW2 + C_ * H_;
  // Layer 2: Z = A T2 + b2, T2 = A1 W2^T.
  bias_grad(gb2, dZ.data(), N, C_);
  kernels::spmm_backward(dT2.data(), nullptr, A, AT, g.a_hat_t.perm.data(), g.norm.data(), dZ.data(), nullptr, C_);
  kernels::matmul_backward(dA1.data(), gW2, nullptr, dT2.data(), A1_.data(), W2(), static_cast<int>(N),
                           static_cast<int>(C_), static_cast<int>(H_));
  // A1 = dropout(relu(H1)).
  for (int64_t i = 0; i < N * H_; ++i) dH1[i] = H1_[i] > 0.f ? dA1[i] * (last_train_ ? mask1_[i] : 1.f) : 0.f;
  // Layer 1: H1 = A T1 + b1, T1 = X W1: dW1 (F,H) = X^T dT1, through X's transpose.
  bias_grad(gb1, dH1.data(), N, H_);
  kernels::spmm_backward(dT1.data(), nullptr, A, AT, g.a_hat_t.perm.data(), g.norm.data(), dH1.data(), nullptr, H_);
  kernels::spmm_backward(gW1, nullptr, x.x.view(), x.xt.view(), x.xt.perm.data(), Xv_.data(), dT1.data(), nullptr, H_);
}

void Gcn::adam_step(int t) {
  // Adam with L2 (torch.optim.Adam's weight_decay): g += wd p on layer 1, then the AdamW op with
  // its decoupled decay off is exactly Adam.
  const int64_t n1 = H_ * F_ + H_;
  for (int64_t i = 0; i < n1; ++i) grads_[i] += cfg_.weight_decay * params_[i];
  kernels::AdamWParams hp;
  hp.lr = cfg_.lr;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.999f;
  hp.eps = 1e-8f;
  hp.weight_decay = 0.f;
  hp.t = t;
  kernels::adamw_update(params_.data(), m_.data(), v_.data(), grads_.data(), num_params(), hp);
}

double Gcn::accuracy(const std::vector<int32_t>& y, const std::vector<int32_t>& nodes) const {
  if (nodes.empty()) return 0;
  int64_t ok = 0;
  for (int32_t n : nodes) {
    const float* z = Z_.data() + static_cast<int64_t>(n) * C_;
    int64_t best = 0;
    for (int64_t c = 1; c < C_; ++c)
      if (z[c] > z[best]) best = c;
    ok += best == y[n];
  }
  return static_cast<double>(ok) / static_cast<double>(nodes.size());
}

GcnResult train_gcn(const GraphDataset& d, const GcnConfig& cfg, const std::function<bool(const GcnEpoch&)>& on_epoch) {
  if (cfg.epochs < 1) throw_input("train_gcn: epochs = " + std::to_string(cfg.epochs) + " must be positive", "epochs");
  const GcnGraph g = gcn_prepare(d.adj);
  const SparseFeatures x = sparse_features(d.x, d.num_nodes, d.num_features);
  Gcn model(d.num_features, d.num_classes, cfg);
  GcnResult r;
  double best_val = -1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int e = 1; e <= cfg.epochs; ++e) {
    GcnEpoch rec;
    rec.epoch = e;
    rec.train_loss = model.forward(g, x, d.y, d.train, true, static_cast<uint64_t>(e));
    model.backward(g, x, d.y, d.train);
    model.adam_step(e);
    rec.val_loss = model.forward(g, x, d.y, d.val, false, 0);
    rec.val_acc = model.accuracy(d.y, d.val);
    rec.test_acc = model.accuracy(d.y, d.test);
    if (rec.val_acc > best_val) {
      best_val = rec.val_acc;
      r.best_val_test_acc = rec.test_acc;
    }
    r.epochs.push_back(rec);
    r.final_test_acc = rec.test_acc;
    r.final_val_acc = rec.val_acc;
    if (on_epoch && !on_epoch(rec)) break;
  }
  r.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

GcnSeedsResult train_gcn_seeds(const GraphDataset& d, const GcnConfig& cfg, int num_seeds,
                               const std::function<void(uint64_t, const GcnResult&)>& on_run) {
  if (num_seeds < 1) throw_input("train_gcn_seeds: " + std::to_string(num_seeds) + " seeds; give at least 1", "seeds");
  GcnSeedsResult out;
  double sum = 0, secs = 0;
  for (int k = 0; k < num_seeds; ++k) {
    GcnConfig c = cfg;
    c.seed = cfg.seed + static_cast<uint64_t>(k);
    out.seeds.push_back(c.seed);
    out.runs.push_back(train_gcn(d, c));
    sum += out.runs.back().final_test_acc;
    secs += out.runs.back().train_seconds;
    if (on_run) on_run(c.seed, out.runs.back());
  }
  out.mean_test_acc = sum / num_seeds;
  out.mean_seconds = secs / num_seeds;
  double ss = 0;
  for (const GcnResult& r : out.runs) ss += (r.final_test_acc - out.mean_test_acc) * (r.final_test_acc - out.mean_test_acc);
  out.std_test_acc = num_seeds > 1 ? std::sqrt(ss / (num_seeds - 1)) : 0.0;
  return out;
}

}  // namespace rtx::geom
