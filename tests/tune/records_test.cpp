// rtx::tune records: resume skips recorded trials (and tunes only new points of a grown space),
// replay measures nothing, profile versions are never overwritten, nearest-shape lookup,
// stale entries, and rtx.profile.v1 export/import (round trip, SKU refusal, all-or-nothing).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/store/store.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/efficiency.hpp"
#include "rtx/tune/lookup.hpp"
#include "rtx/tune/records.hpp"
#include "rtx/tune/search.hpp"

using namespace rtx::tune;
using nlohmann::json;
using rtx::kernels::Shape;

namespace {

Space space_abc(std::vector<int64_t> c_values = {1, 2, 4, 8}) {
  Space s;
  s.params = {{"A", {0, 1, 2, 3, 4, 5}, 0, ""}, {"B", {0, 1, 2, 3}, 0, ""}, {"C", std::move(c_values), 1, ""}};
  s.validate = [](const Params& p) { return p.at("A") == 0 && p.at("B") == 0 ? std::string("A=B=0 invalid") : ""; };
  return s;
}

double f_abc(const Params& p) {
  const double a = static_cast<double>(p.at("A")), b = static_cast<double>(p.at("B"));
  return 1 + (a - 4) * (a - 4) + (b - 1) * (b - 1) + std::abs(std::log2(static_cast<double>(p.at("C"))) - 2);
}

TuneKey key_for(const std::string& sku = "cpu:test-sku:avx2", Shape shape = {{"M", 64}, {"N", 64}, {"K", 64}}) {
  return TuneKey{"matmul_forward", "cpu.blocked", std::move(shape), rtx::DType::F32, rtx::kernels::Backend::CPU, sku};
}

size_t measured_rows(TrialStore& t) {
  size_t n = 0;
  for (const auto& r : t.all()) n += r.eval.status != Evaluation::Status::Skip;
  return n;
}

std::vector<size_t> indices(const SearchResult& r) {
  std::vector<size_t> v;
  for (const auto& t : r.trials) v.push_back(t.index);
  return v;
}

}  // namespace

TEST_CASE("TuneKey text round-trips and rejects malformed keys", "[cpu]") {
  const TuneKey k = key_for();
  CHECK(k.str() == "matmul_forward|cpu.blocked|K=64,M=64,N=64|f32|cpu|cpu:test-sku:avx2");
  const TuneKey back = TuneKey::parse(k.str());
  CHECK(back.str() == k.str());
  CHECK(back.shape == k.shape);
  for (const char* bad : {"", "a|b|c", "op|v|M=1|f32|cpu|", "op|v|M=1|f99|cpu|sku", "op|v|M=1|f32|tpu|sku"}) {
    INFO(bad);
    CHECK_THROWS_AS(TuneKey::parse(bad), rtx::Error);
  }
  CHECK(config_json({{"NC", 3}, {"MC", 1}}) == R"({"MC":1,"NC":3})");
}

TEST_CASE("resume: an interrupted run continues and reuses recorded trials", "[cpu]") {
  rtx::store::Store st(":memory:");
  TrialStore trials(st, key_for());
  const Space s = space_abc();
  SearchOptions o;
  o.strategy = "random";
  o.strategy_options.seed = 11;

  // Uninterrupted reference run (no store).
  FunctionObjective ref(f_abc);
  o.budget.evals = 40;
  const SearchResult whole = search(s, ref, o);

  // Interrupted after 15 evaluations, then resumed with the full budget.
  FunctionObjective inner(f_abc);
  RecordingObjective rec(inner, trials, 0);
  o.budget.evals = 15;
  search(s, rec, o);
  CHECK(inner.calls() == 15);
  CHECK(measured_rows(trials) == 15);
  o.budget.evals = 40;
  const SearchResult resumed = search(s, rec, o);
  CHECK(inner.calls() == 40);       // only the 25 new configurations were measured
  CHECK(resumed.measured == 25);
  CHECK(resumed.evaluations == 40);
  CHECK(indices(resumed) == indices(whole));  // same path as the uninterrupted run
  REQUIRE(resumed.best);
  CHECK(resumed.trials[*resumed.best].params == whole.trials[*whole.best].params);
  CHECK(measured_rows(trials) == 40);

  // A recorded trial is read back as stored.
  const auto t = trials.find(resumed.trials[*resumed.best].params);
  REQUIRE(t);
  CHECK(t->eval.status == Evaluation::Status::Ok);
  CHECK(t->eval.median == resumed.trials[*resumed.best].eval.median);
  CHECK_FALSE(trials.find({{"A", 99}}));
}

