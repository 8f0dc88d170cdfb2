// Tests of the GPT-2 model on CPU: parity with PyTorch (the committed golden file written by
// tests/reference/gpt2_golden.py), determinism, odd batch shapes, gradient accumulation, config,
// layout, init and memory accounting, and bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/models/gpt2.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::models;
using nlohmann::json;

namespace {

/// The golden file, parsed once.
const json& golden() {
  static const json j = [] {
    std::string path = test::source_dir() + "/tests/reference/data/gpt2_golden.json";
#ifdef RTX_GPT2_GOLDEN
    if (!std::getenv("RTX_SOURCE_DIR")) path = RTX_GPT2_GOLDEN;  // run outside ctest
#endif
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path + " (set RTX_SOURCE_DIR to the repository root)");
    json d = json::parse(f);
    if (d.value("schema", "") != "rtx.gpt2_golden.v1") throw std::runtime_error(path + ": unexpected schema");
    return d;
  }();
  return j;
}

template <class T>
std::vector<T> vec(const json& a) {
  return a.get<std::vector<T>>();
}

/// max|a-b| / max|b| (rtx/kernels/check.hpp's metric).
double maxnorm_rel(const float* a, const double* b, size_t n) {
  kernels::CheckResult r;
  kernels::compare(a, b, n, "x", r);
  if (r.nonfinite || r.unwritten) return INFINITY;
  return r.max_rel_err;
}
double maxnorm_rel(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  return maxnorm_rel(a.data(), b.data(), a.size());
}
double maxnorm_rel(const std::vector<float>& a, const std::vector<float>& b) {
  return maxnorm_rel(a, std::vector<double>(b.begin(), b.end()));
}

/// Per-tensor comparison of flat gradients, printing OK / NOT OK and the error of each (llm.c's
/// style); returns the largest per-tensor max-norm relative error.
double compare_per_tensor(const std::vector<ParamTensor>& lay, const std::vector<float>& got,
                          const std::vector<double>& want, double tol, bool print) {
  double worst = 0;
  for (const ParamTensor& t : lay) {
    const double e = maxnorm_rel(got.data() + t.offset, want.data() + t.offset, t.numel);
    worst = std::max(worst, e);
    if (print || e > tol) std::printf("  %-6s %-24s max-norm rel err %.3e\n", e <= tol ? "OK" : "NOT OK", t.name.c_str(), e);
  }
  return worst;
}

Gpt2Config golden_config() { return Gpt2Config::from_json(golden()["config"], "gpt2_golden.json"); }

/// A model with the golden weights, room for B x T.
std::unique_ptr<Gpt2> golden_model(int max_B, int max_T, const Gpt2KernelParams& kp = {}, Engine engine = Engine::Direct) {
  auto m = std::make_unique<Gpt2>(golden_config(), max_B, max_T, Backend::Cpu, kp, engine);
  const auto p = vec<float>(golden()["params"]);
  REQUIRE(p.size() == m->num_params());
  m->set_params(p.data());
  return m;
}

template <class F>
ErrorCategory category_of(F&& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.category();
  }
  FAIL("no rtx::Error thrown");
  return ErrorCategory::Internal;
}

