// KernelObjective: a fake variant (deterministic "times", one fast but wrong configuration)
// checks check-before-time, early abort and skips; then a real tiny matmul tuned end to end.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "rtx/app/bench.hpp"
#include "rtx/app/tune.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/store/store.hpp"
#include "rtx/tune/measure.hpp"
#include "rtx/tune/records.hpp"
#include "rtx/tune/search.hpp"
#include "test_util.hpp"

using namespace rtx::tune;
using rtx::kernels::Shape;

namespace {

/// Instance whose timed_run returns X * 1 ms (deterministic), whose output is wrong for X == 1,
/// and which counts runs.
class FakeInstance : public rtx::kernels::Instance {
 public:
  FakeInstance(int64_t x, int* timed) : x_(x), timed_(timed) {}
  void run() override { ran_ = true; }
  rtx::kernels::CheckResult check() override {
    rtx::kernels::CheckResult r;
    r.tolerance = 1e-5;
    r.max_rel_err = (x_ == 1 || !ran_) ? 0.5 : 0.0;
    r.ok = r.max_rel_err <= r.tolerance;
    r.detail = "out[3]";
    return r;
  }
  uint64_t checksum() override { return 0; }
  size_t footprint_bytes() const override { return 0; }
  double timed_run() override {
    ++*timed_;
    return static_cast<double>(x_) * 1e-3;
  }
  void flush_cache() override {}

 private:
  int64_t x_;
  int* timed_;
  bool ran_ = false;
};

struct Fake {
  rtx::kernels::OpDef op;
  rtx::kernels::Variant v;
  int timed = 0;
  Fake() {
    op.name = "fake_op";
    op.dims = {"N"};
    v.name = "cpu.fake";
    v.space.params = {{"X", {1, 2, 3, 4, 5}, 3, "fake knob"}};
    v.validate = [](const Shape&, const Params& p) { return p.at("X") == 5 ? std::string("X=5 unsupported") : ""; };
    v.make = [this](const Shape&, rtx::DType, const Params& p, uint64_t) {
      return std::unique_ptr<rtx::kernels::Instance>(new FakeInstance(p.at("X"), &timed));
    };
  }
};

}  // namespace

TEST_CASE("KernelObjective checks first: a fast wrong configuration fails and is never timed", "[cpu]") {
  Fake f;
  KernelObjective obj(f.op, f.v, {{"N", 7}}, rtx::DType::F32, 1);
  EvalBudget b;
  b.min_samples = 4;
  b.max_samples = 4;
  Evaluation e = obj.evaluate({{"X", 1}}, b);
  CHECK(e.status == Evaluation::Status::Fail);
  CHECK(e.reason.find("wrong output: max_rel_err 0.5") != std::string::npos);
  CHECK(e.reason.find("out[3]") != std::string::npos);
  CHECK(f.timed == 0);
  e = obj.evaluate({{"X", 5}}, b);
  CHECK(e.status == Evaluation::Status::Skip);
  CHECK(e.reason == "X=5 unsupported");
  e = obj.evaluate({{"X", 2}}, b);
  CHECK(e.status == Evaluation::Status::Ok);
  CHECK(e.samples.size() == 4);
  CHECK(e.median == Approx(2e-3));
  CHECK(f.timed == 4);
}

TEST_CASE("KernelObjective aborts a clearly slower candidate early", "[cpu]") {
  Fake f;
  KernelObjective obj(f.op, f.v, {{"N", 7}}, rtx::DType::F32, 1);
  EvalBudget b;
  b.min_samples = 10;
  b.max_samples = 10;
  b.max_rel_ci = 1e-9;
  b.abort_after = 3;
  b.abort_above = 3.5e-3;
  Evaluation e = obj.evaluate({{"X", 4}}, b);
  CHECK(e.status == Evaluation::Status::Ok);
  CHECK(e.aborted);
  CHECK(e.samples.size() == 3);
  CHECK(e.reason.find("aborted early") != std::string::npos);
  e = obj.evaluate({{"X", 3}}, b);
  CHECK_FALSE(e.aborted);
  CHECK(e.samples.size() == 10);
}

