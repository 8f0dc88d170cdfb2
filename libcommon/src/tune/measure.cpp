// KernelObjective: check first, then time with rtx-bench's stop rule, with early abort.
#include "rtx/tune/measure.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
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

std::pair<std::vector<double>, std::vector<double>> sample_interleaved(const std::function<double()>& a,
                                                                       const std::function<double()>& b, size_t n) {
  std::pair<std::vector<double>, std::vector<double>> out;
  for (size_t i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      out.first.push_back(a());
      out.second.push_back(b());
    } else {
      out.second.push_back(b());
      out.first.push_back(a());
    }
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
    if (n >= b.min_samples && app::bench::converged(e.samples, b.max_rel_ci, b.min_samples)) break;
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