std::vector<int32_t> random_ids(size_t n, uint64_t subseq, int V) {
  std::vector<int32_t> v(n);
  kernels::fill_ids(v.data(), n, 7, subseq, V);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("gpt2 layout matches the golden file and known parameter counts", "[cpu]") {
  const Gpt2Config cfg = golden_config();
  const auto lay = gpt2_param_layout(cfg);
  const json& gl = golden()["layout"];
  REQUIRE(lay.size() == gl.size());
  size_t off = 0;
  for (size_t i = 0; i < lay.size(); ++i) {
    INFO(lay[i].name);
    CHECK(lay[i].name == gl[i]["name"].get<std::string>());
    CHECK(lay[i].shape == gl[i]["shape"].get<std::vector<int64_t>>());
    CHECK(lay[i].offset == off);
    CHECK(lay[i].decay == (lay[i].shape.size() == 2));
    off += lay[i].numel;
  }
  CHECK(gpt2_num_params(cfg) == off);
  // GPT-2 124M with the unpadded vocabulary (nanoGPT reports 124.44M including wpe).
  CHECK(gpt2_num_params(Gpt2Config::preset("gpt2")) == 124439808u);
  // shakespeare-char-cpu: V*C + Tm*C + L*(12C^2 + 13C) + 2C with V 65, C 128, Tm 64, L 4.
  CHECK(gpt2_num_params(Gpt2Config::preset("shakespeare-char-cpu")) ==
        65u * 128 + 64u * 128 + 4u * (12u * 128 * 128 + 13u * 128) + 2u * 128);
}

TEST_CASE("gpt2 parity with PyTorch at step 0: logits, loss, every gradient (direct and graph engines)", "[cpu]") {
  // the graph engine (Polygraph IR: autodiff backward, executor) must pass the same golden
  const Engine engine = GENERATE(Engine::Direct, Engine::Graph);
  INFO("engine " << engine_name(engine));
  const json& c0 = golden()["cases"][0];
  const int B = c0["B"], T = c0["T"];
  auto m = golden_model(B, T, {}, engine);
  const auto ids = vec<int32_t>(c0["ids"]), tg = vec<int32_t>(c0["targets"]);
  const float loss = m->forward(ids.data(), tg.data(), B, T);
  const double want_loss = c0["loss"];
  const double loss_err = std::fabs(loss - want_loss) / std::fabs(want_loss);
  std::vector<float> logits(static_cast<size_t>(B) * T * m->config().vocab_size);
  m->get_logits(logits.data());
  const double logits_err = maxnorm_rel(logits, vec<double>(c0["logits"]));
  std::printf("gpt2 parity (%s) B=%d T=%d: loss %.7f (torch %.7f) rel err %.2e; logits max-norm rel err %.2e\n", engine_name(engine), B, T,
              loss, want_loss, loss_err, logits_err);
  CHECK(loss_err <= 1e-5);
  CHECK(logits_err <= 1e-5);

  m->zero_grad();
  m->backward();
  std::vector<float> g(m->num_params());
  m->get_grads(g.data());
  const double gerr = compare_per_tensor(m->layout(), g, vec<double>(c0["grads"]), 1e-4, true);
  std::printf("gpt2 parity (%s): gradients worst per-tensor max-norm rel err %.2e\n", engine_name(engine), gerr);
  CHECK(gerr <= 1e-4);
}

TEST_CASE("gpt2 parity with PyTorch for T = 1 and an odd batch (direct and graph engines)", "[cpu]") {
  // the graph engine (Polygraph IR: autodiff backward, executor) must pass the same golden
  const Engine engine = GENERATE(Engine::Direct, Engine::Graph);
  INFO("engine " << engine_name(engine));
  const json& c1 = golden()["cases"][1];
  const int B = c1["B"], T = c1["T"];
  REQUIRE(T == 1);
  auto m = golden_model(B, 16, {}, engine);  // max_T larger than the batch: buffers carved for the batch
  const auto ids = vec<int32_t>(c1["ids"]), tg = vec<int32_t>(c1["targets"]);
  const float loss = m->forward(ids.data(), tg.data(), B, T);
  const double want = c1["loss"];
  CHECK(std::fabs(loss - want) / std::fabs(want) <= 1e-5);
  m->zero_grad();
  m->backward();
  std::vector<float> g(m->num_params());
  m->get_grads(g.data());
  CHECK(compare_per_tensor(m->layout(), g, vec<double>(c1["grads"]), 1e-4, false) <= 1e-4);
}

TEST_CASE("gpt2 logits of causal prefixes and single rows match the reference", "[cpu]") {
  // Position t's logits depend only on tokens 0..t, and each batch row is independent, so a
  // prefix (T' < T) or one row of the golden batch must reproduce the golden logits' slice.
  const json& c0 = golden()["cases"][0];
  const int B = c0["B"], T = c0["T"];
  const int V = golden_config().vocab_size;
  const auto ids = vec<int32_t>(c0["ids"]);
  const auto want = vec<double>(c0["logits"]);
  auto m = golden_model(B, T);
  for (int Tp : {1, 2, 7}) {
    for (int b0 : {0, B - 1}) {
      const int Bp = b0 == 0 ? B : 1;  // the whole batch, or its last row alone
      std::vector<int32_t> sub;
      std::vector<double> ref;
      for (int b = b0; b < b0 + Bp; ++b)
        for (int t = 0; t < Tp; ++t) {
          sub.push_back(ids[static_cast<size_t>(b) * T + t]);
          const double* row = want.data() + (static_cast<size_t>(b) * T + t) * V;
          ref.insert(ref.end(), row, row + V);
        }
      const float l = m->forward(sub.data(), nullptr, Bp, Tp);
      CHECK(std::isnan(l));
      std::vector<float> got(ref.size());
      m->get_logits(got.data());
      INFO("B'=" << Bp << " T'=" << Tp);
      CHECK(maxnorm_rel(got, ref) <= 1e-5);
    }
  }
}

TEST_CASE("gpt2 parity with PyTorch over 10 AdamW steps with clipping (direct and graph engines)", "[cpu]") {
  // the graph engine (Polygraph IR: autodiff backward, executor) must pass the same golden
  const Engine engine = GENERATE(Engine::Direct, Engine::Graph);
  INFO("engine " << engine_name(engine));
  const json& a = golden()["adamw"];
  const int B = a["B"], T = a["T"];
  auto m = golden_model(B, T, {}, engine);
  AdamWConfig opt;
  opt.beta1 = a["beta1"];
  opt.beta2 = a["beta2"];
  opt.eps = a["eps"];
  opt.weight_decay = a["weight_decay"];
  opt.grad_clip = a["grad_clip"];
  const float lr = a["lr"];
  const auto want_loss = vec<double>(a["losses"]), want_norm = vec<double>(a["grad_norms"]);
  std::vector<float> losses, norms;
  int t = 0;
  for (const json& b : a["batches"]) {
    const auto ids = vec<int32_t>(b["ids"]), tg = vec<int32_t>(b["targets"]);
    m->zero_grad();
    losses.push_back(m->forward(ids.data(), tg.data(), B, T));
    m->backward();
    norms.push_back(static_cast<float>(m->step(++t, lr, opt)));
  }
  REQUIRE(losses.size() == 10);
  const double lerr = maxnorm_rel(losses, want_loss), nerr = maxnorm_rel(norms, want_norm);
  std::printf("gpt2 parity (%s) 10 AdamW steps: losses max-norm rel err %.2e, grad norms %.2e (loss %.5f -> %.5f)\n", engine_name(engine), lerr,
              nerr, losses.front(), losses.back());
  CHECK(lerr <= 1e-4);
  CHECK(nerr <= 1e-4);
}

TEST_CASE("gpt2 is deterministic: same inputs give bitwise-identical loss, grads, params", "[cpu]") {
  const Gpt2Config cfg = golden_config();
  const int B = 4, T = 13;
  const auto ids = random_ids(B * T, 1, cfg.vocab_size), tg = random_ids(B * T, 2, cfg.vocab_size);
  auto run = [&](std::vector<float>& loss, std::vector<float>& grads, std::vector<float>& params) {
    Gpt2 m(cfg, B, 16);
    m.init_weights(42);
    for (int t = 1; t <= 3; ++t) {
      m.zero_grad();
      loss.push_back(m.forward(ids.data(), tg.data(), B, T));
      m.backward();
      if (t < 3) m.step(t, 1e-2f, AdamWConfig{});
    }
    grads.resize(m.num_params());
    params.resize(m.num_params());
    m.get_grads(grads.data());
    m.get_params(params.data());
  };
  std::vector<float> l1, g1, p1, l2, g2, p2;
  run(l1, g1, p1);
  run(l2, g2, p2);
  CHECK(same_bits(l1, l2));
  CHECK(same_bits(g1, g2));
  CHECK(same_bits(p1, p2));
  CHECK(l1[2] < l1[0]);  // two steps on the same batch lower its loss
}

TEST_CASE("gpt2 gradient accumulation: two half batches at scale 1/2 equal one full batch", "[cpu]") {
  const int B = 4, T = 9;
  const int V = golden_config().vocab_size;
  const auto ids = random_ids(B * T, 3, V), tg = random_ids(B * T, 4, V);
  auto m = golden_model(B, 16);
  m->zero_grad();
  const float full_loss = m->forward(ids.data(), tg.data(), B, T);
  m->backward(1.0f);
  std::vector<float> full(m->num_params()), acc(m->num_params());
  m->get_grads(full.data());

  m->zero_grad();
  double half_loss = 0;
  for (int k = 0; k < 2; ++k) {
    const size_t off = static_cast<size_t>(k) * (B / 2) * T;
    half_loss += 0.5 * m->forward(ids.data() + off, tg.data() + off, B / 2, T);
    m->backward(0.5f);
  }
  m->get_grads(acc.data());
  CHECK(std::fabs(half_loss - full_loss) / full_loss <= 1e-6);
  double worst = 0;
  for (const ParamTensor& t : m->layout()) {
    const std::vector<float> a(acc.begin() + t.offset, acc.begin() + t.offset + t.numel);
    const std::vector<float> f(full.begin() + t.offset, full.begin() + t.offset + t.numel);
    worst = std::max(worst, maxnorm_rel(a, f));
  }
  std::printf("gpt2 grad accumulation K=2 vs full batch: worst per-tensor max-norm rel err %.2e\n", worst);
  CHECK(worst <= 1e-5);
  // Accumulation really accumulates: backward twice doubles the gradient.
  m->zero_grad();
  m->forward(ids.data(), tg.data(), B, T);
  m->backward();
  m->backward();
  m->get_grads(acc.data());
  for (float& x : full) x *= 2.0f;
  CHECK(maxnorm_rel(acc, full) <= 1e-6);
}

TEST_CASE("gpt2 step clips the global gradient norm like torch's clip_grad_norm_", "[cpu]") {
  const int B = 2, T = 5;
  const int V = golden_config().vocab_size;
  const auto ids = random_ids(B * T, 5, V), tg = random_ids(B * T, 6, V);
  auto m = golden_model(B, T);
  m->zero_grad();
  m->forward(ids.data(), tg.data(), B, T);
  m->backward();
  std::vector<float> g(m->num_params()), after(m->num_params());
  m->get_grads(g.data());
  double ss = 0;
  for (float x : g) ss += static_cast<double>(x) * x;
  const double norm = m->grad_norm();
  CHECK(std::fabs(norm - std::sqrt(ss)) <= 1e-12 * std::sqrt(ss));
  AdamWConfig opt;
  opt.grad_clip = static_cast<float>(norm / 4);
  CHECK(m->step(1, 1e-3f, opt) == norm);  // returns the pre-clip norm
  m->get_grads(after.data());
  const double coef = opt.grad_clip / (norm + 1e-6);
  for (float& x : g) x = static_cast<float>(x * static_cast<float>(coef));
  CHECK(maxnorm_rel(after, g) <= 1e-7);
  CHECK(std::fabs(m->grad_norm() - opt.grad_clip) <= 1e-5 * opt.grad_clip);
}

TEST_CASE("gpt2 step skips the update when the gradient norm is not finite", "[cpu]") {
  const int B = 1, T = 4;
  const int V = golden_config().vocab_size;
  auto ids = random_ids(B * T, 11, V);
  const auto tg = random_ids(B * T, 12, V);
  auto m = golden_model(B, T);
  std::vector<float> p(m->num_params()), after(m->num_params()), mm(m->num_params()), vv(m->num_params());
  m->get_params(p.data());
  p[static_cast<size_t>(ids[0]) * m->config().n_embd] = NAN;  // a NaN in the embedding row of ids[0]
  m->set_params(p.data());
  m->zero_grad();
  CHECK(std::isnan(m->forward(ids.data(), tg.data(), B, T)));
  m->backward();
  CHECK_FALSE(std::isfinite(m->step(1, 1e-3f, AdamWConfig{})));
  m->get_params(after.data());
  m->get_moments(mm.data(), vv.data());
  CHECK(std::memcmp(p.data(), after.data(), p.size() * sizeof(float)) == 0);
  CHECK(std::all_of(mm.begin(), mm.end(), [](float x) { return x == 0.0f; }));
  CHECK(std::all_of(vv.begin(), vv.end(), [](float x) { return x == 0.0f; }));
}

TEST_CASE("gpt2 init_weights follows nanoGPT's init and the seed", "[cpu]") {
  Gpt2Config cfg = Gpt2Config::preset("shakespeare-char-cpu");
  Gpt2 m(cfg, 1, 8);
  m.init_weights(7);
  std::vector<float> p(m.num_params()), q(m.num_params());
  m.get_params(p.data());
  for (const ParamTensor& t : m.layout()) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      s += p[t.offset + i];
      s2 += static_cast<double>(p[t.offset + i]) * p[t.offset + i];
    }
    const double mean = s / t.numel, sd = std::sqrt(s2 / t.numel - mean * mean);
    INFO(t.name << " mean " << mean << " sd " << sd);
    if (t.decay) {
      const bool proj = t.name.find("c_proj.weight") != std::string::npos;
      const double want = proj ? 0.02 / std::sqrt(2.0 * cfg.n_layer) : 0.02;
      CHECK(std::fabs(sd - want) <= 0.05 * want);
      CHECK(std::fabs(mean) <= 0.05 * want);
    } else {
      const bool lnw = t.name.find("ln_") != std::string::npos && t.name.find(".weight") != std::string::npos;
      CHECK(mean == (lnw ? 1.0 : 0.0));
      CHECK(sd == 0.0);
    }
  }
  Gpt2 m2(cfg, 1, 8);
  m2.init_weights(7);
  m2.get_params(q.data());
  CHECK(same_bits(p, q));
  m2.init_weights(8);
  m2.get_params(q.data());
  CHECK_FALSE(same_bits(p, q));
}

