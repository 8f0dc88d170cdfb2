// rtx-tune logic: resolve tuning keys (one op or a bench pack), run a search per key with
// resume/replay through the store, write versioned profiles, show, export and import them.
// The tool (tools/rtx-tune) only binds flags to the *Command structs and calls run_*.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/app/bench.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/tune/records.hpp"
#include "rtx/tune/search.hpp"

namespace rtx::app::tune {

inline constexpr const char* kTuneRunSchema = "rtx.tune.v1";

/// What to tune: a bench pack's cases or one op at one shape (the tuning keys).
struct Target {
  std::string pack;              ///< --pack FILE (every runnable case with a tunable variant)
  std::string op;                ///< --op NAME (with --shape)
  std::string shape;             ///< "M=64,N=64,K=64" or "64x64x64"
  std::string variant;           ///< "" : the backend's first variant with a non-empty space
  std::string dtype = "f32";
  std::string backend = "cpu";
  /// --serve MODEL: tune rtx-serve's scheduler knobs and forward threads for this model file
  /// (serve::scheduler_space) instead of a kernel; key op "serve_scheduler", variant the
  /// model's file stem, shape the workload.
  std::string serve;
  std::string workload = "requests=16,prompt=32,gen=32";  ///< --workload (with --serve)
};

/// `rtx-tune run`.
struct RunCommand : Target {
  std::string strategy = "random";
  std::string budget = "200evals";
  uint64_t seed = 0;
  bool replay = false;           ///< answer from recorded trials only; measure and write nothing
  size_t min_samples = 5, max_samples = 30;
  double max_time = 0.25;        ///< s of sampling per configuration
  double abort_ratio = 1.5;      ///< early abort above this x the best median (0: never)
  size_t confirm = 15;           ///< interleaved A/B samples of the winner vs the defaults (0: off)
  bool json = false;
  bool quiet = false;
  bool progress = false;         ///< TTY progress line on stderr
  /// Busy-host trials may become the best (--include-busy); by default they never do, so a key
  /// measured only on a busy host gets no profile.
  bool include_busy = false;
  std::string db;
  std::vector<std::string> argv;
  /// Reads the host-contention signals around each trial (tune::HostJudgedObjective); empty:
  /// app::bench::sample_host. Tests inject busy readings here.
  std::function<app::bench::HostSample()> host_sampler;
  /// Ctrl-C (rtx::cli::InterruptGuard::requested in the tool): asked before every trial and
  /// before the confirmation; true stops the run there. May be null.
  std::function<bool()> should_stop;
};
/// Tune every key; prints a summary on `err` and (json) one rtx.tune.v1 document on `out`:
/// {"schema","hardware","strategy","seed","budget","replay","keys":[{"key","op","variant",
/// "shape","dtype","backend","sku","evaluations","measured","reused","skipped","failed",
/// "aborted","contended","contention_reason","seconds","stop_reason","best":{"params","median_s"}|null,
/// "default":{"params","median_s"}|null,"speedup_vs_default","search_speedup","confirm":{"n",
/// "default_median_s","best_median_s","speedup","ci","p","verdict","host":{"contended","reason",
/// "judged_on"}}|null,"profile_params","profile_version","curve"}]}.
/// Every measured trial is judged for host contention (tune::HostJudgedObjective, rtx-bench's
/// per-window rule) and stored with the verdict (tuning_trials.contended). "contended" counts
/// the Ok trials measured on a busy host: they are re-measured by the next run rather than
/// reused, and never chosen as best unless include_busy; "contention_reason" is the first one's
/// evidence. A default measured on a busy host is no baseline either (default is null then).
/// speedup_vs_default is the confirmation's (default and winner re-measured interleaved, ABBA,
/// judged as rtx-bench compare does with a 2% threshold) when there was one, else the search's
/// sequential ratio (search_speedup). A winner the confirmation finds slower is not saved:
/// the defaults become the profile.
/// Interrupted (should_stop): the key being searched ends with stop_reason "interrupted", gets no
/// confirmation and no profile (a partial search decides nothing), later keys are not started,
/// the run is recorded as "interrupted", the JSON has "interrupted": true, and the return is 130.
/// Every trial measured so far is in the store (one transaction each), so the same command
/// again reuses them (RecordingObjective) and measures only the rest.
/// Returns 0, or 1 when some key found no configuration that passed its check.
/// Throws rtx::Error (Usage: bad flags, --pack with --op; Input: unknown op/variant, bad
/// shape or pack; Environment: no GPU for cuda).
int run_run(const RunCommand& c, std::ostream& out, std::ostream& err);

inline constexpr const char* kEfficiencySchema = "rtx.tune.efficiency.v1";

/// `rtx-tune efficiency`: replay strategies over seeds against each key's recorded grid.
struct EfficiencyCommand : Target {
  std::string strategies = "grid,random,halving,tpe";  ///< comma list
  size_t seeds = 20;
  uint64_t seed = 0;             ///< first seed
  std::string within = "3%";     ///< "3%" or "0.03"
  size_t budget = 0;             ///< evaluations per replay; 0: the recorded grid's
  bool default_first = false;
  bool partial = false;          ///< allow a grid with unrecorded valid points
  size_t min_samples = 5, max_samples = 30;
  double abort_ratio = 1.5;
  std::string format = "table";  ///< table | json | csv (--json: json)
  std::string db;
};
/// Prints, per key, the grid's coverage and optimum, and per strategy the evaluations to come
/// within the target (mean, median, worst over seeds; share of the grid) and the mean
/// best-so-far ratio at 1%, 5%, 10%, 25%, 50% and 100% of the budget.
/// json: {"schema": "rtx.tune.efficiency.v1", "hardware", "within", "seeds", "first_seed", "keys": [{"key",
/// "grid_points", "valid_points", "recorded", "ok", "failed", "aborted", "optimum": {"params",
/// "median_s"}, "worst_ratio", "default_ratio", "within_target", "budget", "best_strategy",
/// "goal_met", "strategies": [{"strategy", "reached", "mean_evals", "median_evals", "worst_evals",
/// "mean_evals_pct_of_grid", "evals_to_target" (per seed, null: missed), "mean_ratio",
/// "worst_ratio"}]}]}. csv: key,strategy,evaluations,mean_ratio,worst_ratio (one row per
/// evaluation count). goal_met: the best strategy reached the target on every seed with a mean
/// <= 25% of the grid's evaluations. Returns 0. Throws rtx::Error(Usage) for bad
/// flags, rtx::Error(Input) when a key has no (or a partial) recorded grid.
int run_efficiency(const EfficiencyCommand& c, std::ostream& out, std::ostream& err);

/// `rtx-tune show [--stats]`.
struct ShowCommand {
  bool stats = false;   ///< also trial counts per key and the lookup outcome of each tuned key
  bool json = false;
  std::string db;
};
int run_show(const ShowCommand& c, std::ostream& out, std::ostream& err);

/// `rtx-tune export -o FILE`.
struct ExportCommand {
  std::string out = "-";
  bool json = false;
  std::string db;
};
int run_export(const ExportCommand& c, std::ostream& out, std::ostream& err);

/// `rtx-tune import FILE [--force]`.
struct ImportCommand {
  std::string file;
  bool force = false;
  bool json = false;
  std::string db;
};
int run_import(const ImportCommand& c, std::ostream& out, std::ostream& err);

/// The registry op that `--op name` means: the op of that exact name; else the one op whose
/// name starts with `name` (an unambiguous prefix, e.g. "layernorm_f" -> layernorm_forward), said
/// on `err` ("rtx-tune: --op 'layernorm_f' taken as layernorm_forward"). Throws rtx::Error(Usage)
/// naming --op when several ops start with it (listing them) or none does (listing the closest
/// by edit distance, rtx::close_matches, else every op).
const kernels::OpDef& resolve_op(const kernels::Registry& reg, const std::string& name, std::ostream& err);

/// The variant `rtx-tune run` tunes when --variant is not given: the first variant of `op`
/// for `backend` whose space has more than one point. Throws rtx::Error(Input) when none.
const kernels::Variant& default_tunable_variant(const kernels::OpDef& op, kernels::Backend backend);

}  // namespace rtx::app::tune
