// Tests of rtx-evolve history: a store with bench_results rows (a planted 20% step right after a
// promotion), change points linked to that proposal, flat noise, validation recording, the CLI.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/evolve/history.hpp"
#include "rtx/evolve/report.hpp"
#include "rtx/store/store.hpp"
#include "test_util.hpp"
#include "../../libcommon/src/store/migrations.hpp"  // the released migrations, to build an older store

using nlohmann::json;

namespace {

const std::string kCase = "matmul_fwd_small/cpu.blocked/K=128,M=256,N=384/f32";

/// Point i's timestamp: one hour apart from 2026-01-01T00:00, plus `minute` minutes.
std::string at(int i, int minute = 0) {
  char b[40];
  std::snprintf(b, sizeof b, "2026-01-%02dT%02d:%02d:00.000Z", 1 + i / 24, i % 24, minute);
  return b;
}

int64_t add_run(rtx::store::Store& st, const std::string& tool) {
  auto& q = st.prepare("INSERT INTO runs (tool, status) VALUES (?1, 'ok')");
  q.bind(1, tool);
  q.run();
  return st.last_insert_rowid();
}

void add_point(rtx::store::Store& st, const std::string& name, int i, double median_s, const std::string& tool = "rtx-bench",
               const json& params = json::object()) {
  const int64_t run = add_run(st, tool);
  auto& q = st.prepare(
      "INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, params_json, median_s, n, created_at) "
      "VALUES (?1, ?2, 'matmul', 'cpu.blocked', 'cpu', 'K=128,M=256,N=384', 'f32', ?3, ?4, 11, ?5)");
  q.bind(1, run).bind(2, name).bind(3, params.dump()).bind(4, median_s).bind(5, at(i));
  q.run();
}

int64_t add_proposal(rtx::store::Store& st) {
  auto& q = st.prepare("INSERT INTO proposals (key, status, json) VALUES ('threads@cpu', 'promoted', '{}')");
  q.run();
  return st.last_insert_rowid();
}

/// A 'promote' deployment of proposal `id` at time `when`.
void add_promotion(rtx::store::Store& st, int64_t id, const std::string& when) {
  auto& q = st.prepare(
      "INSERT INTO evolve_deployments (proposal_id, target, key, from_version, to_version, action, created_at) "
      "VALUES (?1, 'config', 'threads@cpu', NULL, 1, 'promote', ?2)");
  q.bind(1, id).bind(2, when);
  q.run();
}

/// 40 points of kCase: 20 at ~1 ms, then 20 at ~0.8 ms (a 20% speedup) after proposal `step`
/// was promoted between points 19 and 20; a decoy promotion (no effect) between points 7 and 8.
/// Points 10..14 and 25..29 are evolve baseline arms; each has a candidate row beside it (excluded).
struct Planted {
  int64_t step = 0, decoy = 0;
};
Planted plant(rtx::store::Store& st) {
  Planted p;
  p.decoy = add_proposal(st);
  p.step = add_proposal(st);
  rtx::Philox rng(42);
  for (int i = 0; i < 40; ++i) {
    const double level = i < 20 ? 1.0e-3 : 0.8e-3;
    const double v = level * (1.0 + 0.01 * static_cast<double>(rng.next_normal()));
    if ((i >= 10 && i < 15) || (i >= 25 && i < 30)) {
      const int64_t pid = i < 20 ? p.decoy : p.step;
      add_point(st, kCase, i, v, "rtx-evolve", {{"tile", 64}, {"rtx_evolve", {{"proposal_id", pid}, {"arm", "baseline"}}}});
      add_point(st, kCase, i, 0.5 * v, "rtx-evolve", {{"rtx_evolve", {{"proposal_id", pid}, {"arm", "candidate"}}}});
    } else {
      add_point(st, kCase, i, v);
    }
  }
  add_promotion(st, p.decoy, at(7, 30));
  add_promotion(st, p.step, at(19, 30));
  return p;
}

}  // namespace

