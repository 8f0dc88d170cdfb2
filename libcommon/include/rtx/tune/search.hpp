// rtx::tune search: a discrete parameter space, the objective a strategy queries (kernel timing,
// recorded trials, or a synthetic function in tests), the strategies and the budgeted driver.
// No store and no kernels here: see measure.hpp (kernel objective) and records.hpp (store).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rtx/kernels/registry.hpp"

namespace rtx::tune {

using kernels::Param;
using kernels::Params;

/// A search space: the grid of `params` (kernels::ParamSpace order: last param fastest) and
/// a validity rule. Points are addressed by their grid index in [0, size()).
struct Space {
  std::vector<Param> params;
  /// Why a point cannot run ("" when it can); null: every point is valid.
  std::function<std::string(const Params&)> validate;

  /// Number of grid points (1 for an empty space).
  size_t size() const;
  /// The assignment at grid index `i` (< size(); else rtx::Error(Internal)).
  Params at(size_t i) const;
  /// Grid index of `p` (every param present with one of its values), nullopt otherwise.
  std::optional<size_t> index_of(const Params& p) const;
  /// Per-param value index of grid point `i` (digit k is the index into params[k].values).
  std::vector<size_t> digits(size_t i) const;
  /// Grid index of per-param value indices (inverse of digits()).
  size_t from_digits(const std::vector<size_t>& d) const;
  /// The defaults assignment (each param's default_value).
  Params defaults() const;
};

/// Space of a registry variant at one shape: its ParamSpace, validated by Variant::validate.
Space variant_space(const kernels::Variant& v, const kernels::Shape& shape);

/// How one evaluation may be measured: sample count bounds and a time cap; `abort_above`
/// (s, 0: never) lets the objective stop early once the first samples' median exceeds it.
struct EvalBudget {
  size_t min_samples = 5;
  size_t max_samples = 30;
  double max_time = 0.25;     ///< s of sampling for this configuration (applies once min_samples are taken)
  double max_rel_ci = 0.03;   ///< stop when the 95% median CI half-width / median <= this
  double abort_above = 0;     ///< s; 0 disables early abort
  size_t abort_after = 3;     ///< samples taken before the early-abort test
};

/// Outcome of evaluating one configuration.
struct Evaluation {
  enum class Status { Ok, Skip, Fail };
  Status status = Status::Skip;
  std::string reason;             ///< why skipped / failed / aborted early ("" for a clean ok)
  std::vector<double> samples;    ///< s (timing) or objective values, in measurement order
  double median = 0;              ///< s; meaningful for Ok
  bool aborted = false;           ///< stopped early as clearly slower than the best so far
  bool reused = false;            ///< came from a recorded trial (resume / replay), nothing measured
  bool counts = true;             ///< counts toward the evaluation budget (false: replay miss)
  /// The timing was taken on a busy host (HostJudgedObjective, rtx-bench's per-window rule):
  /// such an Ok trial is never a search's best (unless SearchOptions::include_contended), is
  /// re-measured rather than reused by a resume, and is not cited by rtx-evolve's tuner.
  bool contended = false;
  std::string contention_reason;  ///< the evidence when contended, e.g. "PSI cpu stall 38% of the window (> 10%)"
  /// What the verdict covered: "trial" (this evaluation's own window), "recent" (too short
  /// alone: the window back to an earlier trial's start, kMinJudgedWindow or more), "" (not
  /// judged: no timing, or nothing long enough measured yet).
  std::string judged_on;
};

/// "ok" | "skip" | "fail" (the store's tuning_trials.status vocabulary).
const char* status_name(Evaluation::Status s) noexcept;

/// What a strategy queries: evaluate one configuration under a budget. Implementations:
/// KernelObjective (measure.hpp), ReplayObjective (records.hpp), FunctionObjective (below).
class Objective {
 public:
  virtual ~Objective() = default;
  virtual Evaluation evaluate(const Params& p, const EvalBudget& b) = 0;
  /// Told when the driver skips `p` because the space's validate rejected it (never run), so
  /// a recording objective can store the reason. Default: nothing.
  virtual void skipped(const Params& p, const std::string& reason) {}
  /// `n` timed samples (s) of each of two configurations taken interleaved (a b b a a b ...),
  /// so that drift of the machine during the run hits both alike: how a search's winner is
  /// confirmed against the defaults, which were measured at another time. nullopt when this
  /// objective cannot measure (replay, synthetic) or a configuration does not run.
  virtual std::optional<std::pair<std::vector<double>, std::vector<double>>> interleaved(const Params& a,
                                                                                         const Params& b, size_t n) {
    return std::nullopt;
  }
};

/// Deterministic synthetic objective for tests and simulations: evaluate() returns Ok with
/// `samples` copies of f(p) (at least 1, capped by b.max_samples), Skip with the reason when
/// `skip` says so, Fail when `fail` says so. Counts calls.
class FunctionObjective : public Objective {
 public:
  explicit FunctionObjective(std::function<double(const Params&)> f,
                             std::function<std::string(const Params&)> skip = nullptr,
                             std::function<std::string(const Params&)> fail = nullptr);
  Evaluation evaluate(const Params& p, const EvalBudget& b) override;
  size_t calls() const { return calls_; }

