// rtx-serve run as a subprocess: flag values that would start a server that cannot work (every
// request 429 or 413, authentication silently off, a name that cannot be bound) are refused at
// start, exit 2, with a message naming the flag or variable and what is wrong.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "test_util.hpp"

using rtx::test::run;

TEST_CASE("rtx-serve run: values that would make a useless server are refused at start, exit 2, naming the flag",
          "[cpu][cli]") {
  const std::string model = rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  // timeout: a value let through would start a server that never exits.
  const std::string serve = "timeout 30 " + rtx::test::tool_path("rtx-serve") + " run --port 0 --no-profile ";
  const std::string dir = rtx::test::temp_dir();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--max-queue 0", "rtx-serve: error: --max-queue: must be >= 1 (0 would answer every request 429, even when idle)"},
      {"--max-body-bytes 0", "rtx-serve: error: --max-body-bytes: must be >= 1"},
      {"--api-key ''", "rtx-serve: error: --api-key: empty API key: it would turn authentication off; leave out --api-key"},
      {"--api-key 'a b'", "rtx-serve: error: --api-key: the API key has whitespace or a control byte"},
      {"--host 999.1.1.1", "rtx-serve: error: --host: '999.1.1.1' cannot be parsed as an address nor resolved"},
      {"--host example.invalid", "rtx-serve: error: --host: 'example.invalid' cannot be parsed as an address nor resolved"},
      {"--host ''", "rtx-serve: error: --host: is empty"},
      {"--request-timeout inf", "rtx-serve: error: --request-timeout: must be a finite number of seconds > 0 (got inf)"},
      {"--header-timeout inf", "rtx-serve: error: --header-timeout: must be seconds in [0.001, 86400] (got inf)"},
      {"--receive-timeout nan", "rtx-serve: error: --receive-timeout: must be seconds in [0.001, 86400] (got nan)"},
      // 1e10 s overflowed the guard's nanosecond deadlines and 1e-9 s refused every request.
      {"--header-timeout 1e10", "rtx-serve: error: --header-timeout: must be seconds in [0.001, 86400] (got 1e+10)"},
      {"--receive-timeout 1e-9", "rtx-serve: error: --receive-timeout: must be seconds in [0.001, 86400] (got 1e-09)"},
      {"--header-timeout 0", "rtx-serve: error: --header-timeout: must be seconds in [0.001, 86400] (got 0)"},
      {"--shutdown-deadline inf", "rtx-serve: error: --shutdown-deadline: must be a finite number of seconds >= 0"},
      // The range first: "needs --canary-profile" would send the user after the wrong fix.
      {"--canary-fraction 2", "rtx-serve: error: --canary-fraction: must be in [0, 1] (got 2)"},
      {"--canary-fraction -0.5", "rtx-serve: error: --canary-fraction: must be in [0, 1] (got -0.5)"},
      {"--model-name ''", "rtx-serve: error: --model-name: is empty (or blank); leave the flag out for its default"},
      {"--alias ' '", "rtx-serve: error: --model-name: is empty (or blank); leave the flag out for its default"},
      // Refused before the model loads, naming the flag (it had failed after binding the port).
      {"--alias \"$(printf '\\377\\376')\"", "rtx-serve: error: --model-name: must be valid UTF-8 without control characters (got '\\xFF\\xFE')"},
      {"--alias \"$(printf 'a\\033[31mRED')\"", "rtx-serve: error: --model-name: must be valid UTF-8 without control characters (got 'a\\x1B[31mRED')"},
      {"--chat-template ''", "rtx-serve: error: --chat-template: is empty"},
  };
  for (const auto& [args, want] : cases) {
    const auto p = run(serve + "-m " + model + " " + args);
    INFO(args << "\nstderr: " << p.err);
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.err, Catch::StartsWith(want));
    CHECK_THAT(p.err, !Catch::Contains("in use, or not permitted"));
  }
  // An empty RTX_API_KEY is refused, naming the variable; a key on the command line wins over it.
  const auto empty_env = run(serve + "-m " + model, "RTX_API_KEY=");
  CHECK(empty_env.exit_code == 2);
  CHECK_THAT(empty_env.err, Catch::StartsWith("rtx-serve: error: RTX_API_KEY: empty API key: it would turn "
                                              "authentication off; unset RTX_API_KEY to run without one"));
  // -m naming a directory or a device: said so, not what a loader made of it.
  const auto d = run(serve + "-m " + dir);
  CHECK(d.exit_code == 2);
  CHECK_THAT(d.err, Catch::StartsWith("rtx-serve: error: " + dir + ": is a directory, not a model file"));
  const auto z = run(serve + "-m /dev/zero");
  CHECK(z.exit_code == 2);
  CHECK_THAT(z.err, Catch::StartsWith("rtx-serve: error: /dev/zero: is not a regular file"));
}

