// The rtx-bench subcommands (run, compare, list, show): glue between flags, the pack
// expander, the runner, artifacts, measured peaks and the store.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <ostream>
#include <tuple>

#include <chrono>
#include <ctime>
#include <cstdio>
#include "rtx/dist/comm.hpp"
#include "rtx/app/bench.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/app/doctor.hpp"
#include "rtx/cli/cli.hpp"
#include "rtx/core/build_info.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/time.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/stats/abba.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/bus.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::app::bench {
namespace {

using nlohmann::json;

/// Peaks for the backend from the latest doctor report measured on this machine. `st` is the
/// run's store; null under --no-store, when the store at `db_path` is opened read-only just
/// for them (nothing is created or written; a missing or unreadable store is said in
/// Peaks::source, never an error).
Peaks peaks_for(store::Store* st, Backend b, const std::string& db_path) {
  Peaks p;
  std::unique_ptr<store::Store> ro;
  if (!st) {
    try {
      store::StoreOptions o;
      o.read_only = true;
      ro = std::make_unique<store::Store>(db_path, o);
      st = ro.get();
    } catch (const Error& e) {
      p.source = "--no-store: no doctor report read (" + e.message() + ")";
      return p;
    }
  }
  std::string why;
  const auto m = doctor::latest_measured_peaks(*st, &why);
  if (!m) {
    p.source = why;  // none stored, a --quick report with nothing carried over, or another machine's
    return p;
  }
  if (b == Backend::CPU) {
    p.flops = m->cpu_sgemm_flops;
    p.bytes_per_s = m->cpu_stream_bytes_per_s;
    p.source = "rtx-doctor " + m->measured_at + ": cblas_sgemm FLOP/s, STREAM triad B/s";
  } else {
    p.flops = m->gpu_bf16_flops;
    p.bytes_per_s = m->gpu_copy_bytes_per_s;
    p.source = "rtx-doctor " + m->measured_at + ": bf16 GEMM FLOP/s, device copy B/s";
  }
  if (!(p.flops > 0) && !(p.bytes_per_s > 0)) p.source += " (no peaks measured: rtx-doctor ran with --quick?)";
  return p;
}

/// Record the run, its artifact and one bench_results row per case in ONE transaction; each row
/// carries its case's host contention (contended, contention_reason).
/// `started_at` is the UTC time the run began (the row itself is written at the end, so a killed
/// run leaves no partial rows).
void record(store::Store& st, const RunCommand& c, const json& doc, const RunResult& r, bool failed, const std::string& sku,
            const std::string& started_at) {
  store::Transaction tx(st);
  auto& run = st.prepare(
      "INSERT INTO runs (tool, args_json, seed, git_sha, hw_sku, hw_json, status, started_at, finished_at) "
      "VALUES ('rtx-bench', ?1, ?2, ?3, ?4, ?5, ?6, ?7, strftime('%Y-%m-%dT%H:%M:%fZ','now'))");
  run.bind(1, json(c.argv).dump())
      .bind(2, static_cast<int64_t>(c.seed))
      .bind(3, rtx::git_sha())
      .bind(4, sku)
      .bind(5, doc["hardware"].dump())
      .bind(6, failed ? "fail" : "ok")
      .bind(7, started_at);
  run.run();
  const int64_t run_id = st.last_insert_rowid();
  auto& art = st.prepare("INSERT INTO artifacts (run_id, kind, schema, json) VALUES (?1, 'bench', ?2, ?3)");
  art.bind(1, run_id).bind(2, kBenchSchema).bind(3, doc.dump());
  art.run();
  auto& row = st.prepare(
      "INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, params_json, median_s, p10_s, "
      "p90_s, mad_s, n, ci_lo_s, ci_hi_s, gflops, gbps, checksum, samples_json, noisy, contended, contention_reason) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)");
  for (const CaseResult& x : r.cases) {
    if (x.status == "skipped") continue;
    row.bind(1, run_id)
        .bind(2, x.c.id)
        .bind(3, x.c.op)
        .bind(4, x.c.variant)
        .bind(5, kernels::backend_name(x.c.backend))
        .bind(6, kernels::shape_to_string(x.c.shape))
        .bind(7, dtype_name(x.c.dtype))
        .bind(8, json(x.c.params).dump());
    if (x.status == "ok") {
      row.bind(9, x.median).bind(10, x.p10).bind(11, x.p90).bind(12, x.mad);
      row.bind(14, x.ci.lo).bind(15, x.ci.hi).bind(16, x.flops_per_s / 1e9).bind(17, x.bytes_per_s / 1e9);
    }
    row.bind(13, static_cast<int64_t>(x.samples.size()))
        .bind(18, static_cast<int64_t>(x.checksum))
        .bind(19, json(x.samples).dump())
        .bind(20, x.noisy ? 1 : 0)
        .bind(21, x.host.contended ? 1 : 0)  // the artifact's cases[].host (judge_contention)
        .bind(22, x.host.contended ? x.host.reason : std::string());
    row.run();
  }
  tx.commit();
}

/// `out` and `pack` are the same file (after following links and relative paths).
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/// The same path once normalized (absolute, ".." and "." resolved, existing links followed),
/// for two output files of which neither may exist yet.
bool same_path(const std::string& a, const std::string& b) {
  if (same_file(a, b)) return true;
  std::error_code e1, e2;
  const auto pa = std::filesystem::weakly_canonical(std::filesystem::absolute(a, e1), e1);
  const auto pb = std::filesystem::weakly_canonical(std::filesystem::absolute(b, e2), e2);
  return !e1 && !e2 && pa == pb;
}

/// One runner option: the flag if given (range-checked up front), else the pack default
/// (checked by parse_pack), else `fallback`.
template <class T>
T option(const std::optional<double>& flag, const std::optional<T>& pack_value, T fallback) {
  return flag ? static_cast<T>(*flag) : pack_value.value_or(fallback);
}

/// The child command line of one round: argv without --rounds, -o/--output, --json,
/// -q/--quiet, --no-store, --events and --max-time (each with its value), plus
/// `--rounds 1 --max-time T --no-store -q -o OUT` (T: this round's share of the case budget).
std::vector<std::string> round_args(const std::vector<std::string>& argv, const std::string& out, double round_max_time) {
  std::vector<std::string> a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& x = argv[i];
    if (i > 0) {
      if (x == "--rounds" || x == "-o" || x == "--output" || x == "--events" || x == "--baseline-exe" || x == "--baseline-out" ||
          x == "--max-time") {
        ++i;  // and its value
        continue;
      }
      if (x.rfind("--rounds=", 0) == 0 || x.rfind("--output=", 0) == 0 || x.rfind("--events=", 0) == 0 || x.rfind("--max-time=", 0) == 0 ||
          x.rfind("--baseline-exe=", 0) == 0 || x.rfind("--baseline-out=", 0) == 0 ||
          (x.size() > 2 && x.rfind("-o", 0) == 0) || x == "--json" || x == "-q" || x == "--quiet" || x == "--no-store")
        continue;
    }
    a.push_back(x);
  }
  char t[40];
  std::snprintf(t, sizeof t, "%.17g", round_max_time);
  for (const char* extra : {"--rounds", "1", "--max-time", static_cast<const char*>(t), "--no-store", "-q", "-o"}) a.emplace_back(extra);
  a.push_back(out);
  return a;
}

