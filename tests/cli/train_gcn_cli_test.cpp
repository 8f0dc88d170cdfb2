// rtx-train run --model gcn end to end: --json (rtx.train_gcn.v1) on Cora for a few epochs,
// same seed -> same numbers, and exit 2 for a folder without Planetoid files or a bad flag.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace rtx::test;

TEST_CASE("rtx-train run --model gcn: json result, determinism, bad input", "[cpu][cli]") {
  const std::string cmd = tool_path("rtx-train") + " run --model gcn --data " + data_dir() +
                          "/cora --epochs 20 --seeds 2 --seed 5 --threads 2 --json";
  const Proc a = run(cmd);
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  const auto j = nlohmann::json::parse(a.out);
  CHECK(j["schema"] == "rtx.train_gcn.v1");
  CHECK(j["dataset"]["nodes"] == 2708);
  CHECK(j["dataset"]["edges"] == 10556);
  REQUIRE(j["runs"].size() == 2);
  CHECK(j["runs"][0]["seed"] == 5);
  CHECK(j["runs"][1]["seed"] == 6);
  CHECK(j["runs"][0]["test_acc"].get<double>() > 0.5);  // 20 epochs already learn most of Cora
  const Proc b = run(cmd);
  REQUIRE(b.exit_code == 0);
  const auto k = nlohmann::json::parse(b.out);
  CHECK(k["runs"][0]["final_train_loss"] == j["runs"][0]["final_train_loss"]);
  CHECK(k["test_acc_mean"] == j["test_acc_mean"]);

  const Proc missing = run(tool_path("rtx-train") + " run --model gcn --data " + temp_dir() + " --json");
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("Planetoid") != std::string::npos);
  const Proc bad = run(tool_path("rtx-train") + " run --model gcn --data " + data_dir() + "/cora --seeds 0");
  CHECK(bad.exit_code == 2);
  const Proc unknown = run(tool_path("rtx-train") + " run --model gat --data " + data_dir() + "/cora");
  CHECK(unknown.exit_code == 2);
}
