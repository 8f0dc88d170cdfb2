// GCN (geom/gcn.hpp): gradients vs float64 central differences of a plain-loop float64 forward on
// a 50-node Cora subgraph, bitwise-identical training curves for one seed, and Cora accuracy.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/geom/gcn.hpp"
#include "rtx/geom/planetoid.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::geom;

namespace {
const GraphDataset& cora() {
  static const GraphDataset g = load_planetoid(rtx::test::data_dir() + "/cora", "cora");
  return g;
}

/// The subgraph induced by nodes [0, n): features, labels, edges among them.
GraphDataset subgraph(const GraphDataset& d, int64_t n) {
  GraphDataset s;
  s.num_nodes = n;
  s.num_features = d.num_features;
  s.num_classes = d.num_classes;
  s.x.assign(d.x.begin(), d.x.begin() + n * d.num_features);
  s.y.assign(d.y.begin(), d.y.begin() + n);
  std::vector<int32_t> src, dst;
  for (int64_t r = 0; r < n; ++r)
    for (int32_t k = d.adj.row_ptr[r]; k < d.adj.row_ptr[r + 1]; ++k)
      if (d.adj.col_idx[k] < n) {
        src.push_back(d.adj.col_idx[k]);
        dst.push_back(static_cast<int32_t>(r));
      }
  s.adj = kernels::csr_from_edges(n, n, src, dst);
  for (int32_t i = 0; i < n; i += 2) s.train.push_back(i);
  return s;
}

/// Float64 loss of the GCN at parameters p (layout W1 (H,F), b1, W2 (C,H), b2), no dropout,
/// plain loops from the definition: A_hat = D^-1/2 (A+I) D^-1/2 built here from the edges.
double loss64(const GraphDataset& s, int64_t H, const std::vector<double>& p) {
  const int64_t N = s.num_nodes, F = s.num_features, C = s.num_classes;
  const double *W1 = p.data(), *b1 = W1 + H * F, *W2 = b1 + H, *b2 = W2 + C * H;
  std::vector<std::vector<double>> A(N, std::vector<double>(N, 0.0));
  for (int64_t r = 0; r < N; ++r) {
    A[r][r] = 1;
    for (int32_t k = s.adj.row_ptr[r]; k < s.adj.row_ptr[r + 1]; ++k) A[r][s.adj.col_idx[k]] = 1;
  }
  std::vector<double> deg(N, 0.0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < N; ++c) deg[r] += A[r][c];
  // W (O,K) when !input_major, (K,O) when input_major (layer 1's storage).
  auto layer = [&](const std::vector<double>& X, int64_t K, const double* W, const double* b, int64_t O,
                   bool input_major) {
    std::vector<double> T(N * O, 0.0), Y(N * O, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t k = 0; k < K; ++k) T[n * O + o] += X[n * K + k] * (input_major ? W[k * O + o] : W[o * K + k]);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < N; ++c)
        if (A[r][c] != 0)
          for (int64_t o = 0; o < O; ++o) Y[r * O + o] += A[r][c] / std::sqrt(deg[r] * deg[c]) * T[c * O + o];
    for (int64_t r = 0; r < N; ++r)
      for (int64_t o = 0; o < O; ++o) Y[r * O + o] += b[o];
    return Y;
  };
  std::vector<double> X(s.x.begin(), s.x.end());
  std::vector<double> H1 = layer(X, F, W1, b1, H, true);
  for (double& v : H1) v = std::max(v, 0.0);
  const std::vector<double> Z = layer(H1, H, W2, b2, C, false);
  double L = 0;
  for (int32_t n : s.train) {
    double m = -INFINITY, z = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, Z[n * C + c]);
    for (int64_t c = 0; c < C; ++c) z += std::exp(Z[n * C + c] - m);
    L += m + std::log(z) - Z[n * C + s.y[n]];
  }
  return L / static_cast<double>(s.train.size());
}
}  // namespace

