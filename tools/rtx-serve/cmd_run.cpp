// `rtx-serve run`: load a model, start the scheduler(s) and the HTTP server, stop on SIGTERM.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/scheduler.hpp"
#include "rtx/serve/server.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/serve/text.hpp"
#include "rtx/serve/tuning.hpp"
#include "rtx/tune/lookup.hpp"

namespace rtx_serve {

namespace {

volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) { g_signal = sig; }

struct RunArgs {
  std::string model, host = "127.0.0.1", api_key, chat_template, canary_profile, served_name, profile_db;
  std::string device = "cpu";
  int port = 8080, threads = 0;
  double canary_fraction = 0, shutdown_deadline_s = 10;
  size_t max_body = 1 << 20, max_header_bytes = 64 << 10;
  double header_timeout_s = 10, receive_timeout_s = 60;
  bool no_profile = false;
  bool log_requests = false;
  bool dequantize = false;
  bool int8_activations = false;  // the default; the flag is accepted for scripts that name it
  bool f32_activations = false;
  rtx::serve::SchedulerConfig sched;
  /// Scheduler flags by SchedulerConfig JSON key: a flag given on the command line beats the
  /// promoted config, which beats the built-in default.
  std::vector<std::pair<std::string, CLI::Option*>> sched_flags;
  CLI::Option* threads_flag = nullptr;
  /// String flags whose empty value would silently mean "not given".
  std::vector<CLI::Option*> nonempty_flags;
  CLI::Option* api_key_flag = nullptr;
};

/// Refuses a --host that does not parse as an address or resolve as a name (bind() would only
/// say "in use, or not permitted").
void check_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &res);
  if (res) ::freeaddrinfo(res);
  if (rc != 0)
    rtx::throw_usage("'" + host + "' cannot be parsed as an address nor resolved as a host name (" + ::gai_strerror(rc) + ")",
                     "--host", "e.g. --host 127.0.0.1, --host 0.0.0.0 or --host ::1");
}

