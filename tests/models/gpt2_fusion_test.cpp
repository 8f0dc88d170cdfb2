// GPT-2 CPU attention fusion switch (Gpt2KernelParams::attention.algo): the unfused (naive)
// path matches the fused (flash) one within fp32 1e-5 relative in losses and every gradient over
// several training steps at T = 1, 7, 127, and matches the PyTorch golden file on its own.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/core/philox.hpp"
#include "rtx/models/gpt2.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::models;

namespace {

Gpt2KernelParams attention(bool fused) {
  Gpt2KernelParams kp;
  kp.attention.algo = fused ? kernels::AttentionParams::Algo::Flash : kernels::AttentionParams::Algo::Naive;
  return kp;
}

/// max|a-b| / max|b| over [off, off+n) (exact match required where b is all zero).
double maxnorm_rel(const float* a, const float* b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    r = std::max(r, std::fabs(static_cast<double>(b[i])));
  }
  return r > 0 ? d / r : (d > 0 ? INFINITY : 0.0);
}

/// Worst per-tensor max-norm relative error of gradients a vs b.
double grad_err(const std::vector<ParamTensor>& lay, const std::vector<float>& a, const std::vector<float>& b,
                std::string* worst) {
  double e = 0;
  for (const ParamTensor& t : lay) {
    const double x = maxnorm_rel(a.data() + t.offset, b.data() + t.offset, t.numel);
    if (x > e) e = x, *worst = t.name;
  }
  return e;
}

std::vector<int32_t> ids_of(size_t n, uint64_t subseq, int V) {
  std::vector<int32_t> v(n);
  Philox r(11, subseq);
  for (auto& x : v) x = static_cast<int32_t>(r.next_u32() % static_cast<uint32_t>(V));
  return v;
}

}  // namespace

TEST_CASE("gpt2 attention fused vs unfused: losses and gradients within 1e-5 over several steps", "[cpu]") {
  for (const int T : {1, 7, 127}) {
    const int B = T == 127 ? 2 : 3;
    Gpt2Config cfg;
    cfg.n_layer = 2;
    cfg.n_head = 3;
    cfg.n_embd = 24;
    cfg.block_size = T;
    cfg.vocab_size = 67;
    Gpt2 fused(cfg, B, T, Backend::Cpu, attention(true)), unfused(cfg, B, T, Backend::Cpu, attention(false));
    fused.init_weights(3);
    unfused.init_weights(3);
    // Adam with a large eps: updates are continuous in the gradient, so a gradient that is ~0
    // with opposite signs in the two arms cannot move the weights apart by 2 lr (sign(g) updates).
    AdamWConfig opt;
    opt.eps = 1e-2f;
    bool any_bits_differ = false;
    for (int step = 1; step <= 4; ++step) {
      const auto ids = ids_of(static_cast<size_t>(B) * T, 2 * step, cfg.vocab_size);
      const auto tg = ids_of(static_cast<size_t>(B) * T, 2 * step + 1, cfg.vocab_size);
      std::vector<float> gf(fused.num_params()), gu(unfused.num_params());
      fused.zero_grad();
      unfused.zero_grad();
      const float lf = fused.forward(ids.data(), tg.data(), B, T);
      const float lu = unfused.forward(ids.data(), tg.data(), B, T);
      fused.backward();
      unfused.backward();
      fused.get_grads(gf.data());
      unfused.get_grads(gu.data());
      std::string worst = "-";
      const double ge = grad_err(fused.layout(), gu, gf, &worst);
      const double le = std::fabs(static_cast<double>(lu) - lf) / std::fabs(static_cast<double>(lf));
      INFO("T=" << T << " step " << step << ": loss " << lf << " vs " << lu << " rel " << le << "; worst gradient "
                << worst << " rel " << ge);
      CHECK(std::isfinite(lf));
      CHECK(le <= 1e-5);
      CHECK(ge <= 1e-5);
      if (std::memcmp(gf.data(), gu.data(), gf.size() * sizeof(float)) != 0) any_bits_differ = true;
      if (step == 4) std::printf("gpt2 fusion T=%d: loss rel %.2e, gradients worst per-tensor rel %.2e (%s)\n", T, le, ge, worst.c_str());
      fused.step(step, 1e-2f, opt);
      unfused.step(step, 1e-2f, opt);
    }
    // The switch is live: at T = 127 the two attention paths sum in different orders.
    if (T == 127) CHECK(any_bits_differ);
  }
}

TEST_CASE("gpt2 unfused attention matches the PyTorch golden file at step 0", "[cpu]") {
  std::ifstream f(test::source_dir() + "/tests/reference/data/gpt2_golden.json");
  REQUIRE(f.good());
  const nlohmann::json g = nlohmann::json::parse(f);
  const Gpt2Config cfg = Gpt2Config::from_json(g["config"], "gpt2_golden.json");
  for (const auto& c : g["cases"]) {
    const int B = c["B"], T = c["T"];
    Gpt2 m(cfg, B, T, Backend::Cpu, attention(false));
    const auto p = g["params"].get<std::vector<float>>();
    REQUIRE(p.size() == m.num_params());
    m.set_params(p.data());
    const auto ids = c["ids"].get<std::vector<int32_t>>(), tg = c["targets"].get<std::vector<int32_t>>();
    const float loss = m.forward(ids.data(), tg.data(), B, T);
    const double want = c["loss"];
    CHECK(std::fabs(loss - want) / std::fabs(want) <= 1e-5);
    m.zero_grad();
    m.backward();
    std::vector<float> gr(m.num_params());
    m.get_grads(gr.data());
    const auto ref = c["grads"].get<std::vector<double>>();
    const std::vector<float> reff(ref.begin(), ref.end());
    std::string worst = "-";
    const double e = grad_err(m.layout(), gr, reff, &worst);
    INFO("B=" << B << " T=" << T << " worst " << worst << " " << e);
    CHECK(e <= 1e-4);  // the fused path's bound against torch (gpt2_test)
  }
}
