// The adaptive sampling runner of rtx-bench: check, warm up, sample until the median's CI
// is tight or the time budget is spent; sequential or seeded-interleaved across cases.
#include <sched.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "rtx/measure/measure.hpp"
#include "rtx/telemetry/bus.hpp"
#include "rtx/telemetry/gpu_clock.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/kernels/matmul.hpp"

namespace rtx::measure {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// A case being measured.
struct Live {
  size_t index = 0;                            // into the input/result vectors
  std::unique_ptr<kernels::Instance> inst;
  bool done = false;
};

/// Rethrow an instance error with the case id in front.
[[noreturn]] void rethrow_for(const BenchCase& c, const Error& e) {
  throw Error(e.category(), "case " + c.id + ": " + e.message(), e.where().empty() ? c.id : e.where(), e.hint());
}

/// Summary statistics and the stop decision for the current samples.
void summarize(CaseResult& r) {
  const auto& s = r.samples;
  if (s.empty()) return;
  r.median = stats::median(s);
  r.p10 = stats::percentile(s, 0.10);
  r.p90 = stats::percentile(s, 0.90);
  r.mad = stats::mad(s);
  r.ci = stats::median_ci(s);
  r.rel_ci = r.median > 0 ? std::max(r.median - r.ci.lo, r.ci.hi - r.median) / r.median : 0;
  if (r.median > 0) {
    r.flops_per_s = r.work.flops / r.median;
    r.bytes_per_s = r.work.bytes / r.median;
  }
}

/// Take one sample (flush first when cold). Returns the sample.
double sample_once(kernels::Instance& inst, bool cold) {
  if (cold) {
    inst.flush_cache();
    inst.sync();
  }
  return inst.timed_run();
}

void progress_line(const RunnerOptions& o, size_t done, size_t total, const CaseResult& r) {
  if (!o.progress) return;
  std::fprintf(stderr, "\r\033[K[%zu/%zu] %s  n=%zu  median %s  ci +-%.1f%%", done, total, r.c.id.c_str(),
               r.samples.size(), format_seconds(r.median).c_str(), 100 * r.rel_ci);
  std::fflush(stderr);
}

/// "integer in [lo, hi]" check for a runner option.
std::string integer_problem(double v, double lo, double hi, const char* what) {
  char b[160];
  if (!std::isfinite(v) || v != std::floor(v) || v < lo || v > hi) {
    std::snprintf(b, sizeof b, "%s must be an integer in [%.17g, %.17g], got %.17g", what, lo, hi, v);
    return b;
  }
  return "";
}

/// "finite number in (0, hi]" check for a runner option.
std::string positive_problem(double v, double hi, const char* what) {
  char b[160];
  if (!std::isfinite(v) || !(v > 0) || v > hi) {
    std::snprintf(b, sizeof b, "%s must be a finite number in (0, %.17g], got %.17g", what, hi, v);
    return b;
  }
  return "";
}

}  // namespace

std::string runner_option_problem(const std::string& key, double v) {
  if (key == "warmup") return integer_problem(v, 0, 1e6, "warmup (untimed runs)");
  if (key == "min_samples") return integer_problem(v, 1, 1e7, "min_samples");
  if (key == "max_samples") return integer_problem(v, 1, 1e9, "max_samples");
  if (key == "max_time") return positive_problem(v, 86400, "max_time (seconds per case)");
  if (key == "rounds") return integer_problem(v, 1, static_cast<double>(kMaxRounds), "rounds (processes per run)");
  if (key == "max_rel_ci") return positive_problem(v, 1, "max_rel_ci (a fraction: 0.02 is 2%)");
  if (key == "threads") {
    const int cpus = std::max(1, omp_get_num_procs());
    return integer_problem(v, 0, 4.0 * cpus, "threads (0: the default; at most 4 x the logical CPUs)");
  }
  throw_internal("runner_option_problem: unknown option '" + key + "'");
}

uint64_t parse_seed(const std::string& text) {
  const char* hint = "a decimal integer in [0, 18446744073709551615]";
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos)
    throw_usage("bad --seed '" + text + "'", "--seed", hint);
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') throw_usage("--seed " + text + " is out of range", "--seed", hint);
  return static_cast<uint64_t>(v);
}

