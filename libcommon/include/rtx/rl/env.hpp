// Batched simulators for reinforcement learning (issue 42): N environments of one kind stepped
// together, state as structure of arrays, each env seeded with its own Philox stream, same-step
// autoreset. The classic-control envs follow gymnasium 1.x's physics operation by operation
// (float64 where gymnasium computes in float64, float32 where numpy's promotion makes it float32),
// checked against gymnasium itself by tests/rl/classic_control_test.cpp. Not a wrapper zoo: no
// rendering, no observation/reward wrappers. Shape letters: N envs, S state dim, O obs dim,
// A action dim (continuous).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rtx::rl {

/// What one environment kind is: sizes, action space, time limit (gymnasium's registration).
struct EnvSpec {
  std::string name;            ///< gymnasium id, e.g. "CartPole-v1"
  int state_dim = 0;           ///< S: internal state (float64 values)
  int obs_dim = 0;             ///< O: observation (float32)
  bool discrete = true;        ///< Discrete(num_actions) or Box(act_low, act_high, (act_dim,))
  int num_actions = 0;         ///< discrete: action count
  int act_dim = 0;             ///< continuous: A
  float act_low = 0, act_high = 0;  ///< continuous bounds (float32, as gymnasium's Box)
  int max_episode_steps = 0;   ///< TimeLimit: truncated when an episode reaches this many steps
};

/// The kinds built in: CartPole-v1, Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1.
std::vector<std::string> env_names();
/// Spec of a kind by gymnasium id. Throws rtx::Error(Input) naming the id and listing the known ones.
const EnvSpec& env_spec(const std::string& name);

class Physics;  // per-kind batched dynamics (env.cpp)

/// N environments of one kind. All outputs are structure-of-arrays buffers owned by the VecEnv
/// and overwritten by the next reset()/step().
///
/// Autoreset is SAME-STEP (gymnasium 0.29 / CleanRL / SB3 behaviour, gymnasium 1.x's
/// AutoresetMode.SAME_STEP): when env i terminates or truncates in step(), its final observation
/// goes to final_obs(), the env is reset at once and obs() holds the new episode's first
/// observation. Every step is a real transition (no dummy reset step to mask out as with
/// gymnasium 1.x's default NEXT_STEP), and a truncated transition can be bootstrapped from
/// final_obs(). See docs/rl.md.
///
/// Randomness: env i draws its reset states from Philox(seed, subsequence i), so an env's episodes
/// do not depend on N or on the thread count. The reset distributions are gymnasium's (e.g.
/// CartPole U(-0.05, 0.05)^4) but the draws are not numpy's (replaying gymnasium's exactly is what
/// set_state() is for).
class VecEnv {
 public:
  /// Throws rtx::Error(Input) for an unknown name or num_envs < 1. Call reset() before step().
  VecEnv(const std::string& name, int num_envs, uint64_t seed);
  ~VecEnv();
  VecEnv(VecEnv&&) noexcept;
  VecEnv& operator=(VecEnv&&) noexcept;

  const EnvSpec& spec() const { return *spec_; }
  int num_envs() const { return n_; }

  /// Resets every env (new initial states, episode counters zero); fills obs().
  void reset();
  /// Steps every env. Discrete kinds: actions (N) int32 in [0, num_actions); continuous kinds:
  /// (N, A) float32, clamped to [act_low, act_high] as gymnasium does. Throws rtx::Error(Input)
  /// on a wrong span size, an out-of-range discrete action, a call of the other kind's overload,
  /// or step() before reset().
  void step(const int32_t* actions, size_t count);
  void step(const float* actions, size_t count);
  void step(const std::vector<int32_t>& a) { step(a.data(), a.size()); }
  void step(const std::vector<float>& a) { step(a.data(), a.size()); }

  /// (N, O) float32 row-major: the observation to act on (after autoreset).
  const float* obs() const { return obs_.data(); }
  /// (N, O): for envs done in the last step, the observation their episode ended on; other rows
  /// hold the current observation.
  const float* final_obs() const { return final_obs_.data(); }
  /// (N) the last step's rewards (float64, as gymnasium returns them).
  const double* reward() const { return reward_.data(); }
  /// (N) 1 where the last step terminated (a terminal state of the MDP), else 0.
  const uint8_t* terminated() const { return term_.data(); }
  /// (N) 1 where the last step hit the time limit (both flags may be 1 at once, as gymnasium).
  const uint8_t* truncated() const { return trunc_.data(); }
  /// (N) for envs done in the last step: the finished episode's return (sum of rewards, float64,
  /// in step order) and length; undefined elsewhere.
  const double* episode_return() const { return done_return_.data(); }
  const int32_t* episode_length() const { return done_length_.data(); }
  /// (N) steps taken in the current episode.
  const int32_t* episode_step() const { return steps_.data(); }
  /// State component k (0 <= k < S) of every env: (N) float64 (structure of arrays).
  const double* state(int k) const;
  /// (N) state component k at the end of the last step, before the autoreset; valid for envs
  /// done in the last step (the terminal state a golden comparison or a model needs), stale elsewhere.
  const double* final_state(int k) const;

  /// Replaces env i's state with s (S values) as if a reset had produced it (episode counters
  /// zero, obs() recomputed). Used to replay another simulator's reset states (the gymnasium
  /// golden test). Throws rtx::Error(Input) on a bad env index or size.
  void set_state(int env, const std::vector<double>& s);

  /// Total env steps taken by this VecEnv (N per step()).
  int64_t total_steps() const { return total_steps_; }

 private:
  void finish_step();
  void reset_env(int i);

  const EnvSpec* spec_;
  int n_;
  uint64_t seed_;
  std::unique_ptr<Physics> phys_;
  std::vector<double> state_;       // (S, N): component k of env i at k*N + i
  std::vector<double> final_state_; // (S, N): as state_, written for done envs before their reset
  std::vector<uint8_t> fresh_;      // (N) 1 until the first step after a reset (MountainCarContinuous: float64 phase)
  std::vector<uint64_t> rng_offset_;// (N) next Philox element of env i's stream
  std::vector<float> obs_, final_obs_;
  std::vector<double> reward_, ep_return_, done_return_;
  std::vector<uint8_t> term_, trunc_;
  std::vector<int32_t> steps_, done_length_;
  int64_t total_steps_ = 0;
  bool started_ = false;
};

/// Uniform random actions on a VecEnv: simulator throughput (rtx-train rl --algo random) and a
/// baseline return. Actions are Philox(seed, 1 << 32 | env) draws: discrete u % K, continuous
/// U[low, high) in float32.
struct RandomRun {
  int64_t steps = 0;          ///< env steps taken (N per batch step)
  double seconds = 0;         ///< wall time of the stepping loop (actions drawn inside it)
  double cpu_seconds = 0;     ///< process CPU time of the loop (std::clock; immune to the host pausing us)
  int64_t episodes = 0;       ///< episodes finished
  double mean_return = 0;     ///< their mean return (0 when none)
};
/// Runs ceil(total_steps / num_envs) batch steps. Throws rtx::Error(Input) as VecEnv, or for
/// total_steps < 1.
RandomRun run_random(const std::string& name, int num_envs, int64_t total_steps, uint64_t seed);

}  // namespace rtx::rl
