// KernelObjective: a fake variant (deterministic "times", one fast but wrong configuration)
// checks check-before-time, early abort and skips; then a real tiny matmul tuned end to end.
#include <catch2/catch.hpp>

#include "rtx/core/error.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/store/store.hpp"
#include "rtx/tune/measure.hpp"
#include "rtx/tune/records.hpp"
#include "rtx/tune/search.hpp"

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
  const auto& reg = rtx::kernels::registry();
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