std::vector<size_t> interleave_order(size_t n, uint64_t seed, uint64_t round) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  Philox rng(seed, 0x1e7e0000ull + round);
  for (size_t i = n; i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.next_u32() % i);  // modulo bias < i / 2^32: negligible
    std::swap(v[i - 1], v[j]);
  }
  return v;
}

bool converged(const std::vector<double>& samples, double max_rel_ci, size_t min_samples) {
  if (samples.size() < std::max<size_t>(min_samples, 1)) return false;
  const stats::Interval ci = stats::median_ci(samples);
  if (ci.coverage < 0.95) return false;
  const double m = stats::median(samples);
  if (!(m > 0)) return true;  // a zero-time op cannot get tighter
  return std::max(m - ci.lo, ci.hi - m) / m <= max_rel_ci;
}

void annotate_roofline(CaseResult& r, const Peaks& peaks) {
  r.bound.clear();
  r.peak_fraction.reset();
  if (r.status != "ok" || !(r.median > 0)) return;
  if (peaks.flops > 0 && peaks.bytes_per_s > 0 && r.work.bytes > 0) {
    const double balance = peaks.flops / peaks.bytes_per_s;  // FLOP/B
    const double intensity = r.work.flops / r.work.bytes;
    if (intensity >= balance) {
      r.bound = "compute";
      r.peak_fraction = r.flops_per_s / peaks.flops;
    } else {
      r.bound = "memory";
      r.peak_fraction = r.bytes_per_s / peaks.bytes_per_s;
    }
  } else if (peaks.flops > 0 && r.work.bytes <= 0 && r.work.flops > 0) {
    r.bound = "compute";
    r.peak_fraction = r.flops_per_s / peaks.flops;
  } else if (peaks.bytes_per_s > 0 && r.work.flops <= 0 && r.work.bytes > 0) {
    r.bound = "memory";
    r.peak_fraction = r.bytes_per_s / peaks.bytes_per_s;
  }
}

std::pair<int, bool> configure_threads(int threads, bool pin) {
  const std::string why = runner_option_problem("threads", threads);
  if (!why.empty()) throw_usage(why, "--threads", "use 0 (the default) or N >= 1");
  if (threads > 0) omp_set_num_threads(threads);
  const int n = omp_get_max_threads();
  if (!pin) return {n, false};
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    throw_env(std::string("--pin: sched_getaffinity failed: ") + std::strerror(errno), "--pin");
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.empty()) throw_env("--pin: the process may run on no CPU", "--pin");
  int failures = 0;
  // OMP_PROC_BIND=close: thread i on the i-th allowed CPU (wrapping). libgomp keeps its
  // pool, so the binding holds for later parallel regions with the same thread count.
#pragma omp parallel num_threads(n) reduction(+ : failures)
  {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<size_t>(omp_get_thread_num()) % cpus.size()], &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) ++failures;
  }
  if (failures) throw_env("--pin: sched_setaffinity failed for " + std::to_string(failures) + " threads", "--pin");
  return {n, true};
}

namespace {
/// A bench case's span args: {"case": id, "op", "variant"} (built only while tracing).
nlohmann::json case_span_args(const BenchCase& c) {
  if (!telemetry::enabled()) return nullptr;
  return {{"case", c.id}, {"op", c.op}, {"variant", c.variant}};
}
}  // namespace

