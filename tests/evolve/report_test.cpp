// rtx-evolve report: a store with hand-made proposals, gates, deployments and bench results; the
// HTML (self-contained, escaped), Markdown tables and JSON numbers against hand-computed values;
// --since, an empty store, bad formats and the CLI.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/core/error.hpp"
#include "rtx/evolve/gates.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/proposal.hpp"
#include "rtx/evolve/report.hpp"
#include "rtx/store/store.hpp"
#include "test_util.hpp"

using namespace rtx::evolve;
using nlohmann::json;

namespace {

const char* kEvil = "<script>alert(\"x\")</script> & 'more' | pipe";
const std::string kCase = "matmul_fwd_small/cpu.blocked/K=128,M=7,N=127/f32";

Proposal make(const std::string& domain, const std::string& key, const std::string& sku, const std::string& status,
              const std::string& why = "test") {
  Proposal p;
  p.domain = domain;
  p.target = target_of(domain);
  p.key = key;
  p.plan = {{"why", why}};
  p.actions = json::array({{{"set", "knob"}, {"from", 1}, {"to", 2}}});
  p.changeset = {{"base_version", nullptr}, {"base", {{"knob", 1}}}, {"candidate", {{"knob", 2}}}};
  p.rollback = {{"command", "rtx-evolve rollback <ID>"}, {"restore_version", nullptr}};
  p.provenance = {{"git_sha", "abc"}, {"sku", sku},   {"code_sha256", "0"}, {"data_sha256", "0"},
                  {"env_sha256", "0"}, {"seeds", {{"seed", 0}}}};
  p.fingerprint = make_fingerprint(domain, key, p.changeset["candidate"]);
  p.status = status;
  return p;
}

GateResult perf(bool passed, double est, double lo, double hi, const std::string& reason) {
  return GateResult{"performance", passed, "improvement_ci_lo", lo, 0.10,
                    {{"improvement", est}, {"ci", {lo, hi}}, {"p", 0.03}, {"reason", reason}}};
}
GateResult ok(const std::string& gate) { return GateResult{gate, true, "x", 0, 0, {{"reason", "fine"}}}; }

/// The hand-made store (ids in insertion order):
///  1 tuner matmul SKU-A promoted     perf pass +20% [15, 25]
///  2 tuner gelu   SKU-A failed       perf FAIL (below threshold)          (created 2020)
///  3 parallelism  SKU-A passed       perf pass +12% [11, 14], evil why
///  4 memory       SKU-B failed       perf FAIL (below threshold), memory FAIL
///  5 scheduler    SKU-B rolled_back  perf pass +18% [16, 20]
///  6 tuner        SKU-A new          no gates                            (created 2020)
///  7 tuner matmul SKU-A superseded   perf pass +11% [10, 12]
/// Validated 6 (all but 6), passed 4 (1 3 5 7), promoted 3 (1 5 7): 66.7%, 50.0%.
/// Since 2021: validated 5, passed 4, promoted 3: 80.0%, 60.0%.
void fill(rtx::store::Store& st) {
  const std::string mm = "matmul|cpu.blocked|{\"K\":128}|f32|cpu|SKU-A";
  Proposal p1 = make("tuner", mm, "SKU-A", "promoted");
  insert_proposal(st, p1, 0);
  record_gates(st, p1.id, 0, {ok("safety"), ok("determinism"), perf(true, 0.20, 0.15, 0.25, "CI above"), ok("memory"),
                              ok("approval")});
  Proposal p2 = make("tuner", "gelu|cpu.ref|{}|f32|cpu|SKU-A", "SKU-A", "failed");
  insert_proposal(st, p2, 0);
  record_gates(st, p2.id, 0, {ok("safety"), perf(false, 0.03, -0.01, 0.07,
                                                  "improvement +3.0% [CI -1.0%, +7.0%]: below the +10.0% threshold"),
                              ok("memory")});
  Proposal p3 = make("parallelism", "parallelism|SKU-A", "SKU-A", "passed", kEvil);
  insert_proposal(st, p3, 0);
  record_gates(st, p3.id, 0, {ok("safety"), perf(true, 0.12, 0.11, 0.14, "CI above"), ok("memory")});
  Proposal p4 = make("memory", "memory|SKU-B", "SKU-B", "failed");
  insert_proposal(st, p4, 0);
  record_gates(st, p4.id, 0, {ok("safety"), perf(false, 0.01, -0.02, 0.04,
                                                  "improvement +1.0% [CI -2.0%, +4.0%]: below the +10.0% threshold"),
                              GateResult{"memory", false, "peak_reserved_bytes", 2e6, 1e6, {{"reason", "peak above baseline"}}}});
  Proposal p5 = make("scheduler", "scheduler|SKU-B", "SKU-B", "rolled_back");
  insert_proposal(st, p5, 0);
  record_gates(st, p5.id, 0, {ok("safety"), perf(true, 0.18, 0.16, 0.20, "CI above")});
  Proposal p6 = make("tuner", "softmax|cpu.ref|{}|f32|cpu|SKU-A", "SKU-A", "new");
  insert_proposal(st, p6, 0);
  Proposal p7 = make("tuner", mm, "SKU-A", "superseded");
  insert_proposal(st, p7, 0);
  record_gates(st, p7.id, 0, {ok("safety"), perf(true, 0.11, 0.10, 0.12, "CI above")});
  st.exec("UPDATE proposals SET created_at = '2020-01-01T00:00:00.000Z' WHERE id IN (2, 6)");
  st.exec("INSERT INTO evolve_deployments (proposal_id, target, key, from_version, to_version, action, actor, created_at) "
          "VALUES (1, 'profile', 'k', NULL, 1, 'promote', 'tester', '2026-01-01T00:00:12.000Z')");

  // A bench case measured 24 times: 1.00 ms for 12 runs, then 0.80 ms (a 20% step) after the
  // promotion of proposal 1; small deterministic ripple.
  const int64_t run = st.begin_run("rtx-bench", "[]", 0, "abc", "SKU-A", "{}");
  rtx::store::Transaction tx(st);
  auto& q = st.prepare(
      "INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, median_s, n, created_at) "
      "VALUES (?1, ?2, 'matmul_fwd_small', 'cpu.blocked', 'cpu', '{}', 'f32', ?3, 11, ?4)");
  for (int i = 0; i < 24; ++i) {
    const double v = (i < 12 ? 1.0e-3 : 0.8e-3) * (1 + 0.002 * ((i * 7) % 5 - 2));
    char at[40];
    std::snprintf(at, sizeof at, "2026-01-01T00:00:%02d.000Z", i < 12 ? i : i + 1);
    q.bind(1, run).bind(2, kCase).bind(3, v).bind(4, std::string(at));
    q.run();
  }
  tx.commit();
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

const json& domain_row(const json& r, const std::string& d) {
  for (const auto& x : r["win_rate"]["by_domain"])
    if (x["domain"] == d) return x;
  FAIL("no domain row " << d);
  static json none;
  return none;
}

}  // namespace

TEST_CASE("report: JSON numbers match hand-computed counts and rates", "[cpu]") {
  rtx::store::Store st(":memory:");
  fill(st);
  const json r = build_report(st, ReportOptions{});
  CHECK(r["schema"] == "rtx.report.v1");
  CHECK(r["queue"]["total"] == 7);
  CHECK(r["queue"]["status_counts"]["failed"] == 2);
  CHECK(r["queue"]["status_counts"]["promoted"] == 1);
  CHECK(r["queue"]["status_counts"]["new"] == 1);
  REQUIRE(r["queue"]["proposals"].size() == 7);
  CHECK(r["queue"]["proposals"][0]["id"] == 7);  // newest first

  const json& ov = r["win_rate"]["overall"];
  CHECK(ov["validated"] == 6);
  CHECK(ov["passed"] == 4);
  CHECK(ov["promoted"] == 3);
  CHECK(ov["pass_rate"].get<double>() == Approx(4.0 / 6.0));
  CHECK(ov["promote_rate"].get<double>() == Approx(0.5));
  const json& tuner = domain_row(r, "tuner");
  CHECK(tuner["validated"] == 3);
  CHECK(tuner["passed"] == 2);
  CHECK(tuner["promoted"] == 2);
  CHECK(domain_row(r, "parallelism")["promote_rate"].get<double>() == 0.0);
  CHECK(domain_row(r, "memory")["pass_rate"].get<double>() == 0.0);
  CHECK(domain_row(r, "scheduler")["promote_rate"].get<double>() == 1.0);

  // Gate failures: performance evaluated for 6 proposals, failed 2 with one reason pattern.
  bool seen_perf = false, seen_mem = false;
  for (const auto& g : r["gate_failures"]["by_gate"]) {
    if (g["gate"] == "performance") {
      seen_perf = true;
      CHECK(g["evaluated"] == 6);
      CHECK(g["failed"] == 2);
    }
    if (g["gate"] == "memory") {
      seen_mem = true;
      CHECK(g["evaluated"] == 4);
      CHECK(g["failed"] == 1);
    }
    CHECK(g["gate"] != "approval");
  }
  CHECK(seen_perf);
  CHECK(seen_mem);
  const json& top = r["gate_failures"]["top_reasons"];
  REQUIRE(top.size() == 2);
  CHECK(top[0]["gate"] == "performance");
  CHECK(top[0]["count"] == 2);
  CHECK_THAT(top[0]["reason"].get<std::string>(), Catch::Contains("below the +10.0% threshold"));
  CHECK(top[1]["reason"] == "peak above baseline");

  // Impact: (SKU-A, matmul) holds 1 and 7, one in force; (SKU-B, scheduler) holds 5.
  const json& groups = r["impact"]["groups"];
  REQUIRE(groups.size() == 2);
  CHECK(groups[0]["sku"] == "SKU-A");
  CHECK(groups[0]["op"] == "matmul");
  CHECK(groups[0]["promoted"] == 2);
  CHECK(groups[0]["in_force"] == 1);
  CHECK(groups[0]["best_improvement"].get<double>() == Approx(0.20));
  CHECK(groups[1]["op"] == "scheduler");
  CHECK(groups[1]["items"][0]["ci_lo"].get<double>() == Approx(0.16));
  CHECK(groups[1]["items"][0]["ci_hi"].get<double>() == Approx(0.20));

  // Queue actions: approve the passed one, roll back the promoted one.
  for (const auto& p : r["queue"]["proposals"]) {
    if (p["id"] == 3) CHECK(p["command"] == "rtx-evolve approve 3");
    if (p["id"] == 1) CHECK(p["command"] == "rtx-evolve rollback 1");
    if (p["id"] == 2) CHECK_THAT(p["action"].get<std::string>(), Catch::Contains("failed performance"));
    if (p["id"] == 6) CHECK(p["improvement"].is_null());
  }

  // Performance over time: the 24-point case, one change point at the 20% step, caused by #1.
  const json& cases = r["performance"]["cases"];
  REQUIRE(cases.size() == 1);
  CHECK(cases[0]["case"] == kCase);
  REQUIRE(cases[0]["points"].size() == 24);
  REQUIRE(cases[0]["change_points"].size() == 1);
  const json& cp = cases[0]["change_points"][0];
  CHECK(cp["index"] == 12);
  CHECK(cp["rel_change"].get<double>() == Approx(-0.2).margin(0.01));
  CHECK(cp["caused_by"] == 1);

  // JSON rendering round-trips.
  CHECK(json::parse(render_report(r, "json")) == r);
}

TEST_CASE("report: an undecided performance gate is told apart from a failure", "[cpu]") {
  rtx::store::Store st(":memory:");
  Proposal dec = make("parallelism", "parallelism|SKU-A", "SKU-A", "failed");
  insert_proposal(st, dec, 0);
  record_gates(st, dec.id, 0, {ok("safety"), perf(false, -0.20, -0.25, -0.15, "slower: CI below 0")});
  Proposal und = make("scheduler", "scheduler|SKU-A", "SKU-A", "failed");
  insert_proposal(st, und, 0);
  GateResult borderline = perf(false, 0.09, 0.02, 0.16, "CI straddles +10.0% (still borderline after re-measuring)");
  borderline.detail["undecided"] = true;
  record_gates(st, und.id, 0, {ok("safety"), borderline});
  // Undecided performance, but the memory gate failed: a failure, and memory is the reason.
  Proposal mem = make("memory", "memory|SKU-A", "SKU-A", "failed");
  insert_proposal(st, mem, 0);
  record_gates(st, mem.id, 0, {ok("safety"), borderline,
                               GateResult{"memory", false, "peak_reserved_bytes", 2e6, 1e6,
                                          {{"reason", "no reduction of peak or fragmentation"}}}});

  const json rows = status_report(st, 10)["proposals"];
  REQUIRE(rows.size() == 3);
  CHECK_FALSE(failed_undecided_only(rows[0]["gates"]));  // newest first: #3 memory, #2 undecided, #1 decided
  CHECK_FALSE(failed_undecided_only(rows[2]["gates"]));
  CHECK(failed_undecided_only(rows[1]["gates"]));
  CHECK_FALSE(failed_undecided_only(json::array()));
  const std::string text = format_report(status_report(st, 10), "text");
  INFO(text);
  CHECK_THAT(text, Catch::Contains("3 failed (1 undecided)"));
  CHECK_THAT(text, Catch::Contains("Failed (not retried on this SKU):\n  #3 memory: no reduction of peak or "
                                   "fragmentation\n  #1 performance: slower: CI below 0\n"));
  CHECK_THAT(text, Catch::Contains("Undecided (not promoted; this host's noise or too few --rounds hid the effect; a "
                                   "later run proposes them again):\n  #2 performance: CI straddles"));
  CHECK(status_report(st, 10)["summary"]["undecided"] == 1);
  // Each proposal's gates line says undecided, not FAIL, for a gate without a verdict.
  CHECK_THAT(text, Catch::Contains("gates: pass safety (") && Catch::Contains("undecided performance (") &&
                       Catch::Contains("FAIL memory (") && Catch::Contains("FAIL performance (time new/base CI hi 1.250)"));
  CHECK(gate_verdict(json{{"gate", "performance"}, {"passed", false}, {"detail", {{"undecided", true}}}}) == "undecided");
  CHECK(gate_verdict(json{{"gate", "memory"}, {"passed", false}, {"detail", {{"undecided", true}}}}) == "FAIL");
  CHECK(gate_verdict(json{{"gate", "heldout"}, {"passed", true}}) == "pass");
  // So does kg query failed (JSON: undecided), which still lists it: it did not pass.
  const json kq = kg_query(st, KgQuery{"failed", "", "", "performance", "", 50});
  REQUIRE(kq["rows"].size() == 3);
  for (const json& row : kq["rows"]) CHECK(row["undecided"] == (row["proposal_id"] != 1));
  CHECK_THAT(kg_format_text(kq), Catch::Contains("performance undecided: ") && Catch::Contains("performance FAIL: "));

  const json r = build_report(st, ReportOptions{});
  for (const auto& p : r["queue"]["proposals"]) {
    const std::string action = p["action"];
    if (p["id"] == 1) CHECK_THAT(action, Catch::Contains("not retried on this SKU"));
    if (p["id"] == 3) CHECK_THAT(action, Catch::StartsWith("none: failed memory: no reduction of peak"));
    if (p["id"] == 2) CHECK_THAT(action, Catch::StartsWith("none now: undecided performance") && Catch::Contains("a later run proposes it again"));
  }
  // Win rate: the undecided proposal is neither a win nor a failure (out of the denominator),
  // counted apart and said in the text.
  const json& ov = r["win_rate"]["overall"];
  CHECK(ov["validated"] == 2);  // #1 and #3 decided
  CHECK(ov["passed"] == 0);
  CHECK(ov["failed"] == 2);
  CHECK(ov["undecided"] == 1);
  CHECK(ov["pass_rate"].get<double>() == Approx(0.0));
  CHECK(domain_row(r, "scheduler")["validated"] == 0);
  CHECK(domain_row(r, "scheduler")["undecided"] == 1);
  CHECK(domain_row(r, "scheduler")["pass_rate"] == nullptr);
  CHECK(domain_row(r, "memory")["undecided"] == 0);
  const std::string md = render_report(r, "md");
  CHECK_THAT(md, Catch::Contains("| domain | validated | passed | promoted | undecided |"));
  CHECK_THAT(md, Catch::Contains("| all | 2 | 0 | 0 | 1 | 0.0% | 0.0% |"));
  CHECK_THAT(md, Catch::Contains("1 proposal was undecided"));
  // Gate failures: the undecided performance gates (#2, #3) are not counted as failures.
  for (const auto& g : r["gate_failures"]["by_gate"])
    if (g["gate"] == "performance") {
      CHECK(g["evaluated"] == 3);
      CHECK(g["failed"] == 1);
      CHECK(g["undecided"] == 2);
    }
  for (const auto& t : r["gate_failures"]["top_reasons"]) CHECK(t["reason"].get<std::string>().find("straddles") == std::string::npos);
  CHECK_THAT(render_report(r, "html"), Catch::Contains("1 proposal was undecided"));
  CHECK_THAT(render_report(r, "html"), Catch::Contains("<span class=\"undecided\" title=\"CI straddles"));
  // ... and the HTML and Markdown Gate failures tables show the undecided count beside failed.
  // by_gate is sorted by gate name: memory (1 evaluated, 1 failed), performance, safety.
  CHECK_THAT(md, Catch::Contains("### Gate failures\n\n| gate | evaluated | failed | undecided |\n|---|---:|---:|---:|\n"
                                 "| memory | 1 | 1 | 0 |\n| performance | 3 | 1 | 2 |\n| safety | 3 | 0 | 0 |\n"));
  const std::string html = render_report(r, "html");
  CHECK_THAT(html, Catch::Contains("<h2>Gate failures</h2>\n<table><tr><th>gate</th><th>evaluated</th><th>failed</th>"
                                   "<th>undecided</th></tr>\n"));
  CHECK_THAT(html, Catch::Contains("<tr><td>performance</td><td class=\"n\">3</td><td class=\"n\">1</td><td "
                                   "class=\"n\">2</td></tr>\n"));

  // The prior that keeps a failure from being proposed again ignores the undecided one.
  CHECK(failed_before(st, dec.fingerprint, "SKU-A"));
  CHECK_FALSE(failed_before(st, und.fingerprint, "SKU-A"));
  CHECK(failed_before(st, mem.fingerprint, "SKU-A"));
}

TEST_CASE("report: busy-host bench points are marked in JSON, HTML and Markdown", "[cpu]") {
  rtx::store::Store st(":memory:");
  fill(st);
  // Two of the 24 points were measured on a busy host (and are much slower).
  st.exec("UPDATE bench_results SET contended = 1, contention_reason = 'PSI cpu stall 41%', median_s = 3e-3 "
          "WHERE created_at IN ('2026-01-01T00:00:03.000Z', '2026-01-01T00:00:20.000Z')");
  const json r = build_report(st, ReportOptions{});
  REQUIRE(r["performance"]["cases"].size() == 1);
  const json& c = r["performance"]["cases"][0];
  CHECK(c["busy_points"] == 2);
  size_t busy = 0;
  for (const auto& p : c["points"])
    if (p["contended"].get<bool>()) {
      ++busy;
      CHECK(p["contention_reason"] == "PSI cpu stall 41%");
    }
  CHECK(busy == 2);
  // Left out of the change-point analysis: still the one 20% step, no spike change points.
  REQUIRE(c["change_points"].size() == 1);
  CHECK(c["change_points"][0]["rel_change"].get<double>() == Approx(-0.2).margin(0.01));
  const std::string html = render_report(r, "html");
  CHECK(count_of(html, "class=\"pb busy\"") == 2);
  CHECK_THAT(html, Catch::Contains("(busy host: PSI cpu stall 41%)"));
  CHECK_THAT(html, Catch::Contains("2 of 24 points of"));
  const std::string md = render_report(r, "md");
  CHECK_THAT(md, Catch::Contains("| case | points | busy | first | last |"));
  CHECK_THAT(md, Catch::Contains(" | 24 | 2 | "));
}

TEST_CASE("report: a case measured only on a busy host says its first/last are busy values", "[cpu]") {
  rtx::store::Store st(":memory:");
  fill(st);
  st.exec("UPDATE bench_results SET contended = 1, contention_reason = 'PSI cpu stall 41%'");
  const json r = build_report(st, ReportOptions{});
  REQUIRE(r["performance"]["cases"].size() == 1);
  const json& c = r["performance"]["cases"][0];
  CHECK(c["busy_points"] == 24);
  CHECK(c["analysis"] == "no_quiet_points");
  CHECK(c["change_points"].empty());  // nothing quiet was analysed
  const std::string md = render_report(r, "md");
  INFO(md);
  // fill(): point 0 is 1.0 ms x (1 - 0.004), point 23 is 0.8 ms x (1 - 0.002); change -19.8%.
  CHECK_THAT(md, Catch::Contains(" | 24 | 24 | 0.996 ms (busy) | 0.7984 ms (busy) | -19.8% (busy) | not analysed (no quiet "
                                 "point) |"));
  CHECK_THAT(md, Catch::Contains("(busy): every point of " + kCase + " was measured on a busy host, so first, last and "
                                 "change are busy-host values"));
  const std::string html = render_report(r, "html");
  CHECK_THAT(html, Catch::Contains("All 24 points of " + kCase + " were measured on a busy host (hollow circles): there "
                                   "is no quiet point"));
  CHECK(count_of(html, "class=\"pb busy\"") == 24);
  // With quiet points the values are over those, unmarked (the busy-host test above), and the
  // note counts; here one quiet point is enough to drop the marker.
  st.exec("UPDATE bench_results SET contended = 0 WHERE created_at = '2026-01-01T00:00:00.000Z'");
  const json r1 = build_report(st, ReportOptions{});
  CHECK(r1["performance"]["cases"][0]["analysis"] == "too_few_points");
  const std::string md1 = render_report(r1, "md");
  CHECK(md1.find("(busy)") == std::string::npos);
  CHECK_THAT(md1, Catch::Contains(" | 24 | 23 | 0.996 ms | 0.996 ms | +0.0% | none |"));
  CHECK_THAT(render_report(r1, "html"), Catch::Contains("23 of 24 points of"));
}

TEST_CASE("report: gates with too few rounds show no CI and count as undecided", "[cpu]") {
  rtx::store::Store st(":memory:");
  // The gates a --rounds 2 validation records (gates.cpp's own judgements of 2+2 round medians).
  std::vector<std::vector<double>> base(1), cand(1);
  for (int i = 0; i < 10; ++i) {
    base[0].push_back(1e-3 * (1 + 0.01 * (i % 3)));
    cand[0].push_back(0.5e-3 * (1 + 0.01 * (i % 4)));
  }
  PerfRule rule = default_rule("parallelism");
  rule.rounds = 2;
  GateResult pg = judge_performance(base, cand, rule).gate();
  pg.threshold = rule.threshold;
  pg.detail["undecided"] = true;
  const GateResult hg = judge_heldout(base, cand, 0.05, 2);
  REQUIRE(pg.detail["too_few_rounds"] == true);
  REQUIRE(hg.detail["too_few_rounds"] == true);
  Proposal few = make("parallelism", "parallelism|SKU-A", "SKU-A", "failed");
  insert_proposal(st, few, 0);
  record_gates(st, few.id, 0, {ok("safety"), ok("determinism"), pg, hg, ok("memory")});
  // Too few rounds beside a failed memory gate: a failure (memory decided).
  Proposal mem = make("memory", "memory|SKU-A", "SKU-A", "failed");
  insert_proposal(st, mem, 0);
  record_gates(st, mem.id, 0, {ok("safety"), pg, GateResult{"memory", false, "peak_reserved_bytes", 2e6, 1e6,
                                                            {{"reason", "peak above baseline"}}}});

  const json rows = status_report(st, 10)["proposals"];
  REQUIRE(rows.size() == 2);
  CHECK(failed_undecided_only(rows[1]["gates"]));        // #1: performance and heldout undecided only
  CHECK_FALSE(failed_undecided_only(rows[0]["gates"]));  // #2: memory failed
  CHECK(gate_undecided("heldout", false, hg.detail));
  CHECK_FALSE(gate_undecided("heldout", true, hg.detail));
  CHECK_FALSE(gate_undecided("memory", false, {{"undecided", true}}));
  CHECK_FALSE(failed_before(st, few.fingerprint, "SKU-A"));  // proposed again by a later run
  CHECK(failed_before(st, mem.fingerprint, "SKU-A"));
  CHECK_THAT(gate_value_text(rows[1]["gates"][2]), Catch::Matches(R"(time new/base [0-9.]+ estimate, no CI \(too few rounds\))"));
  const std::string text = format_report(status_report(st, 10), "text");
  INFO(text);
  CHECK_THAT(text, Catch::Contains("2 failed (1 undecided)"));
  CHECK_THAT(text, Catch::Contains("#1 performance: too few rounds for a 95% CI (n=2+2 round medians; needs 4 rounds per "
                                   "arm: --rounds 4 or more)"));
  CHECK_THAT(text, Catch::Contains("#2 memory: peak above baseline"));
  CHECK(text.find("CI lo") == std::string::npos);  // no CI bound is shown for either gate

  const json r = build_report(st, ReportOptions{});
  for (const auto& p : r["queue"]["proposals"])
    if (p["id"] == 1) {
      CHECK(p["ci_lo"].is_null());
      CHECK(p["ci_hi"].is_null());
      CHECK(p["too_few_rounds"] == true);
      CHECK(p["improvement"].get<double>() == Approx(pg.detail["improvement"].get<double>()));
      CHECK_THAT(p["action"].get<std::string>(), Catch::StartsWith("none now: undecided performance"));
      // Too few rounds, not the host's noise, left it undecided: the action says so.
      CHECK_THAT(p["action"].get<std::string>(), Catch::Contains("too few rounds to decide"));
      CHECK(p["action"].get<std::string>().find("noise") == std::string::npos);
    }
  CHECK(r["win_rate"]["overall"]["undecided"] == 1);
  CHECK(r["win_rate"]["overall"]["validated"] == 1);
  const std::string md = render_report(r, "md");
  CHECK_THAT(md, Catch::Contains("(no CI: too few rounds)"));
  CHECK_THAT(render_report(r, "html"), Catch::Contains("(no CI: too few rounds)"));
}

TEST_CASE("report: --since and --limit", "[cpu]") {
  rtx::store::Store st(":memory:");
  fill(st);
  ReportOptions o;
  o.since = "2021-01-01";
  o.limit = 2;
  const json r = build_report(st, o);
  CHECK(r["since"] == "2021-01-01T00:00:00.000Z");
  CHECK(r["queue"]["total"] == 5);
  CHECK(r["queue"]["proposals"].size() == 2);
  CHECK(r["win_rate"]["overall"]["validated"] == 5);
  CHECK(r["win_rate"]["overall"]["pass_rate"].get<double>() == Approx(0.8));
  CHECK(r["win_rate"]["overall"]["promote_rate"].get<double>() == Approx(0.6));
  CHECK(r["queue"]["status_counts"].count("new") == 0);
  // Points before 2026-01-01T00:00:13 drop out of the history.
  o.since = "2026-01-01T00:00:13Z";
  const json r2 = build_report(st, o);
  REQUIRE(r2["performance"]["cases"].size() == 1);
  CHECK(r2["performance"]["cases"][0]["points"].size() == 12);
  CHECK(build_report(st, ReportOptions{"2030-01-01", 20, 12, 200})["queue"]["total"] == 0);
}

TEST_CASE("report: HTML is one self-contained, escaped page with the numbers", "[cpu]") {
  rtx::store::Store st(":memory:");
  fill(st);
  const std::string html = render_report(build_report(st, ReportOptions{}), "html");
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(count_of(html, "<html") == 1);
  CHECK(count_of(html, "</html>") == 1);
  // No scripts, no external resources: no src=, only in-page #anchors, no URL but the SVG namespace.
  CHECK(count_of(html, "<script") == 0);
  CHECK(count_of(html, "src=") == 0);
  CHECK(count_of(html, "url(") == 0);
  CHECK(count_of(html, "@import") == 0);
  CHECK(count_of(html, "<link") == 0);
  CHECK(count_of(html, "href=") == count_of(html, "href=\"#"));
  CHECK(count_of(html, "http") == count_of(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  // The plan's why is escaped, not executed.
  CHECK_THAT(html, Catch::Contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;more&#39;"));
  // Counts, rates, commands, CI, charts with axes and units.
  CHECK_THAT(html, Catch::Contains("4 of 6 validated proposals passed every gate (66.7%); 3 were promoted (50.0%)"));
  CHECK_THAT(html, Catch::Contains("<code>rtx-evolve approve 3</code>"));
  CHECK_THAT(html, Catch::Contains("<code>rtx-evolve rollback 1</code>"));
  CHECK_THAT(html, Catch::Contains("[+15.0%, +25.0%]"));
  CHECK_THAT(html, Catch::Contains("improvement +3.0% [CI -1.0%, +7.0%]: below the +10.0% threshold"));
  CHECK(count_of(html, "<svg") == 5);  // status, win rate, gate failures, impact, one case
  CHECK_THAT(html, Catch::Contains("% of validated proposals"));
  CHECK_THAT(html, Catch::Contains("improvement, % of baseline time"));
  CHECK_THAT(html, Catch::Contains("median_s (ms)"));
  CHECK_THAT(html, Catch::Contains("class=\"cp\""));
  CHECK_THAT(html, Catch::Contains("change -20"));
  CHECK_THAT(html, Catch::Contains("(#1)"));
}

TEST_CASE("report: Markdown tables have the right rows", "[cpu]") {
  rtx::store::Store st(":memory:");
  fill(st);
  const std::string md = render_report(build_report(st, ReportOptions{}), "md");
  CHECK(count_of(md, "<svg") == 0);
  CHECK(count_of(md, "<script") == 0);
  CHECK_THAT(md, Catch::Contains("| tuner | 3 | 2 | 2 | 0 | 66.7% | 66.7% |"));
  CHECK_THAT(md, Catch::Contains("| parallelism | 1 | 1 | 0 | 0 | 100.0% | 0.0% |"));
  CHECK_THAT(md, Catch::Contains("| all | 6 | 4 | 3 | 0 | 66.7% | 50.0% |"));
  CHECK_THAT(md, Catch::Contains("| performance | 6 | 2 |"));
  CHECK_THAT(md, Catch::Contains("| memory | 4 | 1 |"));
  CHECK_THAT(md, Catch::Contains("| **total** | 7 |"));
  CHECK_THAT(md, Catch::Contains("| SKU-A | matmul | 1 | "));
  CHECK_THAT(md, Catch::Contains("| +20.0% | [+15.0%, +25.0%] |"));
  // Markdown is not HTML: '<' before a tag name becomes &lt; (no raw HTML), '>' stays as typed
  // ("knob 1 -> 2"), and nothing inside a code span is entity-escaped.
  CHECK_THAT(md, Catch::Contains("&lt;script>alert(\"x\")&lt;/script> & 'more' \\| pipe"));
  CHECK_THAT(md, Catch::Contains("knob 1 -> 2"));
  CHECK(count_of(md, "&gt;") == 0);
  CHECK(count_of(md, "-&gt;") == 0);
  CHECK(count_of(md, "Z UTC") == 0);
  CHECK_THAT(md, Catch::Contains("`rtx-evolve approve 3`"));
  CHECK_THAT(md, Catch::Contains("| " + kCase + " | 24 | "));
  // Queue table: header, separator and one row per proposal.
  size_t rows = 0;
  std::istringstream in(md);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("| ", 0) == 0 && line.find(" | tuner | ") != std::string::npos && line.find("|---") == std::string::npos)
      ++rows;
  CHECK(rows == 4);  // proposals 1, 2, 6, 7
}

TEST_CASE("report: Markdown escaping and gate reasons from the detail", "[cpu]") {
  rtx::store::Store st(":memory:");
  // A safety failure with only detail.failures (no reason), another with nothing at all, and a
  // why with comparison signs that are not HTML.
  Proposal a = make("memory", "memory|SKU-A", "SKU-A", "failed", "p < 0.05 and a -> b, <b>bold</b>, <!-- c -->");
  insert_proposal(st, a, 0);
  record_gates(st, a.id, 0,
               {GateResult{"safety", false, "sandbox_failures", 2, 0,
                           {{"failures", {"candidate trial 1: killed by signal 9 (SIGKILL)", "baseline trial 2: timed out"}}}}});
  Proposal b = make("tuner", "gelu|cpu.ref|{}|f32|cpu|SKU-A", "SKU-A", "failed");
  insert_proposal(st, b, 0);
  record_gates(st, b.id, 0, {GateResult{"safety", false, "sandbox_failures", 1, 0, json::object()}});
  const json r = build_report(st, ReportOptions{});
  const json& top = r["gate_failures"]["top_reasons"];
  REQUIRE(top.size() == 2);
  std::set<std::string> reasons;
  for (const auto& t : top) reasons.insert(t["reason"].get<std::string>());
  CHECK(reasons == std::set<std::string>{"candidate trial 1: killed by signal 9 (SIGKILL); baseline trial 2: timed out",
                                         "(no reason recorded)"});
  for (const auto& p : r["queue"]["proposals"])
    if (p["id"] == a.id) {
      CHECK(p["gates"][0]["reason"] == "candidate trial 1: killed by signal 9 (SIGKILL); baseline trial 2: timed out");
      CHECK_THAT(p["action"].get<std::string>(), Catch::Contains("failed safety: candidate trial 1: killed"));
    }
  const std::string md = render_report(r, "md");
  CHECK_THAT(md, Catch::Contains("(why: p < 0.05 and a -> b, &lt;b>bold&lt;/b>, &lt;!-- c -->)"));
  CHECK_THAT(md, Catch::Contains("killed by signal 9 (SIGKILL); baseline trial 2: timed out | 1 |"));
  const std::string html = render_report(r, "html");
  CHECK_THAT(html, Catch::Contains("p &lt; 0.05 and a -&gt; b"));  // HTML still escapes everything
  // The header says the time once, with its Z.
  const std::string at = r["generated_at"];
  REQUIRE(at.size() == 24);
  CHECK(at.back() == 'Z');
  CHECK_THAT(md, Catch::Contains("generated " + at + "\n"));
  CHECK_THAT(html, Catch::Contains("generated " + at + " &middot;"));
  CHECK(count_of(md + html, "Z UTC") == 0);

  // A store path with a backtick and a pipe stays one code span in one table-safe line.
  rtx::store::Store odd(":memory:");
  json doc = build_report(odd, ReportOptions{});
  doc["db"] = "/tmp/a`b|c<d>.db";
  CHECK_THAT(render_report(doc, "md"), Catch::Contains("store ``/tmp/a`b\\|c<d>.db``, generated"));
}

TEST_CASE("report: an empty store gives a clear report", "[cpu]") {
  rtx::store::Store st(":memory:");
  const json r = build_report(st, ReportOptions{});
  CHECK(r["queue"]["total"] == 0);
  CHECK(r["win_rate"]["overall"]["validated"] == 0);
  CHECK(r["win_rate"]["overall"]["pass_rate"].is_null());
  CHECK(r["impact"]["groups"].empty());
  CHECK(r["performance"]["cases"].empty());
  const std::string html = render_report(r, "html");
  CHECK_THAT(html, Catch::Contains("No proposals in the store"));
  CHECK_THAT(html, Catch::Contains("No proposal has been validated yet"));
  CHECK_THAT(html, Catch::Contains("No promoted improvement yet"));
  CHECK(count_of(html, "</html>") == 1);
  CHECK_THAT(render_report(r, "md"), Catch::Contains("No proposals in the store"));
}

TEST_CASE("report: bad format and bad --since are Input errors", "[cpu]") {
  rtx::store::Store st(":memory:");
  const json r = build_report(st, ReportOptions{});
  for (const char* f : {"pdf", "", "HTML", "text"}) {
    try {
      render_report(r, f);
      FAIL("format accepted: " << f);
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      CHECK(e.where() == "--format");
    }
  }
  for (const char* s : {"yesterday", "2026-02-30", "2026-13-01", "2026-1-1", "7w", "-3d"}) {
    INFO(s);
    CHECK_THROWS_AS(normalize_since(s, 0), rtx::Error);
  }
}

TEST_CASE("report: --since forms and nice axis ticks", "[cpu]") {
  CHECK(normalize_since("", 0).empty());
  CHECK(normalize_since("2026-01-31", 0) == "2026-01-31T00:00:00.000Z");
  CHECK(normalize_since("2026-01-31T12:34Z", 0) == "2026-01-31T12:34:00.000Z");
  CHECK(normalize_since("2026-01-31T12:34:56.7Z", 0) == "2026-01-31T12:34:56.700Z");
  CHECK(normalize_since("2024-02-29 23:59:59", 0) == "2024-02-29T23:59:59.000Z");
  CHECK(normalize_since("2024-02-29T23:59:59+01:00", 0) == "2024-02-29T22:59:59.000Z");
  const double now = 10 * 86400.0;
  CHECK(normalize_since("7d", now) == "1970-01-04T00:00:00.000Z");
  CHECK(normalize_since("12h", now) == "1970-01-10T12:00:00.000Z");
  CHECK(normalize_since("30m", now) == "1970-01-10T23:30:00.000Z");

  CHECK(nice_ticks(0, 100, 5) == std::vector<double>{0, 20, 40, 60, 80, 100});
  CHECK(nice_ticks(0, 7.3, 5) == std::vector<double>{0, 2, 4, 6, 8});
  for (auto [lo, hi] : {std::pair<double, double>{0, 0.00123}, {-3.7, 41}, {5, 5}, {0.8, 1.0}, {-25, -1}}) {
    const auto t = nice_ticks(lo, hi, 5);
    INFO(lo << " " << hi);
    REQUIRE(t.size() >= 3);
    CHECK(t.size() <= 12);
    CHECK(t.front() <= lo);
    CHECK(t.back() >= hi);
    for (size_t i = 2; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == Approx(t[1] - t[0]));
  }
  CHECK(html_escape("a<b>&\"'") == "a&lt;b&gt;&amp;&quot;&#39;");
}

TEST_CASE("rtx-evolve report: CLI writes one HTML file, md, json; bad input exits 2", "[cpu]") {
  const std::string dir = rtx::test::temp_dir(), db = dir + "/rtx.db";
  {
    rtx::store::Store st(db);
    fill(st);
  }
  const std::string tool = rtx::test::tool_path("rtx-evolve") + " --db " + db + " ";
  auto h = rtx::test::run(tool + "report -o " + dir + "/report.html");
  INFO(h.out << h.err);
  REQUIRE(h.exit_code == 0);
  std::ifstream f(dir + "/report.html");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string html = ss.str();
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK_THAT(html, Catch::Contains("&lt;script&gt;"));
  CHECK(count_of(html, "src=") == 0);

  auto m = rtx::test::run(tool + "report --format md --limit 3");
  REQUIRE(m.exit_code == 0);
  CHECK_THAT(m.out, Catch::Contains("| all | 6 | 4 | 3 | 0 | 66.7% | 50.0% |"));
  CHECK_THAT(m.out, Catch::Contains("| 7 | 20"));  // newest 3: 7, 6, 5
  CHECK_THAT(m.out, Catch::Contains("| 5 | 20"));
  CHECK_THAT(m.out, !Catch::Contains("| 4 | 20"));

  auto j = rtx::test::run(tool + "--json report --since 2021-01-01");
  REQUIRE(j.exit_code == 0);
  const json r = json::parse(j.out);
  CHECK(r["win_rate"]["overall"]["validated"] == 5);
  auto j2 = rtx::test::run(tool + "report --format json --limit 1");
  REQUIRE(j2.exit_code == 0);
  CHECK(json::parse(j2.out)["queue"]["proposals"].size() == 1);

  auto bad = rtx::test::run(tool + "report --format pdf");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--format"));
  auto j3 = rtx::test::run(tool + "--json report --since 2021-01-01T05:00+05:00");  // = 2021-01-01T00:00Z
  REQUIRE(j3.exit_code == 0);
  CHECK(json::parse(j3.out)["since"] == "2021-01-01T00:00:00.000Z");
  CHECK(json::parse(j3.out)["win_rate"]["overall"]["validated"] == 5);
  CHECK(rtx::test::run(tool + "report --since '2026-11-30 garbage'").exit_code == 2);
  CHECK(rtx::test::run(tool + "report --since 2026-02-30").exit_code == 2);
  auto bs = rtx::test::run(tool + "report --since yesterday");
  CHECK(bs.exit_code == 2);
  CHECK_THAT(bs.err, Catch::Contains("--since"));
  CHECK(rtx::test::run(tool + "report --limit 0").exit_code == 2);

  // An empty store reports, not crashes (report opens read-only: the store must exist).
  { rtx::store::Store empty(dir + "/empty.db"); }
  auto e = rtx::test::run(rtx::test::tool_path("rtx-evolve") + " --db " + dir + "/empty.db report --format md");
  CHECK(e.exit_code == 0);
  CHECK_THAT(e.out, Catch::Contains("No proposals in the store"));
}

TEST_CASE("speedup_text: t_b/t_c = 1/(1 - improvement), the CI in the headline's unit", "[cpu]") {
  // 1 - t_c/t_b = 0.20 -> t_b/t_c = 1/0.8 = 1.25; CI [0.15, 0.25] -> [1/0.85, 1/0.75] = [1.176, 1.333].
  CHECK(speedup_text(0.20, 0.15, 0.25) == "1.25x faster [1.18, 1.33]");
  // The report's "-108.7% CI lo" case: 1/(1 + 1.087) = 0.479, i.e. 2.087x slower; the CI
  // [-1.4, -0.8] is speedups [1/2.4, 1/1.8], slowdowns [1.8, 2.4].
  CHECK(speedup_text(-1.087, -1.4, -0.8) == "2.09x slower [1.80, 2.40]");
  // A CI across 1 stays in speedup units: [1/1.01, 1/0.93] = [0.990, 1.075].
  CHECK(speedup_text(0.03, -0.01, 0.07) == "1.03x faster [0.99, 1.08]");
  CHECK(speedup_text(0.0, json(), json()) == "1.00x faster");
  CHECK(speedup_text(json(), 0.1, 0.2).empty());
  // From gate rows: the last performance row decides.
  const json gates = json::array({{{"gate", "performance"}, {"detail", {{"improvement", 0.5}, {"ci", {0.4, 0.6}}}}},
                                  {{"gate", "memory"}},
                                  {{"gate", "performance"}, {"detail", {{"improvement", 0.20}, {"ci", {0.15, 0.25}}}}}});
  CHECK(gates_speedup_text(gates) == "1.25x faster [1.18, 1.33]");
  CHECK(gates_speedup_text(json::array({{{"gate", "safety"}}})).empty());
}

TEST_CASE("report HTML: a summary first, each proposal led by its verdict and number, evidence behind details", "[cpu]") {
  rtx::store::Store st(":memory:");
  fill(st);
  const json r = build_report(st, ReportOptions{});
  const std::string html = render_report(r, "html");
  const size_t summary = html.find("<section id=\"summary\""), queue = html.find("<section id=\"queue\"");
  REQUIRE(summary != std::string::npos);
  REQUIRE(queue != std::string::npos);
  CHECK(summary < queue);
  // Proposal 1 (promoted, improvement 0.20 [0.15, 0.25]) is named in the summary with its number
  // and its rollback command.
  const std::string head = html.substr(summary, queue - summary);
  CHECK_THAT(head, Catch::Contains("#1 tuner"));
  CHECK_THAT(head, Catch::Contains("1.25x faster [1.18, 1.33]; next: <code>rtx-evolve rollback 1</code>"));
  CHECK_THAT(head, Catch::Contains("<code>rtx-evolve approve 3</code>"));  // passed, waiting
  // The queue row leads with the verdict and the deciding number; proposal 4 failed on memory.
  CHECK_THAT(html, Catch::Contains("<td class=\"st-promoted\">promoted</td><td class=\"n\">1.25x faster [1.18, 1.33]</td>"));
  CHECK_THAT(html, Catch::Contains("<td class=\"st-failed\">failed</td><td class=\"n\">failed memory</td>"));
  // status / run text: each proposal led by its status and number, gates on the next line.
  const std::string text = format_report(status_report(st, 10), "text");
  INFO(text);
  CHECK_THAT(text, Catch::Contains("#1 promoted, 1.25x faster [1.18, 1.33]: [tuner] "));
  CHECK_THAT(text, Catch::Contains("#2 failed, 1.03x faster [0.99, 1.08]: [tuner] "));
  CHECK_THAT(text, Catch::Contains("#6 new: [tuner] "));  // not measured: no number
  // The what-to-do cell names the failed gate; its reason is in the details.
  CHECK_THAT(html, Catch::Contains("<td>none: failed performance (not retried on this SKU)</td>"));
  // One <details> per proposal, holding the reasons (not in the narrow cells).
  CHECK(count_of(html, "<details>") == r["queue"]["proposals"].size());
  CHECK(count_of(html, "<details>") == count_of(html, "</details>"));
  CHECK(count_of(html, "<tr>") + count_of(html, "<tr ") == count_of(html, "</tr>"));
  CHECK(count_of(html, "<section") == count_of(html, "</section>"));
  // Well-formed: every element opened is closed in order (void and self-closed ones aside).
  const std::regex tag("<(/?)([a-zA-Z][a-zA-Z0-9]*)[^>]*?(/?)>");
  const std::set<std::string> void_elems = {"br", "meta", "img", "hr", "input", "link", "wbr"};
  std::vector<std::string> open_tags;
  bool nested = true;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[2], close_slash = (*it)[1], self = (*it)[3];
    if (void_elems.count(name) || !self.empty()) continue;
    if (close_slash.empty()) {
      open_tags.push_back(name);
    } else if (open_tags.empty() || open_tags.back() != name) {
      INFO("</" << name << "> closes <" << (open_tags.empty() ? std::string("nothing") : open_tags.back()) << "> at "
                << it->position());
      nested = false;
      break;
    } else {
      open_tags.pop_back();
    }
  }
  CHECK(nested);
  CHECK(open_tags.empty());
  const size_t reason = html.find("improvement +3.0% [CI -1.0%, +7.0%]: below the +10.0% threshold");
  REQUIRE(reason != std::string::npos);
  const size_t open = html.rfind("<details>", reason), close = html.rfind("</details>", reason);
  REQUIRE(open != std::string::npos);
  CHECK((close == std::string::npos || open > close));  // inside a details element
}
