// DP-SGD pieces vs float64 references: per-example gradients (ghost norms and the materialised
// per-sample graph) vs a float64 loop over single examples (ir::interpret_f64 of the plain
// per-example graph), clipping, accumulation across physical chunks, the noise scale, Poisson
// sampling, the ledger, determinism; the IDX loader on Fashion-MNIST; the memory of both methods.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/idx.hpp"
#include "rtx/ir/autodiff.hpp"
#include "rtx/ir/exec.hpp"
#include "rtx/ir/planner.hpp"
#include "rtx/privacy/dpsgd.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::privacy;

namespace {
ImageDataset synthetic(int64_t n, int64_t dim, int64_t classes, uint64_t seed) {
  ImageDataset d;
  d.n = n;
  d.dim = dim;
  d.classes = classes;
  Philox r(seed, 7);
  for (int64_t i = 0; i < n * dim; ++i) d.x.push_back(r.next_float() * (i % 3 == 0 ? 3.0f : 1.0f));
  for (int64_t i = 0; i < n; ++i) d.y.push_back(static_cast<int32_t>(r.next_u32() % classes));
  return d;
}

// Float64 gradient of one example's loss wrt every parameter: the plain graph at B = 1, autodiff
// wrt the parameters, interpreted in double. Independent of ghost clipping.
std::vector<std::vector<double>> f64_example_grad(const MlpShape& s, const Params& p, const ImageDataset& d, int64_t e) {
  ir::Graph g("f64_example");
  ir::V a = g.input("x", {1, s.sizes[0]});
  std::vector<int> wrt;
  for (size_t k = 0; k + 1 < s.sizes.size(); ++k) {
    const std::string n = "l" + std::to_string(k);
    ir::V w = g.param(n + ".w", {s.sizes[k + 1], s.sizes[k]}), b = g.param(n + ".b", {s.sizes[k + 1]});
    wrt.push_back(w.id);
    wrt.push_back(b.id);
    a = g.linear(a, w, b);
    if (k + 2 < s.sizes.size()) a = g.relu(a);
  }
  ir::V loss = g.sum(g.cross_entropy(a, g.input("y", {1}, DType::I32)), 0);
  const auto br = ir::backward(g, loss.id, wrt);
  ir::Feeds f;
  for (const auto& [n, v] : p) f[n] = std::vector<double>(v.begin(), v.end());
  f["x"] = std::vector<double>(d.x.begin() + e * d.dim, d.x.begin() + (e + 1) * d.dim);
  f["y"] = {static_cast<double>(d.y[static_cast<size_t>(e)])};
  const auto vals = ir::interpret_f64(g, {}, f);
  std::vector<std::vector<double>> out;
  for (int id : br.grads) out.push_back(vals[static_cast<size_t>(id)]);
  return out;
}
}  // namespace