TEST_CASE("KernelObjective: the time cap never leaves fewer than min_samples, so resume reuses the record", "[cpu]") {
  // A loaded host makes every sample slower than max_time / min_samples; max_time ~0 models that.
  Fake f;
  KernelObjective kobj(f.op, f.v, {{"N", 7}}, rtx::DType::F32, 1);
  rtx::store::Store st(":memory:");
  TrialStore trials(st, TuneKey{"fake_op", "cpu.fake", {{"N", 7}}, rtx::DType::F32, rtx::kernels::Backend::CPU, "cpu:x:y"});
  RecordingObjective obj(kobj, trials, 0);
  EvalBudget b;
  b.min_samples = 4;
  b.max_samples = 10;
  b.max_time = 1e-12;
  Evaluation e = obj.evaluate({{"X", 2}}, b);
  CHECK(e.status == Evaluation::Status::Ok);
  CHECK(e.samples.size() >= 4);
  const int before = f.timed;
  e = obj.evaluate({{"X", 2}}, b);  // same flags again: answered from the store
  CHECK(e.reused);
  CHECK(f.timed == before);
}

TEST_CASE("search over a fake variant: the wrong fast config never wins; trials recorded", "[cpu]") {
  Fake f;
  const Shape shape{{"N", 7}};
  KernelObjective kobj(f.op, f.v, shape, rtx::DType::F32, 1);
  rtx::store::Store st(":memory:");
  TrialStore trials(st, TuneKey{"fake_op", "cpu.fake", shape, rtx::DType::F32, rtx::kernels::Backend::CPU, "cpu:x:y"});
  RecordingObjective obj(kobj, trials, 0);
  const Space s = variant_space(f.v, shape);
  SearchOptions o;
  o.strategy = "grid";
  o.eval.min_samples = 3;
  o.eval.max_samples = 5;
  o.first = s.index_of(s.defaults());
  const SearchResult r = search(s, obj, o);
  REQUIRE(r.best);
  CHECK(r.trials[*r.best].params == Params{{"X", 2}});
  CHECK(r.failed == 1);
  CHECK(r.skipped == 1);
  CHECK(r.aborted == 1);  // X=4 after best 2 ms: 4 > 1.5 x 2
  CHECK(r.trials[0].params == Params{{"X", 3}});  // defaults first
  // Every configuration has one row, the invalid one with its reason (it was never run).
  const auto rows = trials.all();
  std::string seen;
  for (const auto& row : rows) seen += std::to_string(row.config.at("X")) + " ";
  INFO("recorded X: " << seen);
  CHECK(rows.size() == 5);
  for (const auto& row : rows) {
    if (row.config.at("X") == 1) {
      CHECK(row.eval.status == Evaluation::Status::Fail);
      CHECK(row.eval.samples.empty());
    }
    if (row.config.at("X") == 5) {
      CHECK(row.eval.status == Evaluation::Status::Skip);
      CHECK(row.eval.reason == "X=5 unsupported");
    }
  }
  // Resume: nothing is timed again.
  const int before = f.timed;
  const SearchResult again = search(s, obj, o);
  CHECK(f.timed == before);
  CHECK(again.measured == 0);
  CHECK(again.trials[*again.best].params == Params{{"X", 2}});
}

TEST_CASE("tuning a real tiny matmul: checked, measured, best no slower than default", "[cpu]") {
  const auto& reg = rtx::app::bench::registry();
  const auto& op = reg.op("matmul_forward");
  const auto& v = reg.variant("matmul_forward", "cpu.blocked");
  const Shape shape{{"M", 64}, {"N", 64}, {"K", 64}};
  KernelObjective obj(op, v, shape, rtx::DType::F32, 7);
  const Space s = variant_space(v, shape);
  SearchOptions o;
  o.strategy = "random";
  o.strategy_options.seed = 2;
  o.budget.evals = 8;
  o.eval.min_samples = 3;
  o.eval.max_samples = 10;
  o.eval.max_time = 0.02;
  o.first = s.index_of(s.defaults());
  const SearchResult r = search(s, obj, o);
  CHECK(r.evaluations == 8);
  CHECK(r.failed == 0);  // every registered configuration computes the right answer
  REQUIRE(r.best);
  const Trial& best = r.trials[*r.best];
  CHECK(best.eval.status == Evaluation::Status::Ok);
  CHECK(best.eval.median > 0);
  CHECK(best.eval.median <= r.trials[0].eval.median);  // the default was measured too
  CHECK(r.trials[0].params == s.defaults());
}

