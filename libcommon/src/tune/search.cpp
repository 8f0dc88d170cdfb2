// Search strategies (grid, random, successive halving, TPE) and the budgeted search driver.
// Pure logic over grid indices: no timing, no store (see measure.cpp, records.cpp).
#include "rtx/tune/search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/stats/stats.hpp"

namespace rtx::tune {

// ---- Space ----------------------------------------------------------------------------------

size_t Space::size() const { return kernels::grid_size(params); }

std::vector<size_t> Space::digits(size_t i) const { return kernels::grid_digits(params, i); }

size_t Space::from_digits(const std::vector<size_t>& d) const { return kernels::grid_index(params, d); }

Params Space::at(size_t i) const { return kernels::grid_point(params, i); }

std::optional<size_t> Space::index_of(const Params& p) const {
  if (p.size() != params.size()) return std::nullopt;
  std::vector<size_t> d(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    auto it = p.find(params[k].name);
    if (it == p.end()) return std::nullopt;
    const auto& vals = params[k].values;
    auto v = std::find(vals.begin(), vals.end(), it->second);
    if (v == vals.end()) return std::nullopt;
    d[k] = static_cast<size_t>(v - vals.begin());
  }
  return from_digits(d);
}

Params Space::defaults() const {
  Params p;
  for (const auto& x : params) p[x.name] = x.default_value;
  return p;
}

Space variant_space(const kernels::Variant& v, const kernels::Shape& shape) {
  Space s;
  s.params = v.space.params;
  if (v.validate) {
    auto validate = v.validate;
    s.validate = [validate, shape](const Params& p) { return validate(shape, p); };
  }
  return s;
}

const char* status_name(Evaluation::Status s) noexcept {
  switch (s) {
    case Evaluation::Status::Ok: return "ok";
    case Evaluation::Status::Skip: return "skip";
    case Evaluation::Status::Fail: return "fail";
  }
  return "?";
}

// ---- FunctionObjective ----------------------------------------------------------------------

FunctionObjective::FunctionObjective(std::function<double(const Params&)> f, std::function<std::string(const Params&)> skip,
                                     std::function<std::string(const Params&)> fail)
    : f_(std::move(f)), skip_(std::move(skip)), fail_(std::move(fail)) {}

Evaluation FunctionObjective::evaluate(const Params& p, const EvalBudget& b) {
  ++calls_;
  Evaluation e;
  if (skip_) {
    if (std::string why = skip_(p); !why.empty()) {
      e.status = Evaluation::Status::Skip;
      e.reason = why;
      return e;
    }
  }
  if (fail_) {
    if (std::string why = fail_(p); !why.empty()) {
      e.status = Evaluation::Status::Fail;
      e.reason = why;
      return e;
    }
  }
  const double y = f_(p);
  e.status = Evaluation::Status::Ok;
  e.samples.assign(std::max<size_t>(1, std::min(b.min_samples, b.max_samples)), y);
  e.median = y;
  return e;
}

// ---- strategies -----------------------------------------------------------------------------
namespace {

/// A seeded permutation of [0, n) drawn lazily (Fisher-Yates with a sparse swap table), so a
/// huge grid costs memory only for the points drawn.
class LazyPermutation {
 public:
  LazyPermutation(size_t n, uint64_t seed, uint64_t stream) : n_(n), rng_(seed, stream) {}
  std::optional<size_t> next() {
    if (pos_ >= n_) return std::nullopt;
    const size_t remaining = n_ - pos_;
    const size_t j = pos_ + static_cast<size_t>(draw() % remaining);
    const size_t a = get(pos_), b = get(j);
    swaps_[j] = a;
    swaps_.erase(pos_);
    ++pos_;
    return b;
  }

 private:
  uint64_t draw() { return (static_cast<uint64_t>(rng_.next_u32()) << 32) | rng_.next_u32(); }
  size_t get(size_t i) const {
    auto it = swaps_.find(i);
    return it == swaps_.end() ? i : it->second;
  }
  size_t n_, pos_ = 0;
  Philox rng_;
  std::unordered_map<size_t, size_t> swaps_;
};

// Philox subsequences of each strategy's streams (fixed: changing them changes every seed's path).
constexpr uint64_t kRandomStream = 0x7e5e0001ull, kHalvingStream = 0x7e5e0002ull, kTpeStream = 0x7e5e0003ull,
                   kTpeModelStream = 0x7e5e0004ull;

class GridStrategy : public Strategy {
 public:
  explicit GridStrategy(size_t n) : n_(n) {}
  const char* name() const override { return "grid"; }
  std::optional<Proposal> ask() override {
    if (next_ >= n_) return std::nullopt;
    return Proposal{next_++, 0};
  }
  void tell(const Proposal&, const Evaluation&) override {}

