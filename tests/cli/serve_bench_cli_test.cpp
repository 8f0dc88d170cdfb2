// rtx-serve bench as a subprocess: configuration errors name the flag that set the value; a run
// in which every request fails says why, next to the summary and in the artifact, and exits 1.
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "rtx/telemetry/hwprofile.hpp"
#include "test_util.hpp"

using nlohmann::json;
using rtx::test::run;

namespace {

std::string serve() { return rtx::test::tool_path("rtx-serve"); }

/// `err` without the busy-host warnings, which a loaded test machine (ctest -j) may add before
/// the run ("rtx-serve bench: warning: before any request was sent, PSI cpu stall ...") and
/// after it ("rtx-serve bench: warning: the host was busy during the run: ...").
std::string without_busy_warning(const std::string& err) {
  std::string out;
  for (size_t at = 0; at < err.size();) {
    const size_t nl = std::min(err.find('\n', at), err.size() - 1);
    const std::string line = err.substr(at, nl + 1 - at);
    if (line.rfind("rtx-serve bench: warning: before any request was sent, ", 0) != 0 &&
        line.rfind("rtx-serve bench: warning: the host was busy during the run: ", 0) != 0)
      out += line;
    at = nl + 1;
  }
  return out;
}

/// A loopback server that answers every POST /v1/completions with `status` and `body` of
/// `type`.
struct StubServer {
  httplib::Server srv;
  int port = 0;
  std::thread th;
  StubServer(int status, std::string body, std::string type) {
    srv.Post("/v1/completions", [=](const httplib::Request&, httplib::Response& res) {
      res.status = status;
      res.set_content(body, type);
    });
    port = srv.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    th = std::thread([this] { srv.listen_after_bind(); });
    for (int i = 0; i < 500 && !srv.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    REQUIRE(srv.is_running());
  }
  ~StubServer() {
    srv.stop();
    th.join();
  }
};

/// A completion streamed as one content chunk, its usage and [DONE] (server-sent events).
const char* const kOneChunkStream =
    "data: {\"choices\":[{\"index\":0,\"text\":\" once\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\n\n"
    "data: [DONE]\n\n";

/// A loopback port that accepts connections (the kernel's backlog) and never answers.
using SilentServer = rtx::test::LoopbackListener;

}  // namespace

TEST_CASE("rtx-serve bench: prompts files, -o and --extra-body are checked before any request, naming the file",
          "[cpu][cli]") {
  SilentServer srv;  // a request sent would time out: none may be
  const std::string dir = rtx::test::temp_dir();
  const auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  const std::string bench = serve() + " bench --port " + std::to_string(srv.port()) + " -n 1 --timeout 30 ";
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"--prompts-file " + write("empty.txt", ""), 2, "rtx-serve: error: " + dir + "/empty.txt: the prompts file is empty"},
      {"--prompts-file " + write("blank.txt", "\n  \r\n\t\n"), 2,
       "rtx-serve: error: " + dir + "/blank.txt: the prompts file has no prompt (every line is blank)"},
      {"--prompts-file " + write("latin1.txt", "Once\ncaf\xe9\n"), 2,
       "rtx-serve: error: " + dir + "/latin1.txt: line 2 is not valid UTF-8"},
      {"--prompt \"$(printf '\\377')\"", 2, "rtx-serve: error: --prompt: prompt 1 is not valid UTF-8"},
      // The fields the load generator sets itself.
      {"--extra-body '{\"stream\": false}'", 2, "rtx-serve: error: --extra-body: \"stream\" cannot be given in extra_body: "
                                               "every request streams"},
      {"--extra-body '{\"stream_options\": {}}'", 2, "rtx-serve: error: --extra-body: \"stream_options\" cannot be given"},
      {"--extra-body '{\"max_tokens\": 3}'", 2,
       "rtx-serve: error: --extra-body: \"max_tokens\" cannot be given in extra_body: set by --max-tokens"},
      {"--extra-body '{\"prompt\": \"x\"}'", 2, "rtx-serve: error: --extra-body: \"prompt\" cannot be given"},
      // -o in a folder that does not exist: a usage error (2) said before the run, as rtx-bench's.
      {"-o " + dir + "/no/such/dir/b.json", 2,
       "rtx-serve: error: -o: the folder of " + dir + "/no/such/dir/b.json does not exist (create it first or give another path)"},
      {"-o " + dir, 2, "rtx-serve: error: -o: " + dir + " is a folder, not a file"},
  };
  for (const auto& [args, code, want] : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto p = run(bench + args);
    INFO(args << "\nstderr: " << p.err);
    CHECK(p.exit_code == code);
    CHECK_THAT(p.err, Catch::StartsWith(want));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // no request waited for
  }
  // The -o probe leaves nothing behind.
  const auto ls = run("ls -A " + dir);
  CHECK(ls.out == "blank.txt\nempty.txt\nlatin1.txt\n");
}