TEST_CASE("gpt2 memory() accounts params, grads, AdamW moments and activations", "[cpu]") {
  const Gpt2Config cfg = Gpt2Config::preset("shakespeare-char-cpu");
  Gpt2 m(cfg, 12, 64);
  const Gpt2Memory mem = m.memory();
  const size_t np = m.num_params();
  CHECK(mem.params == np * 4);
  CHECK(mem.grads == np * 4);
  CHECK(mem.optimizer == 2 * np * 4);
  CHECK(mem.activations == Gpt2::activation_bytes(cfg, 12, 64));
  CHECK(mem.total() == mem.params + mem.grads + mem.optimizer + mem.activations);
  // Lower bound: what llm.c keeps per token for the backward (ln1, qkv, atty, residual2, ln2,
  // fch, fch_gelu, residual3 = 16C floats per layer), plus the logits; upper bound: twice that.
  const size_t BT = 12 * 64, C = 128, L = 4, V = 65;
  const size_t floor_bytes = 4 * (BT * L * 16 * C + BT * V);
  CHECK(mem.activations >= floor_bytes);
  CHECK(mem.activations <= 2 * floor_bytes);
  CHECK(Gpt2::activation_bytes(cfg, 12, 32) < mem.activations);
  CHECK(Gpt2::activation_bytes(cfg, 6, 64) < mem.activations);
}

