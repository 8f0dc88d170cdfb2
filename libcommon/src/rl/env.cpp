// The classic-control envs of gymnasium 1.x (gymnasium/envs/classic_control/*.py) as batched
// structure-of-arrays dynamics, and VecEnv (env.hpp). Each kind's step1() is the gymnasium step
// written operation for operation in the same order and precision, so results match to the last
// bit where the libm calls agree (numpy and glibc do on x86-64; the golden test allows 1e-12).
// This file must not be compiled with FMA contraction (sources.cmake sets -ffp-contract=off):
// a fused a*b+c rounds once where numpy rounds twice.
#include "rtx/rl/env.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"

namespace rtx::rl {
namespace {

constexpr double kPi = 3.141592653589793;  // math.pi / np.pi

// numpy's scalar `x ** 2`: libm pow(x, 2.0) (powf for float32 scalars), which glibc does not
// always round like x * x (Acrobot and Pendulum differ by an ulp within a few steps otherwise).
// The exponent is read through a volatile so the compiler cannot fold pow(x, 2) into x * x.
volatile double g_two = 2.0;
double np_sq(double x) { return std::pow(x, static_cast<double>(g_two)); }
float np_sq(float x) { return std::pow(x, static_cast<float>(g_two)); }

// Uniform double in [lo, lo + range) from env i's Philox stream, as numpy's
// Generator.uniform does it: lo + range * U[0,1).
double uniform(uint64_t seed, uint64_t env, uint64_t& offset, double lo, double hi) {
  Philox p(seed, env, offset);
  const double u = p.next_double();
  offset = p.offset();
  return lo + (hi - lo) * u;
}

// ---- CartPole-v1 (cartpole.py CartPoleEnv.step, euler integrator) ---------------------------
struct CartPole {
  static constexpr int S = 4, O = 4;
  static constexpr double gravity = 9.8, masscart = 1.0, masspole = 0.1;
  static constexpr double total_mass = masspole + masscart;
  static constexpr double length = 0.5;
  static constexpr double polemass_length = masspole * length;
  static constexpr double force_mag = 10.0, tau = 0.02;
  static constexpr double theta_threshold = 12 * 2 * kPi / 360;
  static constexpr double x_threshold = 2.4;

  static void reset(double* s, uint64_t seed, uint64_t env, uint64_t& off) {
    for (int k = 0; k < 4; ++k) s[k] = uniform(seed, env, off, -0.05, 0.05);
  }
  static void step1(double* s, uint8_t&, int32_t action, double& reward, uint8_t& term) {
    double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const double force = action == 1 ? force_mag : -force_mag;
    const double costheta = std::cos(theta), sintheta = std::sin(theta);
    const double temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
    const double thetaacc = (gravity * sintheta - costheta * temp) /
                            (length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass));
    const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    x = x + tau * x_dot;
    x_dot = x_dot + tau * xacc;
    theta = theta + tau * theta_dot;
    theta_dot = theta_dot + tau * thetaacc;
    s[0] = x, s[1] = x_dot, s[2] = theta, s[3] = theta_dot;
    term = (x < -x_threshold || x > x_threshold || theta < -theta_threshold || theta > theta_threshold) ? 1 : 0;
    reward = 1.0;
  }
  static void observe(const double* s, float* o) {
    for (int k = 0; k < 4; ++k) o[k] = static_cast<float>(s[k]);
  }
};

// ---- Acrobot-v1 (acrobot.py, "book" dynamics, rk4 over [0, dt], no torque noise) -------------
struct Acrobot {
  static constexpr int S = 4, O = 6;
  static constexpr double dt = 0.2;
  static constexpr double m1 = 1.0, m2 = 1.0, l1 = 1.0, lc1 = 0.5, lc2 = 0.5, I1 = 1.0, I2 = 1.0, g = 9.8;
  static constexpr double MAX_VEL_1 = 4 * kPi, MAX_VEL_2 = 9 * kPi;

