// The rtx-tune subcommands (run, show, export, import): glue between flags, the registry, the
// search driver, the store's trials and profiles, and the rtx.profile.v1 artifact.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <ostream>
#include <set>
#include <thread>

#include "rtx/app/bench.hpp"
#include "rtx/app/tune.hpp"
#include "rtx/cli/interrupt.hpp"
#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/core/names.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/serve/tuning.hpp"
#include "rtx/stats/compare.hpp"
#include "rtx/stats/stats.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/efficiency.hpp"
#include "rtx/tune/lookup.hpp"
#include "rtx/tune/measure.hpp"

namespace rtx::app::tune {

using nlohmann::json;
using namespace rtx::tune;

const kernels::Variant& default_tunable_variant(const kernels::OpDef& op, kernels::Backend backend) {
  for (const auto& v : op.variants)
    if (v.backend == backend && v.space.grid_size() > 1) return v;
  throw_input("op '" + op.name + "' has no tunable variant on " + kernels::backend_name(backend), "--op",
              "pick an op whose variant declares a parameter space (rtx-bench list shows them)");
}

namespace {

/// One thing to tune: a kernel variant at a shape, or (model non-empty) rtx-serve's scheduler
/// for a model file under a batch workload.
struct Job {
  const kernels::OpDef* op = nullptr;
  const kernels::Variant* variant = nullptr;
  TuneKey key;
  std::string model;
  serve::BatchWorkload workload;
};

int max_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

Space job_space(const Job& j) {
  return j.model.empty() ? variant_space(*j.variant, j.key.shape) : serve::scheduler_space(max_threads(), j.workload);
}

}  // namespace

const kernels::OpDef& resolve_op(const kernels::Registry& reg, const std::string& name, std::ostream& err) {
  if (const kernels::OpDef* o = reg.find(name)) return *o;
  std::vector<std::string> names, starts;
  for (const auto& o : reg.ops()) {
    names.push_back(o.name);
    if (!name.empty() && o.name.rfind(name, 0) == 0) starts.push_back(o.name);
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (starts.size() == 1) {
    err << "rtx-tune: --op '" << printable(name) << "' taken as " << starts[0] << " (the only op it starts)\n";
    return reg.op(starts[0]);
  }
  if (starts.size() > 1)
    throw_usage("op '" + printable(name) + "' is ambiguous: " + std::to_string(starts.size()) + " ops start with it (" + list(starts) + ")",
                "--op", "give the full name, e.g. --op " + starts[0]);
  const auto near = close_matches(names, name);
  throw_usage("unknown op '" + printable(name) + "'", "--op",
              near.empty() ? "known ops: " + list(names) : "did you mean " + list(near) + "?");
}

namespace {

/// Exactly one of --pack, --op, --serve.
void check_target(const Target& c, const char* hint) {
  const int n = !c.pack.empty() + !c.op.empty() + !c.serve.empty();
  if (n != 1)
    throw_usage(n == 0 ? "nothing to tune" : "--pack, --op and --serve are exclusive", "--pack/--op/--serve", hint);
  if (!c.op.empty() && c.shape.empty()) throw_usage("--op needs --shape", "--shape", "e.g. --shape M=64,N=64,K=64");
}

std::vector<Job> resolve_jobs(const Target& c, kernels::Backend backend, const std::string& sku, bool quiet, std::ostream& err) {
  const kernels::Registry& reg = app::bench::registry();
  std::vector<Job> jobs;
  if (!c.serve.empty()) {
    if (backend != kernels::Backend::CPU) throw_usage("--serve tunes the CPU serving engine", "--backend", "drop --backend");
    if (!std::filesystem::is_regular_file(c.serve)) throw_input("no such model file (--serve)", c.serve);
    Job j;
    j.model = c.serve;
    j.workload = serve::BatchWorkload::from_shape(kernels::parse_shape(c.workload, {"requests", "prompt", "gen"}), "--workload");
    j.key = TuneKey{serve::kSchedulerTuneOp, serve::tune_model_name(c.serve), j.workload.shape(), DType::F32, backend, sku};
    jobs.push_back(std::move(j));
    return jobs;
  }
  auto add = [&](const kernels::OpDef& op, const kernels::Variant& v, const kernels::Shape& s, DType dt) {
    Job j;
    j.op = &op;
    j.variant = &v;
    j.key = TuneKey{op.name, v.name, s, dt, backend, sku};
    for (const Job& x : jobs)
      if (x.key.str() == j.key.str()) return;
    jobs.push_back(std::move(j));
  };
  if (!c.pack.empty()) {
    const bench::Pack pack = bench::load_pack(c.pack);
    bench::ExpandOptions eo;
    eo.backend = backend;
    for (const bench::BenchCase& bc : bench::expand_pack(pack, reg, eo)) {
      if (!bc.skip_reason.empty()) continue;
      const kernels::Variant& v = reg.variant(bc.op, bc.variant);
      if (v.space.grid_size() <= 1) {
        if (!quiet) err << "rtx-tune: " << bc.id << ": variant has no parameters to tune; skipped\n";
        continue;
      }
      add(reg.op(bc.op), v, bc.shape, bc.dtype);
    }
    if (jobs.empty()) throw_input(c.pack + ": no runnable case with a tunable variant on " + c.backend, c.pack);
    return jobs;
  }
  std::ostream silent(nullptr);  // -q: errors only
  const kernels::OpDef& op = resolve_op(reg, c.op, quiet ? silent : err);
  const kernels::Shape shape = kernels::parse_shape(c.shape, op.dims);
  const DType dt = parse_dtype(c.dtype);
  if (std::string why = kernels::shape_problem(op, shape, dt, kernels::host_memory_bytes() / 4); !why.empty())
    throw_input("--shape " + c.shape + ": " + why, "--shape");
  const kernels::Variant& v = c.variant.empty() ? default_tunable_variant(op, backend) : reg.variant(op.name, c.variant);
  if (v.backend != backend)
    throw_usage("variant '" + v.name + "' runs on " + kernels::backend_name(v.backend) + ", not " + c.backend, "--variant",
                "pass --backend " + std::string(kernels::backend_name(v.backend)));
  bool dtype_ok = false;
  for (DType x : v.dtypes) dtype_ok = dtype_ok || x == dt;
  if (!dtype_ok) throw_input("variant '" + v.name + "' does not support dtype " + c.dtype, "--dtype");
  add(op, v, shape, dt);
  return jobs;
}

std::string fmt_s(double s) { return s > 0 ? bench::format_seconds(s) : "-"; }

std::string fmt_ratio(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3fx", r);
  return b;
}

/// Progress line on stderr: key i/n, trials, best so far, estimated time left.
struct Progress {
  bool on = false;
  size_t job = 0, jobs = 0;
  Budget budget;
  size_t grid = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  void update(const Trial& t, size_t evals) const {
    if (!on) return;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double eta = -1;
    if (budget.seconds > 0) eta = std::max(0.0, budget.seconds - el);
    if (budget.evals && evals) eta = el / static_cast<double>(evals) * static_cast<double>(budget.evals - std::min(evals, budget.evals));
    else if (!budget.evals && budget.seconds <= 0 && evals)
      eta = el / static_cast<double>(evals) * static_cast<double>(grid > evals ? grid - evals : 0);
    std::fprintf(stderr, "\r\033[K[key %zu/%zu] trials %zu%s  best %s  ETA %s", job, jobs, evals,
                 budget.evals ? ("/" + std::to_string(budget.evals)).c_str() : "", fmt_s(t.best_so_far).c_str(),
                 eta < 0 ? "?" : bench::format_seconds(eta).c_str());
    std::fflush(stderr);
  }
};

/// A key's search counts in rtx-tune run's JSON, finished or interrupted: evaluations, measured,
/// reused (stored trials), skipped, failed, aborted, seconds, stop_reason.
json search_counts(const SearchResult& r) {
  return {{"evaluations", r.evaluations}, {"measured", r.measured}, {"reused", r.evaluations - r.measured},
          {"skipped", r.skipped},         {"failed", r.failed},     {"aborted", r.aborted},
          {"seconds", r.seconds},         {"stop_reason", r.stop_reason}};
}

}  // namespace

int run_run(const RunCommand& c, std::ostream& out, std::ostream& err) {
  check_target(c, "pass --pack PACK, --op NAME --shape M=..,N=..,K=.., or --serve MODEL");
  const Budget budget = parse_budget(c.budget);
  {
    const auto names = strategy_names();
    if (std::find(names.begin(), names.end(), c.strategy) == names.end())
      throw_usage("unknown strategy '" + c.strategy + "'", "--strategy", "one of: grid, random, halving, tpe");
  }
  if (c.min_samples < 1 || c.max_samples < c.min_samples)
    throw_usage("need 1 <= --min-samples <= --max-samples", "--min-samples");
  if (!(c.max_time > 0) || !std::isfinite(c.max_time)) throw_usage("--max-time must be > 0 s", "--max-time");
  if (!(c.abort_ratio == 0 || c.abort_ratio > 1)) throw_usage("--abort-ratio must be 0 (off) or > 1", "--abort-ratio");
  const kernels::Backend backend = kernels::parse_backend(c.backend);
  const std::string sku = telemetry::sku_key(c.backend);
  const std::vector<Job> jobs = resolve_jobs(c, backend, sku, c.quiet, err);

  store::Store st(store::resolve_db_path(c.db));
  const json hw = telemetry::to_json(telemetry::hardware_profile());
  int64_t run_id = 0;
  if (!c.replay) run_id = st.begin_run("rtx-tune", json(c.argv).dump(), c.seed, rtx::git_sha(), sku, hw.dump());

  json doc = {{"schema", kTuneRunSchema}, {"hardware", hw},         {"strategy", c.strategy},
              {"seed", c.seed},           {"budget", c.budget},     {"replay", c.replay},
              {"keys", json::array()},    {"warnings", json::array()}};
  // A busy host deschedules OpenMP threads mid-region: a microsecond kernel can then time at
  // a scheduler quantum (milliseconds). Say so; the A/B confirmation guards the reported speedup.
  if (const std::string busy = c.replay ? "" : telemetry::busy_host_warning(telemetry::hardware_profile()); !busy.empty()) {
    const std::string w = busy + ": timings are unreliable (OpenMP threads get descheduled; a microsecond kernel can "
                                 "time at milliseconds); stop other jobs, or trust only the A/B-confirmed speedup";
    doc["warnings"].push_back(w);
    if (!c.quiet) err << "rtx-tune: warning: " << w << "\n";
  }
  bool all_found = true, interrupted = false;
  try {
    for (size_t ji = 0; ji < jobs.size(); ++ji) {
      const Job& j = jobs[ji];
      const Space space = job_space(j);
      TrialStore trials(st, j.key);
      SearchOptions so;
      so.strategy = c.strategy;
      so.strategy_options.seed = c.seed;
      so.budget = budget;
      so.eval.min_samples = c.min_samples;
      so.eval.max_samples = c.max_samples;
      so.eval.max_time = c.max_time;
      so.abort_ratio = c.abort_ratio;
      so.include_contended = c.include_busy;
      so.first = space.index_of(space.defaults());
      Progress prog;
      prog.on = c.progress && !c.quiet;
      prog.job = ji + 1;
      prog.jobs = jobs.size();
      prog.budget = budget;
      prog.grid = space.size();
      so.on_trial = [&prog](const Trial& t, size_t evals) { prog.update(t, evals); };
      so.should_stop = c.should_stop;
      if (c.should_stop && c.should_stop()) {
        interrupted = true;
        break;
      }

      SearchResult r;
      std::unique_ptr<Objective> inner;  // what measures (null for replay)
      std::unique_ptr<HostJudgedObjective> judged;  // inner, each trial judged for host contention; confirms the winner
      if (c.replay) {
        std::vector<TrialRecord> rec = trials.all();
        if (rec.empty())
          throw_input("no recorded trials for " + j.key.str(), "--replay", "run rtx-tune run without --replay first");
        ReplayObjective obj(std::move(rec));
        r = search(space, obj, so);
      } else {
        if (!j.model.empty()) {
          serve::BatchWorkload w = j.workload;
          w.seed = c.seed;
          inner = std::make_unique<serve::SchedulerObjective>(j.model, w);
        } else {
          inner = std::make_unique<KernelObjective>(*j.op, *j.variant, j.key.shape, j.key.dtype, c.seed);
        }
        // The scheduler objective's thread waits on the engine's workers: no CPU-share rule.
        judged = std::make_unique<HostJudgedObjective>(*inner, backend, c.host_sampler, j.model.empty());
        judged->mark();  // the warm-up's start: a first short trial is judged on the span since
        // Process warm-up, not recorded: the defaults go first, and without it they would also
        // pay for thread-pool start, page faults and clock ramp-up (seen as a 1.4x "speedup" of
        // whatever is measured later).
        if (so.first) {
          EvalBudget warm;
          warm.min_samples = 1;
          warm.max_samples = 1000;
          warm.max_rel_ci = 0;
          warm.max_time = 0.5;
          (void)inner->evaluate(space.at(*so.first), warm);
        }
        RecordingObjective obj(*judged, trials, run_id, c.include_busy);
        r = search(space, obj, so);
      }
      if (prog.on) std::fprintf(stderr, "\r\033[K");
      if (r.stop_reason == "interrupted") {
        // A partial search decides nothing: no confirmation, no profile. Its trials are stored.
        interrupted = true;
        const size_t left = jobs.size() - ji - 1;
        const std::string w = j.key.str() + ": interrupted after " + std::to_string(r.evaluations) + " evaluations (" +
                              std::to_string(r.measured) + " measured, " + std::to_string(r.evaluations - r.measured) +
                              " reused); no profile saved" +
                              (left ? "; " + std::to_string(left) + " more key" + (left == 1 ? "" : "s") + " not started" : "") +
                              (c.replay ? "" : "; the same command again reuses the stored trials and measures the rest");
        json k = search_counts(r);
        k.update({{"key", j.key.str()}, {"best", nullptr}, {"profile_version", nullptr}});
        doc["keys"].push_back(std::move(k));
        doc["warnings"].push_back(w);
        if (!c.quiet) err << "rtx-tune: " << w << "\n";
        break;
      }

      std::optional<Params> best_params, default_params;
      double best_median = 0, default_median = 0;
      bool default_busy = false;  // the defaults ran, but on a busy host: no baseline median
      if (r.best) {
        best_params = r.trials[*r.best].params;
        best_median = r.trials[*r.best].eval.median;
      }
      if (so.first)
        for (const Trial& t : r.trials)
          if (t.index == *so.first && t.eval.status == Evaluation::Status::Ok && !t.eval.aborted) {
            default_params = t.params;
            default_busy = t.eval.contended && !c.include_busy;
            default_median = default_busy ? 0 : t.eval.median;
          }
      // The defaults were measured first and the winner later: on a drifting machine the
      // sequential ratio can be far off. Confirm with interleaved A/B samples of both.
      json confirm = nullptr;
      std::optional<double> confirmed;
      std::optional<Params> profile_params = best_params;
      // A run that measured nothing new (everything answered from the store: a resume of a
      // finished search) neither re-confirms nor re-saves: the profile it made stands, so
      // repeating a command is idempotent even though an A/B is noisy.
      std::optional<int64_t> standing;
      if (!c.replay && r.measured == 0)
        for (const ProfileEntry& e : current_profiles(st))
          if (e.key == j.key.str()) {
            standing = e.version;
            // Report the confirmation the standing profile was saved with.
            const json& res = e.measured_under.contains("result") ? e.measured_under["result"] : json::object();
            if (res.contains("confirm") && res["confirm"].is_object()) {
              confirm = res["confirm"];
              confirm["from_profile_version"] = e.version;
              if (confirm.contains("speedup") && confirm["speedup"].is_number()) confirmed = confirm["speedup"].get<double>();
            }
          }
      if (c.should_stop && c.should_stop()) {  // Ctrl-C after the search, before the confirmation
        interrupted = true;
        if (!c.quiet) err << "rtx-tune: " << j.key.str() << ": interrupted before the confirmation; no profile saved\n";
        break;
      }
      if (judged && !standing && c.confirm > 0 && best_params && default_params && *best_params != *default_params) {
        if (auto ab = judged->interleaved(*default_params, *best_params, c.confirm)) {
          stats::CompareOptions co;
          co.threshold = 0.02;
          co.min_samples = std::min<size_t>(5, c.confirm);
          const stats::Comparison cmp = stats::compare_samples(ab->first, ab->second, co);
          confirmed = 1 / cmp.ratio;
          confirm = {{"n", c.confirm},
                     {"default_median_s", stats::median(ab->first)},
                     {"best_median_s", stats::median(ab->second)},
                     {"speedup", *confirmed},
                     {"ci", {1 / cmp.hi, 1 / cmp.lo}},
                     // The suite's notation (stats::format_change): time best/default with its CI.
                     {"time_ratio", cmp.ratio},
                     {"time_ratio_ci", {cmp.lo, cmp.hi}},
                     {"change", stats::format_change(cmp)},
                     {"p", cmp.p},
                     {"verdict", stats::verdict_name(cmp.verdict)}};
          const bench::HostEvidence& h = judged->last_interleaved();
          confirm["host"] = {{"contended", h.contended},
                             {"reason", h.contended ? json(h.reason) : json(nullptr)},
                             {"judged_on", h.judged_on.empty() ? "none" : h.judged_on}};
          // A winner the A/B finds slower than the defaults is not promoted to the profile.
          if (cmp.verdict == stats::Verdict::Slower) profile_params = default_params;
        }
      }
      int64_t version = standing.value_or(0);
      if (profile_params && !c.replay && !standing) {
        json under = measured_under(sku);
        under["result"] = {{"median_s", profile_params == best_params ? best_median : default_median},
                           {"default_median_s", default_median > 0 ? json(default_median) : json(nullptr)},
                           {"confirmed_speedup", confirmed ? json(*confirmed) : json(nullptr)},
                           {"confirm", confirm},
                           {"strategy", c.strategy},
                           {"seed", c.seed},
                           {"evaluations", r.evaluations},
                           {"contended_trials", r.contended}};
        version = save_profile(st, j.key.str(), *profile_params, under, run_id);
      }
      if (!best_params) all_found = false;
      const double search_speedup = (best_median > 0 && default_median > 0) ? default_median / best_median : 0;
      const double speedup = confirmed ? *confirmed : search_speedup;
      json k = {{"key", j.key.str()},
                {"op", j.key.op},
                {"variant", j.key.variant},
                {"shape", j.key.shape},
                {"dtype", dtype_name(j.key.dtype)},
                {"backend", c.backend},
                {"sku", sku},
                {"contended", r.contended},
                {"contention_reason", r.contended ? json(r.contention_reason) : json(nullptr)},
                {"best", best_params ? json{{"params", *best_params}, {"median_s", best_median}} : json(nullptr)},
                {"default", default_params && !default_busy ? json{{"params", *default_params}, {"median_s", default_median}}
                                                             : json(nullptr)},
                {"speedup_vs_default", speedup > 0 ? json(speedup) : json(nullptr)},
                {"search_speedup", search_speedup > 0 ? json(search_speedup) : json(nullptr)},
                {"time_ratio_vs_default", speedup > 0 ? json(1 / speedup) : json(nullptr)},
                {"confirm", confirm},
                {"profile_params", profile_params ? json(*profile_params) : json(nullptr)},
                {"profile_version", version > 0 ? json(version) : json(nullptr)},
                {"curve", r.curve}};
      k.update(search_counts(r));
      doc["keys"].push_back(k);
      if (!c.quiet) {
        char line[512];
        std::string ratio;
        char buf[256];
        // Changes in the suite's notation (stats::format_time_ratio_ci): time new/base, new = best,
        // base = default; a confirm saved by an older build has only the speedup and its CI.
        if (search_speedup > 0) ratio = std::string(" (search: ") + stats::kTimeRatioLabel + " " + stats::format_time_ratio(1 / search_speedup) + ")";
        if (!confirm.is_null() && confirmed && confirm.value("ci", json()).is_array() && confirm["ci"].size() == 2) {
          const double s_lo = confirm["ci"][0].get<double>(), s_hi = confirm["ci"][1].get<double>();
          const std::string change = stats::format_time_ratio_ci(1 / *confirmed, s_hi > 0 ? 1 / s_hi : 0, s_lo > 0 ? 1 / s_lo : 0);
          std::snprintf(buf, sizeof buf, "; A/B of %d interleaved runs%s: default %s, best %s, %s %s %s%s",
                        confirm.value("n", 0), confirm.contains("from_profile_version") ? " (when saved)" : "",
                        fmt_s(confirm.value("default_median_s", 0.0)).c_str(), fmt_s(confirm.value("best_median_s", 0.0)).c_str(),
                        stats::kTimeRatioLabel, change.c_str(),
                        confirm.value("verdict", std::string("?")).c_str(),
                        confirm.value("verdict", std::string()) == "slower" ? ", defaults kept" : "");
          ratio += buf;
        }
        std::snprintf(line, sizeof line, "%s: %s  best %s %s  default %s%s  %zu evals (%zu measured, %zu reused), %zu skipped, %zu failed, %zu aborted%s\n",
                      j.key.str().c_str(), c.replay ? "[replay]" : "",
                      best_params ? kernels::params_to_string(*best_params).c_str()
                                  : (r.contended ? "(none measured on a quiet host)" : "(none passed)"),
                      fmt_s(best_median).c_str(), default_busy ? "busy" : fmt_s(default_median).c_str(), ratio.c_str(),
                      r.evaluations, r.measured, r.evaluations - r.measured, r.skipped, r.failed, r.aborted,
                      version > 0 ? (", profile v" + std::to_string(version)).c_str() : "");
        err << line;
      }
      if (r.contended) {
        // Busy trials are stored with their verdict (re-measured, never reused) and, unless
        // --include-busy, never chosen: say so, with the first one's evidence.
        const std::string w =
            j.key.str() + ": " + std::to_string(r.contended) + " of " +
            std::to_string(c.replay ? r.evaluations : r.measured) +
            (c.replay ? " replayed trials were recorded on a busy host" : " measured trials ran on a busy host") +
            " (first: " + r.contention_reason + ")" +
            (c.include_busy ? "; --include-busy let them compete"
                            : ": none of them can be the best, and the next run measures them again") +
            (default_busy ? "; the defaults were among them, so the search has no baseline" : "") +
            (!best_params && !c.include_busy ? "; no profile saved: re-run when the host is quiet" : "");
        doc["warnings"].push_back(w);
        if (!c.quiet) err << "rtx-tune: warning: " << w << "\n";
      }
      if (confirm.is_object() && confirm.contains("host") && confirm["host"].value("contended", false)) {
        const std::string w = j.key.str() + ": the A/B confirmation ran on a busy host (" +
                              confirm["host"]["reason"].get<std::string>() +
                              "): its interleaving exposes both sides alike, but its spread is wider";
        doc["warnings"].push_back(w);
        if (!c.quiet) err << "rtx-tune: warning: " << w << "\n";
      }
    }
  } catch (...) {
    if (run_id) st.finish_run(run_id, "error");
    throw;
  }
  if (run_id) st.finish_run(run_id, interrupted ? "interrupted" : all_found ? "ok" : "fail");
  doc["interrupted"] = interrupted;
  if (c.json) out << doc.dump(2) << "\n";
  if (interrupted) return cli::kInterruptedExit;
  return all_found ? 0 : 1;
}

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> v;
  std::string cur;
  for (char ch : s + ",") {
    if (ch == ',') {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(ch))) {
      cur += ch;
    }
  }
  return v;
}

