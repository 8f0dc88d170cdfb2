// rtx-bench logic: bench packs (rtx.benchpack.v1) and their expansion over the op registry,
// the adaptive sampling runner, the rtx.bench.v1 artifact, and A/B comparison of artifacts.
// The tool (tools/rtx-bench) only binds flags to the *Command structs and calls run_*.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include <nlohmann/json.hpp>

#include "rtx/core/error.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/stats/compare.hpp"
#include "rtx/stats/stats.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::app::bench {

using kernels::Backend;
using kernels::Params;
using kernels::Shape;

inline constexpr const char* kPackSchema = "rtx.benchpack.v1";
inline constexpr const char* kBenchSchema = "rtx.bench.v1";

// ---- bench packs -------------------------------------------------------------------------

/// One case as written in a pack, with the pack's defaults applied. Shapes stay as JSON
/// (objects, "M=..,N=.." or "AxBxC" strings) until expansion knows the op's dims.
struct PackCase {
  std::string name;                   ///< unique within the pack
  std::string op;                     ///< registry op name
  std::string variant = "default";    ///< "default" (first variant of the backend), "all", or a name
  std::vector<nlohmann::json> shapes; ///< each an object or a string (sweeps already expanded)
  std::vector<DType> dtypes{DType::F32};
  Params params;                      ///< overrides of the variant's resolved parameters
  std::vector<Backend> backends;      ///< backends this case is for; empty = any
};

/// Runner settings a pack may set in its "defaults" block (CLI flags override them);
/// parse_pack checks them with runner_option_problem, the rule the CLI flags follow.
struct PackRunDefaults {
  std::optional<double> max_time, max_rel_ci;
  std::optional<size_t> min_samples, max_samples, warmup;
  std::optional<size_t> rounds;  ///< processes per run (`run --rounds`), [1, 200]
};

/// A parsed pack.
struct Pack {
  std::string source;       ///< file it came from (for messages)
  std::string name, description;
  PackRunDefaults run;
  std::vector<PackCase> cases;
};

/// Parse a pack document. Throws rtx::Error(Input) naming `source`, the case and the field
/// ("smoke.json: case 'mm': field 'shapes[1]': dimension \"K\" is -3, must be >= 0"), for a
/// wrong schema, unknown fields, a wrong type at any field, bad dtypes/backends, negative
/// dims or integers outside int64, bad sweeps, 'dtype' with 'dtypes' (or 'shape' with
/// 'shapes'), empty names, names with control characters (< 0x20, 0x7f) or '/', duplicate
/// case names (naming both), runner defaults out of range. Format: docs/bench_packs.md.
Pack parse_pack(const nlohmann::json& doc, const std::string& source);
/// Largest pack file load_pack reads (a pack is a few KiB of JSON).
inline constexpr uint64_t kMaxPackBytes = uint64_t{64} << 20;
/// Read and parse a pack file ("-" = stdin); errors as parse_pack, plus rtx::Error(Input)
/// naming the path for an empty path, a missing, unreadable (any read error) or invalid JSON
/// file, a file that is not a regular file (/dev/zero, a FIFO: refused without reading) and
/// input larger than kMaxPackBytes (64 MiB).
Pack load_pack(const std::string& path);

/// One runnable (or skipped) benchmark: a pack case at one variant, shape and dtype.
struct BenchCase {
  std::string id;           ///< "<case>/<variant>/<shape>/<dtype>", unique; compare keys on it
  std::string name, op, variant;
  Backend backend = Backend::CPU;
  Shape shape;
  DType dtype = DType::F32;
  Params params;            ///< resolved (tuned profile or defaults) with pack overrides
  std::string skip_reason;  ///< "" when runnable; else why it is not run (recorded)
};

/// The registry of everything benchable, built once on first use: the kernels
/// (kernels::registry()), the model-level macro ops (models::register_model_ops: today
/// "gpt2_train_step", a whole GPT-2 training step) and the distributed ones
/// (dist::register_dist_ops: allreduce over the world communicator, benchpacks/dist.json).
/// What rtx-bench, rtx-tune and rtx-evolve expand packs against.
const kernels::Registry& registry();

/// How a pack is expanded.
struct ExpandOptions {
  Backend backend = Backend::CPU;
  std::string filter;       ///< ECMAScript regex searched in each case id; "" keeps all
  bool strict = false;      ///< unknown ops and bad shapes are errors instead of skips
  /// Working-set limit in bytes for kernels::shape_problem; nullopt: host_memory_bytes()/4.
  std::optional<double> max_bytes;
  /// Tuned parameters of the cases (a profile's tune::param_lookup); empty: the variants' defaults.
  kernels::ParamLookup lookup;
};