TEST_CASE("interleaved A/B: ABBA order; KernelObjective times both, refuses a wrong config", "[cpu]") {
  std::string order;
  int t = 0;
  const auto ab = sample_interleaved([&] { order += 'a'; return static_cast<double>(++t); },
                                     [&] { order += 'b'; return static_cast<double>(++t); }, 5);
  CHECK(order == "abbaabbaab");
  CHECK(ab.first == std::vector<double>{1, 4, 5, 8, 9});
  CHECK(ab.second == std::vector<double>{2, 3, 6, 7, 10});

  Fake f;
  KernelObjective obj(f.op, f.v, {{"N", 7}}, rtx::DType::F32, 1);
  const auto r = obj.interleaved({{"X", 3}}, {{"X", 2}}, 6);
  REQUIRE(r);
  CHECK(r->first == std::vector<double>(6, 3e-3));
  CHECK(r->second == std::vector<double>(6, 2e-3));
  CHECK(f.timed == 12);
  CHECK_FALSE(obj.interleaved({{"X", 3}}, {{"X", 1}}, 6));  // X=1 is wrong: never timed
  CHECK(f.timed == 12);
  FunctionObjective fn([](const Params&) { return 1.0; });
  CHECK_FALSE(static_cast<Objective&>(fn).interleaved({}, {}, 3));  // nothing to measure
}

namespace {

/// Host readings on a fake clock: every reading advances the wall clock by `step_s` and the
/// measuring thread's CPU time by 99% of it; the PSI stall counter grows by `stall` x step_s,
/// where `stall` is read at each call (a test flips it to make the host busy).
struct FakeHost {
  double step_s = 0.1;
  double stall = 0.01;
  rtx::app::bench::HostSample now;
  int calls = 0;
  /// With cpus > 0, /proc/stat readings too: the process uses `own` CPUs, other processes `other`.
  int cpus = 0;
  double own = 0.99, other = 0;
  std::function<rtx::app::bench::HostSample()> sampler() {
    return [this] {
      ++calls;
      now.wall_s += step_s;
      now.thread_cpu_s += 0.99 * step_s;
      now.process_cpu_s += (cpus > 0 ? own : 0.99) * step_s;
      now.psi_valid = true;
      now.psi_some_total_us += static_cast<uint64_t>(stall * step_s * 1e6);
      if (cpus > 0) {
        now.cpus = cpus;
        now.cpu_busy.valid = true;
        now.cpu_busy.cpus = cpus;
        now.cpu_busy.tick_s = 0.01;
        now.cpu_busy.busy_s += (own + other) * step_s;
      }
      return now;
    };
  }
};

}  // namespace

TEST_CASE("HostJudgedObjective: the search's own threads are no busy host, a neighbour is", "[cpu]") {
  // rtx-tune --serve on an idle 2-CPU host: its scheduler and OpenMP workers use 1.9 CPUs, PSI
  // reads 18% stall; other processes take nothing. 1 s windows.
  FakeHost host;
  host.step_s = 1.0;
  host.stall = 0.18;
  host.cpus = 2;
  host.own = 1.9;
  host.other = 0.0;
  FunctionObjective fn([](const Params& p) { return 1e-3 * static_cast<double>(p.at("X")); });
  HostJudgedObjective obj(fn, rtx::kernels::Backend::CPU, host.sampler(), false);
  Evaluation e = obj.evaluate({{"X", 2}}, EvalBudget{});
  CHECK(e.judged_on == "trial");
  CHECK_FALSE(e.contended);
  // A CPU hog beside it: other processes take 0.7 CPU-s per s, (0.7 - 0.04) / 2 = 33%.
  host.own = 1.3;
  host.other = 0.7;
  e = obj.evaluate({{"X", 2}}, EvalBudget{});
  CHECK(e.contended);
  CHECK(e.contention_reason == "other processes took 0.70 CPU-s of 2 CPUs x 1.00 s (33%, > 10%)");
}

