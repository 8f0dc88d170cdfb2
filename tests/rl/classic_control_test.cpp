// The classic-control simulators (rl/env.hpp) against gymnasium 1.x itself: golden trajectories
// written by tests/rl/make_classic_golden.py (10^5 random-action steps per env; the first 500 in
// full, every 100th state with the running reward sum, every episode's length and flags), replayed
// with the same actions (rtx's Philox stream) and gymnasium's reset states (numpy's PCG64 replayed
// here). Tolerance 1e-12 relative on states and rewards; termination/truncation steps identical.
// Also: VecEnv semantics (same-step autoreset, seeding, independence of N) and bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/rl/env.hpp"
#include "test_util.hpp"

using namespace rtx;

namespace {

constexpr double kPi = 3.141592653589793;

// numpy's PCG64 (XSL-RR 128/64) and Generator.uniform: low + (high - low) * (next64 >> 11) * 2^-53.
struct Pcg64 {
  unsigned __int128 state, inc;
  uint64_t next64() {
    const unsigned __int128 mult = (static_cast<unsigned __int128>(0x2360ED051FC65DA4ull) << 64) | 0x4385DF649FCCF645ull;
    state = state * mult + inc;
    const uint64_t hi = static_cast<uint64_t>(state >> 64), lo = static_cast<uint64_t>(state);
    const unsigned rot = static_cast<unsigned>(state >> 122);
    const uint64_t x = hi ^ lo;
    return (x >> rot) | (x << ((64 - rot) & 63));
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * (static_cast<double>(next64() >> 11) * (1.0 / 9007199254740992.0));
  }
};

// gymnasium's reset(): the state each env's reset draws (classic_control/*.py).
std::vector<double> gym_reset(const std::string& name, Pcg64& g) {
  if (name == "CartPole-v1") {
    std::vector<double> s(4);
    for (double& v : s) v = g.uniform(-0.05, 0.05);
    return s;
  }
  if (name == "Acrobot-v1") {  // uniform(-0.1, 0.1, 4).astype(np.float32)
    // Rounded through a float array: GCC 12.2's -O3 SLP vectoriser drops the float rounding of
    // `for (double& v : s) v = static_cast<float>(draw())` for some elements (seen here).
    float f[4];
    for (float& v : f) v = static_cast<float>(g.uniform(-0.1, 0.1));
    return {f[0], f[1], f[2], f[3]};
  }
  if (name == "MountainCar-v0" || name == "MountainCarContinuous-v0") return {g.uniform(-0.6, -0.4), 0.0};
  if (name == "Pendulum-v1") {
    const double a = g.uniform(-kPi, kPi);
    return {a, g.uniform(-1.0, 1.0)};
  }
  FAIL("no reset rule for " << name);
  return {};
}

// Reader of make_classic_golden.py's files (little endian):
//   "RTXRLGD1", u32 version (1), u32 name length, name bytes,
//   u32 S, u32 O, u32 discrete, u32 n (action count or dim), u32 max_episode_steps,
//   u64 total_steps, u64 action_seed, u64 action_subseq,
//   u64 pcg state hi, lo, inc hi, lo (numpy PCG64 before the first reset's draw),
//   u64 fnv1a64 of the action array (int32 or float32), f64 s0[S],
//   u32 n_full, u32 sample_every, u32 n_episodes,
//   n_full x {f64 state[S], f32 obs[O], f64 reward, u8 flags (1 terminated, 2 truncated)},
//   (total_steps / sample_every) x {f64 state[S], f64 running reward sum},
//   n_episodes x u16 (length | terminated << 14 | truncated << 15).
struct Golden {
  std::string name;
  uint32_t S = 0, O = 0, discrete = 0, n = 0, max_steps = 0, n_full = 0, sample_every = 0, n_episodes = 0;
  uint64_t total = 0, action_seed = 0, action_subseq = 0, action_hash = 0;
  Pcg64 pcg{};
  std::vector<double> s0;
  struct Full {
    std::vector<double> state;
    std::vector<float> obs;
    double reward;
    uint8_t flags;
  };
  std::vector<Full> full;
  std::vector<std::vector<double>> sample_state;
  std::vector<double> sample_sum;
  std::vector<uint16_t> episodes;
};

struct Cursor {
  const std::vector<char>& b;
  size_t p = 0;
  template <class T>
  T get() {
    REQUIRE(p + sizeof(T) <= b.size());
    T v;
    std::memcpy(&v, b.data() + p, sizeof(T));
    p += sizeof(T);
    return v;
  }
};

Golden read_golden(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  const std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(b.size() > 8);
  REQUIRE(std::string(b.data(), 8) == "RTXRLGD1");
  Cursor c{b, 8};
  Golden g;
  REQUIRE(c.get<uint32_t>() == 1u);
  const uint32_t nl = c.get<uint32_t>();
  REQUIRE(c.p + nl <= b.size());
  g.name.assign(b.data() + c.p, nl);
  c.p += nl;
  g.S = c.get<uint32_t>(), g.O = c.get<uint32_t>(), g.discrete = c.get<uint32_t>(), g.n = c.get<uint32_t>();
  g.max_steps = c.get<uint32_t>();
  g.total = c.get<uint64_t>(), g.action_seed = c.get<uint64_t>(), g.action_subseq = c.get<uint64_t>();
  const uint64_t sh = c.get<uint64_t>(), sl = c.get<uint64_t>(), ih = c.get<uint64_t>(), il = c.get<uint64_t>();
  g.pcg.state = (static_cast<unsigned __int128>(sh) << 64) | sl;
  g.pcg.inc = (static_cast<unsigned __int128>(ih) << 64) | il;
  g.action_hash = c.get<uint64_t>();
  for (uint32_t k = 0; k < g.S; ++k) g.s0.push_back(c.get<double>());
  g.n_full = c.get<uint32_t>(), g.sample_every = c.get<uint32_t>(), g.n_episodes = c.get<uint32_t>();
  for (uint32_t t = 0; t < g.n_full; ++t) {
    Golden::Full r;
    for (uint32_t k = 0; k < g.S; ++k) r.state.push_back(c.get<double>());
    for (uint32_t k = 0; k < g.O; ++k) r.obs.push_back(c.get<float>());
    r.reward = c.get<double>();
    r.flags = c.get<uint8_t>();
    g.full.push_back(r);
  }
  for (uint64_t j = 0; j < g.total / g.sample_every; ++j) {
    std::vector<double> s;
    for (uint32_t k = 0; k < g.S; ++k) s.push_back(c.get<double>());
    g.sample_state.push_back(s);
    g.sample_sum.push_back(c.get<double>());
  }
  for (uint32_t e = 0; e < g.n_episodes; ++e) g.episodes.push_back(c.get<uint16_t>());
  REQUIRE(c.p == b.size());
  return g;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(1.0, std::fabs(b)); }

void replay(const std::string& name) {
  const Golden g = read_golden(rtx::test::source_dir() + "/tests/rl/data/" + name + ".bin");
  REQUIRE(g.name == name);
  const rl::EnvSpec& spec = rl::env_spec(name);
  REQUIRE(static_cast<int>(g.S) == spec.state_dim);
  REQUIRE(static_cast<int>(g.O) == spec.obs_dim);
  REQUIRE(static_cast<bool>(g.discrete) == spec.discrete);
  REQUIRE(static_cast<int>(g.max_steps) == spec.max_episode_steps);

  // The actions: rtx's Philox stream, as the script drew them; its hash proves the same bytes.
  std::vector<int32_t> ai(spec.discrete ? g.total : 0);
  std::vector<float> af(spec.discrete ? 0 : g.total);
  for (uint64_t t = 0; t < g.total; ++t) {
    const uint32_t u = philox_u32(g.action_seed, g.action_subseq, t);
    if (spec.discrete)
      ai[t] = static_cast<int32_t>(u % g.n);
    else
      af[t] = spec.act_low + (spec.act_high - spec.act_low) * u32_to_unit_float(u);
  }
  const uint64_t h = spec.discrete ? fnv1a64(ai.data(), ai.size() * 4) : fnv1a64(af.data(), af.size() * 4);
  REQUIRE(h == g.action_hash);

  Pcg64 pcg = g.pcg;
  rl::VecEnv env(name, 1, /*seed=*/7);
  env.reset();
  const std::vector<double> s0 = gym_reset(name, pcg);
  for (uint32_t k = 0; k < g.S; ++k) REQUIRE(s0[k] == g.s0[k]);
  env.set_state(0, s0);

  double max_state = 0, max_reward = 0, max_obs = 0, max_sum = 0, ret_sum = 0;
  size_t ep = 0, flag_mismatch = 0, sample = 0;
  int64_t first_bad = -1;
  std::vector<double> s(g.S);
  for (uint64_t t = 0; t < g.total; ++t) {
    if (spec.discrete)
      env.step(&ai[t], 1);
    else
      env.step(&af[t], 1);
    const bool term = env.terminated()[0], trunc = env.truncated()[0], done = term || trunc;
    for (uint32_t k = 0; k < g.S; ++k) s[k] = done ? env.final_state(k)[0] : env.state(k)[0];
    const double r = env.reward()[0];
    ret_sum += r;
    if (t < g.n_full) {
      const Golden::Full& f = g.full[t];
      double d = 0;
      for (uint32_t k = 0; k < g.S; ++k) d = std::max(d, rel(s[k], f.state[k]));
      if (d > 1e-12 && first_bad < 0) first_bad = static_cast<int64_t>(t);
      max_state = std::max(max_state, d);
      max_reward = std::max(max_reward, rel(r, f.reward));
      const float* o = done ? env.final_obs() : env.obs();
      for (uint32_t k = 0; k < g.O; ++k) max_obs = std::max(max_obs, rel(o[k], f.obs[k]));
      if ((static_cast<int>(term) | (static_cast<int>(trunc) << 1)) != f.flags) ++flag_mismatch;
    }
    if (t % g.sample_every == g.sample_every - 1) {
      double d = 0;
      for (uint32_t k = 0; k < g.S; ++k) d = std::max(d, rel(s[k], g.sample_state[sample][k]));
      if (d > 1e-12 && first_bad < 0) first_bad = static_cast<int64_t>(t);
      max_state = std::max(max_state, d);
      max_sum = std::max(max_sum, std::fabs(ret_sum - g.sample_sum[sample]) / std::max(1.0, std::fabs(g.sample_sum[sample])));
      ++sample;
    }
    if (done) {
      REQUIRE(ep < g.episodes.size());
      const uint16_t e = g.episodes[ep++];
      const int len = e & 0x3FFF, gterm = (e >> 14) & 1, gtrunc = (e >> 15) & 1;
      if (len != env.episode_length()[0] || gterm != static_cast<int>(term) || gtrunc != static_cast<int>(trunc)) {
        ++flag_mismatch;
        FAIL_CHECK(name << ": episode " << ep - 1 << " ends at step " << t << " length " << env.episode_length()[0]
                        << " term " << term << " trunc " << trunc << "; gymnasium: length " << len << " term "
                        << gterm << " trunc " << gtrunc);
        break;
      }
      env.set_state(0, gym_reset(name, pcg));  // gymnasium's next reset state instead of ours
    }
  }
  const bool ok = max_state <= 1e-12 && max_reward <= 1e-12 && max_sum <= 1e-12 && max_obs <= 1e-6 &&
                  flag_mismatch == 0 && ep == g.episodes.size();
  std::printf("%s %s: %llu steps, %zu episodes; max rel diff state %.3g reward %.3g reward sum %.3g obs %.3g%s\n",
              ok ? "OK" : "NOT OK", name.c_str(), static_cast<unsigned long long>(g.total), ep, max_state, max_reward,
              max_sum, max_obs, first_bad >= 0 ? (" (first > 1e-12 at step " + std::to_string(first_bad) + ")").c_str() : "");
  CHECK(max_state <= 1e-12);
  CHECK(max_reward <= 1e-12);
  CHECK(max_sum <= 1e-12);
  CHECK(max_obs <= 1e-6);
  CHECK(flag_mismatch == 0);
  CHECK(ep == g.episodes.size());
}

}  // namespace