TEST_CASE("dpsgd: per-example gradients, norms and clipped sums equal a float64 loop", "[cpu]") {
  const MlpShape s{{7, 5, 3}};  // odd shapes
  const ImageDataset d = synthetic(23, 7, 3, 1);
  const Params p = init_mlp(s, 3);
  const MlpGraphs g = build_mlp_graphs(s);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < d.n; ++i) idx.push_back(i);
  // Reference: per example, float64 gradient, its norm, clip factor min(1, C/(n + 1e-6)).
  std::vector<std::vector<std::vector<double>>> ges;
  std::vector<double> ref_norms;
  for (int64_t e = 0; e < d.n; ++e) {
    ges.push_back(f64_example_grad(s, p, d, e));
    double sq = 0;
    for (const auto& t : ges.back())
      for (double v : t) sq += v * v;
    ref_norms.push_back(std::sqrt(sq));
  }
  std::vector<double> sorted = ref_norms;
  std::sort(sorted.begin(), sorted.end());
  const double C = sorted[sorted.size() / 2];  // the median norm: about half the examples are clipped
  std::vector<std::vector<double>> ref_sum(ges[0].size());
  for (int64_t e = 0; e < d.n; ++e) {
    const double c = std::min(1.0, C / (ref_norms[static_cast<size_t>(e)] + 1e-6));
    for (size_t t = 0; t < ges[static_cast<size_t>(e)].size(); ++t) {
      const auto& ge = ges[static_cast<size_t>(e)][t];
      ref_sum[t].resize(ge.size(), 0.0);
      for (size_t j = 0; j < ge.size(); ++j) ref_sum[t][j] += c * ge[j];
    }
  }
  int clipped = 0;
  for (double n : ref_norms) clipped += n > C;
  CHECK(clipped > 3);               // the case exercises clipping
  CHECK(clipped < int(d.n));        // and examples under the bound
  for (int64_t chunk : {1, 4, 23, 100}) {  // accumulation over physical chunks gives the same sum
    Params grads;
    std::vector<double> norms;
    clipped_grad_sum(g, p, d, idx, C, chunk, grads, &norms);
    REQUIRE(norms.size() == ref_norms.size());
    for (size_t i = 0; i < norms.size(); ++i) CHECK(std::abs(norms[i] - ref_norms[i]) <= 1e-5 * (1 + ref_norms[i]));
    double worst = 0;
    for (size_t t = 0; t < grads.size(); ++t)
      for (size_t j = 0; j < grads[t].second.size(); ++j)
        worst = std::max(worst, std::abs(grads[t].second[j] - ref_sum[t][j]));
    INFO("chunk " << chunk);
    CHECK(worst <= 1e-5);
  }
  // The materialised per-sample graph gives each example's weight gradient.
  ir::Feeds f;
  for (const auto& [n, v] : p) f[n] = std::vector<double>(v.begin(), v.end());
  std::vector<double> x(d.x.begin(), d.x.end()), y(d.y.begin(), d.y.end());
  f["x"] = x;
  f["y"] = y;
  const auto r = ir::run_f32(g.step, {{"B", d.n}}, f);
  ir::Feeds pf;
  for (size_t k = 0; k < 2; ++k) {
    pf["a" + std::to_string(k)] = std::vector<double>(r.outputs[1 + 2 * k].begin(), r.outputs[1 + 2 * k].end());
    pf["dz" + std::to_string(k)] = std::vector<double>(r.outputs[2 + 2 * k].begin(), r.outputs[2 + 2 * k].end());
  }
  const auto ps = ir::run_f32(g.per_sample, {{"B", d.n}}, pf);
  double worst = 0;
  for (int64_t e = 0; e < d.n; ++e) {
    const auto ge = f64_example_grad(s, p, d, e);
    for (size_t k = 0; k < 2; ++k) {
      const size_t sz = ge[2 * k].size();
      for (size_t j = 0; j < sz; ++j) worst = std::max(worst, std::abs(ps.outputs[k][e * sz + j] - ge[2 * k][j]));
    }
  }
  CHECK(worst <= 1e-5);
}

TEST_CASE("dpsgd: memory of ghost clipping vs materialised per-sample gradients (planner arena)", "[cpu]") {
  const MlpGraphs g = build_mlp_graphs({{784, 256, 10}});
  const ir::Bindings b{{"B", 256}};
  const int64_t step = ir::plan(g.step, b).arena_bytes, ghost = ir::plan(g.clipped_sum, b).arena_bytes,
                per = ir::plan(g.per_sample, b).arena_bytes;
  WARN("B=256, 784-256-10: step graph " << step << " B, ghost clipped sum " << ghost << " B, per-sample grads " << per
       << " B");
  CHECK(per >= 256LL * (256 * 784 + 10 * 256) * 4);  // holds B copies of the weights
  CHECK(ghost < per / 50);
}

