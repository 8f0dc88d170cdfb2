// DP-SGD for an IR-built MLP: ghost-clipped per-example gradients, Poisson sampling, Philox
// noise, the ledger; and the Fashion-MNIST loader over io/idx. See dpsgd.hpp and docs/privacy.md.
#include "rtx/privacy/dpsgd.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/idx.hpp"
#include "rtx/io/safetensors.hpp"
#include "rtx/ir/autodiff.hpp"
#include "rtx/ir/exec.hpp"

namespace rtx::privacy {
namespace {

std::string idx_path(const std::string& dir, const std::string& stem) {
  const std::string p = dir + "/" + stem;
  if (std::filesystem::exists(p + ".gz")) return p + ".gz";
  return p;
}

size_t layers(const MlpShape& s) { return s.sizes.size() - 1; }

}  // namespace

ImageDataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string pre = train ? "train" : "t10k";
  const std::string ip = idx_path(dir, pre + "-images-idx3-ubyte"), lp = idx_path(dir, pre + "-labels-idx1-ubyte");
  const io::IdxArray im = io::read_idx_u8(ip), lb = io::read_idx_u8(lp);
  if (im.dims.size() != 3) throw_input("images must have rank 3 (N, rows, cols)", ip);
  if (lb.dims.size() != 1) throw_input("labels must have rank 1 (N)", lp);
  if (im.dims[0] != lb.dims[0])
    throw_input(std::to_string(im.dims[0]) + " images but " + std::to_string(lb.dims[0]) + " labels", lp);
  ImageDataset d;
  d.n = im.dims[0];
  d.dim = im.dims[1] * im.dims[2];
  d.classes = 10;
  d.x.resize(im.data.size());
  for (size_t i = 0; i < im.data.size(); ++i) d.x[i] = static_cast<float>(im.data[i]) / 255.0f;
  d.y.resize(lb.data.size());
  for (size_t i = 0; i < lb.data.size(); ++i) {
    if (lb.data[i] >= 10) throw_input("label " + std::to_string(lb.data[i]) + " at " + std::to_string(i) + " is not in 0..9", lp);
    d.y[i] = lb.data[i];
  }
  return d;
}

MlpGraphs build_mlp_graphs(const MlpShape& shape) {
  if (shape.sizes.size() < 2) throw_input("an MLP needs at least input and output sizes", "privacy::build_mlp_graphs");
  for (int64_t s : shape.sizes)
    if (s < 1) throw_input("MLP layer sizes must be positive", "privacy::build_mlp_graphs");
  MlpGraphs m;
  m.shape = shape;
  const ir::Dim B = ir::Dim::sym("B");
  const size_t L = layers(shape);
  for (ir::Graph* g : {&m.step, &m.forward}) {
    ir::V a = g->input("x", {B, shape.sizes[0]});
    std::vector<ir::V> as, zs;
    for (size_t k = 0; k < L; ++k) {
      const std::string n = "l" + std::to_string(k);
      as.push_back(a);
      ir::V z = g->linear(a, g->param(n + ".w", {shape.sizes[k + 1], shape.sizes[k]}), g->param(n + ".b", {shape.sizes[k + 1]}));
      zs.push_back(g->named(z, n + ".z"));
      if (k + 1 < L) a = g->relu(z);
    }
    if (g == &m.forward) {
      g->mark_output(zs.back());
      continue;
    }
    ir::V y = g->input("y", {B}, DType::I32);
    ir::V losses = g->cross_entropy(zs.back(), y);
    ir::V loss = g->sum(losses, 0);
    std::vector<int> wrt;
    for (const ir::V& z : zs) wrt.push_back(z.id);
    const ir::BackwardResult br = ir::backward(*g, loss.id, wrt);
    g->mark_output(losses);
    for (size_t k = 0; k < L; ++k) {
      g->mark_output(as[k]);
      g->mark_output(br.grads[k]);
    }
  }
  {
    ir::Graph& g = m.clipped_sum;
    ir::V c = g.input("c", {B, 1});
    for (size_t k = 0; k < L; ++k) {
      ir::V a = g.input("a" + std::to_string(k), {B, shape.sizes[k]});
      ir::V dz = g.input("dz" + std::to_string(k), {B, shape.sizes[k + 1]});
      ir::V dzc = dz * c;
      g.mark_output(g.matmul(dzc, a, /*ta=*/true));  // (N, K)
      g.mark_output(g.sum(dzc, 0));                   // (N)
    }
  }
  {
    ir::Graph& g = m.per_sample;
    for (size_t k = 0; k < L; ++k) {
      ir::V a = g.input("a" + std::to_string(k), {B, shape.sizes[k]});
      ir::V dz = g.input("dz" + std::to_string(k), {B, shape.sizes[k + 1]});
      g.mark_output(g.reshape(dz, {B, shape.sizes[k + 1], 1}) * g.reshape(a, {B, 1, shape.sizes[k]}));
    }
  }
  return m;
}

