// rtx-evolve's validation judges host contention per round: a fake trial child (a shell script as
// ValidateOptions::self_exe) prints canned rtx.evolve.trial.v1 results whose host evidence comes
// from injected readings, so the tests decide which arm's round was busy. Checked: a busy round
// is left out of both arms (gate detail, bench_results rows), busy rounds that dominate are
// judged on all rounds (ABBA-balanced, said in the reason) with the rows contended, and a
// malformed host field fails the safety gate naming the field.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "rtx/app/bench.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/proposal.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/store/store.hpp"
#include "test_util.hpp"

using nlohmann::json;

namespace {

/// A 1 s trial window judged from injected readings: quiet (thread 99%, PSI 1%) or busy (PSI 50%).
json host(bool busy) {
  rtx::app::bench::HostSample a, b;
  a.wall_s = 10;
  b.wall_s = 11;
  a.psi_valid = b.psi_valid = true;
  b.psi_some_total_us = busy ? 500'000 : 10'000;
  b.thread_cpu_s = b.process_cpu_s = busy ? 0.6 : 0.99;
  return rtx::app::bench::to_json(rtx::app::bench::contention_evidence(a, b, 1, rtx::kernels::Backend::CPU));
}

json kcase(const char* id, double scale, size_t n, size_t round) {
  std::vector<double> s;
  for (size_t i = 0; i < n; ++i) s.push_back(scale * 1e-3 * (1 + 0.01 * static_cast<double>((i * 7 + round * 3) % 5)));
  return {{"id", id}, {"samples", s}, {"checksum", "00ab"}, {"repeat_checksum_equal", true}, {"max_rel_err", 0.0},
          {"tolerance", 1e-5}, {"ok", true}, {"detail", ""}};
}

/// Canned trial results for `rounds` ABBA rounds: out.N.json is what run N prints (A B, B A, ...).
/// busy_base / busy_cand: 1-based rounds whose affected part was busy; a busy round's samples are
/// 3x slow. The candidate is 30% faster; `host_override` replaces run 0's affected host object.
std::string fake_child(const std::string& dir, size_t rounds, std::vector<size_t> busy_base, std::vector<size_t> busy_cand,
                       const json& host_override = nullptr) {
  ::mkdir(dir.c_str(), 0755);
  size_t round_a = 0, round_b = 0;
  for (size_t n = 0; n < 2 * rounds; ++n) {
    const int arm = (n / 2) % 2 == 0 ? static_cast<int>(n % 2) : 1 - static_cast<int>(n % 2);
    const size_t r = arm == 0 ? ++round_a : ++round_b;
    const auto& bl = arm == 0 ? busy_base : busy_cand;
    const bool busy = std::find(bl.begin(), bl.end(), r) != bl.end();
    const double scale = (arm == 0 ? 1.0 : 0.7) * (busy ? 3.0 : 1.0);
    json affected = {{"schema", rtx::evolve::kTrialResultSchema},
                     {"cases", json::array({kcase("mm", scale, 5, r), kcase("ln", scale, 5, r)})},
                     {"host", host(busy)}};
    if (n == 0 && !host_override.is_null()) affected["host"] = host_override;
    json heldout = {{"schema", rtx::evolve::kTrialResultSchema},
                    {"cases", json::array({kcase("heldout:mm", 1.0, 5, r)})},
                    {"host", host(false)}};
    std::ofstream(dir + "/out." + std::to_string(n) + ".json")
        << json{{"schema", rtx::evolve::kTrialResultSchema}, {"parts", {affected, heldout}}, {"peak_rss_bytes", 1e7}}.dump();
  }
  std::ofstream(dir + "/n") << "0\n";
  const std::string script = dir + "/child.sh";
  std::ofstream(script) << "#!/bin/sh\nd=$(dirname \"$0\")\nn=$(cat \"$d/n\")\necho $((n + 1)) > \"$d/n\"\ncat \"$d/out.$n.json\"\n";
  ::chmod(script.c_str(), 0755);
  return script;
}

int64_t store_proposal(rtx::store::Store& st, const rtx::evolve::KeyPair& k, int i) {
  const json cases = json::array(
      {{{"id", "mm"}, {"op", "matmul_forward"}, {"variant", "cpu.blocked"}, {"shape", {{"M", 64}, {"N", 65}, {"K", 32}}}, {"dtype", "f32"}},
       {{"id", "ln"}, {"op", "layernorm_forward"}, {"variant", "cpu.vec"}, {"shape", {{"N", 33}, {"C", 64}}}, {"dtype", "f32"}}});
  const json held = json::array({{{"id", "heldout:mm"}, {"op", "matmul_forward"}, {"variant", "cpu.blocked"},
                                  {"shape", {{"M", 31}, {"N", 17}, {"K", 9}}}, {"dtype", "f32"}}});
  rtx::evolve::Proposal p;
  p.domain = "parallelism";
  p.target = "config";
  p.key = "parallelism|cpu:host";
  const json base = {{"threads", 2}}, cand = {{"threads", 1}};
  p.plan = {{"why", "host test " + std::to_string(i)}, {"workload", {{"affected", cases}, {"heldout", held}}}};
  p.actions = json::array({{{"set", "threads"}, {"from", 2}, {"to", 1}}});
  p.changeset = {{"base_version", nullptr}, {"base", base}, {"candidate", cand}};
  p.rollback = {{"command", "rtx-evolve rollback <ID>"}};
  p.provenance = {{"git_sha", "x"}, {"sku", "cpu:host"}, {"code_sha256", "0"}, {"data_sha256", "0"}, {"env_sha256", "0"},
                  {"seeds", {{"seed", i}}}};
  p.fingerprint = rtx::evolve::make_fingerprint(p.domain, p.key, cand) + std::to_string(i);
  rtx::evolve::sign(p, k);
  return rtx::evolve::insert_proposal(st, p, 0);
}

rtx::evolve::ValidateOptions options(const std::string& exe, size_t rounds) {
  rtx::evolve::ValidateOptions o;
  o.self_exe = exe;
  o.rounds = rounds;
  o.sandbox.confine_writes = false;  // the fake child counts its runs in a file of its folder
  o.sandbox.isolate_network = false;
  return o;
}

const rtx::evolve::GateResult& gate(const rtx::evolve::Validation& v, const std::string& name) {
  for (const auto& g : v.gates)
    if (g.gate == name) return g;
  FAIL("no gate " << name);
  return v.gates.front();
}

struct Row {
  std::string case_name;
  int64_t n = 0, contended = 0;
  std::string reason;
  json params;
};
std::vector<Row> rows(rtx::store::Store& st, int64_t proposal_id) {
  auto& q = st.prepare(
      "SELECT case_name, n, contended, contention_reason, params_json FROM bench_results "
      "WHERE json_extract(params_json, '$.rtx_evolve.proposal_id') = ?1 ORDER BY id");
  q.bind(1, proposal_id);
  std::vector<Row> out;
  while (q.step()) out.push_back({q.column_text(0), q.column_int64(1), q.column_int64(2), q.column_text(3), json::parse(q.column_text(4))});
  q.reset();
  return out;
}

}  // namespace

