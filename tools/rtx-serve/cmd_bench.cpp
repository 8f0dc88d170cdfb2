// `rtx-serve bench`: the load generator (rtx/serve/loadgen.hpp) against any OpenAI-compatible
// server (rtx-serve, llama.cpp's llama-server, vLLM): TTFT, TPOT, ITL percentiles, tokens/s.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/serve/loadgen.hpp"
#include "rtx/serve/text.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx_serve {

namespace {

// Ctrl-C during a run: the first SIGINT stops new requests and lets the ones in flight finish,
// so the summary and the artifact still come out (exit 130); the handler is reset by then
// (SA_RESETHAND), so a second SIGINT ends the process at once.
std::atomic<bool> g_interrupted{false};

void on_sigint(int) {
  g_interrupted.store(true);
  static const char msg[] =
      "\nrtx-serve bench: interrupted: waiting for the requests in flight (Ctrl-C again to quit now)\n";
  const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)n;
}
struct BenchArgs {
  rtx::serve::LoadConfig cfg;
  std::vector<std::string> prompts;
  std::string prompts_file, out_path;
  bool no_ignore_eos = false, with_requests = false;
  int warmup = 0;
  std::string extra_body;
  CLI::Option* extra_body_opt = nullptr;
  CLI::Option* prompts_file_opt = nullptr;
  /// The flag that sets each LoadConfig field validate() checks, by field name.
  std::vector<std::pair<std::string, CLI::Option*>> field_flags;
  CLI::Option* num_requests_opt = nullptr;
  CLI::Option* duration_opt = nullptr;
  CLI::Option* api_key_opt = nullptr;
};

/// rtx::serve::validate with its errors naming the flag ("--max-tokens"), not the LoadConfig
/// field ("rtx::serve::LoadConfig.max_tokens"), as `run` does for the scheduler's keys. A run
/// without an end (-n and --duration both 0) says which of the two was given as 0.
void validate_flags(const BenchArgs& a) {
  try {
    rtx::serve::validate(a.cfg);
  } catch (const rtx::Error& e) {
    const std::string prefix = std::string(rtx::serve::kLoadConfigWhere) + ".";
    if (e.where() == rtx::serve::kLoadConfigWhere) {
      const bool n = a.num_requests_opt->count() > 0, d = a.duration_opt->count() > 0;
      const char* hint = "e.g. -n 64, or --duration 30";
      if (n)
        rtx::throw_usage(std::string("0 means no request limit, and ") +
                             (d ? "--duration 0 no time limit" : "--duration is not set") + ": the run would never end",
                         a.num_requests_opt->get_name(), hint);
      if (d)
        rtx::throw_usage("0 means no time limit, and -n is not set: the run would never end", a.duration_opt->get_name(),
                         hint);
      rtx::throw_usage("neither -n nor --duration is set: the run would never end", "-n", hint);
    }
    if (e.where().rfind(prefix, 0) == 0)
      for (const auto& [field, opt] : a.field_flags)
        if (e.where().substr(prefix.size()) == field) rtx::throw_usage(e.message(), opt->get_name(), e.hint());
    throw;
  }
}
}  // namespace