TEST_CASE("resume: adding a value to the space tunes only the new points", "[cpu]") {
  rtx::store::Store st(":memory:");
  TrialStore trials(st, key_for());
  FunctionObjective inner(f_abc);
  RecordingObjective rec(inner, trials, 0);
  SearchOptions o;
  o.strategy = "grid";
  const Space small = space_abc();
  search(small, rec, o);
  const size_t first = inner.calls();
  CHECK(first == small.size() - 4);  // A=B=0 (4 values of C) is invalid, never measured
  const Space grown = space_abc({1, 2, 4, 8, 16});
  const SearchResult r = search(grown, rec, o);
  // Only the C=16 column is new: 6 x 4 points, minus the invalid A=B=0.
  CHECK(inner.calls() - first == 6 * 4 - 1);
  CHECK(r.measured == 6 * 4 - 1);
  CHECK(r.evaluations == grown.size() - 5);
}

TEST_CASE("replay runs a strategy against recorded trials and measures nothing", "[cpu]") {
  rtx::store::Store st(":memory:");
  TrialStore trials(st, key_for());
  const Space s = space_abc();
  {
    FunctionObjective inner(f_abc);
    RecordingObjective rec(inner, trials, 0);
    SearchOptions g;
    g.strategy = "grid";
    search(s, rec, g);
  }
  for (const char* name : {"random", "halving", "tpe"}) {
    INFO(name);
    SearchOptions o;
    o.strategy = name;
    o.strategy_options.seed = 3;
    o.budget.evals = 30;
    FunctionObjective live(f_abc);
    const SearchResult a = search(s, live, o);
    ReplayObjective replay(trials.all());
    const SearchResult b = search(s, replay, o);
    CHECK(b.measured == 0);
    CHECK(replay.lookups() > 0);
    CHECK(indices(a) == indices(b));
    REQUIRE(b.best);
    CHECK(b.trials[*b.best].eval.median == a.trials[*a.best].eval.median);
  }
  // A configuration without a record is a non-counting skip.
  ReplayObjective partial({});
  FunctionObjective unused(f_abc);
  SearchOptions o;
  o.strategy = "grid";
  const SearchResult r = search(s, partial, o);
  CHECK(r.evaluations == 0);
  CHECK_FALSE(r.best);
  CHECK(unused.calls() == 0);
}

TEST_CASE("replay truncates samples to the budget and applies early abort", "[cpu]") {
  TrialRecord rec;
  rec.config = {{"A", 1}};
  rec.eval.status = Evaluation::Status::Ok;
  rec.eval.samples = {5, 5, 5, 1, 1, 1, 1, 1, 1, 1};
  rec.eval.median = 1;
  ReplayObjective r({rec});
  EvalBudget b;
  b.max_samples = 4;
  Evaluation e = r.evaluate({{"A", 1}}, b);
  CHECK(e.samples.size() == 4);
  CHECK(e.median == 5);
  CHECK(e.reused);
  b.max_samples = 10;
  CHECK(r.evaluate({{"A", 1}}, b).median == 1);
  b.abort_above = 2;
  b.abort_after = 3;
  e = r.evaluate({{"A", 1}}, b);
  CHECK(e.aborted);
  CHECK(e.samples.size() == 3);
}