TEST_CASE("gcn: gradients vs float64 central differences on a 50-node subgraph", "[cpu]") {
  const GraphDataset s = subgraph(cora(), 50);
  REQUIRE(s.adj.col_idx.size() > 0);
  GcnConfig cfg;
  cfg.seed = 3;
  cfg.dropout = 0.f;
  Gcn model(s.num_features, s.num_classes, cfg);
  // Non-zero biases so their paths are exercised.
  for (int64_t i = 0; i < cfg.hidden; ++i) model.b1()[i] = 0.05f * static_cast<float>(i % 5) - 0.1f;
  for (int64_t i = 0; i < s.num_classes; ++i) model.b2()[i] = 0.03f * static_cast<float>(i) - 0.1f;
  const GcnGraph g = gcn_prepare(s.adj);
  const SparseFeatures x = sparse_features(s.x, s.num_nodes, s.num_features);
  const float loss = model.forward(g, x, s.y, s.train, false, 0);
  model.backward(g, x, s.y, s.train);
  std::vector<double> p(model.params(), model.params() + model.num_params());
  CHECK(loss == Approx(loss64(s, cfg.hidden, p)).epsilon(1e-6));
  // Tensors: W1 (F,H), b1 (H), W2 (C,H), b2 (C); per tensor, 24 sampled entries (W1 restricted to
  // features some subgraph node has, else the gradient is exactly 0 in both).
  const int64_t H = cfg.hidden, F = s.num_features, C = s.num_classes;
  std::vector<int64_t> feats;
  for (int64_t f = 0; f < F && feats.size() < 24; ++f)
    for (int64_t n = 0; n < 50; ++n)
      if (s.x[n * F + f] != 0.f) {
        feats.push_back(f);
        break;
      }
  struct T {
    const char* name;
    int64_t off, size;
  };
  const T tensors[] = {{"W1", 0, H * F}, {"b1", H * F, H}, {"W2", H * F + H, C * H}, {"b2", H * F + H + C * H, C}};
  for (const T& t : tensors) {
    std::vector<int64_t> idx;
    for (int64_t k = 0; k < 24; ++k)
      idx.push_back(std::string(t.name) == "W1" ? feats[k % feats.size()] * H + (k % H) : (k * 7919) % t.size);
    double max_err = 0, max_g = 0;
    for (int64_t i : idx) {
      const double h = 1e-6, p0 = p[t.off + i];
      p[t.off + i] = p0 + h;
      const double lp = loss64(s, H, p);
      p[t.off + i] = p0 - h;
      const double lm = loss64(s, H, p);
      p[t.off + i] = p0;
      const double num = (lp - lm) / (2 * h);
      max_err = std::max(max_err, std::fabs(num - model.grads()[t.off + i]));
      max_g = std::max(max_g, std::fabs(num));
    }
    INFO(t.name << ": max |analytic f32 - numeric f64| = " << max_err << ", max |grad| = " << max_g);
    CHECK(max_g > 0);
    // The f32 path against float64 differences: within 1e-6 of the tensor's largest gradient
    // (measured 1e-7 .. 4e-7 on 2026-12-07).
    CHECK(max_err <= 1e-6 * max_g);
  }
}

TEST_CASE("gcn: Cora, one seed: accuracy and bitwise-identical training curves", "[cpu]") {
  GcnConfig cfg;
  cfg.seed = 1;
  const GcnResult a = train_gcn(cora(), cfg);
  const GcnResult b = train_gcn(cora(), cfg);
  REQUIRE(a.epochs.size() == 200);
  REQUIRE(b.epochs.size() == 200);
  for (size_t e = 0; e < a.epochs.size(); ++e) {
    INFO("epoch " << e + 1);
    CHECK(std::memcmp(&a.epochs[e].train_loss, &b.epochs[e].train_loss, 4) == 0);
    CHECK(std::memcmp(&a.epochs[e].val_loss, &b.epochs[e].val_loss, 4) == 0);
  }
  CHECK(a.epochs.front().train_loss == Approx(std::log(7.0)).epsilon(0.05));  // near-uniform start
  CHECK(a.epochs.back().train_loss < 0.6f);
  INFO("final test accuracy " << a.final_test_acc << ", val " << a.final_val_acc << ", " << a.train_seconds << " s");
  CHECK(a.final_test_acc >= 0.78);  // the 10-seed mean is the goal (docs/geom.md); one seed varies
  CHECK(a.final_val_acc >= 0.75);
}

TEST_CASE("gcn: bad input", "[cpu]") {
  GcnConfig cfg;
  cfg.dropout = 1.f;
  CHECK_THROWS_AS(Gcn(10, 3, cfg), Error);
  cfg.dropout = 0.5f;
  Gcn m(10, 3, cfg);
  const GcnGraph g = gcn_prepare(kernels::csr_from_edges(4, 4, {0, 1}, {1, 0}));
  const SparseFeatures x = sparse_features(std::vector<float>(40, 0.1f), 4, 10);
  const SparseFeatures wrong = sparse_features(std::vector<float>(36, 0.1f), 4, 9);
  CHECK_THROWS_AS(sparse_features(std::vector<float>(39, 0.1f), 4, 10), Error);
  const std::vector<int32_t> y = {0, 1, 2, 3};  // label 3 >= C
  CHECK_THROWS_AS(m.forward(g, wrong, y, {0}, false, 0), Error);
  CHECK_THROWS_AS(m.forward(g, x, y, {3}, false, 0), Error);
  CHECK_THROWS_AS(m.forward(g, x, y, {7}, false, 0), Error);
  CHECK(std::isfinite(m.forward(g, x, y, {0, 1, 2}, true, 1)));
}