/// Throws why `host`:`port` could not be bound, as an environment error (exit 3): the server's
/// bind reports only that it failed, so the address is bound again on a probe socket (with the
/// server's SO_REUSEADDR) to read bind(2)'s errno, whose text is in the message:
/// "cannot bind 192.0.2.1:8080: Cannot assign requested address (not an address of this
/// machine)". `where` is the flag to change: --host for an address this machine does not have,
/// --port for a port in use or reserved (below 1024 without privileges). `fallback` (the
/// server's error) is thrown as it is when the probe binds (the port came free meanwhile).
[[noreturn]] void throw_bind_error(const std::string& host, int port, const rtx::Error& fallback) {
  const std::string addr = port == 0 ? host + " (--port 0: any free port)" : host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int err = 0;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    rtx::throw_env("cannot bind " + addr + ": " + ::gai_strerror(rc), "--host");
  for (const addrinfo* r = res; r; r = r->ai_next) {
    const int fd = ::socket(r->ai_family, r->ai_socktype | SOCK_CLOEXEC, r->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    const bool bound = ::bind(fd, r->ai_addr, r->ai_addrlen) == 0;
    err = bound ? 0 : errno;
    ::close(fd);
    if (bound) break;
  }
  ::freeaddrinfo(res);
  if (err == 0) throw fallback;
  const std::string why = "cannot bind " + addr + ": " + std::strerror(err);
  switch (err) {
    case EADDRNOTAVAIL:
      rtx::throw_env(why + " (not an address of this machine)", "--host",
                     "bind one of this machine's addresses ('ip addr' lists them), 127.0.0.1, or 0.0.0.0 for all");
    case EADDRINUSE:
      rtx::throw_env(why + " (another process listens there)", "--port", "pick another --port, or stop the process holding it");
    case EACCES:
      rtx::throw_env(why + " (ports below 1024 need privileges)", "--port", "pick a --port of 1024 or above");
    default:
      rtx::throw_env(why, "--host", fallback.hint());
  }
}

/// Refuses a --model that is a directory or not a regular file (a device, FIFO), which the
/// loaders would misreport ("its first bytes are \"\"", "0 bytes").
void check_model_path(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return;  // the loader says it cannot open it
  if (std::filesystem::is_directory(st))
    rtx::throw_input("is a directory, not a model file", path, "give the .gguf or .safetensors file inside it (--model)");
  if (!std::filesystem::is_regular_file(st))
    rtx::throw_input("is not a regular file (a device, FIFO or socket)", path, "give a .gguf or .safetensors file (--model)");
}

/// Apply the configs rtx-evolve promoted for this SKU (scheduler, parallelism) under the flags
/// the user gave explicitly. A promoted value that is not valid here is ignored with a warning:
/// the store never stops the server. Returns the start-up line that says what it applied
/// ("promoted configs ...", without the "rtx-serve: " prefix).
std::string apply_promoted(RunArgs& a, const std::string& db) {
  std::string sku;
  try {
    sku = rtx::telemetry::sku_key("cpu");
  } catch (const rtx::Error& e) {
    return std::string("promoted configs: no SKU (") + e.what() + "); defaults";
  }
  const auto pc = rtx::evolve::promoted_configs(db, sku);
  std::map<std::string, std::string> outcome;
  if (const auto* sc = pc.get("scheduler")) {
    const std::string where = "promoted scheduler config v" + std::to_string(pc.by_domain.at("scheduler").version);
    try {
      if (!sc->is_object()) rtx::throw_input(where + " is not a JSON object", "scheduler");
      nlohmann::json merged = a.sched.to_json();
      for (const auto& item : sc->items()) merged[item.key()] = item.value();
      const nlohmann::json given = a.sched.to_json();
      for (const auto& [k, opt] : a.sched_flags)
        if (opt->count() > 0) merged[k] = given[k];
      rtx::serve::SchedulerConfig cfg = rtx::serve::SchedulerConfig::from_json(merged, where);
      cfg.validate();
      a.sched = cfg;
      outcome["scheduler"] = "";
    } catch (const rtx::Error& e) {
      outcome["scheduler"] = std::string("invalid here: ") + e.what();
    }
  }
  if (const auto* pj = pc.get("parallelism")) {
    std::string why;
    if (a.threads_flag->count() > 0) outcome["parallelism"] = "--threads given";
    else if (const auto t = rtx::evolve::promoted_threads(*pj, 4096, &why)) {
      a.threads = *t;
      outcome["parallelism"] = "";
    } else outcome["parallelism"] = why;
  }
  return rtx::evolve::describe(pc, outcome);
}

/// Apply rtx-tune's scheduler profile for this model file and SKU (the entry nearest to the
/// default batch workload) under the flags given explicitly; rtx-evolve's promoted configs,
/// applied after, override it (they passed gates; a tuned profile is one measurement). Never
/// stops the server: a profile that is not valid here is reported and ignored. Returns what it
/// did, for the start-up line: "max_batch=8,... from KEY (flags kept: max_batch)", "none for
/// model 'X' (defaults)" or "not applied (why)".
std::string apply_tuned(RunArgs& a, rtx::tune::ProfileLookup& lookup) {
  try {
    const std::string stem = rtx::serve::tune_model_name(a.model);
    const auto ans = lookup.find(rtx::serve::kSchedulerTuneOp, stem, rtx::kernels::Backend::CPU,
                                 rtx::serve::BatchWorkload{}.shape(), rtx::DType::F32);
    if (!ans.params) return "none for model '" + stem + "' (defaults)";
    const nlohmann::json given = a.sched.to_json();
    nlohmann::json tuned = rtx::serve::scheduler_config_from(*ans.params, a.sched).to_json();
    std::string kept;
    for (const auto& [k, opt] : a.sched_flags)
      if (opt->count() > 0) tuned[k] = given[k], kept += " " + k;
    rtx::serve::SchedulerConfig cfg = rtx::serve::SchedulerConfig::from_json(tuned, "tuned profile " + ans.key);
    cfg.validate();
    a.sched = cfg;
    const int t = rtx::serve::tuned_threads(*ans.params);
    if (t > 0 && a.threads_flag->count() == 0) a.threads = t;
    else if (t > 0) kept += " threads";
    return rtx::kernels::params_to_string(*ans.params) + " from " + ans.key +
           (kept.empty() ? "" : " (flags kept:" + kept + ")");
  } catch (const rtx::Error& e) {
    return std::string("not applied (") + e.what() + ")";
  }
}

/// An engine configuration file (--canary-profile): {"scheduler": {...SchedulerConfig keys...},
/// "threads": N, "matmul": {"KC": .., "NR": ..}} — every key optional.
struct EngineProfile {
  rtx::serve::SchedulerConfig sched;
  rtx::serve::LoadOptions load;
};

EngineProfile read_engine_profile(const std::string& path, const RunArgs& base) {
  std::ifstream in(path);
  if (!in) rtx::throw_input("cannot open --canary-profile " + path, path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse_error (says the byte), out_of_range (1e400)
    rtx::throw_input(std::string("not valid JSON: ") + e.what(), path, "--canary-profile wants a JSON object");
  }
  if (!j.is_object()) rtx::throw_input(std::string("not a JSON object (found ") + j.type_name() + ")", path);
  EngineProfile p;
  p.sched = base.sched;
  p.load.threads = base.threads;
  p.load.keep_quantized = !base.dequantize;
  p.load.int8_activations = !base.f32_activations;
  p.load.cuda_device = rtx::serve::parse_device(base.device);
  for (const auto& [k, v] : j.items()) {
    if (k == "scheduler") {
      nlohmann::json merged = base.sched.to_json();
      if (!v.is_object()) rtx::throw_input(path + ": \"scheduler\" must be an object", "scheduler");
      for (const auto& [sk, sv] : v.items()) merged[sk] = sv;
      p.sched = rtx::serve::SchedulerConfig::from_json(merged, path + ": scheduler");
    } else if (k == "threads") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 4096)
        rtx::throw_input(path + ": \"threads\" must be an integer in [0, 4096]", "threads");
      p.load.threads = v.get<int>();
    } else if (k == "matmul") {
      if (!v.is_object()) rtx::throw_input(path + ": \"matmul\" must be an object", "matmul");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_number_integer() || mv.get<int64_t>() < 0 || mv.get<int64_t>() > (1 << 14))
          rtx::throw_input(path + ": matmul." + mk + " must be an integer in [0, 16384]", mk);
        const int x = mv.get<int>();
        if (mk == "MC") p.load.matmul.MC = x;
        else if (mk == "NC") p.load.matmul.NC = x;
        else if (mk == "KC") p.load.matmul.KC = x;
        else if (mk == "MR") p.load.matmul.MR = x;
        else if (mk == "NR") p.load.matmul.NR = x;
        else rtx::throw_input(path + ": unknown matmul parameter \"" + mk + "\" (MC, NC, KC, MR, NR)", mk);
      }
    } else if (k != "schema") {
      rtx::throw_input(path + ": unknown key \"" + k + "\" (scheduler, threads, matmul)", k);
    }
  }
  return p;
}

