// Shared CLI plumbing: common options, error -> exit code mapping, TTY checks.
#include "rtx/cli/cli.hpp"

#include <unistd.h>

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/telemetry/bus.hpp"

namespace rtx::cli {

void add_common_options(CLI::App& app, CommonOptions& o) {
  app.set_version_flag("--version", std::string(app.get_name()) + " " + rtx::version() + " (" + rtx::git_sha() + ")");
  app.add_flag("--json", o.json, "Machine-readable JSON on stdout; human text goes to stderr");
  app.add_option("--db", o.db, "Store file (default $RTX_HOME/rtx.db, RTX_HOME defaults to ./.rtx)");
  app.add_flag("-v,--verbose", o.verbose, "More detail on stderr (repeatable)");
  app.add_flag("-q,--quiet", o.quiet, "Only errors on stderr");
  app.add_option("--seed", o.seed, "Seed for every random stream (recorded in artifacts)");
  app.add_option("--events", o.events, "Write telemetry events as JSON Lines to FILE (or set RTX_EVENTS)");
}

/// OMP_NUM_THREADS far beyond the machine (libgomp aborts creating ~10^5 threads) is capped
/// at 4x the logical CPUs, with a note on stderr; an unparsable value is reported too.
static void clamp_openmp_threads(const std::string& tool) {
  const int cpus = std::max(1, omp_get_num_procs());
  const int want = omp_get_max_threads();
  if (want > 4 * cpus) {
    std::cerr << tool << ": note: OMP_NUM_THREADS asks for " << want << " threads on " << cpus
              << " CPUs; using " << 4 * cpus << "\n";
    omp_set_num_threads(4 * cpus);
  }
}

namespace {

// Number of validators of `opt` (CLI11 2.1 has no accessor for it; get_validator(i) throws past the end).
int validator_count(CLI::Option& opt) {
  int n = 0;
  try {
    for (;; ++n) opt.get_validator(n);
  } catch (const CLI::OptionNotFound&) {
  }
  return n;
}

// CLI11 converts an empty string to 0 for numeric options (`--port ""` would mean port 0):
// every INT/UINT/FLOAT option of `app` and its subcommands refuses an empty value instead.
// CLI11 runs an option's validators in the order they were added and reports the first that
// fails, so the check is moved in front of the tool's own (a CLI::Range would otherwise answer
// "Value  not in range 1 to 4096" for `-c ""`).
void refuse_empty_numbers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string t = opt->get_type_name();
    if (opt->get_type_size() == 0 || !(t.rfind("INT", 0) == 0 || t.rfind("UINT", 0) == 0 || t.rfind("FLOAT", 0) == 0))
      continue;
    const int n = validator_count(*opt);
    opt->check(CLI::Validator([](std::string& v) { return v.empty() ? std::string("empty value") : std::string(); },
                              "", "NONEMPTY"));
    for (int i = n; i > 0; --i) std::swap(*opt->get_validator(i), *opt->get_validator(i - 1));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_numbers(*sub);
}

/// CLI11's message, or for a tool with subcommands where none was given, which word was
/// taken for one and what the subcommands are ("A subcommand is required" said neither).
std::string explain_parse_error(const CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  const auto subs = app.get_subcommands([](const CLI::App*) { return true; });
  bool any_parsed = false;
  std::string names;
  for (const CLI::App* s : subs) {
    any_parsed |= s->parsed();
    if (!s->get_group().empty()) names += (names.empty() ? "" : ", ") + s->get_name();  // hidden: group ""
  }
  if (subs.empty() || any_parsed || std::string(e.what()).find("ubcommand") == std::string::npos) return e.what();
  // The first word that is not an option (nor an option's value: a word after an option that
  // takes one, as in --db FILE) is what was meant as the subcommand.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.empty() || a[0] == '-') {
      const CLI::Option* opt = a.rfind("--", 0) == 0 && a.find('=') == std::string::npos ? app.get_option_no_throw(a) : nullptr;
      if (opt && opt->get_items_expected_min() > 0) ++i;
      continue;
    }
    return "unknown subcommand '" + printable(a) + "'; the subcommands are: " + names;
  }
  return "a subcommand is required: " + names;
}

}  // namespace

