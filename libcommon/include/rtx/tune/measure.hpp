// KernelObjective: evaluates one configuration of a registry variant by making the instance,
// checking it against the float64 reference first, then timing it with rtx-bench's sampling
// statistics (median, 95% median CI stop rule) and aborting early when clearly slower.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>

#include "rtx/measure/measure.hpp"
#include "rtx/core/dtype.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/tune/search.hpp"

namespace rtx::tune {

/// Measures configurations of `variant` of `op` at one shape and dtype. For each evaluate():
///  1. variant.validate(shape, p) non-empty -> Skip with that reason (nothing made or run);
///  2. variant.make(shape, dtype, p, seed); an rtx::Error(Input) from make -> Skip with its text;
///  3. run once, check() against the reference: not ok -> Fail "wrong output: max_rel_err X >
///     tolerance Y (detail)" (never timed, never a winner);
///  4. `warmup` untimed runs, then timed_run() samples until measure::converged (b.min_samples,
///     b.max_rel_ci), b.max_samples, or b.max_time s once at least b.min_samples are taken (the
///     time cap never leaves fewer, so the record is complete for RecordingObjective's resume);
///     after b.abort_after samples, when b.abort_above > 0 and their median exceeds it, stop
///     with aborted = true.
/// Median in s (stats::median). rtx::Error(Environment) from make (no GPU) propagates.
/// The op and variant must outlive the objective.
class KernelObjective : public Objective {
 public:
  KernelObjective(const kernels::OpDef& op, const kernels::Variant& variant, kernels::Shape shape, DType dtype,
                  uint64_t seed, size_t warmup = 1);
  Evaluation evaluate(const Params& p, const EvalBudget& b) override;
  /// Both instances made and checked, one warm-up run each, then timed_run() in ABBA order.
  std::optional<std::pair<std::vector<double>, std::vector<double>>> interleaved(const Params& a, const Params& b,
                                                                                 size_t n) override;

 private:
  const kernels::OpDef& op_;
  const kernels::Variant& variant_;
  kernels::Shape shape_;
  DType dtype_;
  uint64_t seed_;
  size_t warmup_;
};

/// Judges every evaluation of `inner` for host contention, with rtx-bench's per-window rule
/// (measure::judge_contention, i.e. the suite's one rule telemetry::judge_host_window: other
/// processes took > 10% of the window's CPU time, so the search's own scheduler and OpenMP
/// threads never count; without /proc/stat: PSI cpu stall > 10% of the window, the measuring
/// thread running < 80% of it on CPU, > 100 involuntary switches/s), and sets Evaluation::contended,
/// contention_reason and judged_on on Ok results (skips and failures carry no timing and are
/// not judged). The window runs from before inner.evaluate() (instance, check, warm-up,
/// sampling) to after it. A window shorter than measure::kMinJudgedWindow (a microsecond
/// kernel converging in a few ms) is judged, as rtx-bench judges such a case on its whole run,
/// on the span back to the latest earlier evaluation that started at least that long before
/// (judged_on "recent"), with the PSI and switch rules only: the span also holds the store
/// writes between trials, where the measuring thread sleeps in fsync. Before any such start
/// exists the trial stays unjudged (judged_on "", not contended); mark() records a start
/// without evaluating (rtx-tune marks its process warm-up). interleaved() is judged the same
/// way and its verdict kept in last_interleaved(). `sampler` (tests inject busy readings)
/// defaults to measure::sample_host. `thread_runs` false: the measuring thread waits while
/// other threads work (rtx-serve's scheduler objective), so the CPU-share rule is off for every
/// window, as it is on CUDA. `inner` must outlive this.
class HostJudgedObjective : public Objective {
 public:
  explicit HostJudgedObjective(Objective& inner, kernels::Backend backend = kernels::Backend::CPU,
                               std::function<measure::HostSample()> sampler = nullptr, bool thread_runs = true);
  Evaluation evaluate(const Params& p, const EvalBudget& b) override;
  void skipped(const Params& p, const std::string& reason) override { inner_.skipped(p, reason); }
  std::optional<std::pair<std::vector<double>, std::vector<double>>> interleaved(const Params& a, const Params& b,
                                                                                 size_t n) override;
  /// Record a window start now (e.g. before an untimed warm-up), so that the first short
  /// trials can be judged on the span since.
  void mark();
  /// Host verdict of the latest interleaved() call (judged_on "" before any).
  const measure::HostEvidence& last_interleaved() const { return interleaved_host_; }

 private:
  measure::HostEvidence judge(const measure::HostSample& before, const measure::HostSample& after);
  void remember(const measure::HostSample& start);  ///< keep a window start (bounded)
  Objective& inner_;
  measure::CpuShareRule cpu_share_rule_;  ///< Off on CUDA and for a waiting thread (thread_runs false)
  std::function<measure::HostSample()> sampler_;
  std::deque<measure::HostSample> starts_;  ///< recent window starts, oldest first
  measure::HostEvidence interleaved_host_;
};

/// Interleave `n` samples of each of two samplers in ABBA order (a, b, b, a, a, b, ...): the
/// order cancels a linear drift and first-after-the-other cache effects. Returns (a's, b's).
std::pair<std::vector<double>, std::vector<double>> sample_interleaved(const std::function<double()>& a,
                                                                       const std::function<double()>& b, size_t n);

/// rtx-bench's sampling under a tuning budget, for any objective: calls `sample()` (one timed
/// run, s) until b.max_samples, until measure::converged (95% median CI within b.max_rel_ci,
/// once b.min_samples are taken), or until b.max_time s have passed with at least b.min_samples;
/// after b.abort_after samples whose median exceeds b.abort_above (> 0), stops with aborted =
/// true and the reason. Returns status Ok with samples and median (stats::median).
Evaluation sample_until(const EvalBudget& b, const std::function<double()>& sample);

}  // namespace rtx::tune