 private:
  std::function<double(const Params&)> f_;
  std::function<std::string(const Params&)> skip_, fail_;
  size_t calls_ = 0;
};

/// One request from a strategy: evaluate grid point `index` at budget level `rung` (0 for
/// single-fidelity strategies; successive halving raises it for survivors).
struct Proposal {
  size_t index = 0;
  size_t rung = 0;
};

/// A search strategy over a Space (ask/tell). Seeded strategies are deterministic for a seed
/// and the sequence of results they are told.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual const char* name() const = 0;
  /// Next proposal, or nullopt when the strategy has nothing left to try.
  virtual std::optional<Proposal> ask() = 0;
  /// Result of the last proposal (median for Ok, else failed/skipped). Called once per ask.
  virtual void tell(const Proposal& p, const Evaluation& e) = 0;
  /// Measurement budget of a rung given the base (rung 0) budget: `base` unless overridden
  /// (successive halving: min = max = base.min_samples x eta^rung samples).
  virtual EvalBudget budget(size_t rung, const EvalBudget& base) const { return base; }
};

/// Settings of the strategies.
struct StrategyOptions {
  uint64_t seed = 0;
  size_t eta = 3;               ///< successive halving: keep the best 1/eta per rung
  size_t halving_initial = 0;   ///< configs in rung 0 of a bracket (0: eta^3)
  size_t tpe_startup = 10;      ///< TPE: random evaluations before the model is used
  double tpe_gamma = 0.25;      ///< TPE: fraction of observations in the "good" set
  size_t tpe_candidates = 64;   ///< TPE: candidates sampled from l(x) per proposal
};

/// Names accepted by make_strategy.
std::vector<std::string> strategy_names();
/// "grid": every point in grid order. "random": a seeded permutation (without replacement).
/// "halving": successive halving (Jamieson & Talwalkar, AISTATS 2016; Li et al., "Hyperband",
/// JMLR 2018): rung 0 evaluates n random configs at the lowest budget, each next rung keeps the
/// best ceil(n/eta) at eta x the samples, until one remains; then a new bracket on unseen points.
/// "tpe": tree-structured Parzen estimator (Bergstra et al., "Algorithms for Hyper-Parameter
/// Optimization", NeurIPS 2011) over the params' value indices: observations split at the gamma
/// quantile into good/bad, per-param categorical Parzen densities l(x), g(x) with a +1 prior,
/// and the candidate (sampled from l) maximizing l(x)/g(x) among unseen points is proposed.
/// Throws rtx::Error(Usage) naming --strategy for an unknown name.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const Space& space, const StrategyOptions& o);

/// Budget of a search: whichever of evaluations / wall seconds runs out first (0: unlimited).
struct Budget {
  size_t evals = 0;
  double seconds = 0;
};
/// Parse "120s", "2m", "1h", "200evals", "200" (evaluations). Throws rtx::Error(Usage) naming --budget.
Budget parse_budget(const std::string& text);

/// One trial of a search, in order.
struct Trial {
  size_t index = 0;          ///< grid index
  Params params;
  size_t rung = 0;
  Evaluation eval;
  double best_so_far = 0;    ///< best Ok median after this trial (0 while none)
  /// Grid index of the incumbent (the point best_so_far belongs to) after this trial; nullopt
  /// while no trial is Ok.
  std::optional<size_t> best_index;
};

/// Driver settings.
struct SearchOptions {
  std::string strategy = "random";
  StrategyOptions strategy_options;
  Budget budget;
  EvalBudget eval;            ///< budget of rung 0; rung r multiplies min/max samples by eta^r
  double abort_ratio = 1.5;   ///< early abort above abort_ratio x best median (0: never)
  /// Busy-host (Evaluation::contended) Ok trials may become the best (rtx-tune run
  /// --include-busy); by default they are told to the strategy but never chosen.
  bool include_contended = false;
  /// Evaluate this grid point first (e.g. the defaults, so the same run measures them).
  std::optional<size_t> first;
  /// Called after every trial (progress display); may be null.
  std::function<void(const Trial&, size_t evals_done)> on_trial;
  /// Asked before every trial (Ctrl-C); true ends the search with stop_reason "interrupted"
  /// (the trials so far stand). May be null.
  std::function<bool()> should_stop;
};

/// Result of a search.
struct SearchResult {
  std::vector<Trial> trials;
  std::optional<size_t> best;     ///< position in `trials` of the best Ok trial
  size_t evaluations = 0;         ///< trials counted toward the budget
  size_t measured = 0;            ///< evaluations that ran something (not reused)
  size_t skipped = 0, failed = 0, aborted = 0;
  size_t contended = 0;           ///< Ok trials measured on a busy host (Evaluation::contended)
  std::string contention_reason;  ///< the first contended trial's evidence ("" when none)
  double seconds = 0;             ///< wall time of the search
  std::string stop_reason;        ///< "exhausted", "evals", "seconds", "interrupted" (should_stop)
  /// Best Ok median after each counted evaluation (0 before the first Ok).
  std::vector<double> curve;
};

/// Run `strategy` against `objective` until the strategy is exhausted or the budget is spent.
/// Invalid points (space.validate) are told Skip without calling the objective and do not count.
/// A Fail never becomes best, nor (unless o.include_contended) a contended Ok trial; both are
/// still told to the strategy. The best is the lowest median among Ok trials at the highest
/// rung each was evaluated at (ties: the earlier trial).
SearchResult search(const Space& space, Objective& objective, const SearchOptions& o);

}  // namespace rtx::tune