TEST_CASE("rtx-serve bench: a server that never answers is reported as a timeout after --timeout s", "[cpu][cli]") {
  SilentServer srv;
  const auto p = run(serve() + " bench --port " + std::to_string(srv.port()) + " -n 2 -c 2 --timeout 1.5");
  INFO("stdout: " << p.out << "\nstderr: " << p.err);
  CHECK(p.exit_code == 1);
  const std::string want = "timeout: no answer from 127.0.0.1:" + std::to_string(srv.port()) +
                           "/v1/completions within 1.5 s (--timeout)";
  CHECK(without_busy_warning(p.err) == "rtx-serve bench: error: no request succeeded (2 failed): " + want + "\n");
  CHECK_THAT(p.out, Catch::Contains("2 x transport_error (first: request ") && Catch::Contains(want));
  CHECK_THAT(p.out + p.err, !Catch::Contains("(Read)") && !Catch::Contains("1.500000"));
}

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

TEST_CASE("rtx-serve bench: when every request fails, the reason is in the summary and the artifact; exit 1", "[cpu][cli]") {
  StubServer srv(400,
                 R"({"error":{"message":"This model's maximum context length is 512 tokens.","type":)"
                 R"("invalid_request_error","param":"prompt","code":"context_length_exceeded"}})",
                 "application/json");
  const std::string dir = rtx::test::temp_dir();
  const std::string bench = serve() + " bench --port " + std::to_string(srv.port) + " -n 3 -c 2 --max-tokens 4";
  const std::string reason = "HTTP 400: context_length_exceeded: This model's maximum context length is 512 tokens.";
  const auto p = run(bench + " -o " + dir + "/b.json");
  INFO("stdout: " << p.out << "\nstderr: " << p.err);
  CHECK(p.exit_code == 1);  // docs: 1 when no request completed
  // With the summary (stdout), before the empty latency figures: how many failed and why.
  const size_t at = p.out.find("- Failures -");
  REQUIRE(at != std::string::npos);
  CHECK(at < p.out.find("Time to First Token"));
  CHECK_THAT(p.out.substr(at), Catch::Contains("\nAll 3 requests failed: the latency figures below are empty.\n"
                                               "3 x http_error (first: request 0): " + reason + "\n"));
  CHECK(without_busy_warning(p.err) == "rtx-serve bench: wrote " + dir + "/b.json (rtx.serve_bench.v1)\n"
                                       "rtx-serve bench: error: no request succeeded (3 failed): " + reason + "\n");
  // The artifact keeps "errors" (counts per status) and adds the groups with their message.
  std::ifstream f(dir + "/b.json");
  const json doc = json::parse(f);
  CHECK(doc["completed"] == 0);
  CHECK(doc["failed"] == 3);
  CHECK(doc["errors"] == json({{"http_error", 3}}));
  // The host's state around the run: the start and the run are judged (warnings on stderr).
  INFO(doc["host"].dump());
  CHECK(doc["host"]["load1_start"].get<double>() >= 0);
  CHECK(doc["host"]["load1_end"].get<double>() >= 0);
  const bool busy = doc["host"]["busy_at_start"].get<bool>();
  CHECK(doc["host"].contains("warning") == busy);
  CHECK((p.err.find("; if the server runs on this host, its latencies are not comparable\n") != std::string::npos) ==
        busy);
  const bool contended = doc["host"]["contended"].get<bool>();
  CHECK(doc["host"]["reason"].get<std::string>().empty() == !contended);
  CHECK((doc["host"]["judged_on"] == "run" || doc["host"]["judged_on"] == "none"));
  CHECK(doc["host"]["thresholds"] == json({{"psi_cpu_some_share_max", 0.1}, {"other_cpu_share_max", 0.1}}));
  // The one busy-host rule decides on other processes' CPU time where /proc/stat reads.
  if (rtx::telemetry::read_cpu_busy().valid && doc["host"]["judged_on"] == "run") {
    CHECK(doc["host"]["basis"] == "other_cpu");
    CHECK(doc["host"]["other_cpu_share"].get<double>() >= 0);
    CHECK(doc["host"]["other_cpu_share"].get<double>() <= 1.0);
    CHECK(doc["host"]["contended"] == (doc["host"]["other_cpu_share"].get<double>() > rtx::telemetry::kMaxOtherCpuShare));
  }
  CHECK((p.err.find("rtx-serve bench: warning: the host was busy during the run: ") != std::string::npos) == contended);
  if (std::ifstream("/proc/pressure/cpu").good()) {
    CHECK(doc["host"]["psi_cpu_some_share"].get<double>() >= 0);
    CHECK(doc["host"]["psi_cpu_some_share"].get<double>() <= 1.0);  // clamped, as rtx-bench's
  }
  REQUIRE(doc["failures"].size() == 1);
  CHECK(doc["failures"][0] == json({{"count", 3}, {"status", "http_error"}, {"http_status", 400}, {"error", reason},
                                    {"first_request", 0}}));
  // -q: no table, but the error still says why the exit code is 1.
  const auto q = run(serve() + " -q bench --port " + std::to_string(srv.port) + " -n 2 --max-tokens 4");
  CHECK(q.exit_code == 1);
  CHECK(q.out.empty());
  CHECK(q.err == "rtx-serve bench: error: no request succeeded (2 failed): " + reason + "\n");
  // --json: the document on stdout carries the failures, the table goes to stderr.
  const auto j = run(bench + " --json");
  CHECK(j.exit_code == 1);
  CHECK(json::parse(j.out)["failures"][0]["error"] == reason);
  CHECK_THAT(j.err, Catch::Contains("3 x http_error (first: request 0): " + reason));
}