TEST_CASE("history: a planted 20% step is found at the promotion and linked to its proposal", "[cpu]") {
  rtx::store::Store st(":memory:");
  const Planted p = plant(st);
  rtx::evolve::HistoryOptions o;
  const auto h = rtx::evolve::case_history(st, kCase, o);
  REQUIRE(h.points.size() == 40);  // the 10 candidate rows are not part of the deployed history
  CHECK(h.points[10].source == "evolve:baseline");
  CHECK(h.points[10].proposal_id == p.decoy);
  CHECK(h.points[0].source == "rtx-bench");
  CHECK_FALSE(h.points[0].proposal_id);
  REQUIRE(h.change_points.size() == 1);
  REQUIRE(h.caused_by.size() == 1);
  const auto& c = h.change_points[0];
  CHECK(c.index == 20);
  REQUIRE(h.caused_by[0]);
  CHECK(*h.caused_by[0] == p.step);
  CHECK(c.relative_change == Approx(-0.2).margin(0.01));
  CHECK(c.mean_before == Approx(1.0e-3).epsilon(0.01));
  CHECK(c.mean_after == Approx(0.8e-3).epsilon(0.01));
  CHECK(c.pvalue <= 0.05);
  CHECK(h.points[20].created_at == at(20));

  // With the candidates included, the 0.5x rows appear as points.
  o.include_candidates = true;
  CHECK(rtx::evolve::case_history(st, kCase, o).points.size() == 50);

  // --since / --limit keep the newest points (indices shift, the link stays).
  rtx::evolve::HistoryOptions w;
  w.since = at(10);
  auto hs = rtx::evolve::case_history(st, kCase, w);
  REQUIRE(hs.points.size() == 30);
  REQUIRE(hs.change_points.size() == 1);
  CHECK(hs.change_points[0].index == 10);
  CHECK(hs.caused_by[0] == p.step);
  w.since = "";
  w.limit = 12;  // the newest 12 points all lie after the step: nothing to see
  hs = rtx::evolve::case_history(st, kCase, w);
  CHECK(hs.points.size() == 12);
  CHECK(hs.points.front().created_at == at(28));
  CHECK(hs.change_points.empty());

  // JSON form.
  const json j = rtx::evolve::to_json(h);
  CHECK(j["schema"] == "rtx.history.v1");
  CHECK(j["points"].size() == 40);
  CHECK(j["change_points"][0]["index"] == 20);
  CHECK(j["change_points"][0]["caused_by"] == p.step);
  CHECK(rtx::evolve::format_history(h).find("caused by proposal #" + std::to_string(p.step)) != std::string::npos);
}

TEST_CASE("history: busy-host points are marked and left out of the change-point analysis", "[cpu]") {
  rtx::store::Store st(":memory:");
  const std::string name = "mm/cpu.blocked/K=128,M=256,N=384/f32";
  for (int i = 0; i < 30; ++i) add_point(st, name, i, 1e-3 * (1 + 0.002 * ((i * 7) % 5 - 2)));
  // Five consecutive points on a busy host, 40% slower: a spurious step if analysed.
  st.exec("UPDATE bench_results SET contended = 1, contention_reason = 'PSI cpu stall 38%', median_s = median_s * 1.4 "
          "WHERE id BETWEEN 21 AND 25");
  rtx::evolve::HistoryOptions o;
  const auto h = rtx::evolve::case_history(st, name, o);
  REQUIRE(h.points.size() == 30);
  CHECK(h.contended_points == 5);
  CHECK(h.busy_left_out == 5);
  CHECK(h.change_points.empty());
  CHECK(h.points[20].contended);
  CHECK(h.points[20].contention_reason == "PSI cpu stall 38%");
  CHECK_FALSE(h.points[19].contended);
  const json j = rtx::evolve::to_json(h);
  CHECK(j["contended_points"] == 5);
  CHECK(j["points"][20]["contended"] == true);
  CHECK(j["points"][20]["contention_reason"] == "PSI cpu stall 38%");
  CHECK(j["points"][0]["contended"] == false);
  const std::string text = rtx::evolve::format_history(h);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("       -  busy  "));  // the host column of a busy row (no proposal)
  CHECK_THAT(text, Catch::Contains("[busy 1]"));
  CHECK_THAT(text, Catch::Contains("5 busy-host points") && Catch::Contains("left out of the change-point analysis"));
  CHECK_THAT(text, Catch::Contains("[busy 1] PSI cpu stall 38%"));
  // --include-busy: analysed like any point; indices still refer to all points.
  o.analyze_contended = true;
  const auto all = rtx::evolve::case_history(st, name, o);
  CHECK(all.busy_left_out == 0);
  REQUIRE_FALSE(all.change_points.empty());
  CHECK(all.change_points[0].index == 20);
}

