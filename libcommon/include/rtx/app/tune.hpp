// rtx-tune logic: resolve tuning keys (one op or a bench pack), run a search per key with
// resume/replay through the store, write versioned profiles, show, export and import them.
// The tool (tools/rtx-tune) only binds flags to the *Command structs and calls run_*.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/kernels/registry.hpp"
#include "rtx/tune/records.hpp"
#include "rtx/tune/search.hpp"

namespace rtx::app::tune {

inline constexpr const char* kTuneRunSchema = "rtx.tune.v1";

/// `rtx-tune run`.
struct RunCommand {
  std::string pack;              ///< --pack FILE (every runnable case with a tunable variant)
  std::string op;                ///< --op NAME (with --shape)
  std::string shape;             ///< "M=64,N=64,K=64" or "64x64x64"
  std::string variant;           ///< "" : the backend's first variant with a non-empty space
  std::string dtype = "f32";
  std::string backend = "cpu";
  std::string strategy = "random";
  std::string budget = "200evals";
  uint64_t seed = 0;
  bool replay = false;           ///< answer from recorded trials only; measure and write nothing
  size_t min_samples = 5, max_samples = 30;
  double max_time = 0.25;        ///< s of sampling per configuration
  double abort_ratio = 1.5;      ///< early abort above this x the best median (0: never)
  bool json = false;
  bool quiet = false;
  bool progress = false;         ///< TTY progress line on stderr
  std::string db;
  std::vector<std::string> argv;
};
/// Tune every key; prints a summary on `err` and (json) one rtx.tune.v1 document on `out`:
/// {"schema","hardware","strategy","seed","budget","replay","keys":[{"key","op","variant",
/// "shape","dtype","backend","sku","evaluations","measured","reused","skipped","failed",
/// "aborted","seconds","stop_reason","best":{"params","median_s"}|null,"default":{"params",
/// "median_s"}|null,"speedup_vs_default","profile_version","curve"}]}.
/// Returns 0, or 1 when some key found no configuration that passed its check.
/// Throws rtx::Error (Usage: bad flags, --pack with --op; Input: unknown op/variant, bad
/// shape or pack; Environment: no GPU for cuda).
int run_run(const RunCommand& c, std::ostream& out, std::ostream& err);

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

/// The variant `rtx-tune run` tunes when --variant is not given: the first variant of `op`
/// for `backend` whose space has more than one point. Throws rtx::Error(Input) when none.
const kernels::Variant& default_tunable_variant(const kernels::OpDef& op, kernels::Backend backend);

}  // namespace rtx::app::tune
