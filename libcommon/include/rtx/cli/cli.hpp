// Shared command-line plumbing for every rtx tool: the common option group, TTY/colour
// detection and the one place where rtx::Error becomes an exit code (docs/architecture.md, "Errors and exit codes").
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace rtx::cli {

/// Options every tool takes (`--json --db -v -q --seed --events`).
struct CommonOptions {
  bool json = false;        ///< machine output (one JSON document) on stdout
  std::string db;           ///< store path; empty: $RTX_HOME/rtx.db, default ./.rtx/rtx.db
  int verbose = 0;          ///< -v count
  bool quiet = false;       ///< -q: errors only on stderr
  uint64_t seed = 0;        ///< --seed, recorded in every artifact and event
  std::string events;       ///< --events FILE: telemetry JSON Lines sink (else $RTX_EVENTS)
};

/// Add the shared option group and `--version` to `app` (tool name taken from app.get_name()).
void add_common_options(CLI::App& app, CommonOptions& o);

/// Parse argv and run `body`, mapping outcomes to exit codes: body's return value as is;
/// --help 0; CLI parse errors 2; rtx::Error by category (2 usage/input, 3 env, 4 internal);
/// a JSON document with text that is not UTF-8 (nlohmann type_error 316) 2; any other exception 4. Before `body`, opens the telemetry sink (--events / RTX_EVENTS) and
/// sets the run seed (rtx::telemetry::init_from_options). Errors go to stderr as "rtx-x: error: ..." and, under --json,
/// also as {"error": {...}} on stdout (invalid UTF-8 in the message written as U+FFFD).
int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& o, const std::function<int()>& body);

/// A tool's subcommands (rtx-bench run/compare, rtx-train prepare/run/...): exactly one is
/// required; each `adder` declares its subcommand's flags and returns the body that runs it.
/// The tool's own options (--json, --db, ...) are accepted after the subcommand too, and each
/// subcommand's --help lists them after its own.
class Subcommands {
 public:
  using Body = std::function<int()>;
  explicit Subcommands(CLI::App& app);
  void add(const char* name, const char* help, const std::function<Body(CLI::App&)>& adder);
  /// Run the body of the subcommand that was parsed (call inside run_tool's body); 2 if none.
  int run() const;

 private:
  CLI::App& app_;
  std::vector<std::pair<CLI::App*, Body>> subs_;
};

/// True when stderr is a terminal (progress displays only then).
bool stderr_is_tty();
/// True when colour may be used on stderr: a TTY and NO_COLOR unset or empty.
bool use_color();

}  // namespace rtx::cli