TEST_CASE("classic control envs match gymnasium 1.x over 10^5 random steps", "[cpu]") {
  for (const std::string& name : rl::env_names()) {
    SECTION(name) { replay(name); }
  }
}

TEST_CASE("VecEnv: same-step autoreset, per-env Philox streams, N-independence", "[cpu]") {
  const int N = 5;
  rl::VecEnv a("CartPole-v1", N, 11), b("CartPole-v1", 3, 11), c("CartPole-v1", N, 12);
  a.reset(), b.reset(), c.reset();
  // Env i's reset state depends only on (seed, i): the first 3 envs of a and b agree, c differs.
  for (int k = 0; k < 4; ++k) {
    for (int i = 0; i < 3; ++i) CHECK(a.state(k)[i] == b.state(k)[i]);
    CHECK(a.state(k)[0] != c.state(k)[0]);
    for (int i = 0; i < N; ++i) {
      CHECK(std::fabs(a.state(k)[i]) < 0.05);
      CHECK(a.obs()[i * 4 + k] == static_cast<float>(a.state(k)[i]));
    }
  }
  // Always push right: every env terminates (pole falls) well before 500 steps.
  std::vector<int32_t> act(N, 1);
  std::vector<int> done_at(N, -1);
  for (int t = 0; t < 200; ++t) {
    std::vector<double> before(4 * N);
    a.step(act);
    for (int i = 0; i < N; ++i) {
      CHECK(a.reward()[i] == 1.0);
      if (a.terminated()[i] && done_at[i] < 0) {
        done_at[i] = t;
        CHECK(a.episode_length()[i] == t + 1);
        CHECK(a.episode_return()[i] == static_cast<double>(t + 1));
        CHECK(a.episode_step()[i] == 0);  // already reset: the new episode has taken no step
        // final_obs is the terminal observation (out of bounds), obs the new episode's first.
        const bool out = std::fabs(a.final_state(0)[i]) > 2.4 || std::fabs(a.final_state(2)[i]) > 12 * 2 * kPi / 360;
        CHECK(out);
        CHECK(a.final_obs()[i * 4 + 2] == static_cast<float>(a.final_state(2)[i]));
        for (int k = 0; k < 4; ++k) {
          CHECK(std::fabs(a.state(k)[i]) < 0.05);
          CHECK(a.obs()[i * 4 + k] == static_cast<float>(a.state(k)[i]));
        }
      }
    }
  }
  for (int i = 0; i < N; ++i) CHECK(done_at[i] > 0);

  // Acrobot's reset state is float32 (gymnasium casts it), in U(-0.1, 0.1).
  rl::VecEnv ac("Acrobot-v1", 64, 5);
  ac.reset();
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 64; ++i) {
      CHECK(ac.state(k)[i] == static_cast<double>(static_cast<float>(ac.state(k)[i])));
      CHECK(std::fabs(ac.state(k)[i]) <= 0.1);
    }
  CHECK(a.total_steps() == 200 * N);

  // Truncation: Pendulum never terminates and truncates at exactly 200 steps.
  rl::VecEnv p("Pendulum-v1", 2, 3);
  p.reset();
  std::vector<float> u(2, 0.5f);
  for (int t = 1; t <= 200; ++t) {
    p.step(u);
    CHECK(p.terminated()[0] == 0);
    CHECK(p.truncated()[0] == (t == 200 ? 1 : 0));
  }
  CHECK(p.episode_length()[1] == 200);
}