TEST_CASE("evolve validate: a busy round on one arm leaves round k out of both arms", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const rtx::evolve::KeyPair k = rtx::evolve::generate_key(dir + "/k", false);
  const int64_t id = store_proposal(st, k, 1);
  // 5 rounds; the baseline's round 2 was busy (and its samples 3x slow).
  const auto v = rtx::evolve::validate(st, id, k, options(fake_child(dir + "/c", 5, {2}, {}), 5), 0);
  const auto& perf = gate(v, "performance");
  INFO(perf.detail.dump());
  CHECK(perf.passed);
  CHECK(perf.detail["n_base"] == 4);
  CHECK(perf.detail["n_cand"] == 4);
  CHECK(perf.detail["improvement"].get<double>() == Approx(0.3).margin(0.02));  // the busy 3x round is not in it
  REQUIRE(perf.detail["host"]["rounds_left_out"].size() == 1);
  CHECK(perf.detail["host"]["rounds_left_out"][0]["round"] == 2);
  CHECK_THAT(perf.detail["host"]["rounds_left_out"][0]["reason"].get<std::string>(),
             Catch::StartsWith("baseline round 2 busy: ") && Catch::Contains("PSI cpu stall 50%"));
  CHECK(perf.detail["undecided"] == false);
  const auto& held = gate(v, "heldout");
  CHECK(held.passed);
  CHECK(held.detail["host"]["rounds_left_out"].empty());  // the held-out part was quiet throughout
  // bench_results: the affected rows of both arms leave round 2 out (4 rounds x 5 samples) and
  // are not contended; the held-out rows keep all 5 rounds.
  const auto rs = rows(st, id);
  REQUIRE(rs.size() == 6);
  for (const Row& r : rs) {
    INFO(r.case_name << " " << r.params.dump());
    CHECK(r.contended == 0);
    CHECK(r.reason.empty());
    const bool heldout = r.params["rtx_evolve"]["part"] == "heldout";
    CHECK(r.n == (heldout ? 25 : 20));
    CHECK(r.params["rtx_evolve"]["round_medians"].size() == (heldout ? 5u : 4u));
    if (!heldout) {
      REQUIRE(r.params["rtx_evolve"].contains("rounds_left_out"));
      CHECK(r.params["rtx_evolve"]["rounds_left_out"][0]["round"] == 2);
    } else {
      CHECK_FALSE(r.params["rtx_evolve"].contains("rounds_left_out"));
    }
  }
}

