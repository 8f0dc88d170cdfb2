// rtx-train run --model mlp (DP-SGD) end to end on a slice of Fashion-MNIST: --json
// (rtx.train_dp.v1) with the privacy ledger, log.jsonl and the checkpoint carrying it, same seed
// -> same result, exit 2 for bad flags.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "rtx/privacy/accountant.hpp"
#include "rtx/privacy/dpsgd.hpp"
#include "rtx/io/atomic_file.hpp"
#include "test_util.hpp"

using namespace rtx::test;

TEST_CASE("rtx-train run --model mlp: DP-SGD json, ledger in log and checkpoint, determinism, bad input", "[cpu][cli]") {
  const std::string out = temp_dir();
  const std::string base = tool_path("rtx-train") + " run --model mlp --data " + data_dir() +
                           "/fashion-mnist --train-examples 3000 --batch 150 --epochs 2 --hidden 32 --seed 3 "
                           "--threads 2 --dp-epsilon 2 --dp-delta 1e-5 --dp-clip 1.5 --json";
  const Proc a = run(base + " --out " + out);
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  const auto j = nlohmann::json::parse(a.out);
  CHECK(j["schema"] == "rtx.train_dp.v1");
  const auto& p = j["privacy"];
  CHECK(p["steps"] == 40);  // 2 epochs at q = 150/3000
  CHECK(p["q"].get<double>() == 0.05);
  CHECK(p["clip"].get<double>() == 1.5);
  CHECK(p["dataset_size"] == 3000);
  CHECK(p["accountant"] == "rdp");
  const double sigma = p["sigma"].get<double>();
  CHECK(sigma == rtx::privacy::noise_multiplier_for_epsilon(2.0, 1e-5, 0.05, 40));
  CHECK(p["epsilon"].get<double>() == rtx::privacy::rdp_epsilon({{sigma, 0.05, 40}}, 1e-5).epsilon);
  CHECK(p["epsilon"].get<double>() <= 2.0);
  CHECK(j["test_acc"].get<double>() > 0.3);  // learns something even on a slice with noise
  // log.jsonl: one record per epoch, the last one's ledger is the final one.
  const std::string log = rtx::io::read_text_file(out + "/log.jsonl");
  const auto last = nlohmann::json::parse(log.substr(log.rfind('\n', log.size() - 2) + 1));
  CHECK(last["privacy"] == p);
  const auto ck = rtx::privacy::load_dp_checkpoint(out + "/ckpt.safetensors", {{784, 32, 10}});
  CHECK(nlohmann::json::parse(ck.ledger.to_json()) == p);
  const Proc b = run(base);
  REQUIRE(b.exit_code == 0);
  CHECK(nlohmann::json::parse(b.out)["test_acc"] == j["test_acc"]);

  CHECK(run(base + " --dp-epsilon 0").exit_code == 2);
  CHECK(run(base + " --dp-delta 1").exit_code == 2);
  CHECK(run(base + " --dp-accountant gdp").exit_code == 2);
  CHECK(run(base + " --batch 5000").exit_code == 2);
  const Proc missing = run(tool_path("rtx-train") + " run --model mlp --data " + temp_dir() + " --json");
  CHECK(missing.exit_code == 2);
}