TEST_CASE("history: every point busy is told apart from 'no change points'", "[cpu]") {
  rtx::store::Store st(":memory:");
  const std::string name = "gelu/cpu.vec/N=4096/f32";
  // 12 points, all on a busy host, with a 40% step in the middle: nothing is analysed by default.
  for (int i = 0; i < 12; ++i) add_point(st, name, i, i < 6 ? 1e-3 : 1.4e-3);
  st.exec("UPDATE bench_results SET contended = 1, contention_reason = 'PSI cpu stall 52%'");
  rtx::evolve::HistoryOptions o;
  const auto h = rtx::evolve::case_history(st, name, o);
  REQUIRE(h.points.size() == 12);
  CHECK(h.contended_points == 12);
  CHECK(h.busy_left_out == 12);
  CHECK(h.analysed_points == 0);
  CHECK(h.change_points.empty());
  CHECK(rtx::evolve::analysis_state(h) == "no_quiet_points");
  const json j = rtx::evolve::to_json(h);
  CHECK(j["analysis"] == "no_quiet_points");
  CHECK(j["analysed_points"] == 0);
  CHECK(j["change_points"].empty());
  const std::string text = rtx::evolve::format_history(h);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("no change-point analysis: all 12 points were measured on a busy host and left out, so "
                                   "there is no quiet point to analyse (--include-busy analyses them)\n"));
  CHECK(text.find("no change points") == std::string::npos);
  // --include-busy: analysed, and the step is found.
  o.analyze_contended = true;
  const auto all = rtx::evolve::case_history(st, name, o);
  CHECK(all.analysed_points == 12);
  CHECK(rtx::evolve::analysis_state(all) == "analysed");
  REQUIRE(all.change_points.size() == 1);
  CHECK(all.change_points[0].index == 6);
  CHECK(rtx::evolve::to_json(all)["analysis"] == "analysed");
  // One quiet point beside busy ones: too few to analyse, and the text says why.
  st.exec("UPDATE bench_results SET contended = 0, contention_reason = '' WHERE id = 1");
  const auto one = rtx::evolve::case_history(st, name, {});
  CHECK(one.analysed_points == 1);
  CHECK(rtx::evolve::analysis_state(one) == "too_few_points");
  CHECK_THAT(rtx::evolve::format_history(one),
             Catch::Contains("no change points (too few points to analyse: 1 quiet, 11 busy left out; --include-busy "
                             "analyses them)"));
  // All quiet and flat: analysed, no change point, plain text.
  st.exec("UPDATE bench_results SET contended = 0, contention_reason = '', median_s = 1e-3");
  const auto flat = rtx::evolve::case_history(st, name, {});
  CHECK(rtx::evolve::analysis_state(flat) == "analysed");
  CHECK_THAT(rtx::evolve::format_history(flat), Catch::EndsWith("no change points\n"));
  // One point, busy: said in the singular.
  add_point(st, "solo", 0, 1e-3);
  st.exec("UPDATE bench_results SET contended = 1 WHERE case_name = 'solo'");
  CHECK_THAT(rtx::evolve::format_history(rtx::evolve::case_history(st, "solo", {})),
             Catch::Contains("no change-point analysis: the only point was measured on a busy host and left out"));
  // An empty series (a metric no row has): too few points, not "no quiet points".
  o = {};
  o.metric = "gflops";
  CHECK(rtx::evolve::analysis_state(rtx::evolve::case_history(st, name, o)) == "too_few_points");
}

TEST_CASE("history: no false change point on a flat noisy series of 60 points", "[cpu]") {
  rtx::store::Store st(":memory:");
  rtx::Philox rng(7);
  for (int i = 0; i < 60; ++i) add_point(st, "flat", i, 2.0e-3 * (1.0 + 0.02 * static_cast<double>(rng.next_normal())));
  add_promotion(st, add_proposal(st), at(30, 30));  // a promotion that changed nothing
  const auto h = rtx::evolve::case_history(st, "flat", {});
  CHECK(h.points.size() == 60);
  CHECK(h.change_points.empty());
  CHECK(h.caused_by.empty());
}

