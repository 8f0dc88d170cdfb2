// rtx::tune search efficiency: how many evaluations each strategy needs to come within a
// target of a key's optimum, found by replaying the strategy over many seeds against a fully
// recorded grid (Kernel Tuner's simulation mode; the best-so-far-vs-evaluations curves of
// Schoonhoven et al., "Benchmarking optimization algorithms for auto-tuning GPU kernels",
// IEEE TEVC 2022). Nothing is timed: the recorded medians are the ground truth.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rtx/tune/records.hpp"
#include "rtx/tune/search.hpp"

namespace rtx::tune {

/// Settings of an efficiency study.
struct EfficiencyOptions {
  std::vector<std::string> strategies = {"grid", "random", "halving", "tpe"};
  size_t seeds = 20;            ///< replays per strategy, seeds first_seed .. first_seed + seeds - 1
  uint64_t first_seed = 0;
  double within = 0.03;         ///< target: incumbent median <= (1 + within) x the optimum
  size_t budget = 0;            ///< evaluations per replay; 0: the grid's (every valid recorded point)
  bool default_first = false;   ///< evaluate the defaults first, as `rtx-tune run` does
  EvalBudget eval;              ///< rung-0 measurement budget handed to the replay (halving's low rungs)
  double abort_ratio = 1.5;     ///< early abort as in `rtx-tune run` (0: never)
  StrategyOptions strategy_options;  ///< seed is replaced per replay
};

/// One strategy's result over all seeds. A ratio is the recorded median of the strategy's
/// incumbent divided by the optimum (1 = found it); before the first Ok trial a replay counts
/// as the grid's worst ratio.
struct StrategyEfficiency {
  std::string strategy;
  /// Per seed: counted evaluations until the incumbent first came within the target (nullopt:
  /// not within the budget).
  std::vector<std::optional<size_t>> evals_to_target;
  size_t reached = 0;           ///< seeds that came within the target
  double mean_evals = 0;        ///< mean of evals_to_target, a miss counting as the budget
  size_t median_evals = 0;      ///< median, a miss counting as the budget
  size_t worst_evals = 0;       ///< largest, a miss counting as the budget
  std::vector<double> mean_ratio;   ///< [e-1]: mean over seeds after e evaluations (e = 1..budget)
  std::vector<double> worst_ratio;  ///< [e-1]: largest over seeds after e evaluations
};

/// Result of an efficiency study of one key.
struct EfficiencyReport {
  size_t grid_points = 0;       ///< points in the space
  size_t valid_points = 0;      ///< points the space's validate accepts
  size_t recorded = 0;          ///< valid points with an ok or fail record (what the grid evaluates)
  size_t ok = 0, failed = 0, aborted = 0;  ///< among recorded; aborted Ok rows have no full median
  double optimum_s = 0;         ///< lowest recorded median (s) of an Ok, not aborted, trial
  Params optimum;
  double worst_ratio = 0;       ///< highest recorded median / optimum
  std::optional<double> default_ratio;  ///< the defaults' median / optimum, when recorded
  size_t within_target = 0;     ///< recorded points within the target (the needles)
  size_t budget = 0;            ///< evaluations per replay
  std::vector<StrategyEfficiency> strategies;
};

/// Replay every strategy in `o.strategies` for `o.seeds` seeds against `records` (the trials of
/// one key, every valid point of `space` recorded) and measure how fast each comes within
/// `o.within` of the optimum. Busy-host trials (Evaluation::contended) count like quiet ones
/// here (the optimum is over every record; rtx-tune efficiency warns about them). Throws rtx::Error(Input) when no record is Ok, when `records` miss
/// valid points and `allow_partial` is false (naming how many, and the command that records the
/// grid), and rtx::Error(Usage) for an unknown strategy, seeds outside [1, 100000], a budget
/// over 10x the grid's evaluations, or within <= 0.
EfficiencyReport efficiency(const Space& space, const std::vector<TrialRecord>& records, const EfficiencyOptions& o,
                            bool allow_partial = false);

}  // namespace rtx::tune
