// rtx-serve run's start-up policy (rtx/app/serve.hpp): what the flags, rtx-tune's profiles and
// rtx-evolve's promoted configs decide, in that order of precedence, and the server's start.
// Not the engine (serve/), not the flags' declarations (tools/rtx-serve/cmd_run.cpp).
#include "rtx/app/serve.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "rtx/core/printable.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/serve/openai.hpp"
#include "rtx/serve/text.hpp"
#include "rtx/serve/tuning.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/lookup.hpp"

namespace rtx::app::serve {

namespace {

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

/// printf into a std::string (the start-up line has names of any length).
std::string strf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

}  // namespace

bool sched_given(const RunCommand& c, const std::string& key) {
  for (const auto& f : c.sched_flags)
    if (f.key == key && f.flag.given) return true;
  return false;
}

void check_api_key(const std::string& key, const std::string& where, const std::string& empty_means,
                   const std::string& how_to_omit) {
  if (key.empty()) rtx::throw_usage("empty API key: " + empty_means + "; " + how_to_omit, where);
  for (const char c : key)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      rtx::throw_usage("the API key has whitespace or a control byte, which a client cannot send in an Authorization "
                       "header",
                       where, "use printable ASCII without spaces");
}

void check_run_command(RunCommand& c, const char* env_api_key) {
  const std::pair<const Flag*, const std::string*> nonempty[] = {
      {&c.host_flag, &c.host}, {&c.served_name_flag, &c.served_name},
      {&c.chat_template_flag, &c.chat_template}, {&c.canary_profile_flag, &c.canary_profile}};
  for (const auto& [flag, value] : nonempty)
    if (flag->given && value->find_first_not_of(" \t") == std::string::npos)
      rtx::throw_usage("is empty (or blank); leave the flag out for its default", flag->name);
  if (c.api_key_flag.given) {
    check_api_key(c.api_key, c.api_key_flag.name, "it would turn authentication off", "leave out --api-key to run without one");
  } else if (env_api_key) {
    c.api_key = env_api_key;
    check_api_key(c.api_key, "RTX_API_KEY", "it would turn authentication off", "unset RTX_API_KEY to run without one");
  }
  // The served id goes into every response's JSON and the start-up line: valid UTF-8 without
  // control characters, said before the model loads (it had failed after, with a generic error).
  if (!c.served_name.empty()) {
    const bool ctl = std::any_of(c.served_name.begin(), c.served_name.end(),
                                 [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; });
    if (!rtx::serve::utf8_valid(c.served_name) || ctl)
      rtx::throw_usage("must be valid UTF-8 without control characters (got '" +
                           rtx::printable(c.served_name, rtx::Escape::NonAscii) + "')",
                       "--model-name");
  }
  if (c.port < 0 || c.port > 65535) rtx::throw_usage("must be in [0, 65535]", "--port");
  if (c.threads < 0) rtx::throw_usage("must be >= 0", "--threads");
  if (c.max_body < 1) rtx::throw_usage("must be >= 1 (0 would refuse every POST with 413)", "--max-body-bytes");
  const auto finite = [&](double x, const char* flag, const char* rule) {
    if (!std::isfinite(x)) rtx::throw_usage(std::string("must be a finite number ") + rule + " (got " + num(x) + ")", flag);
  };
  // The guard counts its deadlines in nanoseconds: 1e10 s overflowed and refused every request
  // at once; 1e-9 s refused every request too. Seconds in [0.001, 86400] (a day).
  const auto timeout = [&](double x, const char* flag) {
    if (!(x >= 0.001 && x <= 86400)) rtx::throw_usage("must be seconds in [0.001, 86400] (got " + num(x) + ")", flag);
  };
  timeout(c.header_timeout_s, "--header-timeout");
  timeout(c.receive_timeout_s, "--receive-timeout");
  finite(c.shutdown_deadline_s, "--shutdown-deadline", "of seconds >= 0");
  if (!(c.canary_fraction >= 0 && c.canary_fraction <= 1))
    rtx::throw_usage("must be in [0, 1] (got " + num(c.canary_fraction) + ")", "--canary-fraction");
  if (sched_given(c, "request_timeout_s")) finite(c.sched.request_timeout_s, "--request-timeout", "of seconds > 0");
}

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

void check_model_path(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return;  // the loader says it cannot open it
  if (std::filesystem::is_directory(st))
    rtx::throw_input("is a directory, not a model file", path, "give the .gguf or .safetensors file inside it (--model)");
  if (!std::filesystem::is_regular_file(st))
    rtx::throw_input("is not a regular file (a device, FIFO or socket)", path, "give a .gguf or .safetensors file (--model)");
}

TunedProfiles::TunedProfiles(const std::string& db) : store_exists(std::filesystem::exists(db)) {
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
TunedProfiles::~TunedProfiles() = default;

std::string apply_promoted(RunCommand& c, const std::string& db) {
  std::string sku;
  try {
    sku = rtx::telemetry::sku_key("cpu");
  } catch (const rtx::Error& e) {
    return std::string("promoted configs: no SKU (") + e.what() + "); defaults";
  }
  return apply_promoted(c, db, sku);
}

std::string apply_promoted(RunCommand& c, const std::string& db, const std::string& sku) {
  const auto pc = rtx::evolve::promoted_configs(db, sku);
  std::map<std::string, std::string> outcome;
  if (const auto* sc = pc.get("scheduler")) {
    const std::string where = "promoted scheduler config v" + std::to_string(pc.by_domain.at("scheduler").version);
    try {
      if (!sc->is_object()) rtx::throw_input(where + " is not a JSON object", "scheduler");
      nlohmann::json merged = c.sched.to_json();
      for (const auto& item : sc->items()) merged[item.key()] = item.value();
      const nlohmann::json given = c.sched.to_json();
      for (const auto& f : c.sched_flags)
        if (f.flag.given) merged[f.key] = given[f.key];
      rtx::serve::SchedulerConfig cfg = rtx::serve::SchedulerConfig::from_json(merged, where);
      cfg.validate();
      c.sched = cfg;
      outcome["scheduler"] = "";
    } catch (const rtx::Error& e) {
      outcome["scheduler"] = std::string("invalid here: ") + e.what();
    }
  }
  if (const auto* pj = pc.get("parallelism")) {
    std::string why;
    if (c.threads_flag.given) outcome["parallelism"] = c.threads_flag.name + " given";
    else if (const auto t = rtx::evolve::promoted_threads(*pj, 4096, &why)) {
      c.threads = *t;
      outcome["parallelism"] = "";
    } else outcome["parallelism"] = why;
  }
  return rtx::evolve::describe(pc, outcome);
}

std::string apply_tuned(RunCommand& c, rtx::tune::ProfileLookup& lookup) {
  try {
    const std::string stem = rtx::serve::tune_model_name(c.model);
    const auto ans = lookup.find(rtx::serve::kSchedulerTuneOp, stem, rtx::kernels::Backend::CPU,
                                 rtx::serve::BatchWorkload{}.shape(), rtx::DType::F32);
    if (!ans.params) return "none for model '" + stem + "' (defaults)";
    const nlohmann::json given = c.sched.to_json();
    nlohmann::json tuned = rtx::serve::scheduler_config_from(*ans.params, c.sched).to_json();
    std::string kept;
    for (const auto& f : c.sched_flags)
      if (f.flag.given) tuned[f.key] = given[f.key], kept += " " + f.key;
    rtx::serve::SchedulerConfig cfg = rtx::serve::SchedulerConfig::from_json(tuned, "tuned profile " + ans.key);
    cfg.validate();
    c.sched = cfg;
    const int t = rtx::serve::tuned_threads(*ans.params);
    if (t > 0 && !c.threads_flag.given) c.threads = t;
    else if (t > 0) kept += " threads";
    return rtx::kernels::params_to_string(*ans.params) + " from " + ans.key +
           (kept.empty() ? "" : " (flags kept:" + kept + ")");
  } catch (const rtx::Error& e) {
    return std::string("not applied (") + e.what() + ")";
  }
}

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

void finish_scheduler_config(RunCommand& c) {
  // A budget below the prefill chunk caps the chunk unless the chunk was asked for explicitly
  // (--token-budget 64 alone is a valid request; both flags contradicting is still an error).
  if (!sched_given(c, "prefill_chunk") && c.sched.prefill_chunk > c.sched.token_budget)
    c.sched.prefill_chunk = std::max(1, c.sched.token_budget);
  try {
    c.sched.validate();
  } catch (const rtx::Error& e) {  // name the flag that was given ("--max-batch"), not the profile key
    for (const auto& f : c.sched_flags)
      if (f.key == e.where() && f.flag.given) rtx::throw_usage(e.message(), f.flag.name, e.hint());
    throw;
  }
  if (c.sched.max_queue < 1) {  // the scheduler takes 0, but then refuses every request with 429, even idle
    std::string flag = "--max-queue";
    for (const auto& f : c.sched_flags)
      if (f.key == "max_queue" && !f.flag.given) flag = "max_queue (from a tuned or promoted config)";
    rtx::throw_usage("must be >= 1 (0 would answer every request 429, even when idle)", flag);
  }
}

rtx::serve::LoadOptions load_options(const RunCommand& c) {
  rtx::serve::LoadOptions lo;
  lo.threads = c.threads;
  lo.keep_quantized = !c.dequantize;
  lo.int8_activations = !c.f32_activations;
  lo.cuda_device = rtx::serve::parse_device(c.device);
  return lo;
}

EngineProfile read_engine_profile(const std::string& path, const RunCommand& base) {
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
  p.load = load_options(base);
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

rtx::serve::ServerConfig server_config(const RunCommand& c, std::FILE* access_log) {
  rtx::serve::ServerConfig sc;
  sc.host = c.host;
  sc.port = c.port;
  sc.api_key = c.api_key;
  sc.max_body_bytes = c.max_body;
  sc.max_header_bytes = c.max_header_bytes;
  sc.header_timeout_s = c.header_timeout_s;
  sc.receive_timeout_s = c.receive_timeout_s;
  if (c.log_requests) sc.access_log = access_log;
  sc.model_name = c.served_name;
  if (!c.chat_template.empty()) {
    if (c.chat_template == "chatml" || c.chat_template == "llama2" || c.chat_template == "plain")
      sc.chat = rtx::serve::chat_template(c.chat_template);
    else sc.chat = rtx::serve::load_chat_template(c.chat_template);
  }
  sc.canary_fraction = c.canary_fraction;
  sc.shutdown_deadline_s = c.shutdown_deadline_s;
  return sc;
}

int run_run(RunCommand& c, std::ostream& out, std::ostream& err, const RunHooks& hooks) {
  using namespace rtx::serve;
  check_run_command(c, std::getenv("RTX_API_KEY"));
  const std::string db = c.db.empty() ? rtx::store::default_db_path() : c.db;
  // What the tuned profiles and the promoted configs did: said once the matmul lookup (which
  // needs the model's shapes) is done, tuned first, then the promoted configs over it.
  std::unique_ptr<TunedProfiles> tuned;
  std::string tuned_sched, tuned_matmul, promoted;
  if (!c.no_profile) {
    tuned = std::make_unique<TunedProfiles>(db);
    if (tuned->lookup) tuned_sched = apply_tuned(c, *tuned->lookup);
    promoted = apply_promoted(c, db);
  }
  finish_scheduler_config(c);
  if (c.canary_fraction > 0 && c.canary_profile.empty())
    rtx::throw_usage("--canary-fraction needs --canary-profile", "--canary-fraction");
  if (!c.canary_profile.empty() && !(c.canary_fraction > 0) && !c.quiet)
    err << "rtx-serve: warning: --canary-profile without --canary-fraction: the canary engine is "
           "loaded but gets no requests (fraction 0)\n";
  check_host(c.host);
  check_model_path(c.model);
  LoadOptions lo = load_options(c);
  Engines e;
  e.model = load_model(c.model, lo);
  if (tuned && tuned->lookup && lo.cuda_device < 0) {  // the tuned matmul parameters are the CPU kernel's
    const int C = e.model->info().n_kv_head * e.model->info().head_dim;
    lo.matmul = profile_matmul(*tuned->lookup, c.sched.max_batch, 4 * C, C, tuned_matmul);
    if (lo.matmul.KC || lo.matmul.NR) e.model = load_model(c.model, lo);
  }
  if (!c.quiet && !c.no_profile) {  // --no-profile: nothing looked up, nothing to say
    if (!tuned->store_exists)  // one line for both: neither rtx-tune nor rtx-evolve wrote here yet
      err << "rtx-serve: no store at " << db
          << ": no rtx-tune profile or rtx-evolve promoted config to apply (defaults)\n";
    else
      err << "rtx-serve: " << tuned_line(db, *tuned, tuned_sched, tuned_matmul) << "\nrtx-serve: " << promoted << "\n";
  }
  e.sched = std::make_unique<Scheduler>(*e.model, c.sched);
  if (!c.canary_profile.empty()) {
    EngineProfile p = read_engine_profile(c.canary_profile, c);
    e.canary_model = load_model(c.model, p.load);
    e.canary_sched = std::make_unique<Scheduler>(*e.canary_model, p.sched);
  }
  Server server(Engine{e.model.get(), e.sched.get(), "main"},
                Engine{e.canary_model.get(), e.canary_sched.get(), "canary"}, server_config(c, stderr));
  int port = 0;
  try {
    port = server.bind();
  } catch (const rtx::Error& ex) {
    if (ex.category() != rtx::ErrorCategory::Environment) throw;
    throw_bind_error(c.host, c.port, ex);
  }
  const ModelInfo& mi = e.model->info();
  const std::string served = c.served_name.empty() ? mi.name : c.served_name;
  if (!c.quiet)
    err << strf("rtx-serve: %s (%s, %d layers, vocab %d, context %d, weights %s %.1f MiB, %s) on http://%s:%d  max_batch %d, "
                "KV %d blocks x %d tokens %s (%.1f MiB), prefix cache %s%s%s\n",
                served.c_str(), mi.arch.c_str(), mi.n_layer, mi.vocab, mi.context, mi.weights.c_str(),
                mi.param_bytes / 1048576.0, mi.device.c_str(), c.host.c_str(), port, c.sched.max_batch,
                e.sched->stats().kv_blocks_total, c.sched.kv_block_tokens, kv_type_name(c.sched.kv_type),
                e.sched->stats().kv_bytes / 1048576.0, c.sched.prefix_cache ? "on" : "off",
                e.canary_sched ? ", canary engine loaded" : "", c.api_key.empty() ? "" : ", API key required")
        << std::flush;
  if (c.json) out << nlohmann::json({{"port", port}, {"host", c.host}, {"model", served}}).dump() << "\n";
  out << std::flush;
  if (hooks.on_listening) hooks.on_listening();
  std::atomic<bool> ended{false};
  std::thread watcher([&] {
    while (!ended && !(hooks.should_stop && hooks.should_stop()))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // A stop() before run()'s accept loop starts would be lost (the listener is not open yet,
    // and run() would then serve forever): wait for it (or for run() to have failed).
    while (!ended && !server.running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    server.stop();
  });
  server.run();
  ended = true;  // the listener failed (or stop() came): end the watcher
  watcher.join();
  if (!c.quiet) err << "rtx-serve: stopped\n";
  return 0;
}

}  // namespace rtx::app::serve
