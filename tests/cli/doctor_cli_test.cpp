// rtx-doctor as a subprocess: --json schema and fields, text mode, exit codes for an unwritable
// RTX_HOME (3), a corrupt store (2), --help (0) and an unknown flag (2).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "test_util.hpp"

using rtx::test::run;
using rtx::test::tool_path;

namespace {
std::string doctor() { return tool_path("rtx-doctor"); }
}  // namespace

TEST_CASE("rtx-doctor --json --quick writes rtx.doctor.v1", "[cpu]") {
  const std::string home = rtx::test::temp_dir();
  const auto p = run(doctor() + " --json --quick", "RTX_HOME=" + home);
  INFO(p.err);
  REQUIRE((p.exit_code == 0 || p.exit_code == 1));
  nlohmann::json j;
  REQUIRE_NOTHROW(j = nlohmann::json::parse(p.out));
  CHECK(j["schema"] == "rtx.doctor.v1");
  CHECK(j["exit_code"] == p.exit_code);
  CHECK(j["hardware"]["cpu"]["physical_cores"].get<int>() >= 1);
  CHECK(j["hardware"].contains("gpus"));
  CHECK(j["probes"]["skipped"] == true);
  REQUIRE(j["checks"].is_array());
  REQUIRE(j["checks"].size() >= 8);
  bool fail = false;
  for (const auto& c : j["checks"]) {
    for (const char* k : {"name", "status", "detail", "hint", "value", "unit"}) CHECK(c.contains(k));
    fail |= c["status"] == "FAIL";
  }
  CHECK(p.exit_code == (fail ? 1 : 0));
  std::ifstream db(home + "/rtx.db");
  CHECK(db.good());  // the report was stored under RTX_HOME
}

TEST_CASE("rtx-doctor text mode has no colour off a TTY", "[cpu]") {
  const std::string home = rtx::test::temp_dir();
  const auto p = run(doctor() + " --quick --db " + home + "/x/rtx.db");
  REQUIRE((p.exit_code == 0 || p.exit_code == 1));
  CHECK(p.out.find("[PASS] store.schema") != std::string::npos);
  CHECK(p.out.find("Host") != std::string::npos);
  CHECK(p.out.find('\033') == std::string::npos);
}

TEST_CASE("rtx-doctor with an unwritable RTX_HOME exits 3 naming the path", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  {
    std::ofstream f(dir + "/file");
    f << "not a directory";
  }
  const auto p = run(doctor() + " --quick", "RTX_HOME=" + dir + "/file/home");
  CHECK(p.exit_code == 3);
  CHECK(p.err.find(dir + "/file") != std::string::npos);
  const auto pj = run(doctor() + " --quick --json", "RTX_HOME=" + dir + "/file/home");
  CHECK(pj.exit_code == 3);
  CHECK(nlohmann::json::parse(pj.out)["error"]["category"] == "environment");
}

TEST_CASE("rtx-doctor with a corrupt store exits 2 with a clear message", "[cpu]") {
  const std::string home = rtx::test::temp_dir();
  {
    std::ofstream f(home + "/rtx.db", std::ios::binary);
    std::mt19937 rng(42);
    for (int i = 0; i < 16384; ++i) f.put(static_cast<char>(rng() & 0xff));
  }
  const auto p = run(doctor() + " --quick", "RTX_HOME=" + home);
  CHECK(p.exit_code == 2);
  CHECK(p.err.find(home + "/rtx.db") != std::string::npos);
  CHECK(p.err.find("rtx-doctor: error:") != std::string::npos);
}

TEST_CASE("rtx-doctor usage", "[cpu]") {
  const auto h = run(doctor() + " --help");
  CHECK(h.exit_code == 0);
  CHECK(h.out.find("--quick") != std::string::npos);
  CHECK(h.out.find("--json") != std::string::npos);
  const auto bad = run(doctor() + " --no-such-flag");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("no-such-flag") != std::string::npos);
  const auto v = run(doctor() + " --version");
  CHECK(v.exit_code == 0);
}

TEST_CASE("rtx-doctor with an unopenable --events file exits 3 naming it", "[cpu]") {
  const std::string home = rtx::test::temp_dir();
  const auto p = run(doctor() + " --quick --json --events " + home + "/none/ev.jsonl", "RTX_HOME=" + home);
  CHECK(p.exit_code == 3);  // unopenable events file: environment error naming it
  CHECK(p.err.find(home + "/none/ev.jsonl") != std::string::npos);
}