/// Longest --filter pattern accepted (std::regex recursion would overflow the stack on
/// a pattern of thousands of nested groups).
inline constexpr size_t kMaxFilterLength = 1000;

/// Expand every pack case over variants x shapes x dtypes for one backend. Invalid
/// (op, variant, shape, dtype, params) combinations become skipped cases carrying the
/// reason (kernels::shape_problem's text against o.max_bytes, validate()'s text, missing
/// backend variant, unsupported dtype, unregistered op). With o.strict an unregistered op
/// or a bad shape is instead an rtx::Error(Input) naming pack, case and field. Always
/// rtx::Error(Input) for an unknown variant of a registered op on the selected backend or
/// an unparseable shape string; rtx::Error(Usage) for a bad or over-long filter regex.
std::vector<BenchCase> expand_pack(const Pack& pack, const kernels::Registry& reg, const ExpandOptions& o);

// ---- runner --------------------------------------------------------------------------------

/// Why `value` is out of range for runner option `key` ("" when it is fine). Keys and
/// ranges (the CLI flags and the pack's "defaults" share them): warmup integer in [0, 1e6];
/// min_samples integer in [1, 1e7]; max_samples integer in [1, 1e9]; max_time finite in
/// (0, 86400] s; max_rel_ci finite in (0, 1]; rounds integer in [1, 200]; threads integer in [0, 4 x logical CPUs].
/// Throws rtx::Error(Internal) for an unknown key.
std::string runner_option_problem(const std::string& key, double value);

/// Parse a --seed value: a decimal integer in [0, 2^64-1] (no sign, no exponent).
/// Throws rtx::Error(Usage) naming --seed otherwise.
uint64_t parse_seed(const std::string& text);

// ---- host contention ------------------------------------------------------------------------
// Evidence, taken around each case's sampling window (not before the run), that other work
// competed with the measurement. Readings are plain structs so tests can inject them.

/// One reading of the signals, taken just before and just after a sampling window.
struct HostSample {
  double wall_s = 0;                 ///< steady_clock, s (arbitrary epoch; only deltas are used)
  double thread_cpu_s = 0;           ///< getrusage(RUSAGE_THREAD) user+system of the measuring thread, s
  double process_cpu_s = 0;          ///< getrusage(RUSAGE_SELF) user+system of all threads, s
  int64_t involuntary_switches = 0;  ///< getrusage(RUSAGE_SELF) ru_nivcsw: preemptions of any thread
  bool psi_valid = false;            ///< /proc/pressure/cpu was readable (telemetry::read_cpu_pressure)
  uint64_t psi_some_total_us = 0;    ///< PSI cpu "some" total, us (system-wide)
  double psi_some_avg10 = 0;         ///< PSI cpu "some avg10", %
  double load1 = 0;                  ///< /proc/loadavg 1-minute load average (telemetry::load_average_1m)
  int cpus = 0;                      ///< CPUs this thread may run on (sched_getaffinity); 0: unknown
  /// /proc/stat busy time of those CPUs (telemetry::read_cpu_busy): minus process_cpu_s, the
  /// CPU time other processes took (the rule, telemetry::judge_host_window).
  telemetry::CpuBusy cpu_busy;
};
/// Read all signals now (a few syscalls and two /proc reads: ~20 us, never inside a sample).
HostSample sample_host();