TEST_CASE("history: cases, unknown case, bad metric, tiny series", "[cpu]") {
  rtx::store::Store st(":memory:");
  CHECK(rtx::evolve::history_cases(st).empty());
  const Planted p = plant(st);
  (void)p;
  add_point(st, "gelu_fwd_small/cpu.tanh/N=4096/f32", 0, 1e-5);
  // Three of kCase's rtx-bench points and one candidate row (not a point) measured on a busy host.
  st.exec("UPDATE bench_results SET contended = 1, contention_reason = 'busy' WHERE case_name = '" + kCase +
          "' AND id IN (SELECT id FROM bench_results WHERE case_name = '" + kCase + "' AND params_json = '{}' LIMIT 3)");
  st.exec("UPDATE bench_results SET contended = 1 WHERE id = (SELECT id FROM bench_results WHERE "
          "json_extract(params_json, '$.rtx_evolve.arm') = 'candidate' LIMIT 1)");
  const auto cases = rtx::evolve::history_cases(st);
  REQUIRE(cases.size() == 2);
  CHECK(cases[0].name == "gelu_fwd_small/cpu.tanh/N=4096/f32");
  CHECK(cases[0].points == 1);
  CHECK(cases[0].busy == 0);
  CHECK(cases[1].name == kCase);
  CHECK(cases[1].points == 40);
  CHECK(cases[1].busy == 3);  // the busy candidate row is not a point
  CHECK(rtx::evolve::case_history(st, kCase, {}).contended_points == 3);  // the same count case_history gives
  const json cj = rtx::evolve::to_json(cases);
  CHECK(cj["schema"] == "rtx.history.v1");
  CHECK(cj["cases"][1] == json{{"case", kCase}, {"points", 40}, {"busy", 3}});
  CHECK(cj["cases"][0]["busy"] == 0);
  const std::string table = rtx::evolve::format_cases(cases);
  INFO(table);
  CHECK_THAT(table, Catch::StartsWith("  points    busy  case\n       1       0  gelu_fwd_small/cpu.tanh/N=4096/f32\n"
                                      "      40       3  " + kCase + "\n"));
  CHECK_THAT(table, Catch::Contains("--include-busy"));
  CHECK(rtx::evolve::format_cases({{"a", 2, 0}}) == "  points    busy  case\n       2       0  a\n");  // no busy note
  CHECK_THAT(rtx::evolve::format_cases({}), Catch::Contains("no bench results"));
  // One point: no change point, not an error.
  const auto one = rtx::evolve::case_history(st, "gelu_fwd_small/cpu.tanh/N=4096/f32", {});
  CHECK(one.points.size() == 1);
  CHECK(one.change_points.empty());
  // Unknown case: Input error naming the close match.
  try {
    rtx::evolve::case_history(st, "matmul_fwd_small/cpu.blocked/K=128,M=256,N=385/f32", {});
    FAIL("expected rtx::Error");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Input);
    CHECK(std::string(e.what()).find(kCase) != std::string::npos);
  }
  rtx::evolve::HistoryOptions o;
  o.metric = "median_s; DROP TABLE runs";
  CHECK_THROWS_AS(rtx::evolve::case_history(st, kCase, o), rtx::Error);
  o.metric = "gflops";  // a metric no row has: zero points, not an error
  CHECK(rtx::evolve::case_history(st, kCase, o).points.empty());
  o.metric = "median_s";
  o.since = "last week";
  CHECK_THROWS_AS(rtx::evolve::case_history(st, kCase, o), rtx::Error);
  o.since = "";
  o.pvalue = 0;
  CHECK_THROWS_AS(rtx::evolve::case_history(st, kCase, o), rtx::Error);
}