std::string read_text(const std::string& path, size_t limit = 4000) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  std::string t = os.str();
  if (t.size() > limit) t = "..." + t.substr(t.size() - limit);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

/// A temporary directory removed (with the round files in it) on scope exit.
struct TempDir {
  std::string path;
  std::vector<std::string> files;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/rtx-bench-rounds.XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
      throw Error(ErrorCategory::Environment, std::string("cannot create a temporary directory: ") + std::strerror(errno), templ,
                  "set TMPDIR to a writable directory");
    path = buf.data();
  }
  std::string file(const std::string& name) {
    files.push_back(path + "/" + name);
    return files.back();
  }
  ~TempDir() {
    for (const auto& f : files) ::unlink(f.c_str());
    ::rmdir(path.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

/// A --filter that matches none of the pack's cases is a usage error (as Google Benchmark's
/// "Failed to match any benchmarks"), not an empty run that exits 0: a typo would otherwise
/// pass a CI step that measured nothing. Throws rtx::Error(Usage) naming --filter.
void require_filter_matched(const std::vector<BenchCase>& cases, const Pack& pack, const kernels::Registry& reg,
                            const ExpandOptions& eo) {
  if (!cases.empty() || eo.filter.empty()) return;
  ExpandOptions all = eo;
  all.filter.clear();
  const size_t n = expand_pack(pack, reg, all).size();
  throw_usage("the regex '" + printable(eo.filter) + "' matches none of the " + std::to_string(n) + " cases of pack '" +
                  printable(pack.name) + "'",
              "--filter", "list the case ids with: rtx-bench list " + (pack.source.empty() ? std::string("PACK") : pack.source));
}

/// Run `rounds` rounds of this command as child processes (fork + execv of c.self_exe, one
/// after another) and return their artifacts; with c.baseline_exe, also `rounds` rounds of it,
/// alternating in ABBA order, returned in the second vector. A child exiting 0 or 1 (a failed
/// check: its artifact records it) is read; any other exit, a signal or a missing artifact
/// throws rtx::Error with the child's stderr (Usage/Input for exit 2, Environment for 3, else
/// Internal), so the run exits as the child did.
std::pair<std::vector<json>, std::vector<json>> run_rounds(const RunCommand& c, size_t rounds, double round_max_time,
                                                           std::ostream& err) {
  if (c.argv.empty())
    throw_internal("run --rounds: RunCommand.argv is empty; the rounds need the command line to re-execute");
  TempDir dir;
  // Each round's engine spans (bench.prepare/warmup/measure, kernel runs) go to this run's
  // events file, each from its own process; bench.result is the parent's (the merged cases).
  const std::string events = telemetry::event_file();
  std::pair<std::vector<json>, std::vector<json>> docs;
  const bool ab = !c.baseline_exe.empty();
  for (size_t slot = 0; slot < (ab ? 2 * rounds : rounds); ++slot) {
    // ABBA: slots (0,1) are A B, (2,3) B A, ... ; A is this program, B the baseline.
    const size_t k = ab ? slot / 2 : slot;
    const bool baseline = ab && stats::abba_arm(slot) == 1;
    const std::string exe = baseline ? c.baseline_exe : c.self_exe;
    const std::string side = baseline ? "baseline " : "";
    const std::string tag = (baseline ? "baseline-round-" : "round-") + std::to_string(k + 1);
    const std::string out = dir.file(tag + ".json"), errf = dir.file(tag + ".err");
    const std::vector<std::string> args = round_args(c.argv, out, round_max_time);
    std::vector<char*> cargv;
    for (const auto& a : args) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0)
      throw Error(ErrorCategory::Environment, std::string("fork failed: ") + std::strerror(errno), "run --rounds",
                  "lower --rounds or free process slots");
    if (pid == 0) {
      // Child: stderr to the round's file, stdout and stdin to /dev/null; telemetry to the
      // parent's events file (if any) with RTX_BENCH_ROUND set, so it publishes no bench.result.
      const int fe = ::open(errf.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int fn = ::open("/dev/null", O_RDWR);
      if (fe >= 0) ::dup2(fe, 2);
      if (fn >= 0) {
        ::dup2(fn, 1);
        ::dup2(fn, 0);
      }
      if (events.empty()) ::unsetenv("RTX_EVENTS");
      else ::setenv("RTX_EVENTS", events.c_str(), 1);
      ::setenv("RTX_BENCH_ROUND", std::to_string(k + 1).c_str(), 1);
      ::execv(exe.c_str(), cargv.data());
      const char* msg = "rtx-bench: cannot execute the round child\n";
      if (::write(2, msg, std::strlen(msg)) < 0) ::_exit(127);
      ::_exit(127);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
      if (errno != EINTR)
        throw Error(ErrorCategory::Environment, std::string("waitpid failed: ") + std::strerror(errno), "run --rounds");
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code != 0 && code != 1) {
      const std::string how = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                  : "exited with status " + std::to_string(code);
      const ErrorCategory cat = code == 2 ? ErrorCategory::Input : code == 3 ? ErrorCategory::Environment : ErrorCategory::Internal;
      throw Error(cat, side + "round " + std::to_string(k + 1) + "/" + std::to_string(rounds) + " (" + exe + ") " + how +
                           "; its stderr:\n" + read_text(errf),
                  baseline ? "run --baseline-exe" : "run --rounds", "run it again with --rounds 1 to see the failure directly");
    }
    try {
      (baseline ? docs.second : docs.first).push_back(read_bench_artifact(out));
    } catch (const Error& e) {
      throw Error(ErrorCategory::Input,
                  side + "round " + std::to_string(k + 1) + "/" + std::to_string(rounds) + " (" + exe +
                      ") exited with status " + std::to_string(code) + " but wrote no valid rtx.bench.v1 artifact: " +
                      e.message(),
                  baseline ? "run --baseline-exe" : "run --rounds",
                  baseline ? "the baseline must be an rtx-bench that accepts this command line" : "");
    }
    if (!c.quiet && cli::stderr_is_tty())
      err << "\rrtx-bench: round " << k + 1 << "/" << rounds << (ab ? " (A and B)" : "") << " done" << std::flush;
  }
  if (!c.quiet && cli::stderr_is_tty()) err << "\n";
  return docs;
}

/// A fresh id shared by the two artifacts of one --baseline-exe run: 128 random bits
/// (std::random_device) as 32 hex digits.
std::string ab_pair_id() {
  std::random_device rd;
  char b[40];
  std::snprintf(b, sizeof b, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return b;
}

/// The run's one contention warning ("" when no case crossed a threshold): the cases by id
/// (at most 6, then a count), each with its evidence, and the load average around the run.
/// `baseline`: the --baseline-exe side's merged result, named separately.
std::string contention_warning(const RunResult& r, const ArtifactMeta& meta, const RunResult* baseline) {
  // Cases with the same evidence (all those judged on the whole run) share one line.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // reason -> ids
  size_t n = 0;
  auto scan = [&](const RunResult& x, const char* side) {
    for (const CaseResult& c : x.cases) {
      if (!c.host.contended) continue;
      ++n;
      auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.first == c.host.reason; });
      if (g == groups.end()) g = groups.insert(groups.end(), {c.host.reason, {}});
      g->second.push_back(side + c.c.id);
    }
  };
  scan(r, "");
  if (baseline) scan(*baseline, "baseline ");
  if (!n) return "";
  std::vector<std::string> lines;
  for (const auto& [reason, ids] : groups) {
    std::string l = "  ";
    for (size_t i = 0; i < ids.size() && i < 4; ++i) l += (i ? ", " : "") + ids[i];
    if (ids.size() > 4) l += " and " + std::to_string(ids.size() - 4) + " more";
    lines.push_back(l + ": " + reason);
  }
  const size_t shown = std::min<size_t>(lines.size(), 6);
  const size_t hidden_groups = lines.size() - shown;
  lines.resize(shown);
  std::ostringstream os;
  char load[160];
  std::snprintf(load, sizeof load, "1-minute load average %.2f at the start, %.2f at the end, on %d logical CPUs", meta.load1_start,
                meta.load1_end, telemetry::hardware_profile().logical_cpus);
  if (baseline)
    os << "rtx-bench: warning: the host was busy while " << n << " case(s) were measured; the rounds alternated (ABBA), so "
       << "both sides met the same neighbours and `rtx-bench compare` of this pair still judges them on the round medians, "
       << "noting the busy rounds (" << load << "):\n";
  else
    os << "rtx-bench: warning: the host was busy while " << n << " case(s) were measured; their timings are not "
       << "trustworthy and `rtx-bench compare` reports them undecided (" << load << "):\n";
  for (const auto& l : lines) os << l << "\n";
  if (hidden_groups) os << "  ... and " << hidden_groups << " more groups of cases (host.contended in the artifact)\n";
  return os.str();
}

/// The run's note on busy rounds left out ("" when none was): each such case by id (at most
/// 6, then a count) with the rounds left out and their evidence. `baseline` as above.
std::string left_out_note(const RunResult& r, const RunResult* baseline) {
  std::vector<std::string> lines;
  size_t n = 0;
  auto scan = [&](const RunResult& x, const char* side) {
    for (const CaseResult& c : x.cases) {
      if (c.host.rounds_left_out.empty()) continue;
      if (++n > 6) continue;
      std::string l = "  " + std::string(side) + c.c.id + ": judged on " + std::to_string(c.host.judged_rounds) + " of " +
                      std::to_string(c.host.rounds) + " rounds; left out";
      for (size_t i = 0; i < c.host.rounds_left_out.size(); ++i)
        l += (i ? "; round " : " round ") + std::to_string(c.host.rounds_left_out[i].round) + " (" + c.host.rounds_left_out[i].reason + ")";
      lines.push_back(l);
    }
  };
  scan(r, "");
  if (baseline) scan(*baseline, "baseline ");
  if (!n) return "";
  std::ostringstream os;
  os << "rtx-bench: note: the host was busy in some rounds of " << n << " case(s); those rounds are left out and each case is "
     << "judged on its quiet rounds (host.rounds_left_out in the artifact):\n";
  for (const auto& l : lines) os << l << "\n";
  if (n > lines.size()) os << "  ... and " << n - lines.size() << " more\n";
  return os.str();
}

}  // namespace