/// Thresholds of judge_contention where /proc/stat cannot tell other processes' CPU time from
/// ours (otherwise they only mark a window oversubscribed; telemetry::judge_host_window decides).
/// Any one crossed flags the case as measured on a busy host.
/// Numbers measured on the 2-CPU development VM with one busy thread for 0.5-1 s: idle: CPU
/// share 0.99-1.00, 2-28 involuntary switches/s, PSI stall 0.1-1%; a -j2 build running: 0.85,
/// 81/s, 52%; 4 spinning threads: 0.33-0.51, 91-121/s, 88-100% (docs/tools/rtx-bench.md).
///  - PSI cpu "some" stall > 10% of the window: for a tenth of the time a runnable task was
///    queued behind another (idle: ~1%); a competitor that large shifts medians past
///    compare's default 5% threshold.
///  - CPU backend: the measuring thread ran < 80% of the window. It is runnable for the
///    whole window (it times the kernels and joins every OpenMP region), so an idle host
///    gives ~0.99; 0.8 means a fifth of the window was lost to preemption, 4x the 5% threshold.
///    Not judged on CUDA, where the thread may block in cudaEventSynchronize by design.
///  - > 100 involuntary context switches per s (all threads of the process), and at least
///    kMinInvoluntarySwitches of them: the scheduler is time-slicing the process against
///    other runnable tasks (idle: <= 28/s; busy: 81-288/s). A preemption every 10 ms; set
///    well above the idle readings so that an idle but noisy host (CI runners) is not flagged
///    on it: the busy hosts measured at 81-121/s were caught by PSI or the CPU share anyway.
///    This one catches contention on kernels without PSI when the CPU share alone stays above
///    0.8. The count floor keeps a short window with 3 ordinary preemptions from reading as
///    60/s.
///  A case window shorter than kMinJudgedWindow is not judged on its own (one 4 ms time slice
///  in a 20 ms window would already look like 20% contention): such a case, typically a
///  microsecond kernel that converged in a few ms, takes the verdict of the whole run's window
///  (judged_on "run": from before the first case's preparation and warm-up to after the last
///  sample), since a host busy around it was busy while it was measured too. When the run is
///  that short as well, the case stays unjudged (judged_on "none"). The PSI "some avg10" is
///  recorded but never decides: it is the kernel's 10 s average, mostly of the time before
///  the run (an idle host 15 s after a busy period read 18% and flagged every case).
inline constexpr double kMaxPsiStallShare = telemetry::kBusyPsiStallShare;
inline constexpr double kMinCpuShare = 0.80;
inline constexpr double kMaxInvoluntaryPerS = 100;
inline constexpr double kMinJudgedWindow = telemetry::kMinJudgedWindowS;  ///< s (0.05)
inline constexpr int64_t kMinInvoluntarySwitches = 10;
/// A window in which this process's own threads used at least this share of the CPUs it may
/// run on (process CPU time / (window x CPUs)) is not contended by neighbours whatever the
/// thresholds above read: under the kernel's fair scheduler a runnable neighbour gets its share
/// (one CPU-bound neighbour against 2 threads on 2 CPUs leaves the process 2/3, against 3
/// threads 3/4), so a stall, switches or a measuring thread below 80% there come from the
/// process's own threads outnumbering the CPUs: HostEvidence::oversubscribed, recorded and
/// shown, not a busy host. Measured: the cpu.blas matmul backward cases on 2 CPUs (OpenBLAS's
/// spinning worker beside libgomp's) read PSI 15-45% and 200-2000 switches/s at 1.94-1.98 CPUs.
inline constexpr double kSelfSaturatedShare = 0.90;

/// A round of a merged case (`run --rounds`) that was measured on a busy host and left out of
/// the case's statistics because enough quiet rounds remained (quiet_rounds_suffice). Under
/// `--baseline-exe` a round is left out on both sides when either side's round of that index
/// was busy (merge_rounds_paired); on the side whose own round was quiet it is `paired`.
struct LeftOutRound {
  size_t round = 0;              ///< 1-based round number
  std::string reason;            ///< that round's host.reason (the evidence that flagged it), or for a
                                 ///< paired one "the baseline's round k was busy: <its evidence>"
  bool paired = false;           ///< quiet on its own; left out with the other side's busy round k
  std::vector<double> samples;   ///< its samples, s (kept for inspection; judged on by nothing)
  double median_s = 0;           ///< median of `samples`, s
};

/// Contention evidence of one case: sums over its sampling windows (one window per case run
/// sequentially, one per batch under --interleave, the judged rounds' windows after merge_rounds).
struct HostEvidence {
  bool measured = false;             ///< at least one window was recorded
  double window_s = 0;               ///< wall time of the windows, s
  double thread_cpu_s = 0;           ///< measuring-thread CPU time in them, s
  double process_cpu_s = 0;          ///< process CPU time in them, s
  int threads = 1;                   ///< OpenMP threads of the run
  int64_t involuntary_switches = 0;  ///< ru_nivcsw delta
  bool psi_valid = false;            ///< every window had a PSI reading
  double psi_stall_s = 0;            ///< PSI cpu some total delta, s
  double psi_avg10_max = 0;          ///< largest PSI "some avg10" at a window's end, %
  double load1_start = 0, load1_end = 0;  ///< 1-minute load average before the first / after the last window
  size_t rounds = 0;                 ///< merged artifacts: rounds merged (0: a single process)
  size_t rounds_contended = 0;       ///< merged artifacts: rounds judged contended on their own (left out or not;
                                     ///< a paired left-out round is not counted: it was quiet)
  /// Merged artifacts: the rounds the case's samples, round medians, statistics and the sums
  /// above come from (rounds minus rounds_left_out); 0 for a single process.
  size_t judged_rounds = 0;
  /// Merged artifacts: busy rounds left out of the case (in round order); empty when none was,
  /// including when too few quiet rounds remained (then `contended` is set instead).
  std::vector<LeftOutRound> rounds_left_out;
  int cpus = 0;                      ///< CPUs the process may run on (largest over the windows); 0: unknown
  bool other_valid = false;          ///< every window had /proc/stat readings of the same CPUs at both ends
  double other_cpu_s = 0;            ///< CPU time other processes took on those CPUs in the windows, s
  double tick_slack_s = 0;           ///< /proc/stat rounding allowance of the windows, s (2 ticks per CPU per window)
  /// The thresholds were crossed while the process itself used >= kSelfSaturatedShare of its
  /// CPUs: its own threads outnumbered them; not contended (judge_contention).
  bool oversubscribed = false;
  std::string oversubscription;      ///< "" or the readings that crossed, with the process's CPU share
  bool contended = false;            ///< a threshold was crossed (judge_contention)
  std::string reason;                ///< "" or the evidence, e.g. "measuring thread ran 43% of the window, PSI cpu stall 38%"
  /// "case": judged on this window; "run": too short, took the whole run's verdict
  /// (inherit_run_contention); "": not judged (the case and the whole run were shorter than
  /// kMinJudgedWindow; written "none"). Artifacts of earlier builds may hold "avg10"; a host object
  /// without judged_on reads back as "case" when its window is at least kMinJudgedWindow (every
  /// build judged such windows), else "".
  std::string judged_on;

