// The measuring engine: host-contention evidence around each sampling window and the one
// contention rule every tool judges a host by; the adaptive sampling runner.
#pragma once
#include "rtx/measure/pack.hpp"

namespace rtx::measure {
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
  /// The round (1-based: the child process) each of `round_medians` came from, same length:
  /// rounds left out as busy or that ran no sample leave gaps. Compare aligns the cases of one
  /// process by it (artifact field round_ids).
  std::vector<uint64_t> round_ids;
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

}  // namespace rtx::measure