TEST_CASE("history: --since reads dates, ISO-8601 with offsets and ages, and compares instants", "[cpu]") {
  using rtx::evolve::normalize_since;
  CHECK(normalize_since("", 0).empty());
  CHECK(normalize_since("2026-11-30", 0) == "2026-11-30T00:00:00.000Z");
  CHECK(normalize_since("2026-01-01T10", 0) == "2026-01-01T10:00:00.000Z");  // reduced precision
  CHECK(normalize_since("2026-11-30T08:30Z", 0) == "2026-11-30T08:30:00.000Z");
  CHECK(normalize_since("2026-11-30T08:30:50", 0) == "2026-11-30T08:30:50.000Z");  // no zone: UTC
  CHECK(normalize_since("2026-11-30 08:30:50.1239Z", 0) == "2026-11-30T08:30:50.123Z");
  // Offsets are converted to UTC (local = UTC + offset), across day, month and year boundaries.
  CHECK(normalize_since("2026-11-30T08:30:50+05:00", 0) == "2026-11-30T03:30:50.000Z");
  CHECK(normalize_since("2026-11-30T08:30:50-05:30", 0) == "2026-11-30T14:00:50.000Z");
  CHECK(normalize_since("2026-11-30T08:30:50+0530", 0) == "2026-11-30T03:00:50.000Z");
  CHECK(normalize_since("2026-11-30T08:30+05", 0) == "2026-11-30T03:30:00.000Z");
  CHECK(normalize_since("2026-01-01T02:00+03:00", 0) == "2025-12-31T23:00:00.000Z");
  CHECK(normalize_since("2024-02-28T23:00-02:00", 0) == "2024-02-29T01:00:00.000Z");  // leap day
  CHECK(normalize_since("2026-11-30T08:30:50.5-00:00", 0) == "2026-11-30T08:30:50.500Z");
  // Real calendar: leap years by the Gregorian rule.
  CHECK(normalize_since("2000-02-29", 0) == "2000-02-29T00:00:00.000Z");
  CHECK(normalize_since("2024-02-29", 0) == "2024-02-29T00:00:00.000Z");
  // Ages before `now` (2026-11-30T08:30:50.750Z = 1796027450.75 s, checked by hand: 20787 days
  // from 1970-01-01 to 2026-11-30, + 8:30:50.75).
  const double now = 20787.0 * 86400 + 8 * 3600 + 30 * 60 + 50.75;
  CHECK(normalize_since("0m", now) == "2026-11-30T08:30:50.750Z");
  CHECK(normalize_since("30m", now) == "2026-11-30T08:00:50.750Z");
  CHECK(normalize_since("12h", now) == "2026-11-29T20:30:50.750Z");
  CHECK(normalize_since("7d", now) == "2026-11-23T08:30:50.750Z");
  CHECK(normalize_since("365d", now) == "2025-11-30T08:30:50.750Z");
  // Everything else is an Input error naming --since.
  for (const char* bad : {"2026-99-99", "2026-02-30", "2025-02-29", "1900-02-29", "2026-04-31", "2026-00-10", "0000-01-01",
                          "2026-11-30 garbage", "2026-11-30T", "2026-11-30T24:00", "2026-11-30T12:60", "2026-11-30T12:30:60",
                          "2026-11-30T08:30+24:00", "2026-11-30T08:30+05:60", "2026-11-30T08:30:50+05:00x", "2026-1-1",
                          "26-11-30", "last week", "7w", "-3d", "7 d", "d", "1234567d", "2026-11-30Z", " 2026-11-30",
                          "9999-12-31T23:00-05:00"}) {
    INFO(bad);
    try {
      normalize_since(bad, now);
      FAIL("accepted");
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      CHECK(e.where() == "--since");
    }
  }

  // case_history compares instants: a row stored as "2026-01-01 10:30:00" (space, no zone) lies
  // after 10:00Z although it sorts before "2026-01-01T10..." as text.
  rtx::store::Store st(":memory:");
  const Planted p = plant(st);
  (void)p;
  rtx::evolve::HistoryOptions w;
  w.since = "2026-01-01T15:00+05:00";  // = 10:00Z = at(10)
  CHECK(rtx::evolve::case_history(st, kCase, w).points.size() == 30);
  w.since = "2026-01-01T10:00:00.001Z";
  CHECK(rtx::evolve::case_history(st, kCase, w).points.size() == 29);
  st.exec("UPDATE bench_results SET created_at = '2026-01-01 10:30:00' WHERE created_at = '" + at(10) + "'");
  w.since = "2026-01-01T10:00Z";
  CHECK(rtx::evolve::case_history(st, kCase, w).points.size() == 30);
  w.since = "100000d";  // every point
  CHECK(rtx::evolve::case_history(st, kCase, w).points.size() == 40);
  w.since = "2026-99-99";
  CHECK_THROWS_AS(rtx::evolve::case_history(st, kCase, w), rtx::Error);
}

TEST_CASE("history: a held-out workload is its own case", "[cpu]") {
  // The memory domain measures its held-out workload under "heldout:<id>" (validate.cpp): two series.
  rtx::store::Store st(":memory:");
  const std::string affected = "alloc:gpt2-small-step", heldout = "heldout:alloc:gpt2-small-step";
  for (int i = 0; i < 6; ++i) {
    add_point(st, affected, i, 1.0e-3);
    add_point(st, heldout, i, 5.0e-3);
  }
  add_point(st, heldout, 6, 5.0e-3);
  const auto cases = rtx::evolve::history_cases(st);
  REQUIRE(cases.size() == 2);
  CHECK((cases[0].name == affected && cases[0].points == 6 && cases[0].busy == 0));
  CHECK((cases[1].name == heldout && cases[1].points == 7 && cases[1].busy == 0));
  const auto a = rtx::evolve::case_history(st, affected, {});
  const auto h = rtx::evolve::case_history(st, heldout, {});
  REQUIRE(a.points.size() == 6);
  REQUIRE(h.points.size() == 7);
  for (const auto& pt : a.points) CHECK(pt.value == 1.0e-3);
  for (const auto& pt : h.points) CHECK(pt.value == 5.0e-3);
  CHECK(a.change_points.empty());
  CHECK(h.change_points.empty());
  CHECK(rtx::evolve::to_json(h)["case"] == heldout);
}