  double cpu_share() const { return window_s > 0 ? thread_cpu_s / window_s : 0; }  ///< thread CPU / wall
  /// Process CPU / (wall x threads): informational (an op that does not parallelize gives 1/threads).
  double process_cpu_per_thread() const { return window_s > 0 ? process_cpu_s / (window_s * std::max(1, threads)) : 0; }
  double involuntary_per_s() const { return window_s > 0 ? static_cast<double>(involuntary_switches) / window_s : 0; }
  /// Process CPU / (wall x CPUs it may run on): the share of the machine this process used; 0 when cpus is unknown.
  double machine_share() const { return window_s > 0 && cpus > 0 ? process_cpu_s / (window_s * cpus) : 0; }
  /// The windows as telemetry::judge_host_window reads them (the one busy-host rule).
  telemetry::CpuWindow cpu_window() const {
    return {window_s, cpus, other_valid && cpus > 0, other_cpu_s, tick_slack_s, psi_valid, psi_stall_s};
  }
  /// Share of the windows' CPU time other processes took (after the tick allowance); 0 without /proc/stat.
  double other_share() const { return telemetry::judge_host_window(cpu_window()).other_share; }
  /// PSI stall / wall, at most 1 (the PSI file is read a few us after the clock).
  double psi_share() const { return window_s > 0 ? std::min(1.0, psi_stall_s / window_s) : 0; }
};

/// Add the window [before, after] to `e` (load1_start taken from the first window).
void add_window(HostEvidence& e, const HostSample& before, const HostSample& after);
/// Whether judge_contention applies the CPU-share rule (kMinCpuShare). Off where the measuring
/// thread waits by design: a CUDA case (the GPU works), rtx-serve's scheduler (the engine's
/// workers work), a span holding store writes (fsync sleeps).
enum class CpuShareRule { Apply, Off };

/// Set e.contended and e.reason by the suite's one busy-host rule (telemetry::judge_host_window):
/// with /proc/stat readings (e.other_valid), other processes' CPU time above
/// telemetry::kMaxOtherCpuShare of the windows decides, and the thresholds above, crossed
/// without it, only mark the window oversubscribed (the process's own threads); without them
/// (artifacts of earlier builds, no procfs) the thresholds above decide (the CPU-share rule as
/// `rule` says). A window shorter than kMinJudgedWindow is not contended.
void judge_contention(HostEvidence& e, CpuShareRule rule);
/// judge_contention with the CPU-share rule for Backend::CPU only.
void judge_contention(HostEvidence& e, Backend backend);
/// One window, judged: the pure function the runner's readings go through (tests inject them).
HostEvidence contention_evidence(const HostSample& before, const HostSample& after, int threads, CpuShareRule rule);
/// contention_evidence with the CPU-share rule for Backend::CPU only.
HostEvidence contention_evidence(const HostSample& before, const HostSample& after, int threads, Backend backend);
/// A case whose own window was too short to judge (judged_on "") takes the run's verdict when
/// the run's window was judged (judged_on "run", reason prefixed "whole run (...)"); when the
/// run was too short as well the case stays unjudged (not contended, judged_on "").
void inherit_run_contention(HostEvidence& c, const HostEvidence& run);
/// The "host" object of a case in rtx.bench.v1 (fields: docs/tools/rtx-bench.md).
nlohmann::json to_json(const HostEvidence& e);
/// Read a case's "host" object (at JSON pointer `pointer` of file `source`) back; derived
/// fields (cpu_share, ...) are recomputed, not read. Throws rtx::Error(Input) naming source and
/// field for a wrong type or a negative value ("a.json: field '/cases/2/host/contended':
/// expected boolean, got string"), `threads` outside [1, 65536], `rounds_contended` above
/// `rounds`, an unknown `judged_on`, a missing `contended`, `judged_rounds` other than `rounds`
/// minus the left-out rounds, and a `rounds_left_out` entry that is not an object with a
/// `round` in [1, rounds] (increasing), a string `reason` and positive finite `samples_s`;
/// more left-out rounds than `rounds_contended`.
HostEvidence host_evidence_from_json(const nlohmann::json& j, const std::string& source, const std::string& pointer);