TEST_CASE("HostJudgedObjective judges each trial's window with rtx-bench's rule", "[cpu]") {
  FakeHost host;
  FunctionObjective fn([](const Params& p) { return 1e-3 * static_cast<double>(p.at("X")); },
                       [](const Params& p) { return p.at("X") == 9 ? std::string("no") : std::string(); },
                       [](const Params& p) { return p.at("X") == 8 ? std::string("wrong") : std::string(); });
  HostJudgedObjective obj(fn, rtx::kernels::Backend::CPU, host.sampler());
  EvalBudget b;
  // A quiet 0.1 s window: judged on itself, not contended.
  Evaluation e = obj.evaluate({{"X", 2}}, b);
  CHECK(e.status == Evaluation::Status::Ok);
  CHECK(e.judged_on == "trial");
  CHECK_FALSE(e.contended);
  CHECK(e.contention_reason.empty());
  // 40% of the window stalled: contended, with rtx-bench's evidence text.
  host.stall = 0.40;
  e = obj.evaluate({{"X", 2}}, b);
  CHECK(e.judged_on == "trial");
  CHECK(e.contended);
  CHECK_THAT(e.contention_reason, Catch::Contains("PSI cpu stall 40% of the window (> 10%)"));
  // Skips and failures carry no timing: not judged.
  e = obj.evaluate({{"X", 9}}, b);
  CHECK(e.status == Evaluation::Status::Skip);
  CHECK(e.judged_on.empty());
  CHECK_FALSE(e.contended);
  e = obj.evaluate({{"X", 8}}, b);
  CHECK(e.status == Evaluation::Status::Fail);
  CHECK_FALSE(e.contended);

  // A window too short to judge alone (10 ms): with no earlier start it stays unjudged...
  FakeHost shorter;
  shorter.step_s = 0.01;
  shorter.stall = 0.5;
  HostJudgedObjective fresh(fn, rtx::kernels::Backend::CPU, shorter.sampler());
  e = fresh.evaluate({{"X", 1}}, b);
  CHECK(e.judged_on.empty());
  CHECK_FALSE(e.contended);
  // ...and once earlier trials started >= 50 ms before, it is judged on the span since then.
  for (int i = 0; i < 3; ++i) e = fresh.evaluate({{"X", 1}}, b);
  CHECK(e.judged_on == "recent");
  CHECK(e.contended);
  CHECK_THAT(e.contention_reason, Catch::StartsWith("recent 0.0") &&
                                     Catch::Contains(" s (this trial's window is too short to judge alone): PSI cpu "
                                                     "stall 50% of the window"));
  // The span is judged without the CPU-share rule: the thread sleeping between trials (store
  // fsync) is not contention.
  FakeHost idle_gaps;
  idle_gaps.step_s = 0.01;
  idle_gaps.stall = 0;
  HostJudgedObjective gaps(fn, rtx::kernels::Backend::CPU, [&] {
    auto s = idle_gaps.sampler()();
    s.thread_cpu_s = 0;  // the thread never ran: a 0% CPU share
    return s;
  });
  for (int i = 0; i < 6; ++i) gaps.mark();
  e = gaps.evaluate({{"X", 1}}, b);
  CHECK(e.judged_on == "recent");
  CHECK_FALSE(e.contended);
  // interleaved() keeps its verdict (FunctionObjective cannot interleave: nullopt, still judged).
  host.stall = 0.3;
  CHECK_FALSE(obj.interleaved({{"X", 1}}, {{"X", 2}}, 4));
  CHECK(obj.last_interleaved().contended);
}