int run_tool(CLI::App& app, int argc, char** argv, const CommonOptions& o, const std::function<int()>& body) {
  const std::string tool = app.get_name();
  try {
    refuse_empty_numbers(app);
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string msg = explain_parse_error(app, argc, argv, e);
    std::cerr << tool << ": error: " << msg << "\n" << "Run with --help for usage.\n";
    // Under --json a machine reads stdout: give it the error too (the flag may not have been
    // parsed yet when parsing failed, so look for it in argv).
    bool json = o.json;
    for (int i = 1; i < argc && !json; ++i) json = std::string(argv[i]) == "--json";
    if (json)
      std::cout << nlohmann::json{{"error", {{"category", "usage"}, {"message", msg}, {"where", "command line"},
                                             {"hint", "run with --help for usage"}, {"exit_code", 2}}}}
                       .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                << std::endl;
    return 2;
  }
  auto report = [&](const char* category, const std::string& msg, const std::string& where,
                    const std::string& hint, int code) {
    std::cerr << tool << ": error: " << msg << "\n";
    if (o.json) {
      nlohmann::json j = {{"error", {{"category", category}, {"message", msg}, {"where", where},
                                     {"hint", hint}, {"exit_code", code}}}};
      // The message quotes user input (a path, an argument, a parser's view of a file), which
      // may be invalid UTF-8: replace it (U+FFFD) rather than throw out of the error path.
      std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    }
    return code;
  };
  try {
    rtx::telemetry::init_from_options(o.events, o.seed);
    clamp_openmp_threads(tool);
    const int code = body();
    // Output that could not be written (a full disk, a closed pipe) is a failure, not exit 0.
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0)
      return report("environment", "cannot write the output to stdout (disk full or pipe closed?)", "<stdout>", "", 3);
    return code;
  } catch (const rtx::Error& e) {
    return report(category_name(e.category()), e.what(), e.where(), e.hint(), e.exit_code());
  } catch (const std::bad_alloc&) {
    return report("environment", "out of memory", "", "reduce the problem size", 3);
  } catch (const nlohmann::json::type_error& e) {
    // 316: a JSON document being written holds text that is not UTF-8. Such text comes from
    // outside (an argument, a file, a store row), so it is bad input, not a crash.
    if (e.id == 316)
      return report("input", std::string("input text is not valid UTF-8, cannot write it as JSON (") + e.what() + ")", "",
                    "pass UTF-8 text (arguments, files, store rows)", 2);
    return report("internal", std::string("internal error: ") + e.what(), "", "please report this", 4);
  } catch (const std::exception& e) {
    return report("internal", std::string("internal error: ") + e.what(), "", "please report this", 4);
  }
}

namespace {

// The options of a tool itself (--json, --db, ...), formatted as CLI11 formats an option list.
std::string common_options_help(const CLI::App& tool) {
  const CLI::Formatter f;
  std::string out = "Common options of " + tool.get_name() + " (before or after the subcommand):\n";
  for (const CLI::Option* opt : tool.get_options())
    if (opt != tool.get_help_ptr() && opt != tool.get_help_all_ptr()) out += f.make_option(opt, false);
  out.pop_back();  // CLI11 puts a newline after the footer
  return out;
}

}  // namespace

Subcommands::Subcommands(CLI::App& app) : app_(app) {
  app_.require_subcommand(1);
  app_.fallthrough();
}

void Subcommands::add(const char* name, const char* help, const std::function<Body(CLI::App&)>& adder) {
  CLI::App* s = app_.add_subcommand(name, help);
  Body body = adder(*s);
  // CLI11's help of a subcommand lists only its own options; the tool's common ones are accepted
  // there too (fallthrough), so its footer lists them, after the subcommand's own footer text.
  const std::string own = s->get_footer();
  s->footer(std::string());
  s->footer([tool = &app_, own] { return (own.empty() ? own : own + "\n\n") + common_options_help(*tool); });
  subs_.emplace_back(s, std::move(body));
}

int Subcommands::run() const {
  for (const auto& [app, body] : subs_)
    if (app->parsed()) return body();
  return 2;
}

bool stderr_is_tty() { return ::isatty(STDERR_FILENO) == 1; }

bool use_color() {
  const char* nc = std::getenv("NO_COLOR");
  if (nc && *nc) return false;
  return stderr_is_tty();
}

}  // namespace rtx::cli