 private:
  size_t n_, next_ = 0;
};

class RandomStrategy : public Strategy {
 public:
  RandomStrategy(size_t n, uint64_t seed) : perm_(n, seed, kRandomStream) {}
  const char* name() const override { return "random"; }
  std::optional<Proposal> ask() override {
    auto i = perm_.next();
    if (!i) return std::nullopt;
    return Proposal{*i, 0};
  }
  void tell(const Proposal&, const Evaluation&) override {}

 private:
  LazyPermutation perm_;
};

/// Successive halving in brackets: rung 0 takes `n0` valid unseen points (seeded order); rung
/// r+1 keeps the best ceil(k/eta) Ok, non-aborted results of rung r; a bracket ends at one.
class HalvingStrategy : public Strategy {
 public:
  HalvingStrategy(size_t n, const StrategyOptions& o)
      : perm_(n, o.seed, kHalvingStream), eta_(std::max<size_t>(2, o.eta)),
        n0_(o.halving_initial ? o.halving_initial : eta_ * eta_ * eta_) {}
  const char* name() const override { return "halving"; }

  std::optional<Proposal> ask() override {
    for (;;) {
      if (rung_ == 0) {
        if (results_.size() < n0_ && !pending_.empty()) return take();
        if (results_.size() < n0_ && !exhausted_) {
          if (auto i = perm_.next()) return Proposal{*i, 0};
          exhausted_ = true;
        }
        if (results_.empty()) return std::nullopt;  // nothing valid left
      } else if (!pending_.empty()) {
        return take();
      }
      if (!promote()) {
        // Bracket over: start the next one on unseen points.
        rung_ = 0;
        results_.clear();
        pending_.clear();
        if (exhausted_) return std::nullopt;
      }
    }
  }

  void tell(const Proposal& p, const Evaluation& e) override {
    if (e.status == Evaluation::Status::Skip) return;  // invalid: does not fill a rung slot
    const bool usable = e.status == Evaluation::Status::Ok && !e.aborted;
    results_.push_back({p.index, usable ? e.median : std::numeric_limits<double>::infinity()});
  }

  EvalBudget budget(size_t rung, const EvalBudget& base) const override {
    EvalBudget b = base;
    double scale = 1;
    for (size_t r = 0; r < rung; ++r) scale *= static_cast<double>(eta_);
    const size_t n = static_cast<size_t>(std::max<double>(1, static_cast<double>(base.min_samples)) * scale);
    b.min_samples = b.max_samples = n;
    b.max_time = base.max_time * scale;
    return b;
  }

 private:
  Proposal take() {
    const size_t i = pending_.front();
    pending_.erase(pending_.begin());
    return Proposal{i, rung_};
  }
  /// Move to the next rung with the survivors; false when the bracket is finished.
  bool promote() {
    std::vector<std::pair<double, size_t>> ok;
    for (const auto& r : results_)
      if (std::isfinite(r.second)) ok.push_back({r.second, r.first});
    if (ok.size() <= 1) return false;
    std::stable_sort(ok.begin(), ok.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t keep = (ok.size() + eta_ - 1) / eta_;
    pending_.clear();
    for (size_t k = 0; k < keep; ++k) pending_.push_back(ok[k].second);
    results_.clear();
    ++rung_;
    return true;
  }

  LazyPermutation perm_;
  size_t eta_, n0_;
  size_t rung_ = 0;
  bool exhausted_ = false;
  std::vector<std::pair<size_t, double>> results_;  // (index, median or inf) of the current rung
  std::vector<size_t> pending_;                      // survivors still to evaluate at rung_
};

/// TPE over categorical params (value indices). See make_strategy's doc for the model.
class TpeStrategy : public Strategy {
 public:
  TpeStrategy(const Space& s, const StrategyOptions& o)
      : space_(s), n_(s.size()), o_(o), perm_(n_, o.seed, kTpeStream), rng_(o.seed, kTpeModelStream) {}
  const char* name() const override { return "tpe"; }

