// PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms") for discrete-action envs,
// written after CleanRL's ppo.py (Huang et al. 2022, "The 37 implementation details of PPO"): its
// defaults, its loss (clipped surrogate, clipped value loss, entropy bonus, per-minibatch
// advantage normalisation), GAE, orthogonal init, Adam (eps 1e-5) with a linearly annealed
// learning rate and global grad-norm clipping. The actor and critic (64-64 tanh MLPs) and the
// whole loss are a Polygraph IR graph; their gradients come from IR autodiff; the Adam step is a
// host loop. Shape letters: N envs, T steps per rollout, M minibatch rows, O obs dim, K actions,
// H hidden units.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rtx::rl {

/// Hyperparameters; defaults are CleanRL ppo.py's (total_steps is its 500k; the goal uses 100k).
struct PpoConfig {
  std::string env = "CartPole-v1";
  uint64_t seed = 1;
  int64_t total_steps = 500000;   ///< environment steps (all envs together)
  float lr = 2.5e-4f;             ///< Adam learning rate at the start
  bool anneal_lr = true;          ///< lr * (1 - (iteration - 1) / iterations)
  int num_envs = 4;               ///< N
  int num_steps = 128;            ///< T: rollout length per env
  double gamma = 0.99;
  double gae_lambda = 0.95;
  int num_minibatches = 4;        ///< M = N * T / num_minibatches
  int update_epochs = 4;
  bool norm_adv = true;           ///< advantages normalised per minibatch: (a - mean) / (std + 1e-8), std unbiased
  float clip_coef = 0.2f;
  bool clip_vloss = true;
  float ent_coef = 0.01f;
  float vf_coef = 0.5f;
  float max_grad_norm = 0.5f;
  int hidden = 64;                ///< H
  /// OpenMP threads for the run (restored after): 1 by default, since the nets are so small that a
  /// fork/join per kernel costs more than the work (10x slower with 2 threads on a busy host).
  /// 0 leaves the runtime's setting.
  int threads = 1;
  double goal_return = 475.0;     ///< goal: mean return of the last 100 episodes >= this
  /// Throws rtx::Error(Usage) naming the first bad field (non-positive sizes, N*T not divisible
  /// by num_minibatches, an unknown or continuous env, ...).
  void validate() const;
};

/// One finished episode.
struct PpoEpisode {
  int64_t global_step;   ///< env steps taken (all envs) when it ended
  double ret;            ///< its return
  int32_t length;
};

/// One iteration (rollout + update): the last minibatch's loss terms, as CleanRL logs them.
struct PpoIteration {
  int iteration;
  int64_t global_step;
  double lr, loss, pg_loss, v_loss, entropy, approx_kl, clipfrac;
  double mean_return_100;  ///< mean of the last <= 100 episodes' returns (0 before any)
  double seconds;          ///< wall time since training started
};

/// One minibatch as the loss graph saw it, and the loss terms the f32 graph gave: for tests
/// (the float64 recomputation) and for debugging. `params` are the flat parameters (layout:
/// ppo_param_names) before that minibatch's update.
struct PpoMinibatch {
  int rows = 0, obs_dim = 0, num_actions = 0, hidden = 0;
  std::vector<float> params, obs, logp_old, adv, ret, v_old;  ///< obs (M, O); adv as fed (normalised)
  std::vector<int32_t> actions;                               ///< (M)
  double loss = 0, pg_loss = 0, v_loss = 0, entropy = 0;
  float clip_coef = 0, ent_coef = 0, vf_coef = 0;
  bool clip_vloss = true;
};

struct PpoResult {
  std::vector<PpoEpisode> episodes;
  std::vector<PpoIteration> iterations;
  int64_t goal_step = -1;   ///< first global step at which the last 100 episodes' mean >= goal (-1: never)
  double goal_seconds = -1; ///< wall time at that step
  double seconds = 0;       ///< total wall time
  double cpu_seconds = 0;   ///< process CPU time (std::clock), for hosts that pause processes
  double rollout_seconds = 0, update_seconds = 0;
  int64_t total_steps = 0;
  std::vector<float> params; ///< final flat parameters
  PpoMinibatch first_minibatch; ///< the very first minibatch of the first update (ratio 1)
  PpoMinibatch last_minibatch;  ///< the last minibatch of the last update (ratio != 1, clipping active)
};

/// The flat parameter layout: names and element counts in order ("actor.0.w" (H,O), "actor.0.b"
/// (H), "actor.1.w" (H,H), "actor.1.b", "actor.2.w" (K,H), "actor.2.b" (K), then "critic.*" with
/// a last layer of 1 output). Weights are (out, in) as torch.nn.Linear.
std::vector<std::pair<std::string, int64_t>> ppo_param_layout(int obs_dim, int num_actions, int hidden);

/// Called after every iteration; return false to stop early (e.g. Ctrl-C).
using PpoCallback = std::function<bool(const PpoIteration&)>;

/// Trains PPO on cfg.env; deterministic for a given config and thread count (Philox streams for
/// init, actions and minibatch shuffles; the IR executor's fixed reduction order).
PpoResult train_ppo(const PpoConfig& cfg, const PpoCallback& on_iteration = {});

}  // namespace rtx::rl
