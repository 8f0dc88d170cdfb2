// PPO (rl/ppo.hpp): a few thousand CartPole steps are deterministic (same seed: the same curve and
// parameters to the bit; another seed: different), the first minibatch's loss terms from the f32
// IR graph equal a float64 recomputation written here from CleanRL's formulas (torch.max,
// torch.clamp, Categorical.entropy), orthogonal init, bad configs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "rtx/core/error.hpp"
#include "rtx/rl/ppo.hpp"

using namespace rtx;

namespace {

struct Terms {
  double loss, pg, v, ent;
};

// CleanRL ppo.py's loss for one minibatch, in float64, from the flat parameters (ppo_param_layout).
Terms reference_loss(const rl::PpoMinibatch& m) {
  const int M = m.rows, O = m.obs_dim, K = m.num_actions, H = m.hidden;
  const float* p = m.params.data();
  auto linear = [](const std::vector<double>& x, int in, const float* w, const float* b, int out) {
    std::vector<double> y(out);
    for (int o = 0; o < out; ++o) {
      double s = b[o];
      for (int i = 0; i < in; ++i) s += static_cast<double>(w[o * in + i]) * x[i];
      y[o] = s;
    }
    return y;
  };
  auto tanh_all = [](std::vector<double> v) {
    for (double& x : v) x = std::tanh(x);
    return v;
  };
  // offsets in layout order
  const float* aw0 = p;
  const float* ab0 = aw0 + H * O;
  const float* aw1 = ab0 + H;
  const float* ab1 = aw1 + H * H;
  const float* aw2 = ab1 + H;
  const float* ab2 = aw2 + K * H;
  const float* cw0 = ab2 + K;
  const float* cb0 = cw0 + H * O;
  const float* cw1 = cb0 + H;
  const float* cb1 = cw1 + H * H;
  const float* cw2 = cb1 + H;
  const float* cb2 = cw2 + H;
  REQUIRE(static_cast<size_t>(cb2 + 1 - p) == m.params.size());
  const double eps = m.clip_coef;
  double pg = 0, v = 0, ent = 0;
  for (int r = 0; r < M; ++r) {
    const std::vector<double> x(m.obs.begin() + r * O, m.obs.begin() + (r + 1) * O);
    const auto logits = linear(tanh_all(linear(tanh_all(linear(x, O, aw0, ab0, H)), H, aw1, ab1, H)), H, aw2, ab2, K);
    const double value = linear(tanh_all(linear(tanh_all(linear(x, O, cw0, cb0, H)), H, cw1, cb1, H)), H, cw2, cb2, 1)[0];
    double mx = logits[0];
    for (double l : logits) mx = std::max(mx, l);
    double z = 0;
    for (double l : logits) z += std::exp(l - mx);
    const double lse = mx + std::log(z);
    const double logp = logits[m.actions[r]] - lse;
    double h = 0;
    for (double l : logits) h -= std::exp(l - lse) * (l - lse);
    ent += h;
    const double ratio = std::exp(logp - m.logp_old[r]);
    const double a = m.adv[r];
    pg += std::max(-a * ratio, -a * std::clamp(ratio, 1 - eps, 1 + eps));
    const double unclipped = (value - m.ret[r]) * (value - m.ret[r]);
    if (m.clip_vloss) {
      const double vc = m.v_old[r] + std::clamp(value - m.v_old[r], -eps, eps);
      v += std::max(unclipped, (vc - m.ret[r]) * (vc - m.ret[r]));
    } else {
      v += unclipped;
    }
  }
  Terms t{0, pg / M, 0.5 * v / M, ent / M};
  t.loss = t.pg - m.ent_coef * t.ent + m.vf_coef * t.v;
  return t;
}

rl::PpoConfig small(uint64_t seed) {
  rl::PpoConfig c;
  c.seed = seed;
  c.total_steps = 2048;  // 4 iterations of 4 envs x 128 steps
  return c;
}

}  // namespace

TEST_CASE("PPO: same seed, same curve and parameters to the bit; another seed differs", "[cpu]") {
  const rl::PpoResult a = rl::train_ppo(small(3)), b = rl::train_ppo(small(3)), c = rl::train_ppo(small(4));
  REQUIRE(a.iterations.size() == 4);
  REQUIRE(a.total_steps == 2048);
  REQUIRE(a.iterations.size() == b.iterations.size());
  for (size_t i = 0; i < a.iterations.size(); ++i) {
    CHECK(a.iterations[i].loss == b.iterations[i].loss);
    CHECK(a.iterations[i].pg_loss == b.iterations[i].pg_loss);
    CHECK(a.iterations[i].v_loss == b.iterations[i].v_loss);
    CHECK(a.iterations[i].entropy == b.iterations[i].entropy);
    CHECK(a.iterations[i].mean_return_100 == b.iterations[i].mean_return_100);
  }
  REQUIRE(a.episodes.size() == b.episodes.size());
  for (size_t i = 0; i < a.episodes.size(); ++i) {
    CHECK(a.episodes[i].ret == b.episodes[i].ret);
    CHECK(a.episodes[i].global_step == b.episodes[i].global_step);
  }
  CHECK(a.params == b.params);
  CHECK(a.params != c.params);
  CHECK(a.iterations.back().loss != c.iterations.back().loss);
  // It learns something even in 4096 steps: CartPole's random policy averages ~22 steps.
  CHECK(a.iterations.back().mean_return_100 > a.iterations.front().mean_return_100);
  // Entropy of a 2-action policy is at most log 2, and starts near it (actor head gain 0.01).
  CHECK(a.first_minibatch.entropy <= std::log(2.0) + 1e-6);
  CHECK(a.first_minibatch.entropy > std::log(2.0) - 1e-3);
}