  std::optional<Proposal> ask() override {
    if (seen_.size() >= n_) return std::nullopt;
    if (obs_.size() >= std::max<size_t>(1, o_.tpe_startup)) {
      if (auto i = model_pick()) return mark(*i);
    }
    while (auto i = perm_.next())
      if (!seen_.count(*i)) return mark(*i);
    return std::nullopt;
  }

  void tell(const Proposal& p, const Evaluation& e) override {
    if (e.status == Evaluation::Status::Skip) return;
    const double loss = e.status == Evaluation::Status::Ok ? e.median : std::numeric_limits<double>::infinity();
    obs_.push_back({space_.digits(p.index), loss});
  }

 private:
  Proposal mark(size_t i) {
    seen_.insert(i);
    return Proposal{i, 0};
  }

  std::optional<size_t> model_pick() {
    const size_t P = space_.params.size();
    std::vector<size_t> order(obs_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return obs_[a].loss < obs_[b].loss; });
    const size_t n_good = std::max<size_t>(1, static_cast<size_t>(std::ceil(o_.tpe_gamma * static_cast<double>(obs_.size()))));
    // Per-param categorical Parzen estimators with a +1 (uniform) prior per value.
    std::vector<std::vector<double>> l(P), g(P);
    for (size_t k = 0; k < P; ++k) {
      l[k].assign(space_.params[k].values.size(), 1.0);
      g[k].assign(space_.params[k].values.size(), 1.0);
    }
    for (size_t r = 0; r < order.size(); ++r) {
      const auto& d = obs_[order[r]].digits;
      for (size_t k = 0; k < P; ++k) (r < n_good ? l : g)[k][d[k]] += 1.0;
    }
    for (size_t k = 0; k < P; ++k) {
      double sl = 0, sg = 0;
      for (double v : l[k]) sl += v;
      for (double v : g[k]) sg += v;
      for (double& v : l[k]) v /= sl;
      for (double& v : g[k]) v /= sg;
    }
    std::optional<size_t> best;
    double best_score = -std::numeric_limits<double>::infinity();
    std::vector<size_t> d(P);
    for (size_t c = 0; c < std::max<size_t>(1, o_.tpe_candidates); ++c) {
      double score = 0;
      for (size_t k = 0; k < P; ++k) {
        // Draw value index from l[k] by inverse CDF.
        const double u = rng_.next_double();
        double acc = 0;
        size_t v = l[k].size() - 1;
        for (size_t j = 0; j < l[k].size(); ++j) {
          acc += l[k][j];
          if (u < acc) {
            v = j;
            break;
          }
        }
        d[k] = v;
        score += std::log(l[k][v]) - std::log(g[k][v]);
      }
      const size_t i = space_.from_digits(d);
      if (seen_.count(i)) continue;
      if (score > best_score) {
        best_score = score;
        best = i;
      }
    }
    return best;
  }