TEST_CASE("record_validation writes gates and per-arm bench_results in one transaction", "[cpu]") {
  rtx::store::Store st(":memory:");
  const int64_t pid = add_proposal(st);
  rtx::evolve::GateResult g;
  g.gate = "performance";
  g.passed = true;
  g.metric = "improvement_lo_frac";
  g.value = 0.12;
  std::vector<rtx::evolve::ArmCaseResult> rows(2);
  rows[0].arm = "baseline";
  rows[0].part = "affected";
  rows[0].case_id = kCase;
  rows[0].kind = "kernels";
  rows[0].spec = {{"id", kCase}, {"op", "matmul"}, {"variant", "cpu.blocked"}, {"shape", {{"K", 128}, {"M", 256}, {"N", 384}}},
                  {"dtype", "f32"}, {"params", {{"tile", 32}}}};
  rows[0].samples = {1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 5.0, 6.0, 7.0};
  rows[0].round_medians = {2.0, 11.0, 6.0};
  rows[1] = rows[0];
  rows[1].arm = "candidate";
  rows[1].samples = {1.0, 1.0, 1.0};
  rows[1].round_medians = {1.0};
  const int64_t run = rtx::evolve::record_validation(st, pid, 0, 5, {g}, rows);
  const auto r = st.get_run(run);
  REQUIRE(r);
  CHECK(r->tool == "rtx-evolve");
  CHECK(r->seed == 5);
  auto& q = st.prepare(
      "SELECT case_name, op, shape, median_s, n, json_extract(params_json, '$.rtx_evolve.arm'), "
      "json_extract(params_json, '$.rtx_evolve.proposal_id'), json_extract(params_json, '$.tile'), samples_json "
      "FROM bench_results WHERE run_id = ?1 ORDER BY id");
  q.bind(1, run);
  REQUIRE(q.step());
  CHECK(q.column_text(0) == kCase);
  CHECK(q.column_text(1) == "matmul");
  CHECK(q.column_text(2) == "K=128,M=256,N=384");
  CHECK(q.column_double(3) == 6.0);  // median of the round medians {2, 11, 6}
  CHECK(q.column_int64(4) == 9);
  CHECK(q.column_text(5) == "baseline");
  CHECK(q.column_int64(6) == pid);
  CHECK(q.column_int64(7) == 32);
  CHECK(json::parse(q.column_text(8)).size() == 9);
  REQUIRE(q.step());
  CHECK(q.column_text(5) == "candidate");
  CHECK_FALSE(q.step());
  q.reset();
  auto& gq = st.prepare("SELECT COUNT(*) FROM gate_results WHERE proposal_id = ?1 AND run_id = ?2");
  gq.bind(1, pid).bind(2, run);
  REQUIRE(gq.step());
  CHECK(gq.column_int64(0) == 1);
  gq.reset();
  // The baseline arm is part of the case's history; the candidate is not.
  const auto h = rtx::evolve::case_history(st, kCase, {});
  REQUIRE(h.points.size() == 1);
  CHECK(h.points[0].source == "evolve:baseline");
  CHECK(h.points[0].proposal_id == pid);

  // A failing write (no such proposal: foreign key) leaves nothing behind, runs row included.
  auto count = [&](const char* table) {
    auto& c = st.prepare(std::string("SELECT COUNT(*) FROM ") + table);
    c.step();
    const int64_t n = c.column_int64(0);
    c.reset();
    return n;
  };
  const int64_t runs0 = count("runs"), bench0 = count("bench_results"), gates0 = count("gate_results");
  CHECK_THROWS_AS(rtx::evolve::record_validation(st, pid + 1000, 0, 5, {g}, rows), rtx::Error);
  CHECK(count("runs") == runs0);
  CHECK(count("bench_results") == bench0);
  CHECK(count("gate_results") == gates0);
}

