// `rtx-train run --model gcn`: load a Planetoid graph (--data DIR holding ind.<name>.*; the
// name is the folder's), train GCN over one or more seeds, print accuracy and wall time.
#include <cmath>
#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "rtx/core/error.hpp"
#include "rtx/geom/gcn.hpp"
#include "rtx/geom/planetoid.hpp"

namespace rtx_train {

int run_gcn(const GcnRunArgs& a, const rtx::cli::CommonOptions& common) {
  if (a.threads < 0) rtx::throw_usage("--threads " + std::to_string(a.threads) + " is negative", "--threads");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  if (a.hidden < 1) rtx::throw_usage("--hidden must be positive", "--hidden");
  if (a.epochs < 1) rtx::throw_usage("--epochs must be positive", "--epochs");
  if (a.seeds < 1) rtx::throw_usage("--seeds must be positive", "--seeds");
  if (!(a.lr > 0) || !std::isfinite(a.lr)) rtx::throw_usage("--lr must be a finite number > 0", "--lr");
  std::filesystem::path dir(a.data);
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();
  if (!std::filesystem::exists(dir / ("ind." + name + ".graph")))
    rtx::throw_input("--data " + a.data + " has no ind." + name + ".graph (a Planetoid folder such as $RTX_DATA/cora)",
                     "--data", "point --data at the folder holding the ind.<name>.* pickles");
  const rtx::geom::GraphDataset d = rtx::geom::load_planetoid(dir.string(), name);
  rtx::geom::GcnConfig cfg;
  cfg.hidden = a.hidden;
  cfg.dropout = a.dropout;
  cfg.lr = a.lr;
  cfg.weight_decay = a.weight_decay;
  cfg.epochs = a.epochs;
  cfg.seed = a.seed;
  if (!common.quiet)
    std::fprintf(stderr, "rtx-train: gcn on %s: %lld nodes, %lld edges, %lld features, %lld classes; %d epochs, "
                 "hidden %d, dropout %.2f, lr %g, weight decay %g, %d seed%s, %d threads\n",
                 name.c_str(), static_cast<long long>(d.num_nodes), static_cast<long long>(d.num_edges()),
                 static_cast<long long>(d.num_features), static_cast<long long>(d.num_classes), a.epochs, a.hidden,
                 a.dropout, a.lr, a.weight_decay, a.seeds, a.seeds == 1 ? "" : "s", omp_get_max_threads());
  const auto res = rtx::geom::train_gcn_seeds(d, cfg, a.seeds, [&](uint64_t seed, const rtx::geom::GcnResult& r) {
    if (!common.quiet)
      std::fprintf(stderr, "seed %llu: test %.1f%% (val %.1f%%; at best val: test %.1f%%), final loss %.4f, %.3f s\n",
                   static_cast<unsigned long long>(seed), 100 * r.final_test_acc, 100 * r.final_val_acc,
                   100 * r.best_val_test_acc, r.epochs.back().train_loss, r.train_seconds);
  });
  if (!common.quiet)
    std::fprintf(stderr, "gcn: test accuracy %.2f%% +- %.2f%% over %d seed%s, %.3f s per run\n", 100 * res.mean_test_acc,
                 100 * res.std_test_acc, a.seeds, a.seeds == 1 ? "" : "s", res.mean_seconds);
  if (common.json) {
    nlohmann::json j;
    j["schema"] = "rtx.train_gcn.v1";
    j["dataset"] = {{"name", name}, {"nodes", d.num_nodes}, {"edges", d.num_edges()}, {"features", d.num_features},
                    {"classes", d.num_classes}};
    j["config"] = {{"epochs", a.epochs}, {"hidden", a.hidden}, {"dropout", a.dropout}, {"lr", a.lr},
                   {"weight_decay", a.weight_decay}, {"threads", omp_get_max_threads()}};
    j["runs"] = nlohmann::json::array();
    for (size_t k = 0; k < res.runs.size(); ++k)
      j["runs"].push_back({{"seed", res.seeds[k]}, {"test_acc", res.runs[k].final_test_acc},
                           {"val_acc", res.runs[k].final_val_acc}, {"best_val_test_acc", res.runs[k].best_val_test_acc},
                           {"final_train_loss", res.runs[k].epochs.back().train_loss},
                           {"seconds", res.runs[k].train_seconds}});
    j["test_acc_mean"] = res.mean_test_acc;
    j["test_acc_std"] = res.std_test_acc;
    j["seconds_mean"] = res.mean_seconds;
    std::cout << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace rtx_train