/// Fractions of the budget at which the table shows the mean best-so-far ratio.
constexpr double kCheckpoints[] = {0.01, 0.05, 0.10, 0.25, 0.50, 1.0};
constexpr double kGoalShare = 0.25;  // issue 5: within the target using <= 25% of the grid

}  // namespace

int run_efficiency(const EfficiencyCommand& c, std::ostream& out, std::ostream& err) {
  check_target(c, "pass --op NAME --shape M=..,N=..,K=.. (or --serve MODEL --workload ..): the key whose grid was recorded");
  if (c.format != "table" && c.format != "json" && c.format != "csv")
    throw_usage("unknown format '" + c.format + "'", "--format", "one of table, json, csv");
  if (c.min_samples < 1 || c.max_samples < c.min_samples)
    throw_usage("need 1 <= --min-samples <= --max-samples", "--min-samples");
  if (!(c.abort_ratio == 0 || c.abort_ratio > 1)) throw_usage("--abort-ratio must be 0 (off) or > 1", "--abort-ratio");
  EfficiencyOptions o;
  o.strategies = split_commas(c.strategies);
  o.seeds = c.seeds;
  o.first_seed = c.seed;
  o.within = bench::parse_threshold(c.within, "--within");
  o.budget = c.budget;
  o.default_first = c.default_first;
  o.eval.min_samples = c.min_samples;
  o.eval.max_samples = c.max_samples;
  o.abort_ratio = c.abort_ratio;
  const kernels::Backend backend = kernels::parse_backend(c.backend);
  const std::string sku = telemetry::sku_key(c.backend);
  const std::vector<Job> jobs = resolve_jobs(c, backend, sku, true, err);
  store::Store st(store::resolve_db_path(c.db));

  json doc = {{"schema", kEfficiencySchema}, {"hardware", telemetry::to_json(telemetry::hardware_profile())},
              {"within", o.within}, {"seeds", o.seeds},
              {"first_seed", o.first_seed},  {"keys", json::array()}};
  std::string csv = "key,strategy,evaluations,mean_ratio,worst_ratio\n";
  std::string table;
  char line[512];
  for (const Job& j : jobs) {
    TrialStore trials(st, j.key);
    const std::vector<TrialRecord> rec = trials.all();
    if (rec.empty() && !c.pack.empty()) {
      err << "rtx-tune: " << j.key.str() << ": no recorded trials; skipped\n";
      continue;
    }
    if (rec.empty())
      throw_input("no recorded trials for " + j.key.str(), j.model.empty() ? "--op" : "--serve",
                  "record the grid first: rtx-tune run " +
                      (j.model.empty() ? "--op " + j.key.op + " --shape " + kernels::shape_to_string(j.key.shape)
                                       : "--serve " + j.model + " --workload " + kernels::shape_to_string(j.key.shape)) +
                      " --strategy grid --budget 100000evals --abort-ratio 0");
    size_t busy = 0;
    for (const TrialRecord& t : rec) busy += t.eval.status == Evaluation::Status::Ok && t.eval.contended;
    if (busy)
      err << "rtx-tune: warning: " << j.key.str() << ": " << busy << " of the " << rec.size()
          << " recorded trials were measured on a busy host: the optimum and the ratios may be off (rtx-tune run "
             "measures them again)\n";
    const Space space = job_space(j);
    const EfficiencyReport r = efficiency(space, rec, o, c.partial);
    const StrategyEfficiency* best = nullptr;
    for (const StrategyEfficiency& se : r.strategies)
      if (!best || se.reached > best->reached || (se.reached == best->reached && se.mean_evals < best->mean_evals)) best = &se;
    const double grid_evals = static_cast<double>(r.recorded);
    const bool goal = best && best->reached == best->evals_to_target.size() && best->mean_evals <= kGoalShare * grid_evals;
    json k = {{"key", j.key.str()},
              {"grid_points", r.grid_points},
              {"valid_points", r.valid_points},
              {"recorded", r.recorded},
              {"ok", r.ok},
              {"failed", r.failed},
              {"aborted", r.aborted},
              {"contended", busy},
              {"optimum", {{"params", r.optimum}, {"median_s", r.optimum_s}}},
              {"worst_ratio", r.worst_ratio},
              {"default_ratio", r.default_ratio ? json(*r.default_ratio) : json(nullptr)},
              {"within_target", r.within_target},
              {"budget", r.budget},
              {"best_strategy", best ? json(best->strategy) : json(nullptr)},
              {"goal_met", goal},
              {"strategies", json::array()}};
    std::snprintf(line, sizeof line,
                  "%s\n  grid %zu points, %zu valid, %zu recorded (%zu ok, %zu failed, %zu aborted)%s\n"
                  "  optimum %s %s; worst %.2fx; defaults %s; %zu points within %.3g%%\n"
                  "  %zu seeds per strategy, %zu evaluations each%s\n",
                  j.key.str().c_str(), r.grid_points, r.valid_points, r.recorded, r.ok, r.failed, r.aborted,
                  r.recorded < r.valid_points ? " [partial]" : "", kernels::params_to_string(r.optimum).c_str(),
                  bench::format_seconds(r.optimum_s).c_str(), r.worst_ratio,
                  r.default_ratio ? fmt_ratio(*r.default_ratio).c_str() : "not recorded",
                  r.within_target, o.within * 100, o.seeds, r.budget, c.default_first ? " (defaults first)" : "");
    table += line;
    std::snprintf(line, sizeof line, "  %-8s %9s %8s %8s %8s %7s", "strategy", "reached", "mean", "median", "worst", "%grid");
    table += line;
    for (double f : kCheckpoints) {
      std::snprintf(line, sizeof line, " %7s", ("@" + std::to_string(static_cast<int>(f * 100)) + "%").c_str());
      table += line;
    }
    table += "\n";
    for (const StrategyEfficiency& se : r.strategies) {
      json per_seed = json::array();
      for (const auto& e : se.evals_to_target) per_seed.push_back(e ? json(*e) : json(nullptr));
      k["strategies"].push_back({{"strategy", se.strategy},
                                 {"reached", se.reached},
                                 {"mean_evals", se.mean_evals},
                                 {"median_evals", se.median_evals},
                                 {"worst_evals", se.worst_evals},
                                 {"mean_evals_pct_of_grid", 100 * se.mean_evals / grid_evals},
                                 {"evals_to_target", per_seed},
                                 {"mean_ratio", se.mean_ratio},
                                 {"worst_ratio", se.worst_ratio}});
      std::snprintf(line, sizeof line, "  %-8s %5zu/%-3zu %8.1f %8zu %8zu %6.1f%%", se.strategy.c_str(), se.reached,
                    se.evals_to_target.size(), se.mean_evals, se.median_evals, se.worst_evals,
                    100 * se.mean_evals / grid_evals);
      table += line;
      for (double f : kCheckpoints) {
        const size_t e = std::max<size_t>(1, static_cast<size_t>(std::ceil(f * static_cast<double>(r.budget))));
        std::snprintf(line, sizeof line, " %7.3f", se.mean_ratio[std::min(e, se.mean_ratio.size()) - 1]);
        table += line;
      }
      table += "\n";
      for (size_t e = 0; e < se.mean_ratio.size(); ++e) {
        std::snprintf(line, sizeof line, ",%s,%zu,%.6g,%.6g\n", se.strategy.c_str(), e + 1, se.mean_ratio[e], se.worst_ratio[e]);
        csv += j.key.str() + line;
      }
    }
    if (best) {
      std::snprintf(line, sizeof line, "  best: %s, within %.3g%% of the optimum after %.1f evaluations on average (%.1f%% of the grid's %zu), %zu/%zu seeds; efficient (every seed, <= 25%% of the grid): %s\n",
                    best->strategy.c_str(), o.within * 100, best->mean_evals, 100 * best->mean_evals / grid_evals, r.recorded,
                    best->reached, best->evals_to_target.size(), goal ? "yes" : "NO");
      table += line;
    }
    table += "  (reached: seeds within the target; mean/median/worst: evaluations to get there, a miss counts as the budget;\n"
             "   @N%: mean incumbent median / optimum after N% of the budget)\n";
    doc["keys"].push_back(std::move(k));
  }
  if (doc["keys"].empty()) throw_input(c.pack + ": no case of the pack has recorded trials", "--pack", "record a grid with rtx-tune run first");
  if (c.format == "json") out << doc.dump(2) << "\n";
  else if (c.format == "csv") out << csv;
  else out << table;
  return 0;
}