  static void reset(double* s, uint64_t seed, uint64_t env, uint64_t& off) {
    // uniform(-0.1, 0.1, size=4).astype(np.float32). Rounded through a float array: GCC 12.2's
    // -O3 SLP vectoriser drops the float rounding of `s[k] = static_cast<float>(draw())` in an
    // unrolled loop for some k (tests/rl/classic_control_test.cpp checks the state is float32).
    float f[4];
    for (int k = 0; k < 4; ++k) f[k] = static_cast<float>(uniform(seed, env, off, -0.1, 0.1));
    for (int k = 0; k < 4; ++k) s[k] = f[k];
  }
  // _dsdt: y = (theta1, theta2, dtheta1, dtheta2, a) -> dy
  static void dsdt(const double* y, double* dy) {
    const double a = y[4], theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
    const double ct2 = std::cos(theta2), st2 = std::sin(theta2);
    const double d1 = m1 * (lc1 * lc1) + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * ct2) + I1 + I2;
    const double d2 = m2 * (lc2 * lc2 + l1 * lc2 * ct2) + I2;
    const double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - kPi / 2.0);
    const double phi1 = -m2 * l1 * lc2 * np_sq(dtheta2) * st2 - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * st2 +
                        (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - kPi / 2) + phi2;
    const double ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * np_sq(dtheta1) * st2 - phi2) /
                            (m2 * (lc2 * lc2) + I2 - np_sq(d2) / d1);
    const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    dy[0] = dtheta1, dy[1] = dtheta2, dy[2] = ddtheta1, dy[3] = ddtheta2, dy[4] = 0.0;
  }
  static double wrap(double x, double m, double M) {
    const double diff = M - m;
    while (x > M) x = x - diff;
    while (x < m) x = x + diff;
    return x;
  }
  static double bound(double x, double m, double M) { return std::min(std::max(x, m), M); }
  static void step1(double* s, uint8_t&, int32_t action, double& reward, uint8_t& term) {
    static constexpr double torque[3] = {-1.0, 0.0, 1.0};
    double y0[5] = {s[0], s[1], s[2], s[3], torque[action]}, k1[5], k2[5], k3[5], k4[5], y[5];
    const double h = dt - 0.0, h2 = h / 2.0;
    dsdt(y0, k1);
    for (int j = 0; j < 5; ++j) y[j] = y0[j] + h2 * k1[j];
    dsdt(y, k2);
    for (int j = 0; j < 5; ++j) y[j] = y0[j] + h2 * k2[j];
    dsdt(y, k3);
    for (int j = 0; j < 5; ++j) y[j] = y0[j] + h * k3[j];
    dsdt(y, k4);
    const double h6 = h / 6.0;
    for (int j = 0; j < 4; ++j) y[j] = y0[j] + h6 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
    s[0] = wrap(y[0], -kPi, kPi);
    s[1] = wrap(y[1], -kPi, kPi);
    s[2] = bound(y[2], -MAX_VEL_1, MAX_VEL_1);
    s[3] = bound(y[3], -MAX_VEL_2, MAX_VEL_2);
    term = (-std::cos(s[0]) - std::cos(s[1] + s[0]) > 1.0) ? 1 : 0;
    reward = term ? 0.0 : -1.0;
  }
  static void observe(const double* s, float* o) {
    o[0] = static_cast<float>(std::cos(s[0]));
    o[1] = static_cast<float>(std::sin(s[0]));
    o[2] = static_cast<float>(std::cos(s[1]));
    o[3] = static_cast<float>(std::sin(s[1]));
    o[4] = static_cast<float>(s[2]);
    o[5] = static_cast<float>(s[3]);
  }
};

// ---- MountainCar-v0 (mountain_car.py), float64 throughout ------------------------------------
struct MountainCar {
  static constexpr int S = 2, O = 2;
  static constexpr double min_position = -1.2, max_position = 0.6, max_speed = 0.07, goal_position = 0.5;
  static constexpr double force = 0.001, gravity = 0.0025;

  static void reset(double* s, uint64_t seed, uint64_t env, uint64_t& off) {
    s[0] = uniform(seed, env, off, -0.6, -0.4);
    s[1] = 0.0;
  }
  static void step1(double* s, uint8_t&, int32_t action, double& reward, uint8_t& term) {
    double position = s[0], velocity = s[1];
    velocity += static_cast<double>(action - 1) * force + std::cos(3 * position) * -gravity;
    velocity = std::min(std::max(velocity, -max_speed), max_speed);
    position += velocity;
    position = std::min(std::max(position, min_position), max_position);
    if (position == min_position && velocity < 0) velocity = 0;
    term = (position >= goal_position && velocity >= 0) ? 1 : 0;
    reward = -1.0;
    s[0] = position, s[1] = velocity;
  }
  static void observe(const double* s, float* o) {
    o[0] = static_cast<float>(s[0]);
    o[1] = static_cast<float>(s[1]);
  }
};

