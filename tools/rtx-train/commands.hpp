// rtx-train subcommand wiring: each add_* declares one subcommand's flags and returns the
// function that runs it (the work is in libcommon: rtx::io datasets, rtx::models).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "rtx/cli/cli.hpp"

namespace rtx_train {
using Body = std::function<int()>;
Body add_prepare(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_run(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_sample(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_export(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_presets(CLI::App& app, const rtx::cli::CommonOptions& common);
/// `rtx-train rl --algo ppo --env CartPole-v1`: reinforcement learning (cmd_rl.cpp).
Body add_rl(CLI::App& app, const rtx::cli::CommonOptions& common);
/// `rtx-train run --model gcn`: GCN on a Planetoid graph (cmd_run_gcn.cpp).
struct GcnRunArgs {
  std::string data;
  int epochs = 200, hidden = 16, seeds = 1, threads = 0;
  float dropout = 0.5f, lr = 0.01f, weight_decay = 5e-4f;
  uint64_t seed = 0;
};
int run_gcn(const GcnRunArgs& a, const rtx::cli::CommonOptions& common);
/// `rtx-train run --model mlp`: DP-SGD (or plain SGD with --dp-epsilon inf) on Fashion-MNIST (cmd_run_dp.cpp).
struct DpRunArgs {
  std::string data, out, accountant = "rdp";
  int epochs = 10, hidden = 256, batch = 512, threads = 0;
  int64_t train_examples = 0;  ///< 0: all
  double epsilon = 3.0, delta = 1e-5, clip = 1.0, lr = 0.5, momentum = 0.9;
  uint64_t seed = 0;
};
int run_dp(const DpRunArgs& a, const rtx::cli::CommonOptions& common);
/// $RTX_DATA or ../shared/data (the shared data folder).
std::string data_root();
/// True when --seed was given on the command line (the tool's default seed applies otherwise).
bool seed_given(const CLI::App& sub);
/// The --seed value as typed (CLI11 wraps "-1" to 2^64-1; this refuses it), else `fallback`.
uint64_t parsed_seed(const CLI::App& sub, uint64_t fallback);
}  // namespace rtx_train