int run_show(const ShowCommand& c, std::ostream& out, std::ostream& err) {
  store::Store st(store::resolve_db_path(c.db));
  const std::vector<ProfileEntry> cur = current_profiles(st);
  json doc = {{"db", st.path()}, {"profiles", json::array()}};
  for (const ProfileEntry& e : cur) {
    json m = e.measured_under.contains("result") ? e.measured_under["result"] : json::object();
    doc["profiles"].push_back({{"key", e.key},
                               {"version", e.version},
                               {"versions", profile_versions(st, e.key).size()},
                               {"params", e.params},
                               {"median_s", m.value("median_s", json(nullptr))},
                               {"default_median_s", m.value("default_median_s", json(nullptr))},
                               {"measured_under", e.measured_under},
                               {"created_at", e.created_at}});
  }
  if (c.stats) {
    json trials = json::array();
    auto& q = st.prepare(
        "SELECT op, variant, shape, dtype, backend, sku, SUM(status = 'ok'), SUM(status = 'skip'), SUM(status = 'fail'), "
        "MIN(CASE WHEN status = 'ok' AND contended = 0 THEN median_s END), SUM(status = 'ok' AND contended = 1) "
        "FROM tuning_trials GROUP BY op, variant, shape, dtype, backend, sku ORDER BY op, variant, shape");
    while (q.step())
      trials.push_back({{"op", q.column_text(0)},
                        {"variant", q.column_text(1)},
                        {"shape", json::parse(q.column_text(2))},
                        {"dtype", q.column_text(3)},
                        {"backend", q.column_text(4)},
                        {"sku", q.column_text(5)},
                        {"ok", q.column_int64(6)},
                        {"skip", q.column_int64(7)},
                        {"fail", q.column_int64(8)},
                        {"busy", q.column_int64(10)},
                        {"best_median_s", q.column_opt_double(9) ? json(*q.column_opt_double(9)) : json(nullptr)}});
    q.reset();
    // Resolve every tuned key through the run-time lookup, as kernels would.
    ProfileLookup lookup(st);
    for (const ProfileEntry& e : cur) {
      const TuneKey k = TuneKey::parse(e.key);
      (void)lookup(k.op, k.variant, k.shape, k.dtype);
    }
    json stale = json::array();
    for (const auto& [key, why] : lookup.stale()) stale.push_back({{"key", key}, {"reason", why}});
    lookup.publish_stats();
    doc["stats"] = {{"trials", trials}, {"lookup", lookup.stats_json()}, {"stale", stale}};
  }
  if (c.json) {
    out << doc.dump(2) << "\n";
    return 0;
  }
  if (cur.empty()) err << "no tuned profiles in " << st.path() << " (run rtx-tune run first)\n";
  for (const auto& p : doc["profiles"]) {
    out << p["key"].get<std::string>() << "  v" << p["version"].get<int64_t>() << "/" << p["versions"].get<size_t>() << "  "
        << kernels::params_to_string(p["params"].get<Params>());
    if (p["median_s"].is_number()) out << "  " << bench::format_seconds(p["median_s"].get<double>());
    if (p["default_median_s"].is_number())
      out << " (default " << bench::format_seconds(p["default_median_s"].get<double>()) << ")";
    out << "\n";
  }
  if (c.stats) {
    const json& s = doc["stats"];
    out << "trials:\n";
    for (const auto& t : s["trials"])
      out << "  " << t["op"].get<std::string>() << " " << t["variant"].get<std::string>() << " "
          << kernels::shape_to_string(t["shape"].get<kernels::Shape>()) << " " << t["dtype"].get<std::string>() << ": "
          << t["ok"] << " ok (" << t["busy"] << " on a busy host), " << t["skip"] << " skipped, " << t["fail"]
          << " failed\n";
    const json& l = s["lookup"];
    out << "lookup: " << l["entries"] << " entries, " << l["exact"] << " exact, " << l["nearest"] << " nearest, "
        << l["miss"] << " miss, " << l["stale"] << " stale, " << l["invalid"] << " invalid\n";
    for (const auto& x : s["stale"])
      out << "  stale: " << x["key"].get<std::string>() << ": " << x["reason"].get<std::string>() << "\n";
  }
  return 0;
}

