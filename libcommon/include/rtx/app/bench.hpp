// rtx-bench's commands (run, compare, list, show) over the measuring engine (rtx/measure/:
// packs, runner, host evidence, artifacts, compare). The tool (tools/rtx-bench) only binds
// flags to the *Command structs and calls run_*.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "rtx/measure/measure.hpp"

namespace rtx::app::bench {

// The engine's names (rtx::measure) are visible here too, so tool code reads app::bench::X.
using namespace rtx::measure;

// ---- commands (what the tool's subcommands call) ----------------------------------------------

/// `rtx-bench run`.
struct RunCommand {
  std::string pack;
  std::string out;          ///< -o FILE or "-" (stdout); "" none
  std::string backend = "cpu";
  std::string filter;
  uint64_t seed = 0;
  /// Runner flags as given (unset: the pack's defaults, else RunnerOptions'); checked by
  /// runner_option_problem in run_run, rtx::Error(Usage) naming the flag.
  std::optional<double> max_rel_ci, max_time, min_samples, max_samples, warmup;
  /// --rounds R (unset: the pack's default, else 1): with R > 1 the run re-executes this
  /// program (/proc/self/exe) R times with `--rounds 1 --no-store -q -o TMP` and merges the
  /// R artifacts (merge_rounds). Range [1, 200], rtx::Error(Usage) naming --rounds.
  std::optional<double> rounds;
  std::string self_exe = "/proc/self/exe";  ///< program the rounds re-execute (the rtx-bench binary)
  /// --baseline-exe EXE --baseline-out FILE (with --rounds R >= 2): also run another build's
  /// rtx-bench (or this one, for an A/A) with the same arguments, its rounds alternating with
  /// this program's in ABBA order (A B, B A, A B, ...) so that drift of the machine over the run
  /// falls on both sides alike, as rtx-evolve measures baseline and candidate. Its merged
  /// artifact goes to baseline_out; compare it with this run's: `compare FILE OUT`.
  std::string baseline_exe, baseline_out;
  bool cold = false, interleave = false, pin = false, strict = false;
  int threads = 0;          ///< 0: the OpenMP default
  bool json = false;        ///< artifact JSON on stdout
  bool quiet = false;
  std::string db;           ///< store path flag ("" default store)
  bool no_store = false;    ///< do not record in the store
  std::string events;       ///< --events FILE (else $RTX_EVENTS): one bench.result event per case
  std::vector<std::string> argv;  ///< command line, recorded with the run
};
/// Run a pack, print the table on `err`, write the artifact (`out`, or `-o -` / --json to
/// `out_stream`), record run + artifact in the store, publish one telemetry event (topic
/// bench.result) per case. Returns 0, or 1 when a case failed its correctness check.
/// Throws rtx::Error (2 input/usage: also a runner option out of range, or `out` naming
/// the pack file itself, checked before anything runs or is written; 3 environment).
int run_run(const RunCommand& c, const kernels::Registry& reg, std::ostream& out_stream, std::ostream& err);

/// `rtx-bench compare BASE NEW`.
struct CompareCommand {
  std::string base, fresh;
  std::string threshold = "5%";
  std::string format = "table";
  bool json = false;        ///< same as --format json
};
/// Print the comparison on `out`; returns 1 when any case is slower, else 0 (undecided cases,
/// measured on a busy host, and unconfirmed ones, a common-mode shift of one process per side,
/// do not count as slower; a warning on `err` names them and what to run). Throws
/// rtx::Error(Usage) when both files are "-" (stdin can be read only once). Under a machine
/// format (--format json without --json, or csv) an rtx::Error is also written in-band on
/// `out` (json: {"error": {...}} as --json writes it; csv: an error,category,... row) before it
/// propagates, so a pipe into jq or a CSV reader sees it.
int run_compare(const CompareCommand& c, std::ostream& out, std::ostream& err);

/// `rtx-bench list PACK`: the expanded cases with skip reasons (JSON with json=true).
struct ListCommand {
  std::string pack;
  std::string backend = "cpu";
  std::string filter;
  bool strict = false;
  bool json = false;
};
int run_list(const ListCommand& c, const kernels::Registry& reg, std::ostream& out);

/// `rtx-bench show FILE`: an artifact as a table (or re-emitted JSON with json=true).
struct ShowCommand {
  std::string file;
  bool json = false;
};
int run_show(const ShowCommand& c, std::ostream& out);

}  // namespace rtx::app::bench