Params init_mlp(const MlpShape& shape, uint64_t seed) {
  Params p;
  Philox rng(seed, 0);
  for (size_t k = 0; k < layers(shape); ++k) {
    const int64_t K = shape.sizes[k], N = shape.sizes[k + 1];
    const float bound = 1.0f / std::sqrt(static_cast<float>(K));
    std::vector<float> w(static_cast<size_t>(N * K)), b(static_cast<size_t>(N));
    for (float& v : w) v = (2.0f * rng.next_float() - 1.0f) * bound;
    for (float& v : b) v = (2.0f * rng.next_float() - 1.0f) * bound;
    p.emplace_back("l" + std::to_string(k) + ".w", std::move(w));
    p.emplace_back("l" + std::to_string(k) + ".b", std::move(b));
  }
  return p;
}

static ir::Feeds param_feeds(const Params& params) {
  ir::Feeds f;
  for (const auto& [name, v] : params) f[name] = std::vector<double>(v.begin(), v.end());
  return f;
}

double clipped_grad_sum(const MlpGraphs& g, const Params& params, const ImageDataset& d, const std::vector<int64_t>& idx,
                        double clip, int64_t max_physical, Params& grads, std::vector<double>* norms) {
  if (!(clip > 0)) throw_input("clip norm C must be > 0", "privacy::clipped_grad_sum");
  if (max_physical < 1) throw_input("max_physical must be >= 1", "privacy::clipped_grad_sum");
  const size_t L = layers(g.shape);
  grads = params;
  for (auto& [name, v] : grads) std::fill(v.begin(), v.end(), 0.0f);
  if (norms) norms->clear();
  ir::Feeds feeds = param_feeds(params);
  ir::ExecOptions eo;
  eo.telemetry = false;
  double loss_sum = 0;
  for (size_t start = 0; start < idx.size(); start += static_cast<size_t>(max_physical)) {
    const int64_t b = std::min<int64_t>(max_physical, static_cast<int64_t>(idx.size() - start));
    std::vector<double>& x = feeds["x"];
    std::vector<double>& y = feeds["y"];
    x.assign(static_cast<size_t>(b * d.dim), 0.0);
    y.assign(static_cast<size_t>(b), 0.0);
    for (int64_t i = 0; i < b; ++i) {
      const int64_t e = idx[start + static_cast<size_t>(i)];
      if (e < 0 || e >= d.n) throw_input("example index " + std::to_string(e) + " outside the dataset", "privacy::clipped_grad_sum");
      std::copy_n(d.x.begin() + e * d.dim, d.dim, x.begin() + i * d.dim);
      y[static_cast<size_t>(i)] = d.y[static_cast<size_t>(e)];
    }
    const ir::Bindings bind{{"B", b}};
    const ir::ExecResult r = ir::run_f32(g.step, bind, feeds, eo);
    for (float l : r.outputs[0]) loss_sum += l;
    // Ghost norms: ||g_i||^2 = sum_k ||dz_k[i]||^2 (||a_k[i]||^2 + 1).
    std::vector<double> c(static_cast<size_t>(b)), sq(static_cast<size_t>(b), 0.0);
    for (size_t k = 0; k < L; ++k) {
      const auto& a = r.outputs[1 + 2 * k];
      const auto& dz = r.outputs[2 + 2 * k];
      const int64_t K = g.shape.sizes[k], N = g.shape.sizes[k + 1];
      for (int64_t i = 0; i < b; ++i) {
        double na = 1.0, nz = 0.0;
        for (int64_t j = 0; j < K; ++j) na += double(a[i * K + j]) * a[i * K + j];
        for (int64_t j = 0; j < N; ++j) nz += double(dz[i * N + j]) * dz[i * N + j];
        sq[static_cast<size_t>(i)] += na * nz;
      }
    }
    ir::Feeds cf;
    for (int64_t i = 0; i < b; ++i) {
      const double n = std::sqrt(sq[static_cast<size_t>(i)]);
      if (norms) norms->push_back(n);
      c[static_cast<size_t>(i)] = std::min(1.0, clip / (n + 1e-6));  // Opacus's clip factor
    }
    cf["c"] = c;
    for (size_t k = 0; k < L; ++k) {
      cf["a" + std::to_string(k)] = std::vector<double>(r.outputs[1 + 2 * k].begin(), r.outputs[1 + 2 * k].end());
      cf["dz" + std::to_string(k)] = std::vector<double>(r.outputs[2 + 2 * k].begin(), r.outputs[2 + 2 * k].end());
    }
    const ir::ExecResult s = ir::run_f32(g.clipped_sum, bind, cf, eo);
    for (size_t k = 0; k < 2 * L; ++k)
      for (size_t j = 0; j < grads[k].second.size(); ++j) grads[k].second[j] += s.outputs[k][j];
  }
  return loss_sum;
}

