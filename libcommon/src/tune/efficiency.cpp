// Search efficiency by replay: every strategy x seed runs against the recorded grid of one key
// (ReplayObjective), and the recorded median of its incumbent after each counted evaluation
// traces its best-so-far curve relative to the optimum.
#include "rtx/tune/efficiency.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "rtx/core/error.hpp"

namespace rtx::tune {

EfficiencyReport efficiency(const Space& space, const std::vector<TrialRecord>& records, const EfficiencyOptions& o,
                            bool allow_partial) {
  if (o.seeds == 0 || o.seeds > 100000) throw_usage("--seeds must be in [1, 100000]", "--seeds");
  if (!(o.within > 0) || !std::isfinite(o.within)) throw_usage("the target must be > 0", "--within", "e.g. --within 3%");
  const std::vector<std::string> known = strategy_names();
  for (const std::string& s : o.strategies)
    if (std::find(known.begin(), known.end(), s) == known.end())
      throw_usage("unknown strategy '" + s + "'", "--strategies", "a comma list of grid, random, halving, tpe");
  if (o.strategies.empty()) throw_usage("no strategy to replay", "--strategies");

  std::map<std::string, const TrialRecord*> by_config;
  for (const TrialRecord& r : records) by_config[config_json(r.config)] = &r;

  EfficiencyReport rep;
  rep.grid_points = space.size();
  std::map<size_t, double> truth;  // grid index -> recorded median of an Ok, complete trial
  size_t missing = 0;
  for (size_t i = 0; i < space.size(); ++i) {
    const Params p = space.at(i);
    if (space.validate && !space.validate(p).empty()) continue;
    ++rep.valid_points;
    auto it = by_config.find(config_json(p));
    if (it == by_config.end() || it->second->eval.status == Evaluation::Status::Skip) {
      ++missing;
      continue;
    }
    ++rep.recorded;
    const Evaluation& e = it->second->eval;
    if (e.status == Evaluation::Status::Fail) {
      ++rep.failed;
      continue;
    }
    ++rep.ok;
    if (e.aborted) {
      ++rep.aborted;
      continue;
    }
    truth[i] = e.median;
  }
  if (truth.empty())
    throw_input("no recorded trial passed its check with a full measurement", "trials",
                "record the grid first: rtx-tune run --strategy grid --budget " + std::to_string(rep.valid_points) +
                    "evals --abort-ratio 0");
  if (missing > 0 && !allow_partial)
    throw_input("the grid is recorded for " + std::to_string(rep.recorded) + " of " + std::to_string(rep.valid_points) +
                    " valid points (" + std::to_string(missing) + " missing): the optimum would be a guess",
                "trials",
                "record every point: rtx-tune run --strategy grid --budget " + std::to_string(rep.valid_points) +
                    "evals --abort-ratio 0 (same key), or pass --partial");

  size_t opt_index = truth.begin()->first;
  double worst = 0;
  for (const auto& [i, m] : truth) {
    if (m < truth.at(opt_index)) opt_index = i;
    worst = std::max(worst, m);
  }
  rep.optimum_s = truth.at(opt_index);
  rep.optimum = space.at(opt_index);
  rep.worst_ratio = worst / rep.optimum_s;
  const double target = (1 + o.within) * rep.optimum_s;
  for (const auto& [i, m] : truth) rep.within_target += m <= target;
  const std::optional<size_t> defaults = space.index_of(space.defaults());
  if (defaults && truth.count(*defaults)) rep.default_ratio = truth.at(*defaults) / rep.optimum_s;
  // More evaluations than ten passes over the grid tell nothing new (memory grows with it).
  if (o.budget > 10 * std::max<size_t>(rep.recorded, 1))
    throw_usage("--budget " + std::to_string(o.budget) + " is more than 10x the grid's " + std::to_string(rep.recorded) +
                    " evaluations",
                "--budget", "0 replays as many evaluations as the grid has");
  rep.budget = o.budget ? o.budget : rep.recorded;

  ReplayObjective replay(records);
  for (const std::string& name : o.strategies) {
    StrategyEfficiency se;
    se.strategy = name;
    se.mean_ratio.assign(rep.budget, 0.0);
    se.worst_ratio.assign(rep.budget, 0.0);
    std::vector<size_t> counted;
    for (size_t k = 0; k < o.seeds; ++k) {
      SearchOptions so;
      so.strategy = name;
      so.strategy_options = o.strategy_options;
      so.strategy_options.seed = o.first_seed + k;
      so.budget.evals = rep.budget;
      so.eval = o.eval;
      so.abort_ratio = o.abort_ratio;
      // The optimum is taken over every recorded trial, busy-host ones too (the caller warns):
      // the replays must be free to reach it.
      so.include_contended = true;
      if (o.default_first) so.first = defaults;
      const SearchResult r = search(space, replay, so);
      std::vector<double> curve;
      curve.reserve(rep.budget);
      double ratio = rep.worst_ratio;
      for (const Trial& t : r.trials) {
        if (!t.eval.counts) continue;
        if (t.best_index) ratio = truth.at(*t.best_index) / rep.optimum_s;
        curve.push_back(ratio);
        if (curve.size() == rep.budget) break;
      }
      while (curve.size() < rep.budget) curve.push_back(ratio);  // the strategy ran out of points
      std::optional<size_t> hit;
      for (size_t e = 0; e < curve.size() && !hit; ++e)
        if (curve[e] * rep.optimum_s <= target) hit = e + 1;
      se.evals_to_target.push_back(hit);
      se.reached += hit.has_value();
      counted.push_back(hit.value_or(rep.budget));
      for (size_t e = 0; e < rep.budget; ++e) {
        se.mean_ratio[e] += curve[e];  // a sum here; divided once below, so equal curves average exactly
        se.worst_ratio[e] = std::max(se.worst_ratio[e], curve[e]);
      }
    }
    for (double& m : se.mean_ratio) m /= static_cast<double>(o.seeds);
    double sum = 0;
    for (size_t c : counted) sum += static_cast<double>(c);
    se.mean_evals = sum / static_cast<double>(counted.size());
    std::sort(counted.begin(), counted.end());
    se.median_evals = counted[(counted.size() - 1) / 2];
    se.worst_evals = counted.back();
    rep.strategies.push_back(std::move(se));
  }
  return rep;
}

}  // namespace rtx::tune