TEST_CASE("VecEnv: bad input is an Input error naming the env", "[cpu]") {
  CHECK_THROWS_WITH(rl::VecEnv("CartPole-v9", 1, 0), Catch::Contains("CartPole-v9"));
  CHECK_THROWS_AS(rl::env_spec("nope"), rtx::Error);
  CHECK_THROWS_AS(rl::VecEnv("CartPole-v1", 0, 0), rtx::Error);
  rl::VecEnv e("CartPole-v1", 2, 0);
  std::vector<int32_t> two{0, 1}, one{0}, bad{0, 2};
  CHECK_THROWS_WITH(e.step(two), Catch::Contains("before reset"));
  e.reset();
  CHECK_THROWS_WITH(e.step(one), Catch::Contains("1 actions for 2 envs"));
  CHECK_THROWS_WITH(e.step(bad), Catch::Contains("out of range"));
  std::vector<float> f{0.f, 0.f};
  CHECK_THROWS_WITH(e.step(f), Catch::Contains("discrete"));
  CHECK_THROWS_AS(e.set_state(2, std::vector<double>(4)), rtx::Error);
  CHECK_THROWS_AS(e.set_state(0, std::vector<double>(3)), rtx::Error);
  CHECK_THROWS_AS(e.state(4), rtx::Error);
  rl::VecEnv m("MountainCarContinuous-v0", 1, 0);
  m.reset();
  std::vector<float> nan{std::nanf("")};
  CHECK_THROWS_WITH(m.step(nan), Catch::Contains("NaN"));
  CHECK_THROWS_AS(m.step(one), rtx::Error);
}