TEST_CASE("rtx-evolve history CLI: JSON, table, case list, bad input", "[cpu]") {
  const std::string dir = rtx::test::temp_dir(), db = dir + "/rtx.db";
  int64_t step = 0;
  {
    rtx::store::Store st(db);
    step = plant(st).step;
  }
  const std::string ev = rtx::test::tool_path("rtx-evolve") + " --db " + db + " ";
  auto r = rtx::test::run(ev + "--json history '" + kCase + "'");
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j["schema"] == "rtx.history.v1");
  CHECK(j["case"] == kCase);
  CHECK(j["metric"] == "median_s");
  CHECK(j["points"].size() == 40);
  REQUIRE(j["change_points"].size() == 1);
  CHECK(j["change_points"][0]["index"] == 20);
  CHECK(j["change_points"][0]["caused_by"] == step);
  CHECK(j["change_points"][0]["relative_change"].get<double>() == Approx(-0.2).margin(0.01));

  r = rtx::test::run(ev + "history '" + kCase + "' --since 2026-01-01T10 --limit 25 --pvalue 0.01");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("25 points") != std::string::npos);
  CHECK(r.out.find("caused by proposal #" + std::to_string(step)) != std::string::npos);

  r = rtx::test::run(ev + "--json history");
  REQUIRE(r.exit_code == 0);
  const json l = json::parse(r.out);
  REQUIRE(l["cases"].size() == 1);
  CHECK(l["cases"][0]["case"] == kCase);
  CHECK(l["cases"][0]["points"] == 40);
  CHECK(l["cases"][0]["busy"] == 0);
  r = rtx::test::run(ev + "history");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "  points    busy  case\n      40       0  " + kCase + "\n");

  r = rtx::test::run(ev + "history matmul_fwd_small/cpu.blocked");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(kCase) != std::string::npos);  // the close match is listed
  CHECK(rtx::test::run(ev + "history '" + kCase + "' --metric bogus").exit_code == 2);
  CHECK(rtx::test::run(ev + "history '" + kCase + "' --pvalue 2").exit_code == 2);

  // --since: the same forms as report, bad ones refused naming --since; --limit >= 1.
  r = rtx::test::run(ev + "--json history '" + kCase + "' --since 2026-01-01T15:00+05:00");
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["points"].size() == 30);
  r = rtx::test::run(ev + "--json history '" + kCase + "' --since 100000d");
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["points"].size() == 40);
  for (const char* bad : {"2026-99-99", "'2026-11-30 garbage'", "2026-02-30", "7w"}) {
    INFO(bad);
    r = rtx::test::run(ev + "history '" + kCase + "' --since " + bad);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--since") != std::string::npos);
  }
  for (const char* bad : {"-1", "0", "x"}) {
    INFO(bad);
    CHECK(rtx::test::run(ev + "history '" + kCase + "' --limit " + bad).exit_code == 2);
  }
  r = rtx::test::run(ev + "--json history '" + kCase + "' --limit 1");
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["points"].size() == 1);

  // Every point measured on a busy host: the CLI says there was nothing quiet to analyse.
  {
    rtx::store::Store st(db);
    st.exec("UPDATE bench_results SET contended = 1, contention_reason = 'PSI cpu stall 60%'");
  }
  r = rtx::test::run(ev + "history '" + kCase + "'");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("no quiet point to analyse (--include-busy analyses them)"));
  CHECK(r.out.find("no change points") == std::string::npos);
  r = rtx::test::run(ev + "--json history '" + kCase + "'");
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["analysis"] == "no_quiet_points");
  r = rtx::test::run(ev + "--json history '" + kCase + "' --include-busy");
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["analysis"] == "analysed");
  CHECK(json::parse(r.out)["change_points"].size() == 1);
  r = rtx::test::run(ev + "--json history");
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["cases"][0]["busy"] == 40);

  // A store that claims the latest schema without one of its columns: the invalid-store input error, exit 2,
  // naming the file and the columns (not an internal error with raw SQL).
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(db.c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw, "ALTER TABLE bench_results DROP COLUMN contention_reason", nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    sqlite3_close(raw);
  }
  for (const std::string& args : {std::string("history"), "history '" + kCase + "'"}) {
    r = rtx::test::run(ev + args);
    INFO(args << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(db + " is not a valid rtx store (schema version " +
                                      std::to_string(rtx::store::Store::latest_schema_version()) +
                                      " but table 'bench_results' lacks column 'contention_reason')"));
    CHECK(r.err.find("no such column") == std::string::npos);
  }
}

TEST_CASE("history text shows control bytes from the store as \\xHH", "[cpu]") {
  // A hand-edited store: a reason and a case name with a terminal escape and a newline must not
  // reach the terminal raw (they would clear the screen or forge a row).
  rtx::store::Store st(":memory:");
  const std::string name = "gelu\x1b[2J/N=7";
  for (int i = 0; i < 3; ++i) add_point(st, name, i, 1e-3);
  st.exec("UPDATE bench_results SET contended = 1, contention_reason = 'stall' || char(10) || 'x' || char(27) || '[31m'");
  const std::string text = rtx::evolve::format_history(rtx::evolve::case_history(st, name, {}));
  INFO(text);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK_THAT(text, Catch::Contains("case gelu\\x1B[2J/N=7 ("));
  CHECK_THAT(text, Catch::Contains("[busy 1] stall\\x0Ax\\x1B[31m\n"));
  // The JSON keeps the stored text as it is (JSON escapes it).
  CHECK(rtx::evolve::to_json(rtx::evolve::case_history(st, name, {}))["points"][0]["contention_reason"] ==
        "stall\nx\x1b[31m");
  const std::string list = rtx::evolve::format_cases(rtx::evolve::history_cases(st));
  CHECK(list.find('\x1b') == std::string::npos);
  CHECK_THAT(list, Catch::Contains("gelu\\x1B[2J/N=7\n"));
}