TEST_CASE("gpt2 config presets and JSON round trip", "[cpu]") {
  const auto names = Gpt2Config::preset_names();
  REQUIRE(names == std::vector<std::string>{"gpt2", "gpt2-tiny", "shakespeare-char", "shakespeare-char-cpu"});
  const Gpt2Config g = Gpt2Config::preset("gpt2");
  CHECK((g.n_layer == 12 && g.n_head == 12 && g.n_embd == 768 && g.block_size == 1024 && g.vocab_size == 50257));
  const Gpt2Config s = Gpt2Config::preset("shakespeare-char");
  CHECK((s.n_layer == 6 && s.n_head == 6 && s.n_embd == 384 && s.block_size == 256 && s.vocab_size == 65));
  const Gpt2Config t = Gpt2Config::preset("gpt2-tiny");
  CHECK((t.n_layer == 2 && t.n_head == 2 && t.n_embd == 64 && t.block_size == 64 && t.vocab_size == 50257));
  for (const auto& n : names) CHECK(Gpt2Config::from_json(Gpt2Config::preset(n).to_json()) == Gpt2Config::preset(n));
  std::string msg;
  CHECK(category_of([] { Gpt2Config::preset("gpt3"); }, &msg) == ErrorCategory::Usage);
  CHECK(msg.find("gpt3") != std::string::npos);
  json j = g.to_json();
  j.erase("n_head");
  CHECK(category_of([&] { Gpt2Config::from_json(j, "model.json"); }, &msg) == ErrorCategory::Input);
  CHECK(msg.find("model.json") != std::string::npos);
  CHECK(msg.find("n_head") != std::string::npos);
  j = g.to_json();
  j["n_embd"] = "768";
  CHECK(category_of([&] { Gpt2Config::from_json(j); }) == ErrorCategory::Input);
  j["n_embd"] = 770;  // not divisible by 12 heads
  CHECK(category_of([&] { Gpt2Config::from_json(j); }, &msg) == ErrorCategory::Input);
  CHECK(msg.find("n_head") != std::string::npos);
  Gpt2Config bad = g;
  bad.vocab_size = 0;
  CHECK(category_of([&] { bad.validate(); }, &msg) == ErrorCategory::Input);
  CHECK(msg.find("vocab_size") != std::string::npos);
}