TEST_CASE("profiles are versioned, never overwritten in place", "[cpu]") {
  rtx::store::Store st(":memory:");
  const std::string key = key_for().str();
  json under = measured_under("cpu:test-sku:avx2");
  under["result"] = {{"median_s", 1e-3}};
  CHECK(save_profile(st, key, {{"MC", 96}}, under, 0) == 1);
  under["result"] = {{"median_s", 0.9e-3}};
  CHECK(save_profile(st, key, {{"MC", 96}}, under, 0) == 1);  // same params and build: kept
  CHECK(save_profile(st, key, {{"MC", 192}}, under, 0) == 2);
  const auto v = profile_versions(st, key);
  REQUIRE(v.size() == 2);
  CHECK(v[0].params == Params{{"MC", 96}});  // the old version is untouched
  CHECK(v[0].measured_under["result"]["median_s"] == 1e-3);
  CHECK(v[1].params == Params{{"MC", 192}});
  const auto cur = current_profiles(st);
  REQUIRE(cur.size() == 1);
  CHECK(cur[0].version == 2);
  CHECK(cur[0].measured_under["rtx_sha"] == rtx::git_sha());
  CHECK_THROWS_AS(save_profile(st, "not a key", {}, under, 0), rtx::Error);
}

TEST_CASE("shape_distance is log-space Euclidean", "[cpu]") {
  CHECK(shape_distance({{"M", 1024}}, {{"M", 512}}) == Approx(1.0));
  CHECK(shape_distance({{"M", 4}, {"N", 4}}, {{"M", 1}, {"N", 1}}) == Approx(std::sqrt(8.0)));
  CHECK(shape_distance({{"M", 7}, {"N", 9}}, {{"M", 7}, {"N", 9}}) == 0);
  CHECK(std::isinf(shape_distance({{"M", 4}}, {{"N", 4}})));
  CHECK(std::isinf(shape_distance({{"M", 4}}, {{"M", 4}, {"N", 4}})));
  CHECK(std::isinf(shape_distance({{"M", 4}, {"bias", 0}}, {{"M", 4}, {"bias", 1}})));
  CHECK(shape_distance({{"M", 4}, {"bias", 0}}, {{"M", 8}, {"bias", 0}}) == Approx(1.0));
}

TEST_CASE("lookup: exact, nearest shape, default; other SKU and stale entries unused", "[cpu]") {
  const std::string sku = "cpu:test-sku:avx2";
  auto entry = [&](Shape s, Params p, const std::string& entry_sku, json under) {
    ProfileEntry e;
    e.key = key_for(entry_sku, std::move(s)).str();
    e.version = 1;
    e.params = std::move(p);
    e.measured_under = std::move(under);
    return e;
  };
  json fresh = measured_under(sku);
  json stale = fresh;
  stale["compiler"] = "SomeOtherCC 1.0";
  std::vector<ProfileEntry> entries = {
      entry({{"M", 4096}, {"N", 768}, {"K", 768}}, {{"MC", 1}}, sku, fresh),
      entry({{"M", 4096}, {"N", 3072}, {"K", 768}}, {{"MC", 2}}, sku, fresh),
      entry({{"M", 64}, {"N", 64}, {"K", 64}}, {{"MC", 3}}, "cpu:other:avx512", fresh),
      entry({{"M", 128}, {"N", 128}, {"K", 128}}, {{"MC", 4}}, sku, stale),
  };
  ProfileLookup L(entries, sku, "");
  REQUIRE(L.stale().size() == 1);
  CHECK(L.stale()[0].second.find("compiler") != std::string::npos);
  CHECK(L.size() == 3);

  rtx::kernels::Variant v;
  v.name = "cpu.blocked";
  v.backend = rtx::kernels::Backend::CPU;
  auto a = L.find("matmul_forward", &v, {{"M", 4096}, {"N", 768}, {"K", 768}}, rtx::DType::F32);
  CHECK(a.source == ProfileLookup::Source::Exact);
  CHECK(a.params == Params{{"MC", 1}});
  a = L.find("matmul_forward", &v, {{"M", 4000}, {"N", 2500}, {"K", 700}}, rtx::DType::F32);  // nearer N=3072
  CHECK(a.source == ProfileLookup::Source::Nearest);
  CHECK(a.params == Params{{"MC", 2}});
  CHECK(a.distance == Approx(shape_distance({{"M", 4000}, {"N", 2500}, {"K", 700}}, {{"M", 4096}, {"N", 3072}, {"K", 768}})));
  a = L.find("matmul_forward", &v, {{"M", 64}, {"N", 64}, {"K", 64}}, rtx::DType::F32);  // other SKU's exact key
  CHECK(a.source == ProfileLookup::Source::Nearest);
  CHECK(a.params != Params{{"MC", 3}});
  a = L.find("matmul_forward", &v, {{"M", 128}, {"N", 128}, {"K", 128}}, rtx::DType::F32);  // stale exact key
  CHECK(a.params != Params{{"MC", 4}});
  CHECK(L.stats().stale == 1);
  a = L.find("matmul_forward", &v, {{"M", 64}, {"N", 64}, {"K", 64}}, rtx::DType::BF16);
  CHECK(a.source == ProfileLookup::Source::Default);
  CHECK_FALSE(a.params);
  a = L.find("matmul_forward", &v, {{"M", 64}, {"N", 64}}, rtx::DType::F32);  // other dims: incomparable
  CHECK(a.source == ProfileLookup::Source::Default);
  // A candidate the variant rejects is passed over.
  v.validate = [](const Shape&, const Params& p) { return p.at("MC") == 1 ? std::string("no") : std::string(); };
  a = L.find("matmul_forward", &v, {{"M", 4096}, {"N", 768}, {"K", 768}}, rtx::DType::F32);
  CHECK(a.source == ProfileLookup::Source::Nearest);
  CHECK(a.params == Params{{"MC", 2}});
  CHECK(L.stats().invalid >= 1);
}