TEST_CASE("rtx-evolve history and report open the store read-only: no store is created, none migrated", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string ev = rtx::test::tool_path("rtx-evolve");
  // A mistyped --db: a clear environment error, and neither the directories nor a store appear.
  const std::string missing = dir + "/typo/sub/x.db";
  for (const std::string cmd : {"history", "report --format md"}) {
    INFO(cmd);
    const auto r = rtx::test::run(ev + " --db " + missing + " " + cmd);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains("no store at " + missing));
    CHECK_THAT(r.err, Catch::Contains("rtx-bench run or rtx-evolve run"));
    CHECK_FALSE(std::filesystem::exists(dir + "/typo"));
  }
  // An older (schema 2) store is refused by the read-only open, not migrated behind the user's back.
  const std::string v2 = dir + "/v2.db";
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(v2.c_str(), &db) == SQLITE_OK);
    for (const auto& m : rtx::store::detail::migrations())
      if (m.version <= 2) REQUIRE(sqlite3_exec(db, m.sql, nullptr, nullptr, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "PRAGMA user_version = 2;", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  for (const std::string cmd : {"history", "report --format md"}) {
    INFO(cmd);
    const auto r = rtx::test::run(ev + " --db " + v2 + " " + cmd);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains("older than this rtx's"));
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(v2.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    CHECK(sqlite3_column_int(st, 0) == 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
}

TEST_CASE("rtx-evolve --json history and report --format json survive invalid UTF-8 in the store", "[cpu]") {
  const std::string dir = rtx::test::temp_dir(), db = dir + "/rtx.db";
  {
    rtx::store::Store st(db);
    for (int i = 0; i < 4; ++i) add_point(st, "bad", i, 1e-3);
    // A hand-edited row: case name and reason with bytes that are not UTF-8.
    st.exec("UPDATE bench_results SET case_name = CAST(X'6261645FFF' AS TEXT), contended = 1, "
            "contention_reason = CAST(X'72FF0A1B' AS TEXT)");
  }
  const std::string ev = rtx::test::tool_path("rtx-evolve") + " --db " + db + " ";
  for (const std::string cmd : {"--json history", "--json history $(printf 'bad_\\377')", "report --format json"}) {
    INFO(cmd);
    const auto r = rtx::test::run(ev + cmd);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK_NOTHROW(json::parse(r.out));
    CHECK_THAT(r.out, Catch::Contains("bad_\xEF\xBF\xBD"));  // U+FFFD in place of the 0xFF byte
  }
}

TEST_CASE("history and the md report show created_at, close matches and case names from the store as \\xHH; long lines stay whole", "[cpu]") {
  rtx::store::Store st(":memory:");
  const std::string name = "ctl\x1b[31mRED\x07/N=1";
  for (int i = 0; i < 3; ++i) add_point(st, name, i, 1e-3);
  add_point(st, "long/case", 0, 2e-3, std::string(300, 'x'));
  st.exec("UPDATE bench_results SET created_at = '2026' || char(27) || '[31m' WHERE case_name = 'long/case'");
  // created_at with an escape, a 300-byte runs.tool: the value column is still printed.
  const std::string text = rtx::evolve::format_history(rtx::evolve::case_history(st, "long/case", {}));
  INFO(text);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK_THAT(text, Catch::Contains("2026\\x1B[31m"));
  CHECK_THAT(text, Catch::Contains(std::string(300, 'x') + "         -  -     2 ms"));
  // An unknown case's close matches.
  try {
    rtx::evolve::case_history(st, "ctl[31mRED\x07/N=1", {});  // the ESC left out
    FAIL("an unknown case was found");
  } catch (const rtx::Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find('\x1b') == std::string::npos);
    CHECK(std::string(e.what()).find('\x07') == std::string::npos);
    CHECK_THAT(std::string(e.what()), Catch::Contains("close matches:\n  ctl\\x1B[31mRED\\x07/N=1"));
  }
  const std::string md = rtx::evolve::render_report(rtx::evolve::build_report(st, {}), "md");
  INFO(md);
  CHECK(md.find('\x1b') == std::string::npos);
  CHECK(md.find('\x07') == std::string::npos);
  CHECK_THAT(md, Catch::Contains("ctl\\x1B[31mRED\\x07/N=1"));
}