// ---- MountainCarContinuous-v0 (continuous_mountain_car.py) ----------------------------------
// gymnasium stores this state as float32 after every step, and numpy 2's promotion (NEP 50:
// Python floats are "weak") makes most of the step float32: force * power is float32, the
// gravity term (a Python float) is rounded to float32 before the subtraction, velocity and
// position add in float32. Only the first step after a reset runs on the float64 reset state.
struct MountainCarContinuous {
  static constexpr int S = 2, O = 2;
  static constexpr double min_position = -1.2, max_position = 0.6, max_speed = 0.07, goal_position = 0.45;
  static constexpr double power = 0.0015;

  static void reset(double* s, uint64_t seed, uint64_t env, uint64_t& off) {
    s[0] = uniform(seed, env, off, -0.6, -0.4);
    s[1] = 0.0;
  }
  static void step1(double* s, uint8_t& fresh, float action, double& reward, uint8_t& term) {
    const float a = std::min(std::max(action, -1.0f), 1.0f);
    const float fp = a * static_cast<float>(power);
    if (fresh) {  // float64 position and velocity (the reset state)
      double position = s[0], velocity = s[1];
      const double grav = 0.0025 * std::cos(3 * position);
      velocity += static_cast<double>(static_cast<float>(fp - static_cast<float>(grav)));
      if (velocity > max_speed) velocity = max_speed;
      if (velocity < -max_speed) velocity = -max_speed;
      position += velocity;
      if (position > max_position) position = max_position;
      if (position < min_position) position = min_position;
      if (position == min_position && velocity < 0) velocity = 0;
      term = (position >= goal_position && velocity >= 0) ? 1 : 0;
      s[0] = static_cast<float>(position), s[1] = static_cast<float>(velocity);
      fresh = 0;
    } else {  // float32 state; comparisons against Python floats round them to float32
      float position = static_cast<float>(s[0]), velocity = static_cast<float>(s[1]);
      const double grav = 0.0025 * std::cos(static_cast<double>(3.0f * position));
      velocity = velocity + static_cast<float>(fp - static_cast<float>(grav));
      if (velocity > static_cast<float>(max_speed)) velocity = static_cast<float>(max_speed);
      if (velocity < -static_cast<float>(max_speed)) velocity = -static_cast<float>(max_speed);
      position = position + velocity;
      if (position > static_cast<float>(max_position)) position = static_cast<float>(max_position);
      if (position < static_cast<float>(min_position)) position = static_cast<float>(min_position);
      if (position == static_cast<float>(min_position) && velocity < 0) velocity = 0;
      term = (position >= static_cast<float>(goal_position) && velocity >= 0) ? 1 : 0;
      s[0] = position, s[1] = velocity;
    }
    const double ad = a;
    reward = (term ? 100.0 : 0.0) - (ad * ad) * 0.1;
  }
  static void observe(const double* s, float* o) {
    o[0] = static_cast<float>(s[0]);
    o[1] = static_cast<float>(s[1]);
  }
};

// ---- Pendulum-v1 (pendulum.py, g = 10), float64 state, float32 torque -----------------------
struct Pendulum {
  static constexpr int S = 2, O = 3;
  static constexpr double max_speed = 8, max_torque = 2.0, dt = 0.05, g = 10.0, m = 1.0, l = 1.0;