TEST_CASE("PPO: the f32 IR loss terms equal a float64 recomputation for one minibatch", "[cpu]") {
  {
    const bool clip_vloss = true;
    rl::PpoConfig c = small(7);
    c.total_steps = 512;
    c.clip_vloss = clip_vloss;
    const rl::PpoResult r = rl::train_ppo(c);
    const rl::PpoMinibatch& m = r.first_minibatch;
    REQUIRE(m.rows == 128);
    const Terms t = reference_loss(m);
    std::printf("PPO minibatch (clip_vloss %d): f32 graph loss %.9g pg %.9g v %.9g entropy %.9g; float64 loss %.9g pg "
                "%.9g v %.9g entropy %.9g\n",
                clip_vloss, m.loss, m.pg_loss, m.v_loss, m.entropy, t.loss, t.pg, t.v, t.ent);
    // f32 vs f64 through a 3-layer MLP: relative 1e-5 on the O(1..100) terms; pg_loss is a mean
    // of normalised advantages (about 0), so absolute 1e-5 there.
    CHECK(std::fabs(m.v_loss - t.v) <= 1e-5 * std::max(1.0, std::fabs(t.v)));
    CHECK(std::fabs(m.entropy - t.ent) <= 1e-5 * std::max(1.0, std::fabs(t.ent)));
    CHECK(std::fabs(m.pg_loss - t.pg) <= 1e-5);
    CHECK(std::fabs(m.loss - t.loss) <= 1e-5 * std::max(1.0, std::fabs(t.loss)));
  }
  // The last minibatch of an update has moved parameters (ratio != 1, value clipping active): a
  // large learning rate without annealing makes the clipped branches matter.
  for (bool clip_vloss : {true, false}) {
    rl::PpoConfig c = small(9);
    c.total_steps = 512;
    c.lr = 0.01f;
    c.anneal_lr = false;
    c.clip_vloss = clip_vloss;
    const rl::PpoResult r = rl::train_ppo(c);
    const rl::PpoMinibatch& m = r.last_minibatch;
    REQUIRE(m.rows == 128);
    const Terms t = reference_loss(m);
    std::printf("PPO last minibatch (clip_vloss %d): f32 loss %.9g pg %.9g v %.9g entropy %.9g; float64 %.9g %.9g "
                "%.9g %.9g; approx_kl %.3g, clipfrac %.3f\n",
                clip_vloss, m.loss, m.pg_loss, m.v_loss, m.entropy, t.loss, t.pg, t.v, t.ent, r.iterations.back().approx_kl,
                r.iterations.back().clipfrac);
    CHECK(r.iterations.back().clipfrac > 0);  // clipping is exercised
    CHECK(std::fabs(m.v_loss - t.v) <= 1e-5 * std::max(1.0, std::fabs(t.v)));
    CHECK(std::fabs(m.entropy - t.ent) <= 1e-5 * std::max(1.0, std::fabs(t.ent)));
    CHECK(std::fabs(m.pg_loss - t.pg) <= 1e-5);
    CHECK(std::fabs(m.loss - t.loss) <= 1e-5 * std::max(1.0, std::fabs(t.loss)));
  }
}

TEST_CASE("PPO: orthogonal init and the parameter layout", "[cpu]") {
  const auto layout = rl::ppo_param_layout(4, 2, 64);
  REQUIRE(layout.size() == 12);
  CHECK(layout[0].first == "actor.0.w");
  CHECK(layout[0].second == 64 * 4);
  CHECK(layout[4].second == 2 * 64);
  CHECK(layout[10].first == "critic.2.w");
  CHECK(layout[10].second == 64);
  rl::PpoConfig c = small(1);
  c.total_steps = 512;
  const rl::PpoMinibatch& m = rl::train_ppo(c).first_minibatch;  // params before any update
  // actor.1.w (64 x 64, gain sqrt 2): W W^T = 2 I
  const float* w = m.params.data() + 64 * 4 + 64;
  double worst = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double d = 0;
      for (int k = 0; k < 64; ++k) d += static_cast<double>(w[i * 64 + k]) * w[j * 64 + k];
      worst = std::max(worst, std::fabs(d - (i == j ? 2.0 : 0.0)));
    }
  CHECK(worst < 1e-5);
  // actor.0.w (64 x 4, wide input): orthonormal columns times sqrt 2: W^T W = 2 I (4 x 4)
  const float* w0 = m.params.data();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double d = 0;
      for (int k = 0; k < 64; ++k) d += static_cast<double>(w0[k * 4 + i]) * w0[k * 4 + j];
      CHECK(std::fabs(d - (i == j ? 2.0 : 0.0)) < 1e-5);
    }
  // biases start at zero
  for (int k = 0; k < 64; ++k) CHECK(m.params[64 * 4 + k] == 0.f);
}

TEST_CASE("PPO: bad configs are usage/input errors naming the field", "[cpu]") {
  rl::PpoConfig c;
  c.env = "Pendulum-v1";
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("continuous"));
  c.env = "NoSuchEnv-v0";
  CHECK_THROWS_AS(c.validate(), rtx::Error);
  c = rl::PpoConfig{};
  c.num_minibatches = 3;  // 512 rows do not split in 3
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("num_minibatches"));
  c = rl::PpoConfig{};
  c.num_envs = 0;
  CHECK_THROWS_WITH(rl::train_ppo(c), Catch::Contains("num_envs"));
  c = rl::PpoConfig{};
  c.gamma = 1.5;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("gamma"));
}
