// rtx::tune search: each strategy on a synthetic space with a known optimum (an objective
// function instead of timing), seeded reproducibility, budgets, skips, and wrong outputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>

#include "rtx/core/error.hpp"
#include "rtx/tune/search.hpp"

using namespace rtx::tune;

namespace {

/// A (8 values) x B (6) x C (5) = 240 points; A+B > 10 invalid (skipped, 6 points).
/// f = 1 + (A-5)^2 + 1.5 (B-2)^2 + (log2 C - 3)^2: unique optimum A=5, B=2, C=8, f = 1.
Space synthetic_space() {
  Space s;
  s.params = {{"A", {0, 1, 2, 3, 4, 5, 6, 7}, 0, ""}, {"B", {0, 1, 2, 3, 4, 5}, 0, ""}, {"C", {1, 2, 4, 8, 16}, 1, ""}};
  s.validate = [](const Params& p) { return p.at("A") + p.at("B") > 10 ? std::string("A+B > 10") : std::string(); };
  return s;
}

double synthetic_f(const Params& p) {
  const double a = static_cast<double>(p.at("A")), b = static_cast<double>(p.at("B"));
  const double c = std::log2(static_cast<double>(p.at("C")));
  return 1 + (a - 5) * (a - 5) + 1.5 * (b - 2) * (b - 2) + (c - 3) * (c - 3);
}

size_t valid_points(const Space& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) n += s.validate(s.at(i)).empty();
  return n;
}

SearchResult run_strategy(const std::string& name, uint64_t seed, size_t evals) {
  const Space s = synthetic_space();
  FunctionObjective f(synthetic_f);
  SearchOptions o;
  o.strategy = name;
  o.strategy_options.seed = seed;
  o.budget.evals = evals;
  return search(s, f, o);
}

Params best_params(const SearchResult& r) {
  REQUIRE(r.best);
  return r.trials[*r.best].params;
}

}  // namespace

TEST_CASE("Space: grid indexing round-trips and matches ParamSpace order", "[cpu]") {
  const Space s = synthetic_space();
  REQUIRE(s.size() == 240);
  rtx::kernels::ParamSpace ps;
  ps.params = s.params;
  for (size_t i : {size_t(0), size_t(1), size_t(7), size_t(127), size_t(239)}) {
    CHECK(s.at(i) == ps.at(i));
    CHECK(s.index_of(s.at(i)) == i);
    CHECK(s.from_digits(s.digits(i)) == i);
  }
  CHECK(s.at(1) == Params{{"A", 0}, {"B", 0}, {"C", 2}});  // last param fastest
  CHECK_FALSE(s.index_of({{"A", 9}, {"B", 0}, {"C", 1}}));
  CHECK_FALSE(s.index_of({{"A", 0}, {"B", 0}}));
  CHECK_THROWS_AS(s.at(240), rtx::Error);
  Space one;
  CHECK(one.size() == 1);
  CHECK(one.at(0).empty());
}

TEST_CASE("grid search finds the optimum and visits each valid point once", "[cpu]") {
  const Space s = synthetic_space();
  FunctionObjective f(synthetic_f);
  SearchOptions o;
  o.strategy = "grid";
  const SearchResult r = search(s, f, o);
  CHECK(r.stop_reason == "exhausted");
  CHECK(best_params(r) == Params{{"A", 5}, {"B", 2}, {"C", 8}});
  CHECK(r.trials[*r.best].eval.median == 1.0);
  CHECK(r.evaluations == valid_points(s));
  CHECK(r.skipped == s.size() - valid_points(s));
  CHECK(f.calls() == valid_points(s));  // invalid points are never handed to the objective
  CHECK(r.curve.size() == r.evaluations);
  for (size_t i = 1; i < r.curve.size(); ++i) CHECK(r.curve[i] <= r.curve[i - 1]);
  for (const Trial& t : r.trials)
    if (t.eval.status == Evaluation::Status::Skip) CHECK(t.eval.reason == "A+B > 10");
}