/// Sampling policy (see docs/tools/rtx-bench.md "How a case is measured").
struct RunnerOptions {
  double max_rel_ci = 0.02;   ///< stop when the 95% median CI half-width / median <= this
  double max_time = 1.0;      ///< s of sampling per case; reaching it unconverged marks noisy
  size_t min_samples = 10;    ///< never stop converged below this many samples
  size_t max_samples = 1000;  ///< hard cap (bounds memory and compare cost)
  size_t warmup = 2;          ///< untimed runs after the correctness check, stopped early after max_time s
  bool cold = false;          ///< flush_cache() before each sample (not timed)
  bool interleave = false;    ///< seeded round-robin over batches of samples across cases
  size_t batch = 5;           ///< samples per case per interleave round
  uint64_t seed = 0;          ///< input seed of every instance and the interleave order
  bool progress = false;      ///< one-line progress display on stderr (TTY only)
  /// Reads the contention signals around each sampling window; empty: sample_host. Tests
  /// inject fixed readings here.
  std::function<HostSample()> host_sampler;
};

/// Measured machine peaks for roofline fractions (from the latest doctor report).
struct Peaks {
  double flops = 0;           ///< FLOP/s (fp32 GEMM), 0 unknown
  double bytes_per_s = 0;     ///< B/s (STREAM-like), 0 unknown
  std::string source;         ///< where they came from, or why absent
};

/// The outcome of one case.
struct CaseResult {
  BenchCase c;
  std::string status = "skipped";  ///< "ok", "failed" (check failed), "skipped"
  std::vector<double> samples;     ///< s, in measurement order
  double median = 0, p10 = 0, p90 = 0, mad = 0;  ///< s
  stats::Interval ci;              ///< 95% CI of the median, s
  double rel_ci = 0;               ///< max(median-lo, hi-median) / median
  bool noisy = false;              ///< stopped by max_time/max_samples before reaching max_rel_ci
  std::string stop_reason;         ///< "converged", "max_time", "max_samples", or the skip/failure
  kernels::Work work;              ///< per execution
  double flops_per_s = 0, bytes_per_s = 0;  ///< work / median
  std::string bound;               ///< "compute" or "memory" (roofline, when peaks known)
  std::optional<double> peak_fraction;      ///< of the bound's peak
  uint64_t checksum = 0;           ///< of the checked output (same seed -> same value)
  kernels::CheckResult check;
  size_t footprint_bytes = 0;
  double sampling_s = 0;           ///< wall time spent sampling this case
  /// CUDA cases: SM clock (MHz, NVML) read right after each sample, in sample order; empty
  /// on CPU or without NVML. `throttled_samples` counts samples taken while NVML reported a
  /// slowdown reason (power cap, thermal, power brake): such a case is flagged `throttled`.
  std::vector<uint32_t> sm_clock_mhz;
  size_t throttled_samples = 0;
  /// `run --rounds R`: the median of each round's samples (one per child process), in
  /// round order; empty for a single-process run (the artifact then omits round_medians_s).
  std::vector<double> round_medians;
  HostEvidence host;               ///< contention evidence of the sampling windows (ok cases)
};

/// Result of run_cases: per-case results (input order) and the execution schedule (case
/// index per sampled batch; sequential runs list each case once).
struct RunResult {
  std::vector<CaseResult> cases;
  std::vector<size_t> schedule;
  /// Contention evidence of the whole run_cases call (first reading, before the first case's
  /// preparation and warm-up, to the last, after its last sample); for merged rounds, the
  /// rounds' run windows merged like a case's (rounds, rounds_contended).
  HostEvidence host;
};

/// Rank order used by --interleave for round `round`: a Fisher-Yates shuffle of 0..n-1
/// driven by Philox(seed, subsequence 0x1e7e0000 + round). Deterministic per (n, seed, round).
std::vector<size_t> interleave_order(size_t n, uint64_t seed, uint64_t round);