TEST_CASE("dpsgd: noise scale, Poisson sampling, ledger, determinism", "[cpu]") {
  Params z{{"w", std::vector<float>(200000, 0.0f)}};
  add_noise(z, 2.5, 11, 4);
  double m = 0, s2 = 0;
  for (float v : z[0].second) m += v;
  m /= 200000;
  for (float v : z[0].second) s2 += (v - m) * (v - m);
  const double sd = std::sqrt(s2 / 199999);
  CHECK(std::abs(m) < 4 * 2.5 / std::sqrt(200000.0));
  CHECK(std::abs(sd - 2.5) < 0.02);  // sd of the sample sd ~ 2.5/sqrt(400000) = 0.004
  Params z2{{"w", std::vector<float>(200000, 0.0f)}};
  add_noise(z2, 2.5, 11, 5);
  CHECK(z2[0].second != z[0].second);  // a fresh draw per step

  const auto a = poisson_sample(100000, 0.01, 9, 3);
  CHECK(std::abs(double(a.size()) - 1000.0) < 4 * std::sqrt(990.0));
  CHECK(a == poisson_sample(100000, 0.01, 9, 3));
  CHECK(a != poisson_sample(100000, 0.01, 9, 4));
  CHECK(poisson_sample(50, 0.0, 1, 0).empty());
  CHECK(poisson_sample(50, 1.0, 1, 0).size() == 50);

  const MlpShape s{{6, 8, 4}};
  const ImageDataset tr = synthetic(300, 6, 4, 2), te = synthetic(100, 6, 4, 3);
  DpConfig cfg;
  cfg.q = 0.05;
  cfg.steps = 25;
  cfg.sigma = 1.1;
  cfg.clip = 0.5;
  cfg.max_physical = 7;
  cfg.seed = 5;
  int calls = 0;
  const DpRun r1 = train_dp_mlp(s, tr, te, cfg, [&](int64_t, const Ledger&, double acc, const DpStepInfo&) {
    ++calls;
    CHECK(acc >= 0.0);
  });
  CHECK(calls == 2);  // every 1/q = 20 steps and at the end
  const DpRun r2 = train_dp_mlp(s, tr, te, cfg);
  CHECK(r1.params == r2.params);  // same seed: same bits
  const Ledger& L = r1.ledger;
  CHECK(L.steps == 25);
  CHECK(L.sigma == 1.1);
  CHECK(L.q == 0.05);
  CHECK(L.clip == 0.5);
  CHECK(L.delta == 1e-5);
  CHECK(L.dataset_size == 300);
  CHECK(L.accountant == "rdp");
  CHECK(L.epsilon == rdp_epsilon({{1.1, 0.05, 25}}, 1e-5).epsilon);
  CHECK(L.to_json().find("\"accountant\":\"rdp\"") != std::string::npos);
  // The checkpoint carries the parameters and the ledger exactly.
  const std::string ck = rtx::test::temp_dir() + "/ckpt.safetensors";
  save_dp_checkpoint(ck, s, r1);
  const DpRun back = load_dp_checkpoint(ck, s);
  CHECK(back.params == r1.params);
  CHECK(back.ledger.to_json() == L.to_json());
  CHECK(back.ledger.epsilon == L.epsilon);
  CHECK_THROWS_WITH(load_dp_checkpoint(ck, {{6, 9, 4}}), Catch::Contains("l0.w"));
  CHECK_THROWS_WITH(ledger_from_json("{\"epsilon\": 1}", "x"), Catch::Contains("delta"));
  cfg.seed = 6;
  CHECK(train_dp_mlp(s, tr, te, cfg).params != r1.params);
  cfg.q = 0;
  CHECK_THROWS_AS(train_dp_mlp(s, tr, te, cfg), rtx::Error);
}

TEST_CASE("idx: Fashion-MNIST files and bad input", "[cpu]") {
  const std::string dir = rtx::test::data_dir() + "/fashion-mnist";
  const ImageDataset te = load_fashion_mnist(dir, false);
  CHECK(te.n == 10000);
  CHECK(te.dim == 784);
  std::vector<int> counts(10, 0);
  for (int32_t y : te.y) counts[static_cast<size_t>(y)]++;
  for (int c : counts) CHECK(c == 1000);  // Fashion-MNIST's test set is balanced
  CHECK(*std::max_element(te.x.begin(), te.x.end()) == 1.0f);
  const std::string tmp = rtx::test::temp_dir();
  {
    std::ofstream f(tmp + "/bad", std::ios::binary);
    const unsigned char h[] = {0, 0, 8, 1, 0, 0, 0, 5, 1, 2};
    f.write(reinterpret_cast<const char*>(h), sizeof h);
  }
  CHECK_THROWS_WITH(io::read_idx_u8(tmp + "/bad"), Catch::Contains("dims say 5"));
  {
    std::ofstream f(tmp + "/bad2", std::ios::binary);
    const unsigned char h[] = {0, 0, 0x0D, 1, 0, 0, 0, 1, 1};
    f.write(reinterpret_cast<const char*>(h), sizeof h);
  }
  CHECK_THROWS_WITH(io::read_idx_u8(tmp + "/bad2"), Catch::Contains("type code"));
  CHECK_THROWS_AS(io::read_idx_u8(tmp + "/missing"), rtx::Error);
}
