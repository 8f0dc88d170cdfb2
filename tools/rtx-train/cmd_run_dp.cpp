// `rtx-train run --model mlp`: DP-SGD on Fashion-MNIST (--data DIR or "fashion-mnist" under
// $RTX_DATA): picks the noise multiplier for --dp-epsilon, trains, prints accuracy and the
// privacy ledger; with --out, log.jsonl (one record per epoch, each with the ledger) and
// ckpt.safetensors (parameters, the ledger in its metadata as "rtx.privacy_ledger").
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/time.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/privacy/dpsgd.hpp"

namespace rtx_train {

int run_dp(const DpRunArgs& a, const rtx::cli::CommonOptions& common) {
  namespace pv = rtx::privacy;
  if (a.threads < 0) rtx::throw_usage("--threads is negative", "--threads");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  if (a.epochs < 1) rtx::throw_usage("--epochs must be positive", "--epochs");
  if (a.hidden < 1) rtx::throw_usage("--hidden must be positive", "--hidden");
  if (a.batch < 1) rtx::throw_usage("--batch must be positive", "--batch");
  if (!(a.lr > 0) || !std::isfinite(a.lr)) rtx::throw_usage("--lr must be a finite number > 0", "--lr");
  if (!(a.epsilon > 0)) rtx::throw_usage("--dp-epsilon must be > 0 (inf: no noise)", "--dp-epsilon");
  if (!(a.delta > 0 && a.delta < 1)) rtx::throw_usage("--dp-delta must be in (0, 1)", "--dp-delta");
  // An infinite clip bound clips nothing: no sensitivity bound, so no privacy guarantee to report.
  if (!(a.clip > 0) || !std::isfinite(a.clip)) rtx::throw_usage("--dp-clip must be a finite number > 0", "--dp-clip");
  std::string dir = a.data;
  if (!std::filesystem::is_directory(dir) && std::filesystem::is_directory(data_root() + "/" + a.data))
    dir = data_root() + "/" + a.data;
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") && !std::filesystem::exists(dir + "/train-images-idx3-ubyte"))
    rtx::throw_input("--data " + a.data + " has no train-images-idx3-ubyte[.gz]", "--data",
                     "point --data at the Fashion-MNIST folder (or give \"fashion-mnist\" for $RTX_DATA/fashion-mnist)");
  pv::ImageDataset train = pv::load_fashion_mnist(dir, true);
  const pv::ImageDataset test = pv::load_fashion_mnist(dir, false);
  if (a.train_examples < 0) rtx::throw_usage("--train-examples is negative", "--train-examples");
  if (a.train_examples > 0 && a.train_examples < train.n) {
    train.n = a.train_examples;
    train.x.resize(static_cast<size_t>(train.n * train.dim));
    train.y.resize(static_cast<size_t>(train.n));
  }
  if (a.batch > train.n) rtx::throw_usage("--batch " + std::to_string(a.batch) + " exceeds the " + std::to_string(train.n) + " training examples", "--batch");
  pv::DpConfig cfg;
  cfg.clip = a.clip;
  cfg.q = static_cast<double>(a.batch) / static_cast<double>(train.n);
  cfg.steps = static_cast<int64_t>(std::llround(a.epochs / cfg.q));
  cfg.lr = a.lr;
  cfg.momentum = a.momentum;
  cfg.seed = a.seed;
  cfg.delta = a.delta;
  cfg.accountant = pv::parse_accountant(a.accountant);
  cfg.sigma = std::isinf(a.epsilon) ? 0.0 : pv::noise_multiplier_for_epsilon(a.epsilon, a.delta, cfg.q, cfg.steps, cfg.accountant);
  const pv::MlpShape shape{{train.dim, a.hidden, train.classes}};
  if (!a.out.empty()) {
    std::filesystem::create_directories(a.out);
    rtx::io::require_output_dir(a.out + "/ckpt.safetensors", "--out");
  }
  if (!common.quiet)
    std::fprintf(stderr, "rtx-train: DP-SGD mlp %lld-%d-%lld on %s: %lld examples, q %.6f (expected batch %d), %lld steps "
                 "(%d epochs), sigma %.4f for eps %g delta %g (%s), clip %g, lr %g, momentum %g, %d threads\n",
                 static_cast<long long>(train.dim), a.hidden, static_cast<long long>(train.classes), dir.c_str(),
                 static_cast<long long>(train.n), cfg.q, a.batch, static_cast<long long>(cfg.steps), a.epochs, cfg.sigma,
                 a.epsilon, a.delta, a.accountant.c_str(), a.clip, a.lr, a.momentum, omp_get_max_threads());
  std::string log;
  const auto t0 = std::chrono::steady_clock::now();
  const pv::DpRun run = pv::train_dp_mlp(shape, train, test, cfg, [&](int64_t step, const pv::Ledger& led, double acc,
                                                                      const pv::DpStepInfo& info) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!common.quiet)
      std::fprintf(stderr, "step %lld: test %.2f%%, batch %lld, loss %.4f, clipped %.0f%%, eps %.4f, %.1f s\n",
                   static_cast<long long>(step), 100 * acc, static_cast<long long>(info.batch), info.mean_loss,
                   100 * info.clipped_fraction, led.epsilon, secs);
    nlohmann::json rec{{"step", step}, {"test_acc", acc}, {"batch", info.batch}, {"loss", info.mean_loss},
                       {"clipped_fraction", info.clipped_fraction}, {"seconds", secs},
                       {"privacy", nlohmann::json::parse(led.to_json())}};
    log += rec.dump() + "\n";
  });
  const std::string ledger = run.ledger.to_json();
  if (!a.out.empty()) {
    rtx::io::atomic_write_file(a.out + "/log.jsonl", log);
    pv::save_dp_checkpoint(a.out + "/ckpt.safetensors", shape, run);
  }
  if (!common.quiet)
    std::fprintf(stderr, "mlp: test accuracy %.2f%%; privacy spent: %s\n", 100 * run.test_accuracy, ledger.c_str());
  if (common.json) {
    nlohmann::json j;
    j["schema"] = "rtx.train_dp.v1";
    j["model"] = {{"kind", "mlp"}, {"sizes", shape.sizes}};
    j["test_acc"] = run.test_accuracy;
    j["privacy"] = nlohmann::json::parse(ledger);
    j["config"] = {{"epochs", a.epochs}, {"batch", a.batch}, {"lr", a.lr}, {"momentum", a.momentum}, {"seed", a.seed}};
    std::cout << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace rtx_train