TEST_CASE("rtx-serve bench --help lists the common options (--json, ...) it accepts", "[cpu][cli]") {
  const auto h = run(serve() + " bench --help");
  CHECK(h.exit_code == 0);
  const size_t own = h.out.find("--extra-body"), common = h.out.find("Common options of rtx-serve (before or after the subcommand):");
  REQUIRE(own != std::string::npos);
  REQUIRE(common != std::string::npos);
  CHECK(own < common);  // after the subcommand's own options
  const std::string tail = h.out.substr(common);
  CHECK_THAT(tail, Catch::Contains("\n  --json ") && Catch::Contains("Machine-readable JSON on stdout") &&
                       Catch::Contains("\n  -q,--quiet ") && Catch::Contains("\n  --seed UINT ") &&
                       !Catch::Contains("--help"));
  CHECK_THAT(run(serve() + " run --help").out, Catch::Contains("Common options of rtx-serve") && Catch::Contains("\n  --json "));
}

TEST_CASE("rtx-serve bench: an empty or unsendable API key is refused at start, exit 2, naming the flag or variable",
          "[cpu][cli]") {
  SilentServer srv;  // a request sent would hang until --timeout: none may be
  const std::string bench = "timeout 60 " + serve() + " bench --port " + std::to_string(srv.port()) + " -n 1 --timeout 30 ";
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"--api-key ''", "", "rtx-serve: error: --api-key: empty API key: requests would be sent without one; leave out --api-key"},
      {"--api-key 'a b'", "", "rtx-serve: error: --api-key: the API key has whitespace or a control byte"},
      {"", "RTX_API_KEY=", "rtx-serve: error: RTX_API_KEY: empty API key: requests would be sent without one; unset RTX_API_KEY"},
      {"", "RTX_API_KEY='k y'", "rtx-serve: error: RTX_API_KEY: the API key has whitespace or a control byte"},
      // A key on the command line wins over the variable, and is checked, not the variable.
      {"--api-key ''", "RTX_API_KEY=good", "rtx-serve: error: --api-key: empty API key"},
  };
  for (const auto& [args, env, want] : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto p = run(bench + args, env);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(args << " [" << env << "]\nstderr: " << p.err);
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.err, Catch::StartsWith(want));
    CHECK(took < 20);  // refused before any request (one would wait the 30 s --timeout)
  }
}