  static void reset(double* s, uint64_t seed, uint64_t env, uint64_t& off) {
    s[0] = uniform(seed, env, off, -kPi, kPi);
    s[1] = uniform(seed, env, off, -1.0, 1.0);
  }
  // (x + pi) % (2 pi) - pi with numpy's float remainder (fmod, then the divisor's sign).
  static double angle_normalize(double x) {
    const double b = 2 * kPi;
    double mod = std::fmod(x + kPi, b);
    if (mod != 0) {
      if ((b < 0) != (mod < 0)) mod += b;
    } else {
      mod = std::copysign(0.0, b);
    }
    return mod - kPi;
  }
  static void step1(double* s, uint8_t&, float action, double& reward, uint8_t& term) {
    const double th = s[0], thdot = s[1];
    const float u = std::min(std::max(action, -static_cast<float>(max_torque)), static_cast<float>(max_torque));
    const double an = angle_normalize(th);
    const float ucost = 0.001f * np_sq(u);  // 0.001 * u**2 is float32 in numpy 2
    const double costs = np_sq(an) + 0.1 * np_sq(thdot) + static_cast<double>(ucost);
    const float utorque = 3.0f * u;       // 3.0 / (m * l**2) * u, float32
    double newthdot = thdot + (3 * g / (2 * l) * std::sin(th) + static_cast<double>(utorque)) * dt;
    newthdot = std::min(std::max(newthdot, -max_speed), max_speed);
    const double newth = th + newthdot * dt;
    s[0] = newth, s[1] = newthdot;
    term = 0;
    reward = -costs;
  }
  static void observe(const double* s, float* o) {
    o[0] = static_cast<float>(std::cos(s[0]));
    o[1] = static_cast<float>(std::sin(s[0]));
    o[2] = static_cast<float>(s[1]);
  }
};

}  // namespace

// Per-kind batch loops: each env's state is gathered from the (S, N) arrays into registers,
// stepped, and scattered back; one virtual call per batch.
class Physics {
 public:
  virtual ~Physics() = default;
  virtual void step(double* st, uint8_t* fresh, int n, const void* actions, double* r, uint8_t* term) const = 0;
  virtual void reset(double* st, int n, int i, uint64_t seed, uint64_t& off) const = 0;
  virtual void observe(const double* st, int n, int i, float* o) const = 0;
};

namespace {

template <class K, class Act>
class PhysicsOf final : public Physics {
 public:
  void step(double* st, uint8_t* fresh, int n, const void* actions, double* r, uint8_t* term) const override {
    const Act* a = static_cast<const Act*>(actions);
    for (int i = 0; i < n; ++i) {
      double s[K::S];
      for (int k = 0; k < K::S; ++k) s[k] = st[k * n + i];
      K::step1(s, fresh[i], a[i], r[i], term[i]);
      for (int k = 0; k < K::S; ++k) st[k * n + i] = s[k];
    }
  }
  void reset(double* st, int n, int i, uint64_t seed, uint64_t& off) const override {
    double s[K::S];
    K::reset(s, seed, static_cast<uint64_t>(i), off);
    for (int k = 0; k < K::S; ++k) st[k * n + i] = s[k];
  }
  void observe(const double* st, int n, int i, float* o) const override {
    double s[K::S];
    for (int k = 0; k < K::S; ++k) s[k] = st[k * n + i];
    K::observe(s, o);
  }
};

struct Kind {
  EnvSpec spec;
  std::unique_ptr<Physics> (*make)();
};

template <class K, class Act>
std::unique_ptr<Physics> make_physics() {
  return std::make_unique<PhysicsOf<K, Act>>();
}

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> k = [] {
    std::vector<Kind> v;
    auto disc = [](const char* name, int S, int O, int n, int T) {
      EnvSpec s;
      s.name = name, s.state_dim = S, s.obs_dim = O, s.discrete = true, s.num_actions = n, s.max_episode_steps = T;
      return s;
    };
    auto cont = [](const char* name, int S, int O, float lo, float hi, int T) {
      EnvSpec s;
      s.name = name, s.state_dim = S, s.obs_dim = O, s.discrete = false, s.act_dim = 1, s.act_low = lo,
      s.act_high = hi, s.max_episode_steps = T;
      return s;
    };
    v.push_back({disc("CartPole-v1", CartPole::S, CartPole::O, 2, 500), make_physics<CartPole, int32_t>});
    v.push_back({disc("Acrobot-v1", Acrobot::S, Acrobot::O, 3, 500), make_physics<Acrobot, int32_t>});
    v.push_back({disc("MountainCar-v0", MountainCar::S, MountainCar::O, 3, 200), make_physics<MountainCar, int32_t>});
    v.push_back({cont("MountainCarContinuous-v0", MountainCarContinuous::S, MountainCarContinuous::O, -1.f, 1.f, 999),
                 make_physics<MountainCarContinuous, float>});
    v.push_back({cont("Pendulum-v1", Pendulum::S, Pendulum::O, -2.f, 2.f, 200), make_physics<Pendulum, float>});
    return v;
  }();
  return k;
}