/// rtx-tune's matmul parameters for this machine's SKU (the cpu.blocked entry nearest to a
/// decode-sized matmul of the model, M x N x K), or the defaults. `said` gets what was used,
/// for the start-up line: "KC=256,NR=16 from KEY", "none for this SKU (defaults)", "KEY ignored
/// (why; defaults)" or "not read (why; defaults)".
rtx::kernels::MatmulParams profile_matmul(rtx::tune::ProfileLookup& lookup, int M, int N, int K, std::string& said) {
  rtx::kernels::MatmulParams mp;
  try {
    const auto& reg = rtx::kernels::registry();
    const auto ans = lookup.find("matmul_forward", &reg.variant("matmul_forward", "cpu.blocked"), {{"M", M}, {"N", N}, {"K", K}},
                                 rtx::DType::F32);
    said = "none for this SKU (defaults)";
    if (ans.params) {
      mp = rtx::kernels::matmul_params_from(*ans.params, rtx::kernels::MatmulImpl::Blocked);
      said = rtx::kernels::params_to_string(*ans.params) + " from " + ans.key;
      if (const std::string why = rtx::kernels::matmul_params_invalid(mp, rtx::kernels::cpu_isa_active()); !why.empty()) {
        mp = {};
        said = ans.key + " ignored (" + why + "; defaults)";
      }
    }
  } catch (const rtx::Error& e) {
    said = std::string("not read (") + e.what() + "; defaults)";
  }
  return mp;
}