int run_run(const RunCommand& c, const kernels::Registry& reg, std::ostream& out_stream, std::ostream& err) {
  const Backend backend = kernels::parse_backend(c.backend);
  if (!c.out.empty() && c.out != "-" && c.pack != "-" && same_file(c.out, c.pack))
    throw_usage(c.out + " is the bench pack itself; refusing to overwrite it", "-o",
                "write the artifact to another file");
  RunnerOptions ro;
  // Flags are checked before the pack is read, so a bad flag is reported as such.
  for (const auto& [flag, key, name] : {std::tuple{&c.max_rel_ci, "max_rel_ci", "--max-rel-ci"},
                                        std::tuple{&c.max_time, "max_time", "--max-time"},
                                        std::tuple{&c.min_samples, "min_samples", "--min-samples"},
                                        std::tuple{&c.max_samples, "max_samples", "--max-samples"},
                                        std::tuple{&c.warmup, "warmup", "--warmup"}}) {
    if (!*flag) continue;
    const std::string why = runner_option_problem(key, **flag);
    if (!why.empty()) throw_usage(why, name);
  }
  {
    const std::string why = runner_option_problem("threads", c.threads);
    if (!why.empty()) throw_usage(why, "--threads");
  }
  if (c.rounds) {
    const std::string why = runner_option_problem("rounds", *c.rounds);
    if (!why.empty()) throw_usage(why, "--rounds");
  }
  if (c.baseline_exe.empty() != c.baseline_out.empty())
    throw_usage("--baseline-exe and --baseline-out go together: the baseline's rounds need a file to go to",
                c.baseline_exe.empty() ? "--baseline-out" : "--baseline-exe");
  if (!c.baseline_exe.empty()) {
    std::error_code ec;
    if (::access(c.baseline_exe.c_str(), X_OK) != 0 || !std::filesystem::is_regular_file(c.baseline_exe, ec))
      throw_usage("the baseline program " + c.baseline_exe + " is not an executable file", "--baseline-exe",
                  "give the path of another build's rtx-bench (or this one, for an A/A)");
    if (c.baseline_out == "-" || c.baseline_out == c.out || (!c.out.empty() && c.out != "-" && same_path(c.baseline_out, c.out)) ||
        (c.pack != "-" && same_file(c.baseline_out, c.pack)))
      throw_usage("--baseline-out must be a file other than -o and the pack", "--baseline-out");
  }
  if (backend == Backend::CUDA) rtx::require_cuda("--backend cuda");
  telemetry::init_from_options(c.events, c.seed);
  const Pack pack = load_pack(c.pack);
  ExpandOptions eo;
  eo.backend = backend;
  eo.filter = c.filter;
  eo.strict = c.strict;
  const std::vector<BenchCase> cases = expand_pack(pack, reg, eo);
  require_filter_matched(cases, pack, reg, eo);
  // An empty pack would run nothing and report "0 ok", which a CI job reads as a pass.
  if (cases.empty())
    throw_input("pack '" + printable(pack.name) + "' has no cases: nothing to run", pack.source.empty() ? "pack" : pack.source,
                "add cases to its \"cases\" array; format: docs/bench_packs.md");

  ro.max_rel_ci = option(c.max_rel_ci, pack.run.max_rel_ci, ro.max_rel_ci);
  ro.max_time = option(c.max_time, pack.run.max_time, ro.max_time);
  ro.min_samples = option(c.min_samples, pack.run.min_samples, ro.min_samples);
  ro.max_samples = option(c.max_samples, pack.run.max_samples, ro.max_samples);
  ro.warmup = option(c.warmup, pack.run.warmup, ro.warmup);
  // Several fresh processes per run by default (kDefaultRounds), except where a round cannot
  // re-execute the command: a pack on stdin, or ranks under an MPI launcher (they measure in
  // lock step). Those run one process, and compare will not count its verdicts.
  const bool one_process_only = c.pack == "-" || dist::launched_by_mpi();
  const size_t rounds = option(c.rounds, pack.run.rounds, one_process_only ? size_t{1} : kDefaultRounds);
  if (rounds == 1 && one_process_only && !c.rounds && !pack.run.rounds && !c.quiet)
    err << "rtx-bench: note: one process (" << (c.pack == "-" ? "the pack is stdin" : "under an MPI launcher")
        << "): rtx-bench compare does not count slower/faster verdicts of one process per side"
        << (c.pack == "-" ? "; save the pack to a file to run " + std::to_string(kDefaultRounds) + " rounds" : std::string()) << "\n";
  if (!c.baseline_exe.empty() && rounds < 2)
    throw_usage("--baseline-exe alternates rounds with the baseline: give --rounds R >= 2 (10-20 for a 10% threshold, "
                "about 100 for 5% on a noisy host)",
                "--rounds");
  // Checked before the run so a bad destination costs no measurement and leaves no other file.
  io::require_output_dir(c.out, "-o");
  io::require_output_dir(c.baseline_out, "--baseline-out");
  if (rounds > 1 && c.pack == "-")
    throw_usage("--rounds " + std::to_string(rounds) + " re-reads the pack in each round, but the pack is stdin", "--rounds",
                "save the pack to a file, or use --rounds 1");
  if (ro.max_samples < ro.min_samples)
    throw_usage("--max-samples " + std::to_string(ro.max_samples) + " is below --min-samples " + std::to_string(ro.min_samples) +
                    " (flags or the pack's defaults)",
                c.max_samples ? "--max-samples" : "--min-samples", "raise --max-samples or lower --min-samples");
  ro.cold = c.cold;
  ro.interleave = c.interleave;
  ro.seed = c.seed;
  ro.progress = !c.quiet && cli::stderr_is_tty();

  const auto [threads, pinned] = configure_threads(c.threads, c.pin);
  // Under a launcher (mpirun -n N rtx-bench run benchpacks/dist.json) every rank measures in
  // lock step, but only rank 0 prints, writes the artifact and records in the store.
  const bool lead_rank = !dist::launched_by_mpi() || dist::world().rank() == 0;
  std::unique_ptr<store::Store> st;
  if (!c.no_store && lead_rank) st = std::make_unique<store::Store>(store::resolve_db_path(c.db));

  ArtifactMeta meta;
  meta.pack_name = pack.name;
  meta.pack_source = pack.source;
  meta.seed = c.seed;
  meta.backend = backend;
  meta.runner = ro;
  meta.filter = c.filter;
  meta.threads = threads;
  meta.pinned = pinned;
  meta.peaks = peaks_for(st.get(), backend, store::resolve_db_path(c.db));
  meta.rounds = rounds;
  meta.hardware = telemetry::to_json(telemetry::hardware_profile());

  const std::string started_at = utc_now();
  meta.load1_start = telemetry::load_average_1m();
  RunResult r, rb;
  if (rounds > 1) {
    // The case budget is the run's: each round samples for its share of it.
    auto docs = run_rounds(c, rounds, ro.max_time / static_cast<double>(rounds), err);
    // ABBA: a round busy on either side leaves both sides (merge_rounds_paired), so the two are
    // judged on the same round indices.
    if (!c.baseline_exe.empty())
      std::tie(r, rb) = merge_rounds_paired(docs.first, docs.second);
    else
      r = merge_rounds(docs.first);
  } else {
    r = run_cases(cases, reg, ro);
  }
  meta.load1_end = telemetry::load_average_1m();
  bool failed = false;
  // A round of a multi-round run (RTX_BENCH_ROUND, set by run_rounds) leaves bench.result to
  // the parent, which publishes the merged cases once.
  const bool round_child = std::getenv("RTX_BENCH_ROUND") != nullptr;
  for (CaseResult& x : r.cases) {
    annotate_roofline(x, meta.peaks);
    failed |= x.status == "failed";
    if (!round_child)
    RTX_PUBLISH(telemetry::topic::bench_result,
                {{"id", x.c.id}, {"op", x.c.op}, {"variant", x.c.variant}, {"backend", kernels::backend_name(x.c.backend)},
                 {"shape", kernels::shape_to_string(x.c.shape)}, {"dtype", dtype_name(x.c.dtype)}, {"status", x.status},
                 {"n", x.samples.size()}, {"median_s", x.median}, {"ci_rel", x.rel_ci}, {"noisy", x.noisy},
                 {"contended", x.host.contended}, {"checksum", x.checksum}});
  }
  json doc = to_json(r, meta);
  json doc_b;
  if (!c.baseline_exe.empty()) {
    for (CaseResult& x : rb.cases) annotate_roofline(x, meta.peaks);
    doc_b = to_json(rb, meta);
    std::error_code ec;
    const std::string self = std::filesystem::canonical(c.self_exe, ec).string();
    // The pairing marker compare looks for: both sides of this one interleaved run, and no other.
    const std::string pair = ab_pair_id();
    doc["ab"] = {{"role", "new"}, {"other", c.baseline_out}, {"order", "ABBA rounds"}, {"exe", ec ? c.self_exe : self}, {"pair_id", pair}};
    doc_b["ab"] = {{"role", "baseline"}, {"other", c.out}, {"order", "ABBA rounds"}, {"exe", c.baseline_exe}, {"pair_id", pair}};
  }

  if (!lead_rank) return failed ? 1 : 0;
  if (!c.quiet) err << format_table(doc, cli::use_color());
  // -q keeps stderr to errors, as in the other tools: the artifact's host.contended and
  // compare's "undecided" carry the verdict.
  if (const std::string w = c.quiet ? "" : contention_warning(r, meta, rb.cases.empty() ? nullptr : &rb); !w.empty())
    err << w;
  if (const std::string w = c.quiet ? "" : left_out_note(r, rb.cases.empty() ? nullptr : &rb); !w.empty()) err << w;
  // The baseline first: if it cannot be written, neither file is.
  if (!c.baseline_out.empty()) io::write_artifact(c.baseline_out, doc_b);
  if (!c.out.empty() && c.out != "-") io::write_artifact(c.out, doc);
  if (!c.baseline_out.empty()) {
    if (!c.quiet)
      err << "rtx-bench: baseline " << c.baseline_exe << " measured in alternating rounds: " << c.baseline_out
          << "; compare with: rtx-bench compare " << c.baseline_out << " " << (c.out.empty() || c.out == "-" ? "NEW" : c.out) << "\n";
  }
  if (st) record(*st, c, doc, r, failed, telemetry::sku_key(kernels::backend_name(backend)), started_at);
  // stdout only after the store write: when it fails, stdout holds the error object alone
  // (one JSON document), not the artifact followed by the error. -o FILE is already written.
  if (c.out == "-" || c.json) out_stream << doc.dump(2) << std::endl;
  if (failed && !c.quiet) err << "rtx-bench: a case failed its correctness check (exit 1)\n";
  return failed ? 1 : 0;
}