const Kind& kind(const std::string& name) {
  for (const Kind& k : kinds())
    if (k.spec.name == name) return k;
  std::string known;
  for (const Kind& k : kinds()) known += (known.empty() ? "" : ", ") + k.spec.name;
  throw_input("unknown environment '" + name + "'", "env", "known: " + known);
}

}  // namespace

std::vector<std::string> env_names() {
  std::vector<std::string> v;
  for (const Kind& k : kinds()) v.push_back(k.spec.name);
  return v;
}

const EnvSpec& env_spec(const std::string& name) { return kind(name).spec; }

VecEnv::VecEnv(const std::string& name, int num_envs, uint64_t seed) : spec_(&kind(name).spec), n_(num_envs), seed_(seed) {
  if (num_envs < 1) throw_input("num_envs must be >= 1, got " + std::to_string(num_envs), "VecEnv(" + name + ")");
  phys_ = kind(name).make();
  const size_t N = static_cast<size_t>(n_), S = static_cast<size_t>(spec_->state_dim), O = static_cast<size_t>(spec_->obs_dim);
  state_.assign(S * N, 0.0);
  final_state_.assign(S * N, 0.0);
  fresh_.assign(N, 1);
  rng_offset_.assign(N, 0);
  obs_.assign(N * O, 0.f);
  final_obs_.assign(N * O, 0.f);
  reward_.assign(N, 0.0);
  ep_return_.assign(N, 0.0);
  done_return_.assign(N, 0.0);
  term_.assign(N, 0);
  trunc_.assign(N, 0);
  steps_.assign(N, 0);
  done_length_.assign(N, 0);
}
VecEnv::~VecEnv() = default;
VecEnv::VecEnv(VecEnv&&) noexcept = default;
VecEnv& VecEnv::operator=(VecEnv&&) noexcept = default;

const double* VecEnv::state(int k) const {
  if (k < 0 || k >= spec_->state_dim)
    throw_input("state component " + std::to_string(k) + " out of range [0, " + std::to_string(spec_->state_dim) + ")",
                spec_->name);
  return state_.data() + static_cast<size_t>(k) * n_;
}

const double* VecEnv::final_state(int k) const {
  if (k < 0 || k >= spec_->state_dim)
    throw_input("state component " + std::to_string(k) + " out of range [0, " + std::to_string(spec_->state_dim) + ")",
                spec_->name);
  return final_state_.data() + static_cast<size_t>(k) * n_;
}

void VecEnv::reset_env(int i) {
  phys_->reset(state_.data(), n_, i, seed_, rng_offset_[i]);
  fresh_[i] = 1;
  steps_[i] = 0;
  ep_return_[i] = 0.0;
  phys_->observe(state_.data(), n_, i, obs_.data() + static_cast<size_t>(i) * spec_->obs_dim);
}

void VecEnv::reset() {
  for (int i = 0; i < n_; ++i) reset_env(i);
  std::fill(reward_.begin(), reward_.end(), 0.0);
  std::fill(term_.begin(), term_.end(), 0);
  std::fill(trunc_.begin(), trunc_.end(), 0);
  final_obs_ = obs_;
  started_ = true;
}

void VecEnv::set_state(int env, const std::vector<double>& s) {
  if (env < 0 || env >= n_)
    throw_input("env index " + std::to_string(env) + " out of range [0, " + std::to_string(n_) + ")", spec_->name + " set_state");
  if (static_cast<int>(s.size()) != spec_->state_dim)
    throw_input("state has " + std::to_string(s.size()) + " values, " + spec_->name + " needs " +
                    std::to_string(spec_->state_dim), spec_->name + " set_state");
  for (int k = 0; k < spec_->state_dim; ++k) state_[static_cast<size_t>(k) * n_ + env] = s[k];
  fresh_[env] = 1;
  steps_[env] = 0;
  ep_return_[env] = 0.0;
  phys_->observe(state_.data(), n_, env, obs_.data() + static_cast<size_t>(env) * spec_->obs_dim);
  started_ = true;
}