TEST_CASE("gpt2 rejects bad input with clear errors", "[cpu]") {
  const Gpt2Config cfg = golden_config();
  const int V = cfg.vocab_size;
  std::string msg;
  // Construction.
  CHECK(category_of([&] { Gpt2 m(cfg, 0, 8); }) == ErrorCategory::Input);
  CHECK(category_of([&] { Gpt2 m(cfg, 2, cfg.block_size + 1); }, &msg) == ErrorCategory::Input);
  CHECK(msg.find("block_size") != std::string::npos);
  Gpt2Config odd = cfg;
  odd.n_head = 5;  // 24 % 5 != 0
  CHECK(category_of([&] { Gpt2 m(odd, 2, 8); }) == ErrorCategory::Input);
  Gpt2KernelParams kp;
  kp.attention.Br = 0;
  CHECK(category_of([&] { Gpt2 m(cfg, 2, 8, Backend::Cpu, kp); }) == ErrorCategory::Input);
  if (!test::have_gpu()) {
    CHECK(category_of([&] { Gpt2 m(cfg, 2, 8, Backend::Cuda); }, &msg) == ErrorCategory::Environment);
    std::printf("gpt2 Backend::Cuda here: %s\n", msg.c_str());
  }

  Gpt2 m(cfg, 2, 8);
  m.init_weights(1);
  std::vector<int32_t> ids = random_ids(2 * 8, 9, V), tg = random_ids(2 * 8, 10, V);
  // Backward or logits before any forward.
  CHECK(category_of([&] { m.backward(); }) == ErrorCategory::Usage);
  CHECK(category_of([&] { std::vector<float> l(2 * 8 * V); m.get_logits(l.data()); }) == ErrorCategory::Usage);
  // Batch shape.
  CHECK(category_of([&] { m.forward(ids.data(), tg.data(), 3, 8); }, &msg) == ErrorCategory::Input);
  CHECK(msg.find("max_B") != std::string::npos);
  CHECK(category_of([&] { m.forward(ids.data(), tg.data(), 1, 9); }, &msg) == ErrorCategory::Input);
  CHECK(msg.find("max_T") != std::string::npos);
  CHECK(category_of([&] { m.forward(ids.data(), tg.data(), 0, 8); }) == ErrorCategory::Input);
  CHECK(category_of([&] { m.forward(nullptr, tg.data(), 2, 8); }) == ErrorCategory::Input);
  // Token ids out of range, named with their position.
  ids[11] = V;
  CHECK(category_of([&] { m.forward(ids.data(), tg.data(), 2, 8); }, &msg) == ErrorCategory::Input);
  CHECK(msg.find("ids[b=1, t=3]") != std::string::npos);
  CHECK(msg.find(std::to_string(V)) != std::string::npos);
  ids[11] = -1;
  CHECK(category_of([&] { m.forward(ids.data(), tg.data(), 2, 8); }) == ErrorCategory::Input);
  ids[11] = 0;
  tg[0] = V + 5;
  CHECK(category_of([&] { m.forward(ids.data(), tg.data(), 2, 8); }, &msg) == ErrorCategory::Input);
  CHECK(msg.find("targets") != std::string::npos);
  tg[0] = 1;
  // A forward without targets cannot be backpropagated.
  CHECK(std::isnan(m.forward(ids.data(), nullptr, 2, 8)));
  CHECK(category_of([&] { m.backward(); }, &msg) == ErrorCategory::Usage);
  CHECK(msg.find("targets") != std::string::npos);
  // Optimizer settings.
  m.forward(ids.data(), tg.data(), 2, 8);
  m.backward();
  CHECK(category_of([&] { m.step(0, 1e-3f, AdamWConfig{}); }) == ErrorCategory::Input);
  CHECK(category_of([&] { m.step(1, NAN, AdamWConfig{}); }) == ErrorCategory::Input);
  AdamWConfig bad;
  bad.beta2 = 1.0f;
  CHECK(category_of([&] { m.step(1, 1e-3f, bad); }) == ErrorCategory::Input);
  CHECK(category_of([&] { m.set_params(nullptr); }) == ErrorCategory::Input);
  // After all the rejected calls the model still works.
  CHECK(std::isfinite(m.forward(ids.data(), tg.data(), 2, 8)));
}