/// True when `samples` meet the stop rule: n >= min_samples and the 95% median CI (with
/// coverage >= 95%) has relative half-width <= max_rel_ci.
bool converged(const std::vector<double>& samples, double max_rel_ci, size_t min_samples);

/// Run the runnable cases: make the instance (seed), check() once (failing -> "failed",
/// not timed), checksum, warm up, then sample until converged / max_time / max_samples.
/// Skipped cases are carried through. Throws rtx::Error naming the case id when an
/// instance cannot be made (Input: bad shape; Environment: backend unavailable).
RunResult run_cases(const std::vector<BenchCase>& cases, const kernels::Registry& reg, const RunnerOptions& o);

/// Derive throughput and the roofline fraction: intensity = flops/bytes against the
/// machine balance peaks.flops/peaks.bytes_per_s (Williams, Waterman, Patterson, "Roofline",
/// CACM 2009): at or above the balance the case is compute-bound and its fraction is
/// achieved FLOP/s / peak FLOP/s, below it memory-bound with achieved B/s / peak B/s.
void annotate_roofline(CaseResult& r, const Peaks& peaks);

/// Set OpenMP threads (threads > 0) and, with pin, bind OpenMP thread i to the i-th CPU of
/// the process's allowed set (OMP_PROC_BIND=close semantics, via sched_setaffinity inside
/// a parallel region). Returns {threads in use, pinned}. Throws rtx::Error(Environment) if
/// affinity cannot be set.
std::pair<int, bool> configure_threads(int threads, bool pin);

// ---- artifacts -------------------------------------------------------------------------------

/// Context recorded in an artifact next to the results.
struct ArtifactMeta {
  std::string pack_name, pack_source;
  uint64_t seed = 0;
  Backend backend = Backend::CPU;
  RunnerOptions runner;
  std::string filter;
  int threads = 0;
  bool pinned = false;
  Peaks peaks;
  size_t rounds = 1;        ///< processes merged (written as options.rounds only when > 1)
  /// 1-minute load average (telemetry::load_average_1m) when the run started / ended, written
  /// to the document's "host" object; < 0: not recorded.
  double load1_start = -1, load1_end = -1;
  nlohmann::json hardware = nlohmann::json::object();  ///< hardware profile
};

/// The rtx.bench.v1 document (fields: docs/tools/rtx-bench.md).
nlohmann::json to_json(const RunResult& r, const ArtifactMeta& meta);

/// Parse and validate an rtx.bench.v1 document. Throws rtx::Error(Input) naming `source`
/// and the field ("base.json: field '/cases/3/samples': expected array, got string"): also
/// for a status other than ok/failed/skipped, duplicate case ids, an ok case without
/// samples, a sample that is not a finite positive number, `n` not the sample count, or a
/// `time.median_s` that disagrees with the samples' median (relative 1e-6).
nlohmann::json check_bench_artifact(const nlohmann::json& doc, const std::string& source);
/// Read a file ("-" stdin) and check_bench_artifact it.
nlohmann::json read_bench_artifact(const std::string& path);

/// Human table of an artifact's cases (time with units, CI, GFLOP/s, GB/s, % of peak, flags).
std::string format_table(const nlohmann::json& artifact, bool color = false);

/// "1.23 ms" / "456 us" / "12.3 ns" / "2.5 s".
std::string format_seconds(double s);

/// Merge the artifacts of R rounds of the same pack (one child process each, `run --rounds`)
/// into one result: per case (matched by id, in the first round's order) the concatenated
/// samples, round_medians (the median of each round's samples), summary statistics
/// recomputed on the merged samples, noisy if any round was noisy, status "failed" if any round
/// failed, sampling_s summed. A case of which some rounds were contended (host.contended of
/// that round) while quiet_rounds_suffice(quiet, R) holds is merged from its quiet rounds only:
/// the busy rounds go to host.rounds_left_out (round, reason, samples), host.judged_rounds
/// counts the others and the case is not contended. Otherwise every round is merged and the
/// case is contended, its reason naming the first busy round and why none was left out.
/// Roofline fields are left for annotate_roofline. Throws rtx::Error(Input) naming the round
/// when `rounds` is empty or the rounds' case ids differ.
RunResult merge_rounds(const std::vector<nlohmann::json>& rounds);