TEST_CASE("busy-host trials: never the best, stored with the verdict, re-measured by a resume", "[cpu]") {
  Fake f;
  const Shape shape{{"N", 7}};
  int64_t evaluating = 0;  // X of the configuration being evaluated (set when made)
  auto make = f.v.make;
  f.v.make = [&](const Shape& s, rtx::DType dt, const Params& p, uint64_t seed) {
    evaluating = p.at("X");
    return make(s, dt, p, seed);
  };
  // The host is busy exactly while X=2 (the fastest) is measured: the reading after its window
  // sees 60% PSI stall.
  FakeHost host;
  bool busy_on_2 = true;
  auto sampler = [&, inner = host.sampler()] {
    host.stall = (busy_on_2 && evaluating == 2) ? 0.6 : 0.01;
    return inner();
  };
  KernelObjective kobj(f.op, f.v, shape, rtx::DType::F32, 1);
  HostJudgedObjective judged(kobj, rtx::kernels::Backend::CPU, sampler);
  rtx::store::Store st(":memory:");
  TrialStore trials(st, TuneKey{"fake_op", "cpu.fake", shape, rtx::DType::F32, rtx::kernels::Backend::CPU, "cpu:x:y"});
  const Space s = variant_space(f.v, shape);
  SearchOptions o;
  o.strategy = "grid";
  o.eval.min_samples = 3;
  o.eval.max_samples = 5;
  o.abort_ratio = 0;
  o.first = s.index_of(s.defaults());
  auto x2_row = [&] {
    for (const auto& row : trials.all())
      if (row.config.at("X") == 2) return row;
    FAIL("no row for X=2");
    return TrialRecord{};
  };
  {
    RecordingObjective obj(judged, trials, 0);
    const SearchResult r = search(s, obj, o);
    REQUIRE(r.best);
    CHECK(r.trials[*r.best].params == Params{{"X", 3}});  // 2 ms on a busy host does not count
    CHECK(r.contended == 1);
    CHECK_THAT(r.contention_reason, Catch::Contains("PSI cpu stall 60%"));
    const TrialRecord row = x2_row();
    CHECK(row.eval.contended);
    CHECK_THAT(row.eval.contention_reason, Catch::Contains("PSI cpu stall 60%"));
    CHECK(row.eval.median == Approx(2e-3));
  }
  // --include-busy: the busy trial competes and is reused like a quiet one.
  {
    RecordingObjective obj(judged, trials, 0, /*reuse_contended=*/true);
    SearchOptions oi = o;
    oi.include_contended = true;
    const int before = f.timed;
    const SearchResult r = search(s, obj, oi);
    CHECK(f.timed == before);  // nothing re-measured
    REQUIRE(r.best);
    CHECK(r.trials[*r.best].params == Params{{"X", 2}});
  }
  // A resume measures the busy trial again (only it); on a quiet host it then wins and its row
  // is marked quiet.
  busy_on_2 = false;
  {
    RecordingObjective obj(judged, trials, 0);
    const SearchResult r = search(s, obj, o);
    CHECK(r.measured == 1);
    CHECK(r.contended == 0);
    REQUIRE(r.best);
    CHECK(r.trials[*r.best].params == Params{{"X", 2}});
    CHECK_FALSE(x2_row().eval.contended);
    CHECK(x2_row().eval.contention_reason.empty());
  }
  // Replay passes the recorded verdict on.
  busy_on_2 = true;
  {
    Evaluation busy;
    busy.status = Evaluation::Status::Ok;
    busy.samples = {2e-3, 2e-3, 2e-3};
    busy.median = 2e-3;
    busy.contended = true;
    busy.contention_reason = "PSI cpu stall 60% of the window (> 10%)";
    trials.put({{"X", 2}}, busy, 0);
    ReplayObjective replay(trials.all());
    const Evaluation e = replay.evaluate({{"X", 2}}, o.eval);
    CHECK(e.contended);
    CHECK(e.contention_reason == busy.contention_reason);
    const SearchResult r = search(s, replay, o);
    REQUIRE(r.best);
    CHECK(r.trials[*r.best].params == Params{{"X", 3}});
  }
}