std::vector<int64_t> poisson_sample(int64_t n, double q, uint64_t seed, int64_t step) {
  if (!(q >= 0 && q <= 1)) throw_input("sampling rate q outside [0, 1]", "privacy::poisson_sample");
  Philox rng(seed, (uint64_t{1} << 32) + static_cast<uint64_t>(step));
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i)
    if (rng.next_double() < q) out.push_back(i);
  return out;
}

void add_noise(Params& grads, double sigma_c, uint64_t seed, int64_t step) {
  Philox rng(seed, (uint64_t{1} << 33) + static_cast<uint64_t>(step));
  for (auto& [name, v] : grads)
    for (float& x : v) x += static_cast<float>(sigma_c * rng.next_normal());
}

std::string Ledger::to_json() const {
  nlohmann::json j{{"epsilon", epsilon}, {"delta", delta}, {"sigma", sigma}, {"q", q}, {"steps", steps},
                   {"clip", clip}, {"dataset_size", dataset_size}, {"accountant", accountant}};
  return j.dump();
}

Ledger ledger_from_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw_input(std::string("privacy ledger is not JSON: ") + e.what(), where);
  }
  Ledger l;
  try {
    l.epsilon = j.at("epsilon").get<double>();
    l.delta = j.at("delta").get<double>();
    l.sigma = j.at("sigma").get<double>();
    l.q = j.at("q").get<double>();
    l.clip = j.at("clip").get<double>();
    l.steps = j.at("steps").get<int64_t>();
    l.dataset_size = j.at("dataset_size").get<int64_t>();
    l.accountant = j.at("accountant").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw_input(std::string("privacy ledger: ") + e.what(), where, "fields: epsilon delta sigma q clip steps dataset_size accountant");
  }
  return l;
}

void save_dp_checkpoint(const std::string& path, const MlpShape& shape, const DpRun& run) {
  if (run.params.size() != 2 * layers(shape)) throw_input("checkpoint: parameters do not match the MLP shape", path);
  std::vector<io::SafetensorsSource> ts;
  for (size_t k = 0; k < layers(shape); ++k) {
    ts.push_back({run.params[2 * k].first, io::StDType::F32, {shape.sizes[k + 1], shape.sizes[k]}, run.params[2 * k].second.data(), {}});
    ts.push_back({run.params[2 * k + 1].first, io::StDType::F32, {shape.sizes[k + 1]}, run.params[2 * k + 1].second.data(), {}});
  }
  io::write_safetensors(path, ts, {{"rtx.privacy_ledger", run.ledger.to_json()}, {"rtx.model", "mlp"}});
}

DpRun load_dp_checkpoint(const std::string& path, const MlpShape& shape) {
  const io::SafetensorsFile f = io::SafetensorsFile::open(path);
  const auto it = f.metadata().find("rtx.privacy_ledger");
  if (it == f.metadata().end()) throw_input("checkpoint has no rtx.privacy_ledger in its metadata", path);
  DpRun r;
  r.ledger = ledger_from_json(it->second, path + ": metadata rtx.privacy_ledger");
  for (const auto& [name, v] : init_mlp(shape, 0)) {
    std::vector<float> x = f.read_f32(name);
    if (x.size() != v.size()) throw_input("tensor " + name + " has " + std::to_string(x.size()) + " values, the MLP needs " + std::to_string(v.size()), path);
    r.params.emplace_back(name, std::move(x));
  }
  return r;
}