TEST_CASE("strategies are reproducible for a seed and differ across seeds", "[cpu]") {
  for (const char* name : {"random", "halving", "tpe"}) {
    INFO(name);
    const SearchResult a = run_strategy(name, 42, 60), b = run_strategy(name, 42, 60), c = run_strategy(name, 7, 60);
    REQUIRE(a.trials.size() == b.trials.size());
    std::vector<size_t> ia, ib, ic;
    for (const auto& t : a.trials) ia.push_back(t.index);
    for (const auto& t : b.trials) ib.push_back(t.index);
    for (const auto& t : c.trials) ic.push_back(t.index);
    CHECK(ia == ib);
    CHECK(ia != ic);
    CHECK(a.evaluations == 60);
    CHECK(a.stop_reason == "evals");
  }
}

TEST_CASE("random search samples without replacement", "[cpu]") {
  const SearchResult r = run_strategy("random", 3, 1000);
  std::set<size_t> seen;
  for (const auto& t : r.trials) CHECK(seen.insert(t.index).second);
  CHECK(seen.size() == 240);
  CHECK(best_params(r) == Params{{"A", 5}, {"B", 2}, {"C", 8}});
}

TEST_CASE("random, halving and tpe reach the optimum within budget", "[cpu]") {
  // Over 10 seeds: evaluations until the best so far is <= `target`, capped at the budget.
  // random and tpe must find the optimum (f = 1); successive halving spends evaluations on
  // re-measuring survivors (its gain is in samples, not evaluations), so it must get within
  // one grid step of it (f <= 2: the second-best level).
  const size_t budget = 160;
  std::map<std::string, double> mean_evals;
  for (const char* name : {"random", "halving", "tpe"}) {
    const double target = std::string(name) == "halving" ? 2.0 : 1.0;
    double sum = 0;
    size_t reached = 0;
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      const SearchResult r = run_strategy(name, seed, budget);
      size_t k = 0;
      while (k < r.curve.size() && !(r.curve[k] > 0 && r.curve[k] <= target)) ++k;
      reached += k < r.curve.size();
      sum += static_cast<double>(std::min(k + 1, budget));
    }
    mean_evals[name] = sum / 10;
    WARN(name << ": mean evaluations to f <= " << target << ": " << mean_evals[name] << ", reached in " << reached << "/10");
    CHECK(reached >= 7);
  }
  // The model-based strategy beats uniform random on this smooth objective.
  CHECK(mean_evals["tpe"] < mean_evals["random"]);
}

TEST_CASE("halving promotes survivors to higher rungs with more samples", "[cpu]") {
  const Space s = synthetic_space();
  FunctionObjective f(synthetic_f);
  SearchOptions o;
  o.strategy = "halving";
  o.strategy_options.seed = 5;
  o.strategy_options.eta = 3;
  o.strategy_options.halving_initial = 9;
  o.eval.min_samples = 2;
  o.budget.evals = 13;  // one bracket: 9 + 3 + 1
  const SearchResult r = search(s, f, o);
  std::map<size_t, size_t> per_rung;
  for (const auto& t : r.trials) {
    if (t.eval.status == Evaluation::Status::Skip) continue;
    ++per_rung[t.rung];
    CHECK(t.eval.samples.size() == (t.rung == 0 ? 2u : t.rung == 1 ? 6u : 18u));
  }
  CHECK(per_rung[0] == 9);
  CHECK(per_rung[1] == 3);
  CHECK(per_rung[2] == 1);
  // The rung-2 survivor is the best of rung 0.
  double best0 = 1e300;
  size_t best0_index = 0;
  for (const auto& t : r.trials)
    if (t.rung == 0 && t.eval.status == Evaluation::Status::Ok && t.eval.median < best0) {
      best0 = t.eval.median;
      best0_index = t.index;
    }
  for (const auto& t : r.trials)
    if (t.rung == 2) CHECK(t.index == best0_index);
}

