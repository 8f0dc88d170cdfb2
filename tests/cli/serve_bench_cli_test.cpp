// rtx-serve bench as a subprocess: configuration errors name the flag that set the value.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "test_util.hpp"

using rtx::test::run;

namespace {

std::string serve() { return rtx::test::tool_path("rtx-serve"); }

}  // namespace

TEST_CASE("rtx-serve bench: a bad value is reported under its flag, once, before any connection", "[cpu][cli]") {
  // Nothing is contacted: the configuration is refused before the first connection.
  const std::string bench = serve() + " bench ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      // LoadConfig fields, named by flag (they used to read "rtx::serve::LoadConfig.max_tokens").
      {"-n 4 --max-tokens -3", "rtx-serve: error: --max-tokens: max_tokens must be >= 1"},
      // A bad field is named before the missing -n (which used to hide it).
      {"--max-tokens -3", "rtx-serve: error: --max-tokens: max_tokens must be >= 1"},
      {"-n 4 --temperature -1", "rtx-serve: error: --temperature: temperature must be a finite number >= 0"},
      {"-n 4 --timeout 0", "rtx-serve: error: --timeout: timeout_s must be a finite number > 0"},
      {"-n 4 --request-rate -2", "rtx-serve: error: --request-rate: request_rate must be a finite number >= 0"},
      {"--duration -1", "rtx-serve: error: --duration: duration_s must be a finite number >= 0"},
      {"-n 4 --endpoint v1", "rtx-serve: error: --endpoint: endpoint 'v1' must start with '/'"},
      {"-n 4 --host ''", "rtx-serve: error: --host: host is empty"},
      {"-n 4 --port 70000", "rtx-serve: error: --port: port 70000 is outside 1..65535"},
      // -c and -n: one check (validate), not CLI11's range message for some values and ours for others.
      {"-n 4 -c 0", "rtx-serve: error: --concurrency: concurrency 0 is outside 1..4096"},
      {"-n 4 -c 5000", "rtx-serve: error: --concurrency: concurrency 5000 is outside 1..4096"},
      {"-n -1", "rtx-serve: error: --num-requests: num_requests -1 is negative"},
      // A run without an end: the message says which of -n and --duration was given as 0.
      {"", "rtx-serve: error: -n: neither -n nor --duration is set: the run would never end"},
      {"-n 0", "rtx-serve: error: --num-requests: 0 means no request limit, and --duration is not set: the run "
               "would never end (e.g. -n 64, or --duration 30)"},
      {"--duration 0", "rtx-serve: error: --duration: 0 means no time limit, and -n is not set: the run would never end"},
      {"-n 0 --duration 0", "rtx-serve: error: --num-requests: 0 means no request limit, and --duration 0 no time "
                            "limit: the run would never end"},
  };
  for (const auto& [args, want] : cases) {
    const auto p = run(bench + args);
    INFO(args << "\nstderr: " << p.err);
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.err, Catch::StartsWith(want));
    CHECK_THAT(p.err, !Catch::Contains("LoadConfig") && !Catch::Contains("not in range"));
  }
}