TEST_CASE("rtx-serve run: an address it cannot bind exits 3, naming host, port and bind's reason", "[cpu][cli]") {
  const std::string model = rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  const std::string serve = "timeout 30 " + rtx::test::tool_path("rtx-serve") + " run --no-profile -m " + model + " ";
  // 192.0.2.1 (TEST-NET-1, RFC 5737) parses, but no machine has it.
  const auto fixed = run(serve + "--host 192.0.2.1 --port 18089");
  INFO("stderr: " << fixed.err);
  CHECK(fixed.exit_code == 3);
  CHECK_THAT(fixed.err, Catch::StartsWith("rtx-serve: error: --host: cannot bind 192.0.2.1:18089: Cannot assign "
                                          "requested address (not an address of this machine)"));
  CHECK_THAT(fixed.err, !Catch::Contains("in use"));
  const auto any = run(serve + "--host 192.0.2.1 --port 0");
  INFO("stderr: " << any.err);
  CHECK(any.exit_code == 3);
  CHECK_THAT(any.err, Catch::StartsWith("rtx-serve: error: --host: cannot bind 192.0.2.1 (--port 0: any free port): "
                                        "Cannot assign requested address"));
  // A port another socket listens on: said so, naming --port.
  const rtx::test::LoopbackListener held(4);
  const std::string port = std::to_string(held.port());
  const auto busy = run(serve + "--host 127.0.0.1 --port " + port);
  INFO("stderr: " << busy.err);
  CHECK(busy.exit_code == 3);
  CHECK_THAT(busy.err, Catch::StartsWith("rtx-serve: error: --port: cannot bind 127.0.0.1:" + port +
                                         ": Address already in use (another process listens there)"));
}

TEST_CASE("rtx-serve run: one start-up line says which profile store and SKU were looked at and what they changed; "
          "--alias names the model",
          "[cpu][cli]") {
  const std::string model = rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  // SIGTERM after 3 s: a graceful stop, exit 0, after the start-up lines.
  const std::string serve = "timeout --preserve-status -s TERM 3 " + rtx::test::tool_path("rtx-serve") + " run --port 0 -m " + model;
  const std::string dir = rtx::test::temp_dir();
  const auto lines_with = [](const std::string& err, const std::string& what) {
    size_t n = 0;
    for (size_t at = err.find(what); at != std::string::npos; at = err.find(what, at + 1)) ++n;
    return n;
  };
  // No store: one line for the tuned profiles and the promoted configs together.
  auto p = run(serve + " --db " + dir + "/none.db");
  INFO("stderr: " << p.err);
  CHECK(p.exit_code == 0);
  CHECK_THAT(p.err, Catch::StartsWith("rtx-serve: no store at " + dir + "/none.db: no rtx-tune profile or rtx-evolve "
                                      "promoted config to apply (defaults)\nrtx-serve: tinyllamas-stories-260k (llama, "));
  CHECK(lines_with(p.err, "no store at") == 1);
  // An empty store: the rtx-tune line names the store, the SKU and both lookups; the promoted
  // configs get their own line, after it (they override it).
  const std::string db = dir + "/rtx.db";
  { rtx::store::Store st(db); }
  const std::string sku = rtx::telemetry::sku_key("cpu");
  p = run(serve + " --db " + db);
  INFO("stderr: " << p.err);
  CHECK(p.exit_code == 0);
  CHECK_THAT(p.err, Catch::StartsWith("rtx-serve: rtx-tune profiles in " + db + " for SKU " + sku +
                                      ": tuned scheduler: none for model 'tinyllamas-stories-260k-f32' (defaults); tuned "
                                      "matmul: none for this SKU (defaults)\nrtx-serve: promoted configs: none for " +
                                      sku + "; defaults\nrtx-serve: tinyllamas-stories-260k (llama, "));
  // A file that is not a store: said once, on each line, and the server still starts.
  const std::string junk = dir + "/junk.db";
  {
    std::ofstream f(junk, std::ios::binary);
    for (int i = 0; i < 100; ++i) f << "this is not an SQLite database file at all.\n";
  }
  p = run(serve + " --db " + junk);
  INFO("stderr: " << p.err);
  CHECK(p.exit_code == 0);
  CHECK_THAT(p.err, Catch::StartsWith("rtx-serve: rtx-tune profiles: store " + junk + " not read ("));
  CHECK_THAT(p.err, Catch::Contains("; scheduler and matmul defaults)\nrtx-serve: promoted configs: store not read ("));
  // --no-profile: nothing looked up, nothing said about it.
  p = run(serve + " --db " + db + " --no-profile");
  CHECK(p.exit_code == 0);
  CHECK_THAT(p.err, Catch::StartsWith("rtx-serve: tinyllamas-stories-260k (llama, "));
  CHECK(lines_with(p.err, "rtx-tune profiles") + lines_with(p.err, "promoted configs") == 0);
  // --alias (llama-server's name for --model-name): the served id, in the start-up line and --json.
  p = run(serve + " --no-profile --alias stories --json");
  INFO("stderr: " << p.err);
  CHECK(p.exit_code == 0);
  CHECK_THAT(p.err, Catch::StartsWith("rtx-serve: stories (llama, 5 layers"));
  const auto j = nlohmann::json::parse(p.out, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["model"] == "stories");
}