TEST_CASE("install: kernels resolve tuned params through the registry, counters move", "[cpu]") {
  const auto& reg = rtx::kernels::registry();
  const auto& op = reg.op("matmul_forward");
  const auto& v = reg.variant("matmul_forward", "cpu.blocked");
  const Shape shape{{"M", 64}, {"N", 64}, {"K", 64}};
  const Space s = variant_space(v, shape);
  Params tuned;
  for (size_t i = 1; i < s.size() && tuned.empty(); ++i)
    if (s.validate(s.at(i)).empty() && s.at(i) != s.defaults()) tuned = s.at(i);
  REQUIRE_FALSE(tuned.empty());
  const std::string sku = rtx::telemetry::sku_key("cpu");
  ProfileEntry e;
  e.key = TuneKey{op.name, v.name, shape, rtx::DType::F32, rtx::kernels::Backend::CPU, sku}.str();
  e.version = 1;
  e.params = tuned;
  e.measured_under = measured_under(sku);
  auto L = std::make_shared<ProfileLookup>(std::vector<ProfileEntry>{e}, sku, "");
  const rtx::kernels::ParamLookup pl = param_lookup(L);
  CHECK(rtx::kernels::resolve_params(op, v, shape, rtx::DType::F32, pl) == tuned);
  CHECK(rtx::kernels::resolve_params(op, v, {{"M", 100}, {"N", 60}, {"K", 64}}, rtx::DType::F32, pl) == tuned);
  CHECK(rtx::kernels::resolve_params(op, v, shape, rtx::DType::BF16, pl) == v.space.defaults());
  CHECK(rtx::kernels::resolve_params(op, v, shape, rtx::DType::F32) == v.space.defaults());
  CHECK(rtx::kernels::resolve_params(op, v, shape, rtx::DType::F32, param_lookup(nullptr)) == v.space.defaults());
  const LookupStats st = L->stats();
  CHECK(st.exact == 1);
  CHECK(st.nearest == 1);
  CHECK(st.miss == 1);
  CHECK(L->stats_json()["exact"] == 1);
}

