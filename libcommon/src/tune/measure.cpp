// KernelObjective: check first, then time with rtx-bench's stop rule, with early abort.
#include "rtx/tune/measure.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <omp.h>

#include "rtx/measure/measure.hpp"
#include "rtx/core/error.hpp"
#include "rtx/stats/abba.hpp"
#include "rtx/stats/stats.hpp"

namespace rtx::tune {

KernelObjective::KernelObjective(const kernels::OpDef& op, const kernels::Variant& variant, kernels::Shape shape,
                                 DType dtype, uint64_t seed, size_t warmup)
    : op_(op), variant_(variant), shape_(std::move(shape)), dtype_(dtype), seed_(seed), warmup_(warmup) {}

Evaluation KernelObjective::evaluate(const Params& p, const EvalBudget& b) {
  using Clock = std::chrono::steady_clock;
  Evaluation e;
  if (variant_.validate) {
    if (std::string why = variant_.validate(shape_, p); !why.empty()) {
      e.status = Evaluation::Status::Skip;
      e.reason = why;
      return e;
    }
  }
  std::unique_ptr<kernels::Instance> inst;
  try {
    inst = variant_.make(shape_, dtype_, p, seed_);
  } catch (const Error& err) {
    if (err.category() != ErrorCategory::Input) throw;
    e.status = Evaluation::Status::Skip;
    e.reason = err.message();
    return e;
  }
  inst->run();
  inst->sync();
  const kernels::CheckResult c = inst->check();
  if (!c.ok) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "wrong output: max_rel_err %.3g > tolerance %.3g", c.max_rel_err, c.tolerance);
    e.status = Evaluation::Status::Fail;
    e.reason = buf;
    if (c.unwritten) e.reason += ", " + std::to_string(c.unwritten) + " outputs unwritten";
    if (c.nonfinite) e.reason += ", " + std::to_string(c.nonfinite) + " non-finite";
    if (!c.detail.empty()) e.reason += " (" + c.detail + ")";
    return e;
  }
  const auto w0 = Clock::now();
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  for (size_t w = 0; w < warmup_ && since(w0) < b.max_time; ++w) {
    inst->run();
    inst->sync();
  }
  Evaluation timed = sample_until(b, [&] { return inst->timed_run(); });
  return timed;
}

std::optional<std::pair<std::vector<double>, std::vector<double>>> KernelObjective::interleaved(const Params& a,
                                                                                                const Params& b,
                                                                                                size_t n) {
  std::unique_ptr<kernels::Instance> ia, ib;
  try {
    ia = variant_.make(shape_, dtype_, a, seed_);
    ib = variant_.make(shape_, dtype_, b, seed_);
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::Input) throw;
    return std::nullopt;
  }
  for (auto* inst : {ia.get(), ib.get()}) {
    inst->run();
    inst->sync();
    if (!inst->check().ok) return std::nullopt;
    inst->run();  // warm-up
    inst->sync();
  }
  return sample_interleaved([&] { return ia->timed_run(); }, [&] { return ib->timed_run(); }, n);
}

HostJudgedObjective::HostJudgedObjective(Objective& inner, kernels::Backend backend,
                                         std::function<measure::HostSample()> sampler, bool thread_runs)
    : inner_(inner),
      cpu_share_rule_(thread_runs && backend == kernels::Backend::CPU ? measure::CpuShareRule::Apply
                                                                       : measure::CpuShareRule::Off),
      sampler_(sampler ? std::move(sampler) : measure::sample_host) {}

void HostJudgedObjective::mark() { remember(sampler_()); }

void HostJudgedObjective::remember(const measure::HostSample& start) {
  starts_.push_back(start);
  if (starts_.size() > 256) starts_.pop_front();  // a 50 ms look-back never needs more
}