RunResult run_cases(const std::vector<BenchCase>& cases, const kernels::Registry& reg, const RunnerOptions& o) {
  if (!(o.max_time >= 0)) throw_usage("--max-time must be >= 0", "--max-time");
  if (!(o.max_rel_ci > 0)) throw_usage("--max-rel-ci must be > 0", "--max-rel-ci", "e.g. 0.02 for 2%");
  if (o.max_samples < 1) throw_usage("--max-samples must be >= 1", "--max-samples");
  RunResult out;
  out.cases.resize(cases.size());
  size_t total = 0, finished = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    out.cases[i].c = cases[i];
    out.cases[i].stop_reason = cases[i].skip_reason;
    if (cases[i].skip_reason.empty()) ++total;
  }

  // Contention readings around every sampling window (outside the timed samples).
  const std::function<HostSample()> read_host = o.host_sampler ? o.host_sampler : std::function<HostSample()>(sample_host);
  // The run's window (out.host) is the run minus these waits, as a sum of segments: each
  // segment's wall time, CPU times, switches and PSI stall alike. (Subtracting the waits from
  // the wall time alone left the spinning workers' CPU and any stall of the waits in, over a
  // shorter window: a quiet run of cpu.blas cases read 3.5 CPUs of process time on 2 CPUs and
  // a PSI stall of 53%, and every case was flagged busy.) Open while `run_open`.
  bool run_open = false;
  HostSample segment_start;

  // Let OpenBLAS's idle workers park before a case is prepared (after loading, or after the
  // previous case's cblas calls): spinning, they take the CPUs from the case's OpenMP threads.
  // The wait is left out of the run's host window (a sleeping thread would read as contended).
  // A case on OpenBLAS's pool needs no wait: the spinning workers are the ones it runs on.
  auto on_blas_pool = [&](size_t i) {
    if (!cases[i].skip_reason.empty()) return false;
    return reg.variant(cases[i].op, cases[i].variant).uses_blas_pool;
  };
  auto park_blas_pool = [&] {
    const double park = kernels::blas_pool_parked_in_s();
    if (park <= 0) return;
    if (run_open) add_window(out.host, segment_start, read_host());
    std::this_thread::sleep_for(std::chrono::duration<double>(park));
    if (run_open) segment_start = read_host();
  };

  // Prepare one case: make, check, checksum, warm up. Returns null when it failed its check.
  auto prepare = [&](size_t i) -> std::unique_ptr<kernels::Instance> {
    const BenchCase& c = cases[i];
    CaseResult& r = out.cases[i];
    if (!on_blas_pool(i)) park_blas_pool();
    const kernels::OpDef& op = reg.op(c.op);
    const kernels::Variant& v = reg.variant(c.op, c.variant);
    std::unique_ptr<kernels::Instance> inst;
    // Engine spans (rtx-trace): bench.prepare holds the correctness check's kernel runs
    // (kernel.launch records with shape and variant); warm-up and the timed samples are spans
    // with their kernel records muted, so tracing adds nothing inside the timed loop.
    telemetry::ScopedSpan span("bench.prepare", case_span_args(c));
    try {
      r.work = op.work ? op.work(c.shape, c.dtype) : kernels::Work{};
      inst = v.make(c.shape, c.dtype, c.params, o.seed);
      r.check = inst->check();
      inst->sync();
      r.checksum = inst->checksum();
      r.footprint_bytes = inst->footprint_bytes();
    } catch (const Error& e) {
      rethrow_for(c, e);
    }
    if (!r.check.ok) {
      r.status = "failed";
      r.stop_reason = "correctness check failed: max_rel_err " + std::to_string(r.check.max_rel_err) + " > tolerance " +
                      std::to_string(r.check.tolerance) + (r.check.detail.empty() ? "" : " (" + r.check.detail + ")");
      return nullptr;
    }
    r.status = "ok";
    // Warm-up is bounded by time too: a huge --warmup on a slow case must not hang.
    telemetry::ScopedSpan warm_span("bench.warmup", case_span_args(c));
    const core::MuteEvents mute;
    const auto w0 = Clock::now();
    for (size_t w = 0; w < o.warmup; ++w) {
      inst->run();
      inst->sync();  // CUDA: wait, so the clock sees the work and the queue cannot grow unbounded
      if (seconds_since(w0) >= o.max_time) break;
    }
    inst->sync();
    return inst;
  };

  // Sequential runs take the cases on OpenBLAS's pool first (stable: pack order otherwise), so
  // its workers park once, before the first other case, instead of after each BLAS case: about
  // 0.13 s saved per BLAS case on the 2-vCPU VM, which a default run of 5 rounds pays 5 times.
  std::vector<size_t> order(cases.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!o.interleave) std::stable_partition(order.begin(), order.end(), on_blas_pool);

  const int threads = omp_get_max_threads();
  // The pool OpenBLAS started at load time, before the run window opens (unless a BLAS case is first).
  if (order.empty() || !on_blas_pool(order.front())) park_blas_pool();
  segment_start = read_host();
  run_open = true;

  // Sample case `L` up to `limit` more samples; marks it done when a stop rule fires.
  auto sample = [&](Live& L, size_t limit) {
    CaseResult& r = out.cases[L.index];
    std::optional<telemetry::ScopedSpan> span;
    if (telemetry::enabled()) span.emplace("bench.measure", case_span_args(r.c));
    const HostSample before = read_host();
    const auto t0 = Clock::now();
    std::optional<core::MuteEvents> mute(std::in_place);
    for (size_t k = 0; k < limit && !L.done; ++k) {
      r.samples.push_back(sample_once(*L.inst, o.cold));
      if (r.c.backend == Backend::CUDA) {
        const telemetry::GpuClockSample g = telemetry::sample_gpu_clock(0);
        if (g.valid) {
          r.sm_clock_mhz.push_back(g.sm_mhz);
          r.throttled_samples += g.throttled;
        }
      }
      const size_t n = r.samples.size();
      // Re-evaluating the CI sorts the samples: do it every sample while n is small,
      // then every n/16 samples, so the overhead stays a small fraction.
      const bool evaluate = n >= o.min_samples && (n < 64 || n % std::max<size_t>(1, n / 16) == 0);
      const double elapsed = r.sampling_s + seconds_since(t0);
      if (evaluate && converged(r.samples, o.max_rel_ci, o.min_samples)) {
        L.done = true;
        r.stop_reason = "converged";
      } else if (n >= o.max_samples) {
        L.done = true;
        r.stop_reason = "max_samples";
      } else if (elapsed >= o.max_time) {
        L.done = true;
        r.stop_reason = "max_time";
      }
    }
    r.sampling_s += seconds_since(t0);
    const HostSample after = read_host();
    mute.reset();
    span.reset();
    r.host.threads = threads;
    add_window(r.host, before, after);
    if (L.done) {
      judge_contention(r.host, r.c.backend);
      L.inst.reset();  // free memory early
      summarize(r);
      r.noisy = r.stop_reason != "converged" && !converged(r.samples, o.max_rel_ci, o.min_samples);
      if (r.stop_reason == "max_time" && r.samples.size() < o.min_samples) r.noisy = true;
      progress_line(o, ++finished, total, r);
    }
  };

  // Make case i's instance; false when the case is skipped or failed its check (counted done).
  auto make_live = [&](size_t i, Live& L) {
    if (!cases[i].skip_reason.empty()) return false;
    L.index = i;
    L.inst = prepare(i);
    if (!L.inst) ++finished;
    return static_cast<bool>(L.inst);
  };

  if (!o.interleave) {
    for (size_t i : order) {
      Live L;
      if (!make_live(i, L)) continue;
      out.schedule.push_back(i);
      sample(L, o.max_samples);
    }
  } else {
    std::vector<Live> live;
    for (size_t i = 0; i < cases.size(); ++i) {
      Live L;
      if (make_live(i, L)) live.push_back(std::move(L));
    }
    for (uint64_t round = 0; !live.empty(); ++round) {
      for (size_t k : interleave_order(live.size(), o.seed, round)) {
        Live& L = live[k];
        if (!o.cold) L.inst->run();  // re-warm caches after the other cases ran (untimed)
        L.inst->sync();
        out.schedule.push_back(L.index);
        sample(L, std::max<size_t>(1, o.batch));
      }
      live.erase(std::remove_if(live.begin(), live.end(), [](const Live& L) { return L.done; }), live.end());
    }
  }
  out.host.threads = threads;
  add_window(out.host, segment_start, read_host());
  run_open = false;
  judge_contention(out.host, cases.empty() ? Backend::CPU : cases.front().backend);  // one backend per run
  for (CaseResult& r : out.cases)
    if (r.status == "ok") inherit_run_contention(r.host, out.host);
  if (o.progress && total) std::fprintf(stderr, "\r\033[K");
  return out;
}

}  // namespace rtx::measure