TEST_CASE("rtx-serve bench: a host busy during the run is warned about at the end and marked in the artifact",
          "[cpu][cli]") {
  if (!std::ifstream("/proc/pressure/cpu").good()) {
    WARN("SKIPPED: no /proc/pressure/cpu (PSI): the run cannot be judged here");
    return;
  }
  // Every completion streamed as one content chunk, its usage and [DONE].
  StubServer srv(200, kOneChunkStream, "text/event-stream");
  const std::string dir = rtx::test::temp_dir();
  const std::string bench = " bench --port " + std::to_string(srv.port) + " --duration 1 -c 2 --max-tokens 1";
  rtx::test::Proc p, q;
  {
    rtx::test::BusyHost busy;  // more spinning threads than CPUs: tasks wait for a CPU most of the run
    p = run(serve() + bench + " -o " + dir + "/b.json");
    q = run(serve() + " -q" + bench + " --json");
  }
  INFO("stdout: " << p.out << "\nstderr: " << p.err);
  REQUIRE(p.exit_code == 0);
  std::ifstream f(dir + "/b.json");
  const json doc = json::parse(f);
  REQUIRE(doc["completed"].get<int>() > 0);
  const json& host = doc["host"];
  INFO(host.dump());
  CHECK(host["contended"] == true);
  CHECK(host["judged_on"] == "run");
  const std::string reason = host["reason"];
  // The one rule: the CPU time other processes (this test's spinning threads) took; PSI only
  // where /proc/stat cannot be read.
  const bool stat = rtx::telemetry::read_cpu_busy().valid;
  const std::string lead = stat ? "other processes took " : "PSI cpu stall ";
  if (stat) {
    CHECK_THAT(reason, Catch::StartsWith(lead) && Catch::Contains(" CPU-s of ") && Catch::EndsWith("%, > 10%)"));
    CHECK(host["basis"] == "other_cpu");
    CHECK(host["other_cpu_share"].get<double>() > 0.1);
  } else {
    CHECK_THAT(reason, Catch::StartsWith(lead) && Catch::Contains("% of the window's ") &&
                           Catch::EndsWith("no /proc/stat to tell other processes from ours)"));
  }
  CHECK(host["psi_cpu_some_share"].get<double>() > 0.1);
  CHECK(host["psi_cpu_some_share"].get<double>() <= 1.0);
  // One warning, after the summary (stdout) was written, naming the evidence.
  CHECK_THAT(p.err, Catch::Contains("rtx-serve bench: warning: the host was busy during the run: " + reason +
                                    "; latencies include waits for a CPU (a server on this host counts as another "
                                    "process; this bench's own clients do not)\n"));
  CHECK(p.out.find("Time to First Token") != std::string::npos);
  // -q: no warning on stderr; the document still says so.
  INFO("-q stderr: " << q.err);
  REQUIRE(q.exit_code == 0);
  CHECK(q.err.empty());
  const json qd = json::parse(q.out);
  CHECK(qd["host"]["contended"] == true);
  CHECK_THAT(qd["host"]["reason"].get<std::string>(), Catch::StartsWith(lead));
}

TEST_CASE("rtx-serve bench: an -o folder that cannot be written in is an environment error (3), before any request",
          "[cpu][cli]") {
  if (::geteuid() == 0) {
    WARN("SKIPPED: running as root, every folder is writable");
    return;
  }
  SilentServer srv;  // a request sent would time out: none may be
  const std::string dir = rtx::test::temp_dir();
  REQUIRE(::mkdir((dir + "/ro").c_str(), 0555) == 0);
  const auto p = run(serve() + " bench --port " + std::to_string(srv.port()) + " -n 1 --timeout 30 -o " + dir + "/ro/b.json");
  INFO(p.err);
  CHECK(p.exit_code == 3);
  CHECK_THAT(p.err, Catch::StartsWith("rtx-serve: error: -o: cannot write in the folder of " + dir + "/ro/b.json"));
}

TEST_CASE("rtx-serve bench: no server is said first, without a busy-host warning before it; -o written is said",
          "[cpu][cli]") {
  // A host busy before the run would make bench warn about it: the missing server comes first.
  {
    rtx::test::BusyHost busy;
    const auto p = run(serve() + " bench --port 1 -n 1 --timeout 2");
    INFO(p.err);
    CHECK(p.exit_code == 3);
    CHECK_THAT(p.err, Catch::StartsWith("rtx-serve: error: --port: no server answers at 127.0.0.1:1 ("));
    CHECK_THAT(p.err, !Catch::Contains("warning"));
  }
  StubServer srv(200, kOneChunkStream, "text/event-stream");
  const std::string dir = rtx::test::temp_dir();
  const std::string bench = " bench --port " + std::to_string(srv.port) + " -n 2 --max-tokens 1 -o " + dir + "/b.json";
  const auto w = run(serve() + bench);
  INFO(w.err);
  REQUIRE(w.exit_code == 0);
  CHECK_THAT(without_busy_warning(w.err), Catch::Contains("rtx-serve bench: wrote " + dir + "/b.json (rtx.serve_bench.v1)\n"));
  const auto q = run(serve() + " -q" + bench);
  REQUIRE(q.exit_code == 0);
  CHECK(q.err.empty());
}