measure::HostEvidence HostJudgedObjective::judge(const measure::HostSample& before,
                                                    const measure::HostSample& after) {
  using namespace measure;
  const int threads = std::max(1, omp_get_max_threads());
  HostEvidence h = contention_evidence(before, after, threads, cpu_share_rule_);
  if (h.judged_on == "case") {
    h.judged_on = "trial";
  } else {
    // Too short alone: the span back to the latest start at least kMinJudgedWindow earlier.
    const HostSample* from = nullptr;
    for (auto it = starts_.rbegin(); it != starts_.rend(); ++it)
      if (after.wall_s - it->wall_s >= kMinJudgedWindow) {
        from = &*it;
        break;
      }
    if (from) {
      HostEvidence span;
      span.threads = threads;
      add_window(span, *from, after);
      // Not the CPU-share rule (the span holds the trials' store writes, where the measuring
      // thread sleeps in fsync): judged on PSI and switches only.
      judge_contention(span, CpuShareRule::Off);
      h.contended = span.contended;
      h.judged_on = span.judged_on.empty() ? "" : "recent";
      char w[64];
      std::snprintf(w, sizeof w, "%.3g", span.window_s);
      h.reason = span.contended ? "recent " + std::string(w) + " s (this trial's window is too short to judge alone): " +
                                      span.reason
                                : "";
    }
  }
  remember(before);
  return h;
}

Evaluation HostJudgedObjective::evaluate(const Params& p, const EvalBudget& b) {
  const measure::HostSample before = sampler_();
  Evaluation e = inner_.evaluate(p, b);
  const measure::HostSample after = sampler_();
  if (e.status != Evaluation::Status::Ok || e.reused) return e;
  const measure::HostEvidence h = judge(before, after);
  e.contended = h.contended;
  e.contention_reason = h.contended ? h.reason : "";
  e.judged_on = h.judged_on;
  return e;
}

std::optional<std::pair<std::vector<double>, std::vector<double>>> HostJudgedObjective::interleaved(const Params& a,
                                                                                                    const Params& b,
                                                                                                    size_t n) {
  const measure::HostSample before = sampler_();
  auto r = inner_.interleaved(a, b, n);
  interleaved_host_ = judge(before, sampler_());
  return r;
}

std::pair<std::vector<double>, std::vector<double>> sample_interleaved(const std::function<double()>& a,
                                                                       const std::function<double()>& b, size_t n) {
  std::pair<std::vector<double>, std::vector<double>> out;
  for (size_t slot = 0; slot < 2 * n; ++slot) {  // ABBA (stats::abba_arm)
    if (stats::abba_arm(slot) == 0) out.first.push_back(a());
    else out.second.push_back(b());
  }
  return out;
}

Evaluation sample_until(const EvalBudget& b, const std::function<double()>& sample) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  Evaluation e;
  const auto t0 = Clock::now();
  const size_t max_n = std::max<size_t>(1, b.max_samples);
  while (e.samples.size() < max_n) {
    e.samples.push_back(sample());
    const size_t n = e.samples.size();
    if (b.abort_above > 0 && n == std::max<size_t>(1, b.abort_after) && n < max_n) {
      const double m = stats::median(e.samples);
      if (m > b.abort_above) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "aborted early: median of first %zu samples %.4g s > %.4g s (abort threshold)", n,
                      m, b.abort_above);
        e.aborted = true;
        e.reason = buf;
        break;
      }
    }
    if (n >= b.min_samples && measure::converged(e.samples, b.max_rel_ci, b.min_samples)) break;
    // The time cap never stops below min_samples: RecordingObjective reuses an Ok record only
    // with >= min_samples samples, so a shorter (time-capped, e.g. on a loaded host) record
    // would be re-measured on every resume and resume would not follow the same path.
    if (since(t0) >= b.max_time && n >= std::max<size_t>(1, b.min_samples)) break;
  }
  e.status = Evaluation::Status::Ok;
  e.median = stats::median(e.samples);
  return e;
}

}  // namespace rtx::tune
