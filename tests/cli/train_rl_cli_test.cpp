// rtx-train rl end to end: --algo ppo --json (rtx.train_rl.v1) for a few iterations, same seed ->
// same curve; --algo random's throughput document; exit 2 for an unknown env, a continuous env
// under PPO, a bad flag value.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace rtx::test;

TEST_CASE("rtx-train rl: ppo and random json, determinism, bad input", "[cpu][cli]") {
  const std::string cmd = tool_path("rtx-train") + " --seed 3 --json rl --algo ppo --env CartPole-v1 --total-steps 2048";
  const Proc a = run(cmd);
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  const auto j = nlohmann::json::parse(a.out);
  CHECK(j["schema"] == "rtx.train_rl.v1");
  CHECK(j["algo"] == "ppo");
  CHECK(j["config"]["seed"] == 3);
  CHECK(j["config"]["num_envs"] == 4);
  CHECK(j["config"]["clip_coef"].get<double>() == Approx(0.2));
  CHECK(j["steps"] == 2048);
  REQUIRE(j["curve"].size() == 4);
  CHECK(j["goal_step"].is_null());  // 2048 steps are far from 475
  const Proc b = run(cmd);
  REQUIRE(b.exit_code == 0);
  const auto k = nlohmann::json::parse(b.out);
  CHECK(k["curve"] == j["curve"]);

  const Proc r = run(tool_path("rtx-train") + " --json rl --algo random --env Pendulum-v1 --num-envs 3 --total-steps 600");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto jr = nlohmann::json::parse(r.out);
  CHECK(jr["algo"] == "random");
  CHECK(jr["steps"] == 600);
  CHECK(jr["episodes"] == 3);  // 200 steps each, truncated
  CHECK(jr["mean_return"].get<double>() < 0);

  const Proc unknown = run(tool_path("rtx-train") + " rl --env CartPole-v9 --total-steps 512");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("CartPole-v9") != std::string::npos);
  const Proc cont = run(tool_path("rtx-train") + " rl --env Pendulum-v1 --total-steps 512");
  CHECK(cont.exit_code == 2);
  CHECK(cont.err.find("continuous") != std::string::npos);
  const Proc badmb = run(tool_path("rtx-train") + " rl --num-minibatches 3");
  CHECK(badmb.exit_code == 2);
  const Proc badalgo = run(tool_path("rtx-train") + " rl --algo sac");
  CHECK(badalgo.exit_code == 2);
}