int run_export(const ExportCommand& c, std::ostream& out, std::ostream& err) {
  store::Store st(store::resolve_db_path(c.db));
  const json doc = export_profiles(st);
  if (c.out == "-") {
    out << doc.dump(2) << "\n";
  } else {
    io::write_artifact(c.out, doc);
    if (c.json) out << json{{"written", c.out}, {"entries", doc["entries"].size()}}.dump(2) << "\n";
  }
  err << "exported " << doc["entries"].size() << " profile entries" << (c.out == "-" ? "" : " to " + c.out) << "\n";
  return 0;
}

int run_import(const ImportCommand& c, std::ostream& out, std::ostream& err) {
  const json doc = io::read_artifact(c.file, "profile", {1});
  store::Store st(store::resolve_db_path(c.db));
  const ImportResult r = import_profiles(st, doc, c.file == "-" ? "<stdin>" : c.file, c.force);
  for (const auto& s : r.foreign_skus) err << "rtx-tune: warning: imported entries for another SKU '" << s << "' (--force)\n";
  if (c.json)
    out << json{{"imported", r.imported}, {"unchanged", r.unchanged}, {"foreign_skus", r.foreign_skus}}.dump(2) << "\n";
  else
    err << "imported " << r.imported << " entries (" << r.unchanged << " unchanged)\n";
  return 0;
}

}  // namespace rtx::app::tune