double accuracy(const MlpGraphs& g, const Params& params, const ImageDataset& d) {
  ir::Feeds feeds = param_feeds(params);
  ir::ExecOptions eo;
  eo.telemetry = false;
  int64_t correct = 0;
  const int64_t C = g.shape.sizes.back();
  for (int64_t start = 0; start < d.n; start += 1024) {
    const int64_t b = std::min<int64_t>(1024, d.n - start);
    feeds["x"] = std::vector<double>(d.x.begin() + start * d.dim, d.x.begin() + (start + b) * d.dim);
    const ir::ExecResult r = ir::run_f32(g.forward, {{"B", b}}, feeds, eo);
    for (int64_t i = 0; i < b; ++i) {
      const float* row = r.outputs[0].data() + i * C;
      if (std::max_element(row, row + C) - row == d.y[static_cast<size_t>(start + i)]) ++correct;
    }
  }
  return d.n ? static_cast<double>(correct) / static_cast<double>(d.n) : 0.0;
}

DpRun train_dp_mlp(const MlpShape& shape, const ImageDataset& train, const ImageDataset& test, const DpConfig& cfg,
                   const std::function<void(int64_t, const Ledger&, double, const DpStepInfo&)>& on_epoch) {
  if (!(cfg.q > 0 && cfg.q <= 1)) throw_input("sampling rate q must be in (0, 1]", "privacy::train_dp_mlp");
  if (cfg.steps < 1) throw_input("steps must be >= 1", "privacy::train_dp_mlp");
  if (!(cfg.sigma >= 0)) throw_input("noise multiplier must be >= 0", "privacy::train_dp_mlp");
  if (train.dim != shape.sizes.front() || train.classes != shape.sizes.back())
    throw_input("the MLP's input/output sizes do not match the dataset", "privacy::train_dp_mlp");
  const MlpGraphs g = build_mlp_graphs(shape);
  DpRun run;
  run.params = init_mlp(shape, cfg.seed);
  Params vel = run.params, grads;
  for (auto& [n, v] : vel) std::fill(v.begin(), v.end(), 0.0f);
  const double expected = cfg.q * static_cast<double>(train.n);
  const int64_t every = std::max<int64_t>(1, static_cast<int64_t>(std::llround(1.0 / cfg.q)));
  Ledger& led = run.ledger;
  led.delta = cfg.delta;
  led.sigma = cfg.sigma;
  led.q = cfg.q;
  led.clip = cfg.clip;
  led.dataset_size = train.n;
  led.accountant = accountant_name(cfg.accountant);
  for (int64_t step = 0; step < cfg.steps; ++step) {
    const std::vector<int64_t> idx = poisson_sample(train.n, cfg.q, cfg.seed, step);
    std::vector<double> norms;
    const double loss = clipped_grad_sum(g, run.params, train, idx, cfg.clip, cfg.max_physical, grads, &norms);
    add_noise(grads, cfg.sigma * cfg.clip, cfg.seed, step);
    for (size_t t = 0; t < grads.size(); ++t)
      for (size_t j = 0; j < grads[t].second.size(); ++j) {
        float& v = vel[t].second[j];
        v = static_cast<float>(cfg.momentum * v + grads[t].second[j] / expected);
        run.params[t].second[j] -= static_cast<float>(cfg.lr * v);
      }
    led.steps = step + 1;
    if (on_epoch && ((step + 1) % every == 0 || step + 1 == cfg.steps)) {
      led.epsilon = epsilon(cfg.accountant, {{cfg.sigma, cfg.q, led.steps}}, cfg.delta);
      DpStepInfo info;
      info.batch = static_cast<int64_t>(idx.size());
      info.mean_loss = idx.empty() ? 0.0 : loss / static_cast<double>(idx.size());
      int64_t clipped = 0;
      for (double n : norms) clipped += n > cfg.clip;
      info.clipped_fraction = idx.empty() ? 0.0 : static_cast<double>(clipped) / static_cast<double>(idx.size());
      on_epoch(step + 1, led, accuracy(g, run.params, test), info);
    }
  }
  led.epsilon = epsilon(cfg.accountant, {{cfg.sigma, cfg.q, led.steps}}, cfg.delta);
  run.test_accuracy = accuracy(g, run.params, test);
  return run;
}

}  // namespace rtx::privacy