void VecEnv::step(const int32_t* actions, size_t count) {
  const std::string where = spec_->name + " step";
  if (!spec_->discrete) throw_input("integer actions given to a continuous env (use the float overload)", where);
  if (!started_) throw_input("step() before reset()", where);
  if (static_cast<int64_t>(count) != n_)
    throw_input("got " + std::to_string(count) + " actions for " + std::to_string(n_) + " envs", where);
  for (int i = 0; i < n_; ++i)
    if (actions[i] < 0 || actions[i] >= spec_->num_actions)
      throw_input("action " + std::to_string(actions[i]) + " of env " + std::to_string(i) + " out of range [0, " +
                      std::to_string(spec_->num_actions) + ")", where);
  phys_->step(state_.data(), fresh_.data(), n_, actions, reward_.data(), term_.data());
  finish_step();
}

void VecEnv::step(const float* actions, size_t count) {
  const std::string where = spec_->name + " step";
  if (spec_->discrete) throw_input("float actions given to a discrete env (use the int32 overload)", where);
  if (!started_) throw_input("step() before reset()", where);
  if (static_cast<int64_t>(count) != static_cast<int64_t>(n_) * spec_->act_dim)
    throw_input("got " + std::to_string(count) + " action values for " + std::to_string(n_) + " envs x " +
                    std::to_string(spec_->act_dim), where);
  for (size_t j = 0; j < count; ++j)
    if (std::isnan(actions[j])) throw_input("action of env " + std::to_string(j / spec_->act_dim) + " is NaN", where);
  phys_->step(state_.data(), fresh_.data(), n_, actions, reward_.data(), term_.data());
  finish_step();
}

// Time limit, episode bookkeeping, observations, and the same-step autoreset.
void VecEnv::finish_step() {
  const int O = spec_->obs_dim;
  for (int i = 0; i < n_; ++i) {
    fresh_[i] = 0;
    steps_[i] += 1;
    ep_return_[i] += reward_[i];
    trunc_[i] = steps_[i] >= spec_->max_episode_steps ? 1 : 0;
    float* o = obs_.data() + static_cast<size_t>(i) * O;
    phys_->observe(state_.data(), n_, i, o);
    std::copy(o, o + O, final_obs_.data() + static_cast<size_t>(i) * O);
    if (term_[i] || trunc_[i]) {
      done_return_[i] = ep_return_[i];
      done_length_[i] = steps_[i];
      for (int k = 0; k < spec_->state_dim; ++k) final_state_[static_cast<size_t>(k) * n_ + i] = state_[static_cast<size_t>(k) * n_ + i];
      reset_env(i);
    }
  }
  total_steps_ += n_;
}

RandomRun run_random(const std::string& name, int num_envs, int64_t total_steps, uint64_t seed) {
  if (total_steps < 1) throw_input("total_steps must be >= 1, got " + std::to_string(total_steps), "run_random(" + name + ")");
  VecEnv env(name, num_envs, seed);
  const EnvSpec& s = env.spec();
  const int64_t batches = (total_steps + num_envs - 1) / num_envs;
  std::vector<int32_t> ai(s.discrete ? num_envs : 0);
  std::vector<float> af(s.discrete ? 0 : static_cast<size_t>(num_envs) * s.act_dim);
  RandomRun r;
  double ret_sum = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  env.reset();
  for (int64_t b = 0; b < batches; ++b) {
    for (int i = 0; i < num_envs; ++i) {
      const uint64_t sub = (uint64_t{1} << 32) | static_cast<uint64_t>(i);
      if (s.discrete) {
        ai[i] = static_cast<int32_t>(philox_u32(seed, sub, static_cast<uint64_t>(b)) % static_cast<uint32_t>(s.num_actions));
      } else {
        for (int k = 0; k < s.act_dim; ++k)
          af[static_cast<size_t>(i) * s.act_dim + k] =
              philox_uniform(seed, sub, static_cast<uint64_t>(b) * s.act_dim + k, s.act_low, s.act_high);
      }
    }
    if (s.discrete)
      env.step(ai);
    else
      env.step(af);
    for (int i = 0; i < num_envs; ++i)
      if (env.terminated()[i] || env.truncated()[i]) {
        ++r.episodes;
        ret_sum += env.episode_return()[i];
      }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cpu_seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  r.steps = env.total_steps();
  r.mean_return = r.episodes ? ret_sum / static_cast<double>(r.episodes) : 0.0;
  return r;
}

}  // namespace rtx::rl