/// merge_rounds for the two sides of one `run --baseline-exe` run, whose round k of this
/// program (`fresh[k]`) and of the baseline (`base[k]`) ran next to each other (ABBA order), so
/// that drift and neighbours fall on both alike (Kalibera & Jones 2013). The leave-out rule is
/// applied per case to the pairs: a round busy on either side is left out on both (on the quiet
/// side as LeftOutRound::paired), when the rounds quiet on both sides suffice
/// (quiet_rounds_suffice); else both sides keep every round. So the sides are judged on the same
/// round indices, never on 4 rounds against 5. Returns {fresh merged, base merged}. Throws
/// rtx::Error(Input) as merge_rounds does, and when the sides differ in round count or case ids.
std::pair<RunResult, RunResult> merge_rounds_paired(const std::vector<nlohmann::json>& fresh,
                                                    const std::vector<nlohmann::json>& base);

/// Most rounds `run --rounds` accepts.
inline constexpr size_t kMaxRounds = 200;
/// Fewest rounds on both sides for compare to judge a case on its round medians.
inline constexpr size_t kMinRoundsForBasis = 3;
/// Fewest quiet (not contended) rounds a merged case is judged on after its busy rounds are
/// left out: the rounds basis's minimum, so that compare still judges it on round medians.
inline constexpr size_t kMinQuietRounds = kMinRoundsForBasis;

/// True when a case measured in `rounds` rounds, `quiet` of them judged and not contended (a
/// round too short to judge, judged_on "none", does not count as quiet), may be judged
/// on its quiet rounds alone: quiet >= kMinQuietRounds and quiet >= rounds / 2 (at least half).
/// Below that the busy rounds stay in and the case stays contended. The half rule: when most
/// rounds cross the thresholds the host was busy for most of the run, and the rounds that did
/// not are likely just under the thresholds rather than quiet.
bool quiet_rounds_suffice(size_t quiet, size_t rounds);

/// A round's evidence as the leave-out rule reads it (merge_rounds, merge_rounds_paired, and
/// rtx-evolve's gates): busy when measured and contended; quiet when measured, judged and not
/// contended. A window too short to judge (judged_on "") is neither: on a busy host only the
/// long (busy) windows would be judged at all.
inline bool round_busy(const HostEvidence& e) { return e.measured && e.contended; }
inline bool round_quiet(const HostEvidence& e) { return e.measured && !e.contended && !e.judged_on.empty(); }

// ---- compare ---------------------------------------------------------------------------------

/// One row of a comparison.
struct CompareRow {
  std::string id;
  std::string presence;     ///< "both", "base only", "new only", "not judged"
  std::string note;         ///< why not judged (status of either side)
  double base_median = 0, new_median = 0;  ///< s
  /// "rounds": judged on round_medians_s (both sides have >= kMinRoundsForBasis rounds:
  /// between-process variance included); "samples": on the raw samples_s.
  std::string basis = "samples";
  stats::Comparison cmp;    ///< the statistical verdict (kept as `measured_verdict` when undecided)
  /// "" or why the row is undecided: either side's case has host.contended (recorded by the
  /// runner), e.g. "host busy during base: measuring thread ran 43% of the window". Such a
  /// row counts as `undecided`, never as slower/faster/same, so it cannot fail compare.
  std::string busy;
  /// "" or, when both artifacts are the two sides of one interleaved --baseline-exe run
  /// (same ab.pair_id) judged on round medians and a side was busy, the note kept instead of
  /// `busy`: "host busy in k/N rounds; interleaved ABBA rounds balance it". The verdict stands.
  std::string balanced;
  /// "" or, when a side was merged from its quiet rounds (host.rounds_left_out), e.g. "base
  /// judged on 4 of 5 rounds (round 2 busy: PSI cpu stall 38% of the window (> 10%))". The
  /// verdict stands: it rests on the quiet rounds only.
  std::string left_out;
  /// The short form of `left_out` for the verdict cell: "base 4/5 rounds", "base 4/5, new 3/5 rounds".
  std::string judged_rounds;
  /// Sides whose host evidence was recorded but not judged (host.judged_on "none": the case and
  /// its whole run took under kMinJudgedWindow): "", "base", "new" or "both".
  std::string unjudged;
  /// new_median / base_median (the ratio of the medians shown; 0 when base_median is 0).
  double medians_ratio = 0;
  /// "" or, for a single-process (basis "samples") slower/faster verdict in a pair whose cases
  /// moved together (stats::common_mode_shift), why it is not counted: the whole process ran at
  /// another speed, which one process per side cannot separate from the code. Such a row counts
  /// as `unconfirmed`, never as slower/faster, so it cannot fail compare.
  std::string unconfirmed;
  /// cmp.ratio (the Hodges-Lehmann change) and medians_ratio disagree materially
  /// (change_contradicts_medians): the output explains the two in a footnote.
  bool change_disagrees = false;
};