TEST_CASE("export/import round trip, SKU refusal and all-or-nothing", "[cpu]") {
  const std::string sku = rtx::telemetry::sku_key("cpu");
  rtx::store::Store a(":memory:");
  const std::string k1 = key_for(sku).str();
  const std::string k2 = key_for(sku, {{"M", 128}, {"N", 64}, {"K", 96}}).str();  // sorts after k1
  save_profile(a, k1, {{"MC", 96}}, measured_under(sku), 0);
  save_profile(a, k1, {{"MC", 192}}, measured_under(sku), 0);
  save_profile(a, k2, {{"KC", 64}}, measured_under(sku), 0);
  const json doc = export_profiles(a);
  CHECK(doc["schema"] == kProfileSchema);
  CHECK(doc["hardware"].is_object());
  REQUIRE(doc["entries"].size() == 2);
  CHECK(doc["entries"][0]["key"] == k1);
  CHECK(doc["entries"][0]["version"] == 2);
  CHECK(doc["entries"][0]["params"] == json{{"MC", 192}});
  CHECK(doc["entries"][0]["shape"] == json{{"K", 64}, {"M", 64}, {"N", 64}});

  rtx::store::Store b(":memory:");
  ImportResult r = import_profiles(b, doc, "p.json", false);
  CHECK(r.imported == 2);
  const auto cur = current_profiles(b);
  REQUIRE(cur.size() == 2);
  CHECK(cur[0].key == k1);
  CHECK(cur[0].params == Params{{"MC", 192}});
  CHECK(cur[0].version == 1);  // a new version in this store
  r = import_profiles(b, doc, "p.json", false);
  CHECK(r.unchanged == 2);
  CHECK(r.imported == 0);

  // Another SKU: refused, nothing written (also not the valid first entry).
  json foreign = doc;
  foreign["entries"][1]["key"] = key_for("cpu:someone-else:avx512", {{"M", 8}, {"N", 8}, {"K", 8}}).str();
  foreign["entries"][0]["params"] = {{"MC", 336}};
  rtx::store::Store c(":memory:");
  try {
    import_profiles(c, foreign, "p.json", false);
    FAIL("import of another SKU succeeded");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Input);
    CHECK(std::string(e.what()).find("cpu:someone-else:avx512") != std::string::npos);
    CHECK(e.hint().find("--force") != std::string::npos);
  }
  CHECK(current_profiles(c).empty());
  r = import_profiles(c, foreign, "p.json", true);
  CHECK(r.imported == 2);
  CHECK(r.foreign_skus == std::vector<std::string>{"cpu:someone-else:avx512"});

  // Malformed documents: named field, nothing written.
  rtx::store::Store d(":memory:");
  json bad = doc;
  bad["entries"][1]["params"]["MC"] = "big";
  CHECK_THROWS_WITH(import_profiles(d, bad, "p.json", false), Catch::Contains("/entries/1/params/MC"));
  bad = doc;
  bad["schema"] = "rtx.profile.v9";
  CHECK_THROWS_AS(import_profiles(d, bad, "p.json", false), rtx::Error);
  bad = doc;
  bad["entries"][1]["key"] = "nope";
  CHECK_THROWS_WITH(import_profiles(d, bad, "p.json", false), Catch::Contains("/entries/1/key"));
  bad = doc;
  bad["entries"][1] = bad["entries"][0];
  CHECK_THROWS_WITH(import_profiles(d, bad, "p.json", false), Catch::Contains("duplicate"));
  CHECK(current_profiles(d).empty());
}

// ---- efficiency (replay of strategies against a fully recorded grid) ------------------------

namespace {

// 10 x 10 grid with one point within 3% of the optimum: f(7,3) = 1, every other point >= 1.05.
Space space_10x10(bool reject_a0 = false) {
  Space s;
  s.params = {{"A", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, ""}, {"B", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, ""}};
  if (reject_a0) s.validate = [](const Params& p) { return p.at("A") == 0 ? std::string("A=0 invalid") : ""; };
  return s;
}
double f_10x10(const Params& p) {
  return 1 + 0.1 * std::abs(static_cast<double>(p.at("A")) - 7) + 0.05 * std::abs(static_cast<double>(p.at("B")) - 3);
}
std::vector<TrialRecord> record_all(const Space& s, const std::function<double(const Params&)>& f) {
  std::vector<TrialRecord> v;
  for (size_t i = 0; i < s.size(); ++i) {
    const Params p = s.at(i);
    if (s.validate && !s.validate(p).empty()) continue;
    TrialRecord r;
    r.config = p;
    r.eval.status = Evaluation::Status::Ok;
    r.eval.samples.assign(30, f(p));
    r.eval.median = f(p);
    v.push_back(r);
  }
  return v;
}

}  // namespace

