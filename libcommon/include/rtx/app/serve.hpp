// rtx-serve's start-up policy (`rtx-serve run`): flag checks, which tuned profile and promoted
// config apply over which flags, thread sizing, model and canary loading, the server's
// configuration, bind errors. The tool (tools/rtx-serve) only binds flags into a RunCommand and
// calls run_run; tests call the pieces directly. The engine itself lives in rtx/serve.
#pragma once
#include <cstdio>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/kernels/matmul.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/scheduler.hpp"
#include "rtx/serve/server.hpp"

namespace rtx::store {
class Store;
}
namespace rtx::tune {
class ProfileLookup;
}

namespace rtx::app::serve {

/// A flag of the command line as the policy needs it: its name for messages ("--max-batch")
/// and whether the user gave it (a given flag beats a tuned profile and a promoted config).
struct Flag {
  std::string name;
  bool given = false;
};

/// A scheduler flag: `key` is its SchedulerConfig JSON key ("max_batch").
struct SchedFlag {
  std::string key;
  Flag flag;
};

/// `rtx-serve run`: the flags, bound by the tool. Defaults are the flags' defaults.
struct RunCommand {
  std::string model;                 ///< --model: a GGUF or an rtx checkpoint (.safetensors)
  std::string host = "127.0.0.1";    ///< --host
  Flag host_flag{"--host"};
  int port = 8080;                   ///< --port, [0, 65535]; 0: any free port
  int threads = 0;                   ///< --threads (0: OpenMP's default); a tuned/promoted value may replace it
  Flag threads_flag{"--threads"};
  std::string api_key;               ///< --api-key (or RTX_API_KEY, see check_run_command)
  Flag api_key_flag{"--api-key"};
  std::string served_name;           ///< --model-name
  Flag served_name_flag{"--model-name"};
  std::string chat_template;         ///< --chat-template: chatml | llama2 | plain | a JSON file
  Flag chat_template_flag{"--chat-template"};
  std::string canary_profile;        ///< --canary-profile: an engine profile file (read_engine_profile)
  Flag canary_profile_flag{"--canary-profile"};
  double canary_fraction = 0;        ///< --canary-fraction, [0, 1]
  double shutdown_deadline_s = 10;   ///< --shutdown-deadline, s
  size_t max_body = 1 << 20;         ///< --max-body-bytes, B
  size_t max_header_bytes = 64 << 10;  ///< --max-header-bytes, B
  double header_timeout_s = 10;      ///< --header-timeout, s in [0.001, 86400]
  double receive_timeout_s = 60;     ///< --receive-timeout, s in [0.001, 86400]
  std::string device = "cpu";        ///< --device: cpu | cuda[:N]
  bool no_profile = false;           ///< --no-profile: neither tuned profiles nor promoted configs
  bool log_requests = false;         ///< --log-requests: access log on stderr
  bool dequantize = false;           ///< --dequantize
  bool f32_activations = false;      ///< --f32-activations (int8 activations otherwise)
  rtx::serve::SchedulerConfig sched; ///< the scheduler flags' values
  /// The scheduler flags by SchedulerConfig key: a flag given on the command line beats the
  /// promoted config, which beats the tuned profile, which beats the built-in default.
  std::vector<SchedFlag> sched_flags;
  std::string db;                    ///< the store (--db / RTX_HOME); "" = store::default_db_path()
  bool json = false;                 ///< --json: {"port","host","model"} on stdout once listening
  bool quiet = false;                ///< -q: no start-up lines
};

/// True when `key`'s scheduler flag was given on the command line.
bool sched_given(const RunCommand& c, const std::string& key);

/// Refuses an API key that cannot work, for `run` (the server's key) and `bench` (the one it
/// sends): empty (`empty_means` says what that would do, e.g. "it would turn authentication
/// off"), or with whitespace (cpp-httplib trims a header's surrounding whitespace, so it could
/// never match) or a control byte (not sendable in an Authorization header). Throws
/// rtx::Error(Usage) (exit 2) naming `where`, the flag or the variable.
void check_api_key(const std::string& key, const std::string& where, const std::string& empty_means,
                   const std::string& how_to_omit);

/// The flag checks that need no model nor store, in this order: a given --host, --model-name,
/// --chat-template or --canary-profile that is empty or blank; the API key (--api-key when
/// given, else `env_api_key`, RTX_API_KEY, null when unset; sets c.api_key); --model-name
/// (UTF-8, no control characters); --port in [0, 65535]; --threads >= 0; --max-body-bytes >= 1;
/// the header and receive timeouts (seconds in [0.001, 86400]); --shutdown-deadline finite;
/// --canary-fraction in [0, 1]; a given --request-timeout finite. Error(Usage) naming the flag
/// (or RTX_API_KEY).
void check_run_command(RunCommand& c, const char* env_api_key);

/// Refuses a --host that does not parse as an address or resolve as a name (bind() would only
/// say "in use, or not permitted"). Error(Usage) on --host.
void check_host(const std::string& host);

/// Refuses a --model that is a directory or not a regular file (a device, FIFO), which the
/// loaders would misreport. A path that does not exist passes (the loader says it cannot open
/// it). Error(Input) naming the path.
void check_model_path(const std::string& path);

/// Throws why `host`:`port` could not be bound, as an environment error (exit 3): the server's
/// bind reports only that it failed, so the address is bound again on a probe socket (with the
/// server's SO_REUSEADDR) to read bind(2)'s errno: "cannot bind 192.0.2.1:8080: Cannot assign
/// requested address (not an address of this machine)". `where` is the flag to change: --host
/// for an address this machine does not have, --port for a port in use or reserved. `fallback`
/// (the server's error) is thrown as it is when the probe binds (the port came free meanwhile).
[[noreturn]] void throw_bind_error(const std::string& host, int port, const rtx::Error& fallback);

/// The profiles of a store, opened once for both of rtx-serve's lookups (the scheduler's before
/// the model loads, the matmul's after); `error` says why not when the store exists but cannot
/// be read.
struct TunedProfiles {
  bool store_exists = false;
  std::unique_ptr<rtx::store::Store> store;
  std::unique_ptr<rtx::tune::ProfileLookup> lookup;
  std::string error;
  explicit TunedProfiles(const std::string& db);
  ~TunedProfiles();
};

/// Apply rtx-tune's scheduler profile for this model file and SKU (the entry nearest to the
/// default batch workload) under the flags given explicitly; the promoted configs, applied
/// after, override it (they passed gates; a tuned profile is one measurement). Also sets
/// c.threads from the profile unless --threads was given. Never throws: a profile that is not
/// valid here is reported and ignored. Returns what it did, for the start-up line:
/// "max_batch=8,... from KEY (flags kept: max_batch)", "none for model 'X' (defaults)" or
/// "not applied (why)".
std::string apply_tuned(RunCommand& c, rtx::tune::ProfileLookup& lookup);

/// Apply the configs rtx-evolve promoted for `sku` (scheduler, parallelism) in store `db` under
/// the flags given explicitly. A promoted value that is not valid here is ignored and said: the
/// store never stops the server. Returns the start-up line ("promoted configs ...").
std::string apply_promoted(RunCommand& c, const std::string& db, const std::string& sku);
/// As above for this machine's SKU (telemetry::sku_key("cpu")); "promoted configs: no SKU
/// (why); defaults" when it cannot be read.
std::string apply_promoted(RunCommand& c, const std::string& db);

/// rtx-tune's matmul parameters (the cpu.blocked entry nearest to a decode-sized matmul of the
/// model, M x N x K), or the defaults. `said` gets what was used, for the start-up line:
/// "KC=256,NR=16 from KEY", "none for this SKU (defaults)", "KEY ignored (why; defaults)" (not
/// valid on this CPU's ISA) or "not read (why; defaults)". Never throws.
rtx::kernels::MatmulParams profile_matmul(rtx::tune::ProfileLookup& lookup, int M, int N, int K, std::string& said);

/// The one start-up line about rtx-tune's profiles in an existing store: which store and SKU
/// they were looked up for, and what the scheduler and matmul lookups changed (their texts from
/// apply_tuned and profile_matmul; empty matmul: not looked up, the model runs on a CUDA device).
std::string tuned_line(const std::string& db, const TunedProfiles& tp, const std::string& scheduler,
                       const std::string& matmul);

/// The scheduler configuration after the tuned profile and promoted config: caps
/// --prefill-chunk at --token-budget unless the chunk flag was given, validates it (an error
/// names the flag that was given, "--max-batch", rather than the profile key), and refuses
/// max_queue < 1 (every request would get 429). Error(Usage).
void finish_scheduler_config(RunCommand& c);

/// The canary's engine profile (--canary-profile FILE): {"scheduler": {...SchedulerConfig
/// keys...}, "threads": N in [0, 4096], "matmul": {"MC","NC","KC","MR","NR" in [0, 16384]}},
/// every key optional (and "schema" ignored), over the main engine's settings in `base`.
/// Error(Input) naming the file and key for an unreadable file, bad JSON or an unknown key.
struct EngineProfile {
  rtx::serve::SchedulerConfig sched;
  rtx::serve::LoadOptions load;
};
EngineProfile read_engine_profile(const std::string& path, const RunCommand& base);

/// The load options of the main engine from the flags (threads, quantized kernels, device).
rtx::serve::LoadOptions load_options(const RunCommand& c);

/// The HTTP server's configuration from the flags (the chat template resolved: a built-in
/// name or a JSON template file). `access_log` is where --log-requests writes (the tool's
/// stderr).
rtx::serve::ServerConfig server_config(const RunCommand& c, std::FILE* access_log);

/// The main engine, and the canary's when --canary-profile is given.
struct Engines {
  std::unique_ptr<rtx::serve::Model> model;
  std::unique_ptr<rtx::serve::Scheduler> sched;
  std::unique_ptr<rtx::serve::Model> canary_model;
  std::unique_ptr<rtx::serve::Scheduler> canary_sched;
};

/// What the tool plugs into run_run: `on_listening` runs once the server is bound and the
/// start-up lines are out (rtx-serve installs its SIGTERM/SIGINT handlers there, so a signal
/// during loading still ends the process at once); `should_stop` is polled every 50 ms while
/// serving, true stops the server gracefully. Either may be empty.
struct RunHooks {
  std::function<void()> on_listening;
  std::function<bool()> should_stop;
};

/// `rtx-serve run` from flags to a stopped server: check_run_command (RTX_API_KEY from the
/// environment), the tuned profile and promoted config (unless no_profile), the scheduler
/// config, --host and --model checks, the model (loaded again with the tuned matmul parameters
/// when they change the packing), the canary, bind (a failure explained by throw_bind_error),
/// the start-up lines on `err`, {"port","host","model"} on `out` with json; then serves until
/// hooks.should_stop says so and stops gracefully (shutdown_deadline_s for requests in flight).
/// Returns 0. Errors: Usage/Input for flags and files, Environment for bind and devices.
int run_run(RunCommand& c, std::ostream& out, std::ostream& err, const RunHooks& hooks);

}  // namespace rtx::app::serve