int run_compare(const CompareCommand& c, std::ostream& out, std::ostream& err) {
  const std::string format = c.json ? "json" : c.format;
  if (format != "table" && format != "md" && format != "csv" && format != "json")
    throw_usage("unknown format '" + format + "'", "--format", "use table, md, csv or json");
  CompareReport rep;
  try {
    stats::CompareOptions o;
    o.threshold = parse_threshold(c.threshold);
    if (c.base == "-" && c.fresh == "-")
      throw_usage("BASE and NEW are both '-': stdin can be read only once", "compare", "give at least one of them as a file");
    const json base = read_bench_artifact(c.base);
    const json fresh = read_bench_artifact(c.fresh);
    rep = compare_artifacts(base, fresh, o, c.base, c.fresh);
  } catch (const Error& e) {
    // A machine format reports the error in-band too: a pipe into jq or a CSV reader would
    // otherwise get empty input. Under --json the tool's error path (cli::run_tool) prints it.
    write_compare_error(e, c.json ? "" : format, out);
    throw;
  }
  out << format_compare(rep, format);
  if (rep.unconfirmed)
    err << "rtx-bench: warning: " << rep.unconfirmed
        << " slower/faster verdict(s) unconfirmed: most cases moved together, a whole-process speed shift that one "
           "process per side cannot separate from the code; not counted (exit 0). Confirm with rtx-bench run PACK "
           "--rounds 5 on both sides, or run --rounds 6 --baseline-exe OLD --baseline-out base.json\n";
  if (rep.undecided)
    err << "rtx-bench: warning: " << rep.undecided
        << " case(s) undecided: the host was busy while measuring them (see the verdict column); not counted as "
           "slower or faster; measure both sides again on a quiet machine\n";
  if (rep.slower) err << "rtx-bench: " << rep.slower << " case(s) slower beyond " << 100 * rep.threshold << "% (exit 1)\n";
  return rep.slower ? 1 : 0;
}