  struct Obs {
    std::vector<size_t> digits;
    double loss;
  };
  const Space& space_;
  size_t n_;
  StrategyOptions o_;
  LazyPermutation perm_;
  Philox rng_;
  std::unordered_set<size_t> seen_;
  std::vector<Obs> obs_;
};

}  // namespace

std::vector<std::string> strategy_names() { return {"grid", "random", "halving", "tpe"}; }

std::unique_ptr<Strategy> make_strategy(const std::string& name, const Space& space, const StrategyOptions& o) {
  const size_t n = space.size();
  if (name == "grid") return std::make_unique<GridStrategy>(n);
  if (name == "random") return std::make_unique<RandomStrategy>(n, o.seed);
  if (name == "halving") return std::make_unique<HalvingStrategy>(n, o);
  if (name == "tpe") return std::make_unique<TpeStrategy>(space, o);
  throw_usage("unknown strategy '" + name + "'", "--strategy", "one of: grid, random, halving, tpe");
}

Budget parse_budget(const std::string& text) {
  const char* hint = "e.g. 120s, 5m, 1h, 200evals or 200";
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  const std::string num = text.substr(0, pos), unit = text.substr(pos);
  if (num.empty() || num.find('.') != num.rfind('.')) throw_usage("bad --budget '" + text + "'", "--budget", hint);
  char* end = nullptr;
  const double v = std::strtod(num.c_str(), &end);
  if (!end || *end != '\0' || !(v > 0) || !std::isfinite(v)) throw_usage("bad --budget '" + text + "': must be > 0", "--budget", hint);
  Budget b;
  if (unit.empty() || unit == "evals" || unit == "eval" || unit == "e") {
    if (v != std::floor(v) || v > 1e9) throw_usage("bad --budget '" + text + "': evaluations must be an integer <= 1e9", "--budget", hint);
    b.evals = static_cast<size_t>(v);
  } else if (unit == "s") {
    b.seconds = v;
  } else if (unit == "m" || unit == "min") {
    b.seconds = v * 60;
  } else if (unit == "h") {
    b.seconds = v * 3600;
  } else {
    throw_usage("bad --budget '" + text + "': unknown unit '" + unit + "'", "--budget", hint);
  }
  return b;
}

// ---- driver ---------------------------------------------------------------------------------

SearchResult search(const Space& space, Objective& objective, const SearchOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  SearchResult res;
  if (space.size() == 0) {
    res.stop_reason = "exhausted";
    return res;
  }
  std::unique_ptr<Strategy> strategy = make_strategy(o.strategy, space, o.strategy_options);

  std::map<std::pair<size_t, size_t>, Evaluation> cache;  // (index, rung) -> result
  std::map<size_t, std::pair<size_t, double>> latest;      // index -> (trial pos, median) of its latest Ok
  double best = 0;
  auto budget_left = [&]() -> const char* {
    if (o.should_stop && o.should_stop()) return "interrupted";
    if (o.budget.evals && res.evaluations >= o.budget.evals) return "evals";
    if (o.budget.seconds > 0 && elapsed() >= o.budget.seconds) return "seconds";
    return nullptr;
  };
  auto update_best = [&] {
    best = 0;
    res.best.reset();
    for (const auto& [idx, pm] : latest) {
      (void)idx;
      if (!res.best || pm.second < best || (pm.second == best && pm.first < *res.best)) {
        best = pm.second;
        res.best = pm.first;
      }
    }
  };

  // Evaluate one proposal (or answer it from the cache); returns the evaluation.
  auto run_one = [&](const Proposal& p) -> Evaluation {
    if (auto it = cache.find({p.index, p.rung}); it != cache.end()) return it->second;
    Trial t;
    t.index = p.index;
    t.params = space.at(p.index);
    t.rung = p.rung;
    std::string why = space.validate ? space.validate(t.params) : std::string();
    if (!why.empty()) {
      t.eval.status = Evaluation::Status::Skip;
      t.eval.reason = why;
      t.eval.counts = false;
      objective.skipped(t.params, why);
    } else {
      EvalBudget b = strategy->budget(p.rung, o.eval);
      b.abort_above = (o.abort_ratio > 0 && best > 0) ? o.abort_ratio * best : 0;
      t.eval = objective.evaluate(t.params, b);
      if (t.eval.status == Evaluation::Status::Skip) t.eval.counts = false;
    }
    const Evaluation& e = t.eval;
    if (e.counts) {
      ++res.evaluations;
      if (!e.reused) ++res.measured;
    }
    if (e.status == Evaluation::Status::Skip) ++res.skipped;
    if (e.status == Evaluation::Status::Fail) ++res.failed;
    if (e.aborted) ++res.aborted;
    if (e.status == Evaluation::Status::Ok && e.contended) {
      ++res.contended;
      if (res.contention_reason.empty()) res.contention_reason = e.contention_reason;
    }
    res.trials.push_back(t);
    if (e.status == Evaluation::Status::Ok && !e.aborted && (!e.contended || o.include_contended)) {
      latest[p.index] = {res.trials.size() - 1, e.median};
      update_best();
    } else if (latest.erase(p.index)) {
      // Re-measured at a higher rung and now failed or aborted: its earlier result no longer stands.
      update_best();
    }
    res.trials.back().best_so_far = best;
    if (res.best) res.trials.back().best_index = res.trials[*res.best].index;
    if (e.counts) res.curve.push_back(best);
    cache[{p.index, p.rung}] = e;
    if (o.on_trial) o.on_trial(res.trials.back(), res.evaluations);
    return e;
  };

  if (o.first && *o.first < space.size() && !budget_left()) run_one(Proposal{*o.first, 0});
  // budget_left() is asked before every later trial, so Ctrl-C ends the search between trials.
  for (;;) {
    if (const char* why = budget_left()) {
      res.stop_reason = why;
      break;
    }
    std::optional<Proposal> p = strategy->ask();
    if (!p) {
      res.stop_reason = "exhausted";
      break;
    }
    strategy->tell(*p, run_one(*p));
  }
  res.seconds = elapsed();
  return res;
}

}  // namespace rtx::tune