Body add_bench(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto a = std::make_shared<BenchArgs>();
  auto& cfg = a->cfg;
  const auto field = [&](const char* name, CLI::Option* opt) {
    a->field_flags.emplace_back(name, opt);
    return opt;
  };
  field("host", s.add_option("--host", cfg.host, "Server host")->capture_default_str());
  field("port", s.add_option("--port", cfg.port, "Server port")->capture_default_str());
  a->api_key_opt = s.add_option("--api-key", cfg.api_key, "Bearer token (default: $RTX_API_KEY)");
  s.add_option("--model", cfg.model, "\"model\" field of each request (omitted when empty)");
  field("endpoint", s.add_option("--endpoint", cfg.endpoint, "/v1/completions or /v1/chat/completions")
                        ->capture_default_str());
  // Ranges are checked by rtx::serve::validate (validate_flags), one message per field.
  field("concurrency", s.add_option("-c,--concurrency", cfg.concurrency, "Client threads = requests in flight (1..4096)")
                           ->capture_default_str());
  a->num_requests_opt = field("num_requests", s.add_option("-n,--num-requests", cfg.num_requests,
                                                           "Requests to send (0: no limit, until --duration)")
                                                  ->capture_default_str());
  a->duration_opt = field("duration_s", s.add_option("--duration", cfg.duration_s,
                                                     "Stop starting requests after this many s (0: no limit)")
                                            ->capture_default_str());
  field("prompts", s.add_option("--prompt", a->prompts, "A prompt (repeatable; request i sends prompt i mod count)"));
  a->prompts_file_opt =
      s.add_option("--prompts-file", a->prompts_file, "File with one prompt per line (added to --prompt; blank lines skipped)");
  field("max_tokens", s.add_option("--max-tokens", cfg.max_tokens, "max_tokens of each request")->capture_default_str());
  s.add_flag("--no-ignore-eos", a->no_ignore_eos, "Do not send \"ignore_eos\": true");
  field("temperature", s.add_option("--temperature", cfg.temperature, "Sampling temperature")->capture_default_str());
  field("request_rate", s.add_option("--request-rate", cfg.request_rate, "Mean requests/s, Poisson arrivals (0: unthrottled)")
                            ->capture_default_str());
  field("timeout_s", s.add_option("--timeout", cfg.timeout_s, "Per-request limit, s")->capture_default_str());
  s.add_option("--warmup", a->warmup, "Send this many requests first (concurrency 1), not measured")
      ->capture_default_str();
  s.add_option("-o,--out", a->out_path, "Also write the rtx.serve_bench.v1 artifact to this file ('-' stdout)");
  s.add_flag("--requests", a->with_requests, "Include every request's measurements in the JSON");
  a->extra_body_opt = field("extra_body", s.add_option("--extra-body", a->extra_body,
               "JSON object merged into every request body, e.g. '{\"cache_prompt\": false}'"));
  return [a, &common, &s]() -> int {
    auto& cfg = a->cfg;
    if (a->api_key_opt->count() > 0) {
      check_api_key(cfg.api_key, "--api-key", "requests would be sent without one", "leave out --api-key to send none");
    } else if (const char* k = std::getenv("RTX_API_KEY")) {
      cfg.api_key = k;
      check_api_key(cfg.api_key, "RTX_API_KEY", "requests would be sent without one", "unset RTX_API_KEY to send none");
    }
    cfg.ignore_eos = !a->no_ignore_eos;
    const CLI::App* parent = s.get_parent();
    const CLI::Option* seed = parent ? parent->get_option_no_throw("--seed") : nullptr;
    if (seed && seed->count() > 0) cfg.seed = common.seed;
    for (size_t i = 0; i < a->prompts.size(); ++i)
      if (!rtx::serve::utf8_valid(a->prompts[i]))
        rtx::throw_usage("prompt " + std::to_string(i + 1) + " is not valid UTF-8", "--prompt",
                         "a JSON request body must be UTF-8");
    if (a->prompts_file_opt->count() > 0) {
      // Lines that are empty or blank are skipped (a CR before the LF is dropped); a file with
      // none left is an error, not the default prompt.
      std::ifstream in(a->prompts_file);
      if (!in) rtx::throw_input("cannot open prompts file", a->prompts_file, "check the path given to --prompts-file");
      std::string line;
      size_t n = 0, kept = 0;
      while (std::getline(in, line)) {
        ++n;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t\f\v") == std::string::npos) continue;
        if (!rtx::serve::utf8_valid(line))
          rtx::throw_input("line " + std::to_string(n) + " is not valid UTF-8", a->prompts_file,
                           "a JSON request body must be UTF-8; convert the file (e.g. iconv -t UTF-8)");
        a->prompts.push_back(line);
        ++kept;
      }
      if (in.bad()) rtx::throw_env("cannot read prompts file", a->prompts_file);
      if (kept == 0)
        rtx::throw_input(n == 0 ? "the prompts file is empty" : "the prompts file has no prompt (every line is blank)",
                         a->prompts_file, "put one prompt per line (--prompts-file)");
    }
    if (a->extra_body_opt->count() > 0) {
      std::string why;
      try {
        cfg.extra_body = nlohmann::json::parse(a->extra_body);
        if (!cfg.extra_body.is_object()) why = std::string("it is ") + cfg.extra_body.type_name() + ", not an object";
      } catch (const nlohmann::json::exception& e) {
        why = e.what();
      }
      if (!why.empty())
        rtx::throw_usage("\"" + a->extra_body + "\" is not a JSON object: " + why, "--extra-body",
                         "e.g. --extra-body '{\"cache_prompt\": false}'");
    }
    cfg.prompts = a->prompts;
    if (cfg.prompts.empty()) cfg.prompts = {"Once upon a time"};
    validate_flags(*a);
    if (a->warmup < 0) rtx::throw_usage("--warmup must be >= 0", "--warmup");
    std::error_code ec;
    const auto out_status = std::filesystem::status(a->out_path, ec);
    const bool special = std::filesystem::exists(out_status) && !std::filesystem::is_regular_file(out_status) &&
                         !std::filesystem::is_directory(out_status);  // /dev/null, a FIFO: written in place
    // A missing folder is a usage error (2), an unwritable one an environment error (3), both
    // before any request is sent, as in rtx-bench.
    rtx::io::require_output_dir(a->out_path, "-o");
    if (!a->out_path.empty() && a->out_path != "-" && !special) {
      // Whether -o can be written, before any request is sent (not after the whole run): a temp
      // file in its directory, removed again. An unwritable path is an environment error (3).
      try {
        rtx::io::AtomicFileWriter probe(a->out_path);
      } catch (const rtx::Error& e) {
        throw rtx::Error(e.category(), "-o: cannot write the artifact: " + e.message(), a->out_path,
                         "give a path in a writable directory");
      }
    }
    // No server: that one error, not a busy-host warning before it.
    rtx::serve::require_server(cfg);
    // Other work on this host before any load is sent (a server on this host shares its CPUs
    // with the clients, so the load the bench itself makes is not counted against it).
    const std::string busy = rtx::telemetry::busy_host_warning(rtx::telemetry::hardware_profile());
    if (!busy.empty() && !common.quiet)
      std::cerr << "rtx-serve bench: warning: before any request was sent, " << busy
                << "; if the server runs on this host, its latencies are not comparable\n";
    if (a->warmup > 0) {
      rtx::serve::LoadConfig w = cfg;
      w.concurrency = 1;
      w.num_requests = a->warmup;
      w.duration_s = 0;
      w.request_rate = 0;
      const rtx::serve::LoadReport wr = rtx::serve::run_load(w);
      if (wr.summary.completed == 0 && !wr.requests.empty())
        rtx::throw_env("warm-up failed: " + wr.requests.front().error, cfg.host + ":" + std::to_string(cfg.port),
                       "is the server up and serving " + cfg.endpoint + "?");
    }
    // The run's window: after the warm-up, around the measured requests only.
    const rtx::app::bench::HostSample host_start = rtx::app::bench::sample_host();
    struct sigaction sa{}, old_sa{};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_sa);
    cfg.interrupt = &g_interrupted;
    const rtx::serve::LoadReport report = rtx::serve::run_load(cfg);
    sigaction(SIGINT, &old_sa, nullptr);
    const rtx::app::bench::HostSample host_end = rtx::app::bench::sample_host();
    nlohmann::json doc = rtx::serve::to_json(report, a->with_requests);
    // The run judged by the suite's one rule (telemetry::judge_host_window): the CPU time other
    // processes took in the window. This bench's clients are this process and do not count; a
    // server on this host does (the warning says so).
    const rtx::app::bench::HostEvidence run_ev =
        rtx::app::bench::contention_evidence(host_start, host_end, 1, rtx::app::bench::CpuShareRule::Off);
    const rtx::serve::RunContention run_host = rtx::serve::judge_run_contention(run_ev.cpu_window());
    const bool psi = run_ev.psi_valid;
    nlohmann::json host = {{"load1_start", host_start.load1},
                           {"load1_end", host_end.load1},
                           {"busy_at_start", !busy.empty()},
                           {"contended", run_host.contended},
                           {"reason", run_host.reason},
                           {"judged_on", run_host.judged ? "run" : "none"},
                           {"basis", run_host.basis.empty() ? "none" : run_host.basis},
                           {"thresholds",
                            {{"psi_cpu_some_share_max", rtx::telemetry::kBusyPsiStallShare},
                             {"other_cpu_share_max", rtx::telemetry::kMaxOtherCpuShare}}}};
    if (run_ev.other_valid) host["other_cpu_share"] = run_host.other_share;
    if (!busy.empty()) host["warning"] = busy;
    if (psi) host["psi_cpu_some_share"] = run_host.psi_share;
    doc["host"] = host;
    if (!a->out_path.empty() && !(common.json && a->out_path == "-")) rtx::io::write_artifact(a->out_path, doc);
    if (common.json) {
      std::cout << doc.dump(2) << "\n";
      if (!common.quiet) std::cerr << rtx::serve::format_table(report);
    } else if (!common.quiet) {
      std::cout << rtx::serve::format_table(report);
    }
    if (!a->out_path.empty() && a->out_path != "-" && !common.quiet)
      std::cerr << "rtx-serve bench: wrote " << a->out_path << " (rtx.serve_bench.v1)\n";
    if (run_host.contended && !common.quiet)
      std::cerr << "rtx-serve bench: warning: the host was busy during the run: " << run_host.reason
                << "; latencies include waits for a CPU (a server on this host counts as another process; this bench's own clients do not)\n";
    if (!report.aborted.empty()) std::cerr << "rtx-serve bench: stopped early: " << report.aborted << "\n";
    if (g_interrupted.load()) return 130;  // 128 + SIGINT, as a shell reports an interrupted command
    if (report.summary.completed > 0) return 0;  // failures, if any, are listed in the table
    // The checked thing failed: no request got through (exit 1, like a bench regression). Said
    // even under -q, as an error is; the table (and the artifact's "failures") has the others.
    const auto top = rtx::serve::failure_groups(report.requests, 1);
    std::cerr << "rtx-serve bench: error: no request succeeded";
    if (top.empty()) std::cerr << " (none was sent)\n";
    else std::cerr << " (" << report.summary.failed << " failed): " << top.front().error << "\n";
    return 1;
  };
}

}  // namespace rtx_serve