TEST_CASE("rtx-tune run on a busy host: no profile from busy trials; a quiet re-run measures them again", "[cpu]") {
  // Real matmul trials, with host readings whose PSI stall is 60% of the time (busy) or 0
  // (quiet), on a clock that advances 60 ms per reading: every trial window is long enough to
  // judge alone however fast the machine runs it (on the real clock an idle machine ran all four
  // trials in 1.3 ms, nothing was judged, and the test failed).
  double stall = 0.6;
  rtx::app::bench::HostSample last;
  bool first = true;
  double clock_s = 1000;
  auto sampler = [&] {
    rtx::app::bench::HostSample s = rtx::app::bench::sample_host();
    s.wall_s = clock_s += 0.06;
    if (first) {
      last = s;
      last.psi_some_total_us = 0;
      first = false;
    }
    s.psi_valid = true;
    s.involuntary_switches = 0;
    s.psi_some_total_us = last.psi_some_total_us + static_cast<uint64_t>(stall * (s.wall_s - last.wall_s) * 1e6);
    s.thread_cpu_s = s.wall_s;  // the CPU-share rule never fires: PSI alone decides
    s.cpu_busy.valid = false;   // (no /proc/stat reading: the rule's PSI fallback)
    last = s;
    return s;
  };
  rtx::app::tune::RunCommand c;
  c.op = "matmul_forward";
  c.shape = "M=16,N=24,K=8";
  c.strategy = "grid";
  c.budget = "4evals";
  c.min_samples = 3;
  c.max_samples = 5;
  c.max_time = 0.01;
  c.confirm = 0;
  c.json = true;
  c.quiet = true;
  c.db = rtx::test::temp_dir() + "/rtx.db";
  c.host_sampler = sampler;
  auto run = [&](int want_exit) {
    std::ostringstream out, err;
    const int code = rtx::app::tune::run_run(c, out, err);
    INFO(err.str());
    CHECK(code == want_exit);
    return nlohmann::json::parse(out.str());
  };
  nlohmann::json doc = run(1);  // no configuration measured on a quiet host
  nlohmann::json k = doc["keys"][0];
  CHECK(k["measured"] == 4);
  CHECK(k["contended"] == 4);
  CHECK_THAT(k["contention_reason"].get<std::string>(), Catch::Contains("PSI cpu stall 60%"));
  CHECK(k["best"].is_null());
  CHECK(k["default"].is_null());
  CHECK(k["profile_version"].is_null());
  REQUIRE(doc["warnings"].size() >= 1);
  CHECK_THAT(doc["warnings"].back().get<std::string>(),
             Catch::Contains("4 of 4 measured trials ran on a busy host") && Catch::Contains("no profile saved"));
  {
    rtx::store::Store st(c.db);
    auto& q = st.prepare("SELECT count(*), sum(contended) FROM tuning_trials WHERE status = 'ok'");
    REQUIRE(q.step());
    CHECK(q.column_int64(0) == 4);
    CHECK(q.column_int64(1) == 4);
    q.reset();
    CHECK(rtx::tune::current_profiles(st).empty());
  }
  // The host is quiet now: the same command measures every busy trial again (none reused) and
  // saves a profile.
  stall = 0;
  doc = run(0);
  k = doc["keys"][0];
  CHECK(k["measured"] == 4);
  CHECK(k["reused"] == 0);
  CHECK(k["contended"] == 0);
  CHECK(k["best"].is_object());
  CHECK(k["profile_version"] == 1);
  // --include-busy on a busy host: the busy trials compete; the profile stands (nothing new to save).
  stall = 0.6;
  c.include_busy = true;
  c.db = rtx::test::temp_dir() + "/busy.db";
  doc = run(0);
  k = doc["keys"][0];
  CHECK(k["contended"] == 4);
  CHECK(k["best"].is_object());
  CHECK(k["profile_version"] == 1);
  CHECK_THAT(doc["warnings"].back().get<std::string>(), Catch::Contains("--include-busy let them compete"));
}

TEST_CASE("rtx-tune --op: exact name, a unique prefix (said), else the candidates or the closest ops", "[cpu]") {
  const auto& reg = rtx::kernels::registry();
  std::ostringstream err;
  CHECK(rtx::app::tune::resolve_op(reg, "matmul_forward", err).name == "matmul_forward");
  CHECK(err.str().empty());  // an exact name is taken silently
  CHECK(rtx::app::tune::resolve_op(reg, "layernorm_f", err).name == "layernorm_forward");
  CHECK(err.str() == "rtx-tune: --op 'layernorm_f' taken as layernorm_forward (the only op it starts)\n");
  try {
    rtx::app::tune::resolve_op(reg, "matmul", err);
    FAIL("an ambiguous prefix was taken");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Usage);
    CHECK(e.where() == "--op");
    INFO(e.what());
    CHECK(std::string(e.what()).find("op 'matmul' is ambiguous: ") != std::string::npos);
    CHECK(std::string(e.what()).find("matmul_forward") != std::string::npos);
    CHECK(std::string(e.what()).find("matmul_backward") != std::string::npos);
  }
  try {
    rtx::app::tune::resolve_op(reg, "layrnorm_forward", err);  // a typo: no prefix, the closest named
    FAIL("a misspelt op was taken");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Usage);
    CHECK(std::string(e.what()).find("unknown op 'layrnorm_forward'") != std::string::npos);
    CHECK(e.hint().find("did you mean layernorm_forward") == 0);
  }
  CHECK_THROWS_AS(rtx::app::tune::resolve_op(reg, "", err), rtx::Error);
}