TEST_CASE("evolve validate: busy rounds that dominate are judged on all rounds and the rows contended", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const rtx::evolve::KeyPair k = rtx::evolve::generate_key(dir + "/k", false);
  const int64_t id = store_proposal(st, k, 2);
  // 4 rounds: baseline round 1 and candidate round 4 busy -> 2 quiet pairs (need 3).
  const auto v = rtx::evolve::validate(st, id, k, options(fake_child(dir + "/c", 4, {1}, {4}), 4), 0);
  const auto& perf = gate(v, "performance");
  INFO(perf.detail.dump());
  // Judged on all 4 + 4 rounds, as rtx-bench compare judges one --baseline-exe pair: the busy
  // rounds (3x slow, one on each arm) widen the CI, which the gate reports as it is.
  CHECK_FALSE(perf.detail.value("busy_host", false));
  CHECK(perf.detail["busy_host_balanced"] == true);
  CHECK(perf.detail["host"]["balanced"] == true);
  CHECK(perf.detail["host"]["rounds_left_out"].empty());
  CHECK(perf.detail["n_base"] == 4);
  CHECK_THAT(perf.detail["reason"].get<std::string>(),
             Catch::Contains("[busy host: baseline round 1 busy: ") && Catch::Contains("judged on all rounds"));
  // bench_results: each arm's affected rows are contended, with that arm's busy round.
  const auto rs = rows(st, id);
  REQUIRE(rs.size() == 6);
  for (const Row& r : rs) {
    INFO(r.case_name << " " << r.params.dump());
    const bool heldout = r.params["rtx_evolve"]["part"] == "heldout";
    const bool base = r.params["rtx_evolve"]["arm"] == "baseline";
    CHECK(r.n == 20);
    CHECK(r.contended == (heldout ? 0 : 1));
    if (!heldout)
      CHECK_THAT(r.reason, Catch::StartsWith(base ? "round 1: " : "round 4: ") && Catch::Contains("PSI cpu stall 50%") &&
                               Catch::Contains("1 of 4 rounds busy, 2 round pairs judged quiet"));
    else
      CHECK(r.reason.empty());
  }
}

TEST_CASE("evolve validate: a malformed host field in a trial result fails the safety gate naming it", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const rtx::evolve::KeyPair k = rtx::evolve::generate_key(dir + "/k", false);
  const int64_t id = store_proposal(st, k, 3);
  json bad = host(false);
  bad["involuntary_switches"] = "many";
  const auto v = rtx::evolve::validate(st, id, k, options(fake_child(dir + "/c", 4, {}, {}, bad), 4), 0);
  CHECK_FALSE(v.passed);
  const auto& safety = gate(v, "safety");
  CHECK_FALSE(safety.passed);
  INFO(safety.detail.dump());
  CHECK_THAT(safety.detail["reason"].get<std::string>(),
             Catch::StartsWith("baseline trial 1: trial output: field '/parts/0/host/involuntary_switches'"));
}
