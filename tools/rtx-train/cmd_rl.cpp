// `rtx-train rl --algo ppo --env CartPole-v1 --seed S --total-steps N`: reinforcement learning on
// the batched simulators (rtx::rl). Flags read like CleanRL's ppo.py and default to its values.
#include <csignal>
#include <omp.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "rtx/cli/interrupt.hpp"
#include "rtx/core/error.hpp"
#include "rtx/rl/env.hpp"
#include "rtx/rl/ppo.hpp"

namespace rtx_train {

Body add_rl(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto c = std::make_shared<rtx::rl::PpoConfig>();
  auto algo = std::make_shared<std::string>("ppo");
  auto no_anneal = std::make_shared<bool>(false);
  s.add_option("--algo", *algo, "ppo, or random (uniform random actions: simulator throughput, any env)")
      ->check(CLI::IsMember({"ppo", "random"}))
      ->capture_default_str();
  s.add_option("--env", c->env, "Environment (gymnasium id): CartPole-v1, Acrobot-v1, MountainCar-v0")->capture_default_str();
  s.add_option("--total-steps", c->total_steps, "Environment steps, all envs together")->capture_default_str();
  s.add_option("--num-envs", c->num_envs, "Parallel environments")->capture_default_str();
  s.add_option("--num-steps", c->num_steps, "Steps per env per rollout")->capture_default_str();
  s.add_option("--lr", c->lr, "Adam learning rate")->capture_default_str();
  s.add_flag("--no-anneal-lr", *no_anneal, "Keep the learning rate constant (default: linear decay to 0)");
  s.add_option("--gamma", c->gamma, "Discount")->capture_default_str();
  s.add_option("--gae-lambda", c->gae_lambda, "GAE lambda")->capture_default_str();
  s.add_option("--num-minibatches", c->num_minibatches, "Minibatches per epoch")->capture_default_str();
  s.add_option("--update-epochs", c->update_epochs, "Epochs per rollout")->capture_default_str();
  s.add_option("--clip-coef", c->clip_coef, "Surrogate (and value) clipping")->capture_default_str();
  s.add_option("--ent-coef", c->ent_coef, "Entropy bonus coefficient")->capture_default_str();
  s.add_option("--vf-coef", c->vf_coef, "Value loss coefficient")->capture_default_str();
  s.add_option("--max-grad-norm", c->max_grad_norm, "Global gradient norm clip")->capture_default_str();
  s.add_option("--hidden", c->hidden, "Hidden units of the 2-layer tanh MLPs")->capture_default_str();
  s.add_option("--threads", c->threads, "OpenMP threads (0: the runtime's default; 1: the nets are tiny)")->capture_default_str();
  return [=, &common, &s]() {
    if (*algo == "random") {
      const uint64_t seed = parsed_seed(s, 1);
      // Nothing to save in a random rollout: Ctrl-C ends it at once (the default action).
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      const auto r = rtx::rl::run_random(c->env, c->num_envs, c->total_steps, seed);
      const double sps = r.seconds > 0 ? static_cast<double>(r.steps) / r.seconds : 0.0;
      if (!common.quiet)
        std::fprintf(stderr, "random on %s: %lld steps over %d envs in %.4f s, %.4f s CPU (%.3g steps/s), %lld episodes, mean return %.2f\n",
                     c->env.c_str(), static_cast<long long>(r.steps), c->num_envs, r.seconds, r.cpu_seconds, sps,
                     static_cast<long long>(r.episodes), r.mean_return);
      if (common.json) {
        nlohmann::json j;
        j["schema"] = "rtx.train_rl.v1";
        j["algo"] = "random";
        j["config"] = {{"env", c->env}, {"seed", seed}, {"num_envs", c->num_envs}, {"total_steps", c->total_steps}};
        j["steps"] = r.steps;
        j["seconds"] = r.seconds;
        j["steps_per_second"] = sps;
        j["cpu_seconds"] = r.cpu_seconds;
        j["episodes"] = r.episodes;
        j["mean_return"] = r.mean_return;
        std::cout << j.dump(2) << "\n";
      }
      return 0;
    }
    rtx::rl::PpoConfig cfg = *c;
    cfg.anneal_lr = !*no_anneal;
    cfg.seed = parsed_seed(s, 1);
    cfg.validate();
    if (!common.quiet)
      std::fprintf(stderr, "rtx-train rl: ppo on %s, seed %llu, %lld steps, %d envs x %d steps, %d threads\n",
                   cfg.env.c_str(), static_cast<unsigned long long>(cfg.seed), static_cast<long long>(cfg.total_steps),
                   cfg.num_envs, cfg.num_steps, cfg.threads > 0 ? cfg.threads : omp_get_max_threads());
    rtx::cli::InterruptGuard guard(common.quiet ? "" : "rtx-train: stopping after this iteration (Ctrl-C again quits at once)\n");
    const int64_t every = std::max<int64_t>(1, cfg.total_steps / (cfg.num_envs * cfg.num_steps) / 20);
    const auto r = rtx::rl::train_ppo(cfg, [&](const rtx::rl::PpoIteration& it) {
      if (!common.quiet && (it.iteration % every == 0))
        std::fprintf(stderr, "step %7lld  return(last 100) %7.2f  loss %8.4f  pg %8.4f  v %8.4f  entropy %.4f  kl %.5f  %.2f s\n",
                     static_cast<long long>(it.global_step), it.mean_return_100, it.loss, it.pg_loss, it.v_loss,
                     it.entropy, it.approx_kl, it.seconds);
      return !rtx::cli::InterruptGuard::requested();
    });
    const double sps = r.seconds > 0 ? static_cast<double>(r.total_steps) / r.seconds : 0.0;
    if (!common.quiet) {
      std::fprintf(stderr, "ppo: %lld steps in %.2f s, %.2f s CPU (%.0f steps/s; rollout %.2f s, update %.2f s), %zu episodes\n",
                   static_cast<long long>(r.total_steps), r.seconds, r.cpu_seconds, sps, r.rollout_seconds, r.update_seconds,
                   r.episodes.size());
      if (r.goal_step >= 0)
        std::fprintf(stderr, "goal: mean return of the last 100 episodes >= %.0f at step %lld (%.2f s)\n",
                     cfg.goal_return, static_cast<long long>(r.goal_step), r.goal_seconds);
      else
        std::fprintf(stderr, "goal: mean return of the last 100 episodes never reached %.0f\n", cfg.goal_return);
    }
    if (common.json) {
      nlohmann::json j;
      j["schema"] = "rtx.train_rl.v1";
      j["algo"] = *algo;
      j["config"] = {{"env", cfg.env}, {"seed", cfg.seed}, {"total_steps", cfg.total_steps}, {"num_envs", cfg.num_envs},
                     {"num_steps", cfg.num_steps}, {"lr", cfg.lr}, {"anneal_lr", cfg.anneal_lr}, {"gamma", cfg.gamma},
                     {"gae_lambda", cfg.gae_lambda}, {"num_minibatches", cfg.num_minibatches},
                     {"update_epochs", cfg.update_epochs}, {"clip_coef", cfg.clip_coef}, {"ent_coef", cfg.ent_coef},
                     {"vf_coef", cfg.vf_coef}, {"max_grad_norm", cfg.max_grad_norm}, {"hidden", cfg.hidden},
                     {"threads", cfg.threads > 0 ? cfg.threads : omp_get_max_threads()}};
      j["steps"] = r.total_steps;
      j["seconds"] = r.seconds;
      j["cpu_seconds"] = r.cpu_seconds;
      j["steps_per_second"] = sps;
      j["goal_return"] = cfg.goal_return;
      j["goal_step"] = r.goal_step >= 0 ? nlohmann::json(r.goal_step) : nlohmann::json(nullptr);
      j["goal_seconds"] = r.goal_step >= 0 ? nlohmann::json(r.goal_seconds) : nlohmann::json(nullptr);
      j["episodes"] = r.episodes.size();
      j["curve"] = nlohmann::json::array();
      for (const auto& it : r.iterations)
        j["curve"].push_back({{"step", it.global_step}, {"mean_return_100", it.mean_return_100}, {"loss", it.loss}});
      std::cout << j.dump(2) << "\n";
    }
    return rtx::cli::InterruptGuard::requested() ? rtx::cli::kInterruptedExit : 0;
  };
}

}  // namespace rtx_train