int run_list(const ListCommand& c, const kernels::Registry& reg, std::ostream& out) {
  const Pack pack = load_pack(c.pack);
  ExpandOptions eo;
  eo.backend = kernels::parse_backend(c.backend);
  eo.filter = c.filter;
  eo.strict = c.strict;
  const auto cases = expand_pack(pack, reg, eo);
  require_filter_matched(cases, pack, reg, eo);
  size_t runnable = 0;
  for (const auto& x : cases) runnable += x.skip_reason.empty();
  if (c.json) {
    json j;
    j["schema"] = "rtx.bench-list.v1";
    j["pack"] = {{"name", pack.name}, {"source", pack.source}};
    j["backend"] = kernels::backend_name(eo.backend);
    json arr = json::array();
    for (const auto& x : cases) {
      json e = {{"id", x.id}, {"name", x.name}, {"op", x.op}, {"variant", x.variant}, {"runnable", x.skip_reason.empty()}};
      if (x.skip_reason.empty()) {
        e["shape"] = x.shape;
        e["dtype"] = dtype_name(x.dtype);
        e["params"] = x.params;
      } else {
        e["skip_reason"] = x.skip_reason;
      }
      arr.push_back(e);
    }
    j["cases"] = arr;
    j["summary"] = {{"cases", cases.size()}, {"runnable", runnable}, {"skipped", cases.size() - runnable}};
    out << j.dump(2) << "\n";
    return 0;
  }
  out << pack.name << " (" << pack.source << "), backend " << kernels::backend_name(eo.backend) << ": " << runnable
      << " runnable, " << cases.size() - runnable << " skipped\n";
  for (const auto& x : cases) {
    if (x.skip_reason.empty())
      out << "  run   " << x.id << (x.params.empty() ? "" : "  [" + kernels::params_to_string(x.params) + "]") << "\n";
    else
      out << "  skip  " << x.id << ": " << x.skip_reason << "\n";
  }
  return 0;
}

int run_show(const ShowCommand& c, std::ostream& out) {
  const json doc = read_bench_artifact(c.file);
  if (c.json) {
    out << doc.dump(2) << "\n";
    return 0;
  }
  // Types checked by read_bench_artifact; the pack name and backend come from the file (printable);
  // the seed is unsigned (2^64-1 printed as -1).
  out << "pack " << printable(doc.value("pack", json::object()).value("name", std::string("?"))) << ", seed "
      << doc.value("seed", uint64_t{0}) << ", backend " << printable(doc.value("options", json::object()).value("backend", std::string("?")))
      << "\n";
  out << format_table(doc, false);
  return 0;
}

}  // namespace rtx::app::bench