TEST_CASE("efficiency: grid finds the needle at its grid position, random at (n+1)/2 on average", "[cpu]") {
  const Space s = space_10x10();
  const auto rec = record_all(s, f_10x10);
  EfficiencyOptions o;
  o.strategies = {"grid", "random", "tpe", "halving"};
  o.seeds = 400;
  o.abort_ratio = 0;
  const EfficiencyReport r = efficiency(s, rec, o);
  CHECK(r.grid_points == 100);
  CHECK(r.valid_points == 100);
  CHECK(r.recorded == 100);
  CHECK(r.ok == 100);
  CHECK(r.optimum_s == 1.0);
  CHECK(r.optimum == Params{{"A", 7}, {"B", 3}});
  CHECK(r.within_target == 1);
  CHECK(r.worst_ratio == Approx(1 + 0.7 + 0.3));
  REQUIRE(r.default_ratio);
  CHECK(*r.default_ratio == Approx(f_10x10({{"A", 0}, {"B", 0}})));
  CHECK(r.budget == 100);
  REQUIRE(r.strategies.size() == 4);
  // grid: last parameter fastest, so (A=7, B=3) is the 7*10+3+1 = 74th evaluation, every seed.
  const StrategyEfficiency& g = r.strategies[0];
  CHECK(g.reached == 400);
  CHECK(g.mean_evals == 74);
  CHECK(g.worst_evals == 74);
  CHECK(g.mean_ratio[72] > 1.0);
  CHECK(g.mean_ratio[73] == 1.0);
  CHECK(g.mean_ratio[0] == Approx(f_10x10({{"A", 0}, {"B", 0}})));
  // random without replacement: the one needle's position is uniform on 1..100, mean 50.5,
  // sd 28.9 -> sd of a 400-seed mean 1.44.
  const StrategyEfficiency& rnd = r.strategies[1];
  CHECK(rnd.reached == 400);
  CHECK(std::abs(rnd.mean_evals - 50.5) < 6);
  CHECK(rnd.mean_ratio.back() == 1.0);
  for (size_t e = 1; e < rnd.mean_ratio.size(); ++e) CHECK(rnd.mean_ratio[e] <= rnd.mean_ratio[e - 1]);
  // TPE on a separable landscape beats random on average.
  CHECK(r.strategies[2].mean_evals < rnd.mean_evals);
  CHECK(r.strategies[2].reached == 400);
}

TEST_CASE("efficiency: invalid points, partial grids, failed optimum, short budgets, bad options", "[cpu]") {
  const Space s = space_10x10(true);
  auto rec = record_all(s, f_10x10);
  EfficiencyOptions o;
  o.strategies = {"grid"};
  o.seeds = 2;
  EfficiencyReport r = efficiency(s, rec, o);
  CHECK(r.valid_points == 90);
  CHECK(r.recorded == 90);
  CHECK(r.budget == 90);
  CHECK(r.strategies[0].mean_evals == 64);  // (A=7,B=3) is the 64th valid point in grid order
  CHECK_FALSE(r.default_ratio);             // the defaults (A=0) are invalid

  // A wrong output at the optimum: it never counts; the optimum is the next point.
  for (auto& t : rec)
    if (t.config == Params{{"A", 7}, {"B", 3}}) t.eval.status = Evaluation::Status::Fail;
  r = efficiency(s, rec, o);
  CHECK(r.failed == 1);
  CHECK(r.optimum_s == Approx(1.05));
  CHECK(r.optimum.at("A") == 7);
  CHECK(r.within_target == 2);              // (7,2) and (7,4) are both 1.05

  // A short budget: nobody reaches the target, a miss counts as the budget.
  o.budget = 10;
  r = efficiency(s, rec, o);
  CHECK(r.strategies[0].reached == 0);
  CHECK(r.strategies[0].mean_evals == 10);
  CHECK(r.strategies[0].mean_ratio.size() == 10);
  o.budget = 0;

  // A grid with a hole is refused unless partial is allowed.
  rec.pop_back();
  CHECK_THROWS_WITH(efficiency(s, rec, o), Catch::Contains("89 of 90 valid points"));
  r = efficiency(s, rec, o, true);
  CHECK(r.recorded == 89);

  CHECK_THROWS_AS(efficiency(s, {}, o), rtx::Error);
  o.strategies = {"annealing"};
  CHECK_THROWS_WITH(efficiency(s, rec, o, true), Catch::Contains("unknown strategy"));
  o.strategies = {"grid"};
  o.seeds = 0;
  CHECK_THROWS_AS(efficiency(s, rec, o, true), rtx::Error);
}