TEST_CASE("a wrong-output candidate never wins", "[cpu]") {
  const Space s = synthetic_space();
  // The true optimum "fails its check": the best must be the second best, never the failing one.
  FunctionObjective f(synthetic_f, nullptr, [](const Params& p) {
    return p.at("A") == 5 && p.at("B") == 2 && p.at("C") == 8 ? std::string("wrong output") : std::string();
  });
  for (const char* name : {"grid", "random", "halving", "tpe"}) {
    INFO(name);
    SearchOptions o;
    o.strategy = name;
    o.strategy_options.seed = 1;
    const SearchResult r = search(s, f, o);
    REQUIRE(r.best);
    CHECK_FALSE(best_params(r) == Params{{"A", 5}, {"B", 2}, {"C", 8}});
    CHECK(r.failed >= 1);
    if (std::string(name) == "grid") CHECK(r.trials[*r.best].eval.median == 2.0);
  }
}

TEST_CASE("first point is evaluated first and not twice", "[cpu]") {
  const Space s = synthetic_space();
  FunctionObjective f(synthetic_f);
  SearchOptions o;
  o.strategy = "grid";
  o.first = s.index_of({{"A", 3}, {"B", 3}, {"C", 4}});
  const SearchResult r = search(s, f, o);
  REQUIRE(!r.trials.empty());
  CHECK(r.trials[0].index == *o.first);
  CHECK(r.evaluations == valid_points(s));
  CHECK(f.calls() == valid_points(s));
}

TEST_CASE("budget parsing", "[cpu]") {
  CHECK(parse_budget("200evals").evals == 200);
  CHECK(parse_budget("17").evals == 17);
  CHECK(parse_budget("120s").seconds == 120);
  CHECK(parse_budget("2m").seconds == 120);
  CHECK(parse_budget("1h").seconds == 3600);
  CHECK(parse_budget("0.5s").seconds == 0.5);
  for (const char* bad : {"", "s", "-5", "0", "10x", "1.5evals", "1.2.3s", "evals"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_budget(bad), rtx::Error);
  }
  try {
    parse_budget("3 weeks");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Usage);
    CHECK(e.where() == "--budget");
  }
  CHECK_THROWS_AS(make_strategy("annealing", synthetic_space(), {}), rtx::Error);
}

TEST_CASE("a seconds budget stops the search", "[cpu]") {
  const Space s = synthetic_space();
  FunctionObjective f([](const Params& p) {
    volatile double x = 0;
    for (int i = 0; i < 200000; ++i) x = x + 1e-9 * i;
    return synthetic_f(p);
  });
  SearchOptions o;
  o.strategy = "grid";
  o.budget.seconds = 0.02;
  const SearchResult r = search(s, f, o);
  CHECK(r.stop_reason == "seconds");
  CHECK(r.evaluations < valid_points(s));
  CHECK(r.evaluations >= 1);
}

TEST_CASE("should_stop ends a search before its next trial, keeping the trials so far", "[cpu]") {
  const Space s = synthetic_space();
  FunctionObjective f(synthetic_f);
  SearchOptions o;
  o.strategy = "grid";
  o.first = s.index_of({{"A", 3}, {"B", 3}, {"C", 4}});  // not among the grid's first points
  size_t asked = 0;
  o.should_stop = [&] { return ++asked > 5; };  // true from the 6th question on
  const SearchResult r = search(s, f, o);
  CHECK(r.stop_reason == "interrupted");
  CHECK(asked == 6);  // asked once before each trial (the first one included), then no more
  CHECK(r.trials.size() == 5);
  CHECK(f.calls() == 5);
  CHECK(r.evaluations == 5);
  // The same search without a stop has these five trials first.
  SearchOptions whole = o;
  whole.should_stop = nullptr;
  const SearchResult w = search(s, f, whole);
  CHECK(w.stop_reason == "exhausted");
  for (size_t i = 0; i < r.trials.size(); ++i) {
    CHECK(r.trials[i].index == w.trials[i].index);
    CHECK(r.trials[i].eval.median == w.trials[i].eval.median);
  }
  // A stop before anything ran: no trial at all.
  o.should_stop = [] { return true; };
  const SearchResult none = search(s, f, o);
  CHECK(none.stop_reason == "interrupted");
  CHECK(none.trials.empty());
}