/// The profiles of a store, opened once for both of rtx-serve's lookups (the scheduler's before
/// the model loads, the matmul's after); `error` says why not when the store exists but cannot
/// be read.
struct TunedProfiles {
  bool store_exists = false;
  std::unique_ptr<rtx::store::Store> store;
  std::unique_ptr<rtx::tune::ProfileLookup> lookup;
  std::string error;
  explicit TunedProfiles(const std::string& db) : store_exists(std::filesystem::exists(db)) {
    if (!store_exists) return;
    try {
      store = std::make_unique<rtx::store::Store>(db);
      lookup = std::make_unique<rtx::tune::ProfileLookup>(*store);
    } catch (const rtx::Error& e) {
      lookup.reset();
      store.reset();
      error = e.what();
    }
  }
};

/// The one start-up line about rtx-tune's profiles in an existing store: which store and SKU
/// they were looked up for, and what the scheduler and matmul lookups changed (their texts from apply_tuned and
/// profile_matmul; empty matmul: not looked up, the model runs on a CUDA device).
std::string tuned_line(const std::string& db, const TunedProfiles& tp, const std::string& scheduler,
                       const std::string& matmul) {
  if (!tp.lookup) return "rtx-tune profiles: store " + db + " not read (" + tp.error + "; scheduler and matmul defaults)";
  std::string sku;
  try {
    sku = rtx::telemetry::sku_key("cpu");
  } catch (const rtx::Error& e) {
    sku = std::string("unknown: ") + e.what();
  }
  return "rtx-tune profiles in " + db + " for SKU " + sku + ": tuned scheduler: " + scheduler + "; tuned matmul: " +
         (matmul.empty() ? "not used (a CUDA device: they are the CPU kernel's)" : matmul);
}

}  // namespace

Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto a = std::make_shared<RunArgs>();
  s.add_option("-m,--model", a->model, "GGUF (gpt2 or llama; f32, f16, bf16, Q8_0, Q4/Q5, K-quants) or rtx checkpoint (.safetensors)")->required();
  a->nonempty_flags.push_back(
      s.add_option("--host", a->host, "Address to bind (loopback by default; 0.0.0.0 exposes it)")->capture_default_str());
  s.add_option("--port", a->port, "TCP port (0 = any free port, printed at start)")->capture_default_str();
  a->threads_flag = s.add_option("-t,--threads", a->threads, "Threads for the forward pass (0 = OpenMP default)")->capture_default_str();
  a->api_key_flag =
      s.add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY' on every route but /health (or RTX_API_KEY)");
  a->nonempty_flags.push_back(
      s.add_option("--model-name,--alias", a->served_name,
                   "Model id in /v1/models and requests (default: the GGUF's general.name, else the file name without "
                   "extension; --alias is llama-server's name for it)"));
  a->nonempty_flags.push_back(
      s.add_option("--chat-template", a->chat_template, "chatml | llama2 | plain (default) | a JSON template file"));
  const auto sched_opt = [&](const char* flag, auto& member, const char* key, const char* help) {
    a->sched_flags.emplace_back(key, s.add_option(flag, member, help)->capture_default_str());
  };
  sched_opt("--max-batch", a->sched.max_batch, "max_batch",
            "Most sequences decoding at once");
  sched_opt("--token-budget", a->sched.token_budget, "token_budget",
            "Most tokens (prompt + decode) per forward step");
  sched_opt("--prefill-chunk", a->sched.prefill_chunk, "prefill_chunk",
            "Most prompt tokens of one sequence per step (chunked prefill; capped at --token-budget unless given)");
  sched_opt("--batch-window-ms", a->sched.batch_window_ms, "batch_window_ms",
            "When idle, wait this long for more requests to batch");
  sched_opt("--kv-block-tokens", a->sched.kv_block_tokens, "kv_block_tokens",
            "Positions per KV cache block");
  sched_opt("--kv-blocks", a->sched.kv_blocks, "kv_blocks",
            "KV cache blocks in the pool (0 = max-batch full contexts)");
  a->sched_flags.emplace_back(
      "kv_type", s.add_option_function<std::string>(
                      "--kv-type", [a](const std::string& v) { a->sched.kv_type = rtx::serve::parse_kv_type(v, "--kv-type"); },
                      "KV cache element type: f32 (default; bitwise equal to rtx-train sample) or f16 (half the memory "
                      "and attention reads; keys and values rounded to binary16; CPU only)")
                     ->check(CLI::IsMember({"f32", "f16"}))
                     ->type_name("TYPE"));
  sched_opt("--max-queue", a->sched.max_queue, "max_queue",
            "Waiting requests beyond which new ones get 429");
  sched_opt("--request-timeout", a->sched.request_timeout_s, "request_timeout_s",
            "Seconds before a request ends with a timeout");
  sched_opt("--interactive-target-ms", a->sched.interactive_target_ms, "interactive_target_ms",
            "TTFT target of the interactive lane");
  sched_opt("--batch-target-ms", a->sched.batch_target_ms, "batch_target_ms",
            "TTFT target of the batch lane");
  sched_opt("--tpot-target-ms", a->sched.tpot_target_ms, "tpot_target_ms",
            "TPOT target of the interactive lane: cut each step's prompt chunks so its predicted time stays within "
            "it while such a sequence decodes (0 = off; the token budget alone)");
  a->sched_flags.emplace_back(
      "prefix_cache", s.add_flag("--prefix-cache,!--no-prefix-cache", a->sched.prefix_cache,
                                 "Reuse cached KV blocks of prompts that start like earlier sequences (default on)"));
  s.add_option("--max-body-bytes", a->max_body, "Larger request bodies get 413")->capture_default_str();
  s.add_option("--max-header-bytes", a->max_header_bytes, "Larger request line + headers get 431 (at most 128 lines)")
      ->capture_default_str();
  s.add_option("--header-timeout", a->header_timeout_s, "Seconds a request's line and headers may take to arrive (then 408)")
      ->capture_default_str();
  s.add_option("--receive-timeout", a->receive_timeout_s, "Seconds a whole request (headers + body) may take to arrive (then 408)")
      ->capture_default_str();
  a->nonempty_flags.push_back(
      s.add_option("--canary-profile", a->canary_profile,
                   "Engine configuration JSON for the canary ({\"scheduler\":{...},\"threads\":N,\"matmul\":{...}})"));
  s.add_option("--canary-fraction", a->canary_fraction, "Share of requests routed to the canary engine, [0, 1]")
      ->capture_default_str();
  s.add_option("--shutdown-deadline", a->shutdown_deadline_s, "Seconds in-flight requests get after SIGTERM")
      ->capture_default_str();
  s.add_option("--device", a->device,
               "cpu, or cuda[:N]: run the model on CUDA device N (GPT-2 and Llama; f32, quantized files dequantized)")
      ->capture_default_str();
  s.add_flag("--log-requests", a->log_requests,
             "One line per answered request on stderr: UTC time, client, method, path, status, ms, engine");
  s.add_flag("--dequantize", a->dequantize,
             "Dequantize Q8_0 and K-quant matrices of a GGUF to f32 at load instead of running the quantized kernels");
  auto* i8 = s.add_flag("--int8-activations", a->int8_activations,
                        "K-quant and Q8_0 matrices: quantize activations to 8 bits per 32 values and take integer dot "
                        "products, as llama.cpp (the default; needs AVX2, else W8A32)");
  s.add_flag("--f32-activations", a->f32_activations,
             "K-quant and Q8_0 matrices: f32 activations against the exact dequantized weights (slower decode; docs/perf-history.md)")
      ->excludes(i8);
  s.add_flag("--no-profile", a->no_profile,
             "Do not load tuned profiles (rtx-tune: matmul parameters, scheduler knobs and threads) nor what rtx-evolve promoted");
  return [a, &common]() {
    using namespace rtx::serve;
    for (const CLI::Option* opt : a->nonempty_flags)
      if (opt->count() > 0 && opt->as<std::string>().find_first_not_of(" \t") == std::string::npos)
        rtx::throw_usage("is empty (or blank); leave the flag out for its default", opt->get_name());
    if (a->api_key_flag->count() > 0) {
      check_api_key(a->api_key, "--api-key", "it would turn authentication off", "leave out --api-key to run without one");
    } else if (const char* k = std::getenv("RTX_API_KEY")) {
      a->api_key = k;
      check_api_key(a->api_key, "RTX_API_KEY", "it would turn authentication off", "unset RTX_API_KEY to run without one");
    }
    // The served id goes into every response's JSON and the start-up line: valid UTF-8 without
    // control characters, said before the model loads (it had failed after, with a generic error).
    if (!a->served_name.empty()) {
      const bool ctl = std::any_of(a->served_name.begin(), a->served_name.end(),
                                   [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
      if (!utf8_valid(a->served_name) || ctl)
        rtx::throw_usage("must be valid UTF-8 without control characters (got '" + rtx::printable(a->served_name, rtx::Escape::NonAscii) + "')",
                         "--model-name");
    }
    if (a->port < 0 || a->port > 65535) rtx::throw_usage("must be in [0, 65535]", "--port");
    if (a->threads < 0) rtx::throw_usage("must be >= 0", "--threads");
    if (a->max_body < 1) rtx::throw_usage("must be >= 1 (0 would refuse every POST with 413)", "--max-body-bytes");
    const auto num = [](double x) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", x);
      return std::string(b);
    };
    const auto finite = [&](double x, const char* flag, const char* rule) {
      if (!std::isfinite(x)) rtx::throw_usage(std::string("must be a finite number ") + rule + " (got " + num(x) + ")", flag);
    };
    // The guard counts its deadlines in nanoseconds: 1e10 s overflowed and refused every request
    // at once; 1e-9 s refused every request too. Seconds in [0.001, 86400] (a day).
    const auto timeout = [&](double x, const char* flag) {
      if (!(x >= 0.001 && x <= 86400)) rtx::throw_usage("must be seconds in [0.001, 86400] (got " + num(x) + ")", flag);
    };
    timeout(a->header_timeout_s, "--header-timeout");
    timeout(a->receive_timeout_s, "--receive-timeout");
    finite(a->shutdown_deadline_s, "--shutdown-deadline", "of seconds >= 0");
    if (!(a->canary_fraction >= 0 && a->canary_fraction <= 1))
      rtx::throw_usage("must be in [0, 1] (got " + num(a->canary_fraction) + ")", "--canary-fraction");
    for (const auto& [key, opt] : a->sched_flags)
      if (key == "request_timeout_s" && opt->count() > 0) finite(a->sched.request_timeout_s, "--request-timeout", "of seconds > 0");
    const std::string db = common.db.empty() ? rtx::store::default_db_path() : common.db;
    // What the tuned profiles and the promoted configs did: said once the matmul lookup (which
    // needs the model's shapes) is done, tuned first, then the promoted configs over it.
    std::unique_ptr<TunedProfiles> tuned;
    std::string tuned_sched, tuned_matmul, promoted;
    if (!a->no_profile) {
      tuned = std::make_unique<TunedProfiles>(db);
      if (tuned->lookup) tuned_sched = apply_tuned(*a, *tuned->lookup);
      promoted = apply_promoted(*a, db);
    }
    // A budget below the prefill chunk caps the chunk unless the chunk was asked for explicitly
    // (--token-budget 64 alone is a valid request; both flags contradicting is still an error).
    for (const auto& [key, opt] : a->sched_flags)
      if (key == "prefill_chunk" && opt->count() == 0 && a->sched.prefill_chunk > a->sched.token_budget)
        a->sched.prefill_chunk = std::max(1, a->sched.token_budget);
    try {
      a->sched.validate();
    } catch (const rtx::Error& e) {  // name the flag that was given ("--max-batch"), not the profile key
      for (const auto& [key, opt] : a->sched_flags)
        if (key == e.where() && opt->count() > 0) rtx::throw_usage(e.message(), opt->get_name(), e.hint());
      throw;
    }
    if (a->sched.max_queue < 1) {  // the scheduler takes 0, but then refuses every request with 429, even idle
      std::string flag = "--max-queue";
      for (const auto& [key, opt] : a->sched_flags)
        if (key == "max_queue" && opt->count() == 0) flag = "max_queue (from a tuned or promoted config)";
      rtx::throw_usage("must be >= 1 (0 would answer every request 429, even when idle)", flag);
    }
    if (a->canary_fraction > 0 && a->canary_profile.empty())
      rtx::throw_usage("--canary-fraction needs --canary-profile", "--canary-fraction");
    if (!a->canary_profile.empty() && !(a->canary_fraction > 0) && !common.quiet)
      std::fprintf(stderr, "rtx-serve: warning: --canary-profile without --canary-fraction: the canary engine is "
                           "loaded but gets no requests (fraction 0)\n");
    check_host(a->host);
    check_model_path(a->model);
    LoadOptions lo;
    lo.threads = a->threads;
    lo.keep_quantized = !a->dequantize;
    lo.int8_activations = !a->f32_activations;
    lo.cuda_device = parse_device(a->device);
    auto model = load_model(a->model, lo);
    if (tuned && tuned->lookup && lo.cuda_device < 0) {  // the tuned matmul parameters are the CPU kernel's
      const int C = model->info().n_kv_head * model->info().head_dim;
      lo.matmul = profile_matmul(*tuned->lookup, a->sched.max_batch, 4 * C, C, tuned_matmul);
      if (lo.matmul.KC || lo.matmul.NR) model = load_model(a->model, lo);
    }
    if (!common.quiet && !a->no_profile) {  // --no-profile: nothing looked up, nothing to say
      if (!tuned->store_exists)  // one line for both: neither rtx-tune nor rtx-evolve wrote here yet
        std::fprintf(stderr, "rtx-serve: no store at %s: no rtx-tune profile or rtx-evolve promoted config to apply "
                             "(defaults)\n", db.c_str());
      else
        std::fprintf(stderr, "rtx-serve: %s\nrtx-serve: %s\n", tuned_line(db, *tuned, tuned_sched, tuned_matmul).c_str(),
                     promoted.c_str());
    }
    Scheduler sched(*model, a->sched);
    std::unique_ptr<Model> canary_model;
    std::unique_ptr<Scheduler> canary_sched;
    if (!a->canary_profile.empty()) {
      EngineProfile p = read_engine_profile(a->canary_profile, *a);
      canary_model = load_model(a->model, p.load);
      canary_sched = std::make_unique<Scheduler>(*canary_model, p.sched);
    }
    ServerConfig sc;
    sc.host = a->host;
    sc.port = a->port;
    sc.api_key = a->api_key;
    sc.max_body_bytes = a->max_body;
    sc.max_header_bytes = a->max_header_bytes;
    sc.header_timeout_s = a->header_timeout_s;
    sc.receive_timeout_s = a->receive_timeout_s;
    if (a->log_requests) sc.access_log = stderr;
    sc.model_name = a->served_name;
    if (!a->chat_template.empty()) {
      if (a->chat_template == "chatml" || a->chat_template == "llama2" || a->chat_template == "plain")
        sc.chat = chat_template(a->chat_template);
      else sc.chat = load_chat_template(a->chat_template);
    }
    sc.canary_fraction = a->canary_fraction;
    sc.shutdown_deadline_s = a->shutdown_deadline_s;
    Server server(Engine{model.get(), &sched, "main"},
                  Engine{canary_model.get(), canary_sched.get(), "canary"}, sc);
    int port = 0;
    try {
      port = server.bind();
    } catch (const rtx::Error& e) {
      if (e.category() != rtx::ErrorCategory::Environment) throw;
      throw_bind_error(a->host, a->port, e);
    }
    const ModelInfo& mi = model->info();
    const std::string served = a->served_name.empty() ? mi.name : a->served_name;
    if (!common.quiet)
      std::fprintf(stderr,
                   "rtx-serve: %s (%s, %d layers, vocab %d, context %d, weights %s %.1f MiB, %s) on http://%s:%d  max_batch %d, "
                   "KV %d blocks x %d tokens %s (%.1f MiB), prefix cache %s%s%s\n",
                   served.c_str(), mi.arch.c_str(), mi.n_layer, mi.vocab, mi.context, mi.weights.c_str(),
                   mi.param_bytes / 1048576.0, mi.device.c_str(), a->host.c_str(), port,
                   a->sched.max_batch, sched.stats().kv_blocks_total, a->sched.kv_block_tokens,
                   rtx::serve::kv_type_name(a->sched.kv_type), sched.stats().kv_bytes / 1048576.0, a->sched.prefix_cache ? "on" : "off",
                   canary_sched ? ", canary engine loaded" : "", a->api_key.empty() ? "" : ", API key required");
    if (common.json) std::printf("%s\n", nlohmann::json({{"port", port}, {"host", a->host}, {"model", served}}).dump().c_str());
    std::fflush(stdout);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    std::thread watcher([&server] {
      while (!g_signal) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      server.stop();
    });
    server.run();
    if (!g_signal) g_signal = SIGTERM;  // the listener failed: end the watcher
    watcher.join();
    if (!common.quiet) std::fprintf(stderr, "rtx-serve: stopped\n");
    return 0;
  };
}

}  // namespace rtx_serve