/// True when the change estimate `change` (Hodges-Lehmann ratio new/base) and the ratio of
/// the medians `medians_ratio` disagree materially at threshold t: they fall in different bands
/// of (below 1-t, within [1-t, 1+t], above 1+t) and differ from each other by more than a
/// factor 1 + max(t, 1%). Both spread or bimodal round medians can do that (change -0.1% beside
/// medians of 8 ms and 5.7 us). Non-positive or non-finite inputs: false (nothing to compare).
bool change_contradicts_medians(double change, double medians_ratio, double threshold);

/// All rows and the counts by verdict.
struct CompareReport {
  std::string base_source, new_source;
  double threshold = 0.05;
  std::vector<CompareRow> rows;
  size_t same = 0, faster = 0, slower = 0, ambiguous = 0, unmatched = 0;
  size_t undecided = 0;     ///< judged on both sides but measured on a busy host (CompareRow::busy)
  size_t balanced = 0;      ///< judged despite a busy host: ABBA pair on round medians (CompareRow::balanced)
  size_t left_out = 0;      ///< judged on quiet rounds, busy rounds left out on a side (CompareRow::left_out)
  size_t unjudged = 0;      ///< host contention not judged on a side (CompareRow::unjudged)
  size_t disagreements = 0; ///< change and medians disagree (CompareRow::change_disagrees)
  size_t unconfirmed = 0;   ///< single-process slower/faster verdicts of a common-mode shift (CompareRow::unconfirmed)
  /// The common-mode test over the rows judged on one process per side (basis "samples", host
  /// not busy); `detected` turned their slower/faster verdicts into `unconfirmed`.
  stats::CommonMode common_mode;
};

/// Compare two checked bench artifacts case by case (matched by id). A case whose two sides
/// both carry round_medians_s with >= kMinRoundsForBasis rounds is judged on the round
/// medians (o.min_samples lowered to kMinRoundsForBasis), otherwise on the raw samples.
/// A case whose base or new side has host.contended = true is reported undecided (CompareRow::busy)
/// whatever the statistics say, except when the two artifacts are the baseline and new sides of
/// one `run --baseline-exe` (the same `ab.pair_id`) and the case is judged on round medians:
/// interleaved ABBA rounds expose both sides to the same contention, so the verdict stands and
/// CompareRow::balanced notes the busy rounds (Kalibera & Jones, "Rigorous benchmarking in
/// reasonable time", ISMM 2013). Artifacts without host evidence (older runs) are judged as before.
/// A side merged from its quiet rounds (host.rounds_left_out, merge_rounds) is not contended and
/// is judged on them, noted in CompareRow::left_out. When most rows judged on one process per
/// side (basis "samples") share a slower or faster verdict (stats::common_mode_shift), the shift
/// is the process's, not the code's: their slower/faster verdicts become CompareRow::unconfirmed
/// (counted in `unconfirmed`, not in slower/faster). Each row also records the sides not judged
/// for contention (CompareRow::unjudged) and whether its change contradicts its medians.
CompareReport compare_artifacts(const nlohmann::json& base, const nlohmann::json& fresh, const stats::CompareOptions& o,
                                const std::string& base_source = "base", const std::string& new_source = "new");
/// Render a report: "table" (aligned text), "md" (GitHub markdown), "csv", "json". The change
/// is written as stats::format_change (time new/base [95% CI]) in table and md, and as
/// time_ratio, time_ratio_ci and change (beside the older ratio, ratio_ci) in json. Table and
/// md keep the verdict cell short ("undecided (busy host)", "unconfirmed (process shift)", "same (busy host, ABBA)", "same
/// (base 4/5 rounds)", "same (host not judged)"), list each distinct host reason (and each
/// left-out-rounds note) once below the table with its cases, mark a change that disagrees with
/// the medians with '*' and explain it in a footnote, and say how many cases were not judged
/// for contention; json carries the same as fields (docs/tools/rtx-bench.md); csv ends each row
/// with `reason` (host notes first) and `measured_verdict`. Throws rtx::Error(Usage) for another
/// format.
std::string format_compare(const CompareReport& r, const std::string& format);

/// Write the error `e` on `out` in the machine format `format`: "json" {"error": {category,
/// message, where, hint, exit_code}} (the object cli::run_tool writes under --json); "csv" the
/// header error,category,message,where,hint,exit_code and one row starting "error"; nothing for
/// another format (table and md are read by people, who read stderr).
void write_compare_error(const Error& e, const std::string& format, std::ostream& out);

/// Parse "5%", "5 %" or "0.05" into 0.05 (in [0, 1)). Throws rtx::Error(Usage) naming `flag`.
double parse_threshold(const std::string& s, const char* flag = "--threshold");

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