TEST_CASE("tampered trial rows are refused naming the row; efficiency bounds seeds and budget", "[cpu]") {
  const Space s = space_abc();
  auto fresh = [&](rtx::store::Store& st) {
    TrialStore t(st, key_for());
    FunctionObjective f(f_abc);
    RecordingObjective rec(f, t, 0);
    SearchOptions o;
    o.strategy = "grid";
    search(s, rec, o);
    return t;
  };
  struct Tamper {
    const char* sql;
    const char* message;
  };
  for (const Tamper& tm : std::vector<Tamper>{
           {"UPDATE tuning_trials SET median_s = -1 WHERE status = 'ok' AND id = (SELECT MIN(id) FROM tuning_trials WHERE status = 'ok')",
            "median_s -1"},
           {"UPDATE tuning_trials SET median_s = NULL WHERE status = 'ok' AND id = (SELECT MIN(id) FROM tuning_trials WHERE status = 'ok')",
            "median_s 0"},
           {"UPDATE tuning_trials SET config_json = '[\"a\"]' WHERE id = 2", "config_json is not a JSON object"},
           {"UPDATE tuning_trials SET config_json = '{\"A\":1.5,\"B\":1,\"C\":1}' WHERE id = 2", "config_json.A is not an integer"},
           {"UPDATE tuning_trials SET samples_json = '[\"a\"]' WHERE id = 2", "samples_json holds"},
           {"UPDATE tuning_trials SET config_json = (SELECT config_json FROM tuning_trials WHERE id = 3) WHERE id = 2",
            "hold the same configuration"},
       }) {
    INFO(tm.sql);
    rtx::store::Store st(":memory:");
    TrialStore t = fresh(st);
    if (std::string(tm.message) == "hold the same configuration") {
      // Same configuration spelled differently (key order): normalizes to a duplicate.
      st.exec("UPDATE tuning_trials SET config_json = (SELECT json_object('C', json_extract(config_json, '$.C'), 'B', "
              "json_extract(config_json, '$.B'), 'A', json_extract(config_json, '$.A')) FROM tuning_trials WHERE id = 3) "
              "WHERE id = 2");
    } else {
      st.exec(tm.sql);
    }
    try {
      t.all();
      FAIL("expected the tampered store to be refused");
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      CHECK_THAT(std::string(e.what()) + " " + e.where(), Catch::Contains(tm.message) && Catch::Contains("tuning_trials"));
    }
  }
  rtx::store::Store st(":memory:");
  const auto rec = fresh(st).all();
  EfficiencyOptions o;
  o.strategies = {"random"};
  o.seeds = 100001;
  CHECK_THROWS_WITH(efficiency(s, rec, o, true), Catch::Contains("--seeds must be in [1, 100000]"));
  o.seeds = 2;
  o.budget = 10 * rec.size() + 1;
  CHECK_THROWS_WITH(efficiency(s, rec, o, true), Catch::Contains("more than 10x the grid"));
}
