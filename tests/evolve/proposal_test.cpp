// Envelopes (schema checks, SHA-256 known answers, Ed25519 sign/verify, tampering), the key
// file's mode rule, and promotion / rollback / rehearsal as store transactions.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/history.hpp"
#include "rtx/evolve/proposal.hpp"
#include "rtx/evolve/proposal_store.hpp"
#include "rtx/evolve/proposers.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/tune/search.hpp"
#include "rtx/tune/records.hpp"
#include "test_util.hpp"

using namespace rtx::evolve;
using nlohmann::json;

namespace {

Proposal sample(const std::string& domain, const std::string& key, const json& base, const json& cand) {
  Proposal p;
  p.domain = domain;
  p.target = target_of(domain);
  p.key = key;
  p.plan = {{"why", "test"}};
  p.actions = json::array({{{"set", "x"}, {"from", 1}, {"to", 2}}});
  p.changeset = {{"base_version", nullptr}, {"base", base}, {"candidate", cand}};
  p.rollback = {{"command", "rtx-evolve rollback <ID>"}, {"restore_version", nullptr}};
  p.provenance = {{"git_sha", "abc"}, {"sku", "cpu:test"}, {"code_sha256", "0"}, {"data_sha256", "0"}, {"env_sha256", "0"},
                  {"seeds", {{"seed", 0}}}};
  p.fingerprint = make_fingerprint(domain, key, cand);
  return p;
}

void mark(rtx::store::Store& st, int64_t id, const char* status) { set_status(st, id, status); }

}  // namespace

TEST_CASE("evolve proposal: SHA-256 known answers (FIPS 180-2)", "[cpu]") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string dir = rtx::test::temp_dir();
  { std::ofstream(dir + "/f") << "abc"; }
  CHECK(file_sha256(dir + "/f") == sha256_hex("abc"));
  CHECK_THROWS_AS(file_sha256(dir + "/missing"), rtx::Error);
}

TEST_CASE("evolve proposal: envelope round trip and schema errors name the field", "[cpu]") {
  const Proposal p = sample("memory", "memory|cpu:test", json::object(), {{"round_bytes", 256}});
  const json j = to_json(p);
  CHECK(j["schema"] == kProposalSchema);
  const Proposal q = from_json(j, "x.json");
  CHECK(content_sha256(q) == content_sha256(p));
  CHECK(missing_fields(q).empty());
  auto bad = [&](const std::function<void(json&)>& edit, const std::string& needle) {
    json b = j;
    edit(b);
    try {
      from_json(b, "x.json");
      FAIL("accepted: " + needle);
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      CHECK_THAT(std::string(e.what()) + " " + e.where(), Catch::Contains(needle));
    }
  };
  bad([](json& b) { b["schema"] = "rtx.proposal.v2"; }, "schema");
  bad([](json& b) { b["domain"] = "astrology"; }, "domain");
  bad([](json& b) { b["target"] = "profile"; }, "target");
  bad([](json& b) { b.erase("key"); }, "key");
  bad([](json& b) { b["actions"] = "x"; }, "actions");
  bad([](json& b) { b["changeset"].erase("candidate"); }, "changeset.candidate");
  bad([](json& b) { b["plan"] = 3; }, "plan");
  bad([](json& b) { b["plan"]["why"] = json::object(); }, "plan.why");  // a fuzzer finding
  bad([](json& b) { b["plan"]["why"] = 7; }, "plan.why");
  Proposal incomplete = p;
  incomplete.provenance.erase("env_sha256");
  incomplete.plan.erase("why");
  const auto m = missing_fields(incomplete);
  CHECK(m.size() == 2);
}

TEST_CASE("evolve proposal: Ed25519 sign/verify; tampering and other keys are refused", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const KeyPair k = generate_key(dir + "/k", false);
  CHECK(k.public_key.size() == 32);
  struct stat sb {};
  REQUIRE(::stat((dir + "/k").c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0600);
  CHECK_THROWS_AS(generate_key(dir + "/k", false), rtx::Error);
  const KeyPair again = load_key(dir + "/k");
  CHECK(again.public_hex() == k.public_hex());

  Proposal p = sample("memory", "memory|cpu:test", json::object(), {{"round_bytes", 256}});
  CHECK(verify(p, k) == "envelope is not signed");
  sign(p, k);
  CHECK(verify(p, k) == "");
  p.status = "promoted";  // status and validation are not signed content
  p.validation = {{"x", 1}};
  CHECK(verify(p, k) == "");
  Proposal t = p;
  t.changeset["candidate"]["round_bytes"] = 16;
  CHECK_THAT(verify(t, k), Catch::Contains("modified after signing"));
  Proposal forged = t;
  forged.signature["content_sha256"] = content_sha256(t);  // hash updated, signature not
  CHECK_THAT(verify(forged, k), Catch::Contains("does not verify"));
  const KeyPair other = generate_key(dir + "/k2", false);
  CHECK_THAT(verify(p, other), Catch::Contains("another key"));

  ::chmod((dir + "/k").c_str(), 0644);
  try {
    load_key(dir + "/k");
    FAIL("a world-readable key was accepted");
  } catch (const rtx::Error& e) {
    CHECK(e.category() == rtx::ErrorCategory::Environment);
    CHECK_THAT(e.message(), Catch::Contains("0644"));
  }
  CHECK_THROWS_AS(load_key(dir + "/none"), rtx::Error);
  { std::ofstream(dir + "/bad") << "zz"; }
  ::chmod((dir + "/bad").c_str(), 0600);
  CHECK_THROWS_AS(load_key(dir + "/bad"), rtx::Error);
}

TEST_CASE("evolve deploy: promote, rollback, rehearse, each one transaction; refusals leave the store as it was", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  CHECK(st.schema_version() == rtx::store::Store::latest_schema_version());
  const KeyPair k = generate_key(dir + "/k", false);

  // Config domain: no current version (defaults) -> v1 -> back to defaults.
  Proposal p = sample("memory", "memory|cpu:test", json::object(), {{"round_bytes", 256}});
  sign(p, k);
  const int64_t id = insert_proposal(st, p, 0);
  CHECK(load_proposal(st, id).status == "new");
  CHECK_THROWS_AS(approve(st, id, "me", "manual"), rtx::Error);  // not passed yet
  CHECK_THROWS_AS(promote(st, id, k, "me"), rtx::Error);         // not approved
  mark(st, id, "passed");
  record_gates(st, id, 0, {GateResult{"performance", true, "improvement_ci_lo", 0.2, 0.1, {{"reason", "x"}}}});
  approve(st, id, "me", "manual");
  const auto gates = gate_results(st, id);
  REQUIRE(gates.size() == 2);
  CHECK(gates[1].gate == "approval");
  CHECK(gates[1].detail["actor"] == "me");
  const DeployResult d = promote(st, id, k, "me");
  CHECK_FALSE(d.from_version);
  CHECK(*d.to_version == 1);
  auto cur = current_config(st, "memory|cpu:test");
  REQUIRE(cur);
  CHECK(cur->config["round_bytes"] == 256);
  CHECK(load_proposal(st, id).status == "promoted");
  CHECK(latest_promoted(st) == id);

  const Rehearsal r = rehearse(st, id, k, "me");
  CHECK(r.seconds < 1.0);
  CHECK(current_config(st, "memory|cpu:test")->version == 1);
  const DeployResult b = rollback(st, id, k, "me");
  CHECK(*b.from_version == 1);
  CHECK_FALSE(b.to_version);
  CHECK_FALSE(current_config(st, "memory|cpu:test"));
  CHECK(load_proposal(st, id).status == "rolled_back");
  CHECK_THROWS_AS(rollback(st, id, k, "me"), rtx::Error);  // not promoted any more

  // Tuner domain over the real profiles tables: v1 current -> candidate v2 -> rollback to v1.
  const std::string key = "matmul_forward|cpu.blocked|K=8,M=8,N=8|f32|cpu|cpu:test";
  rtx::tune::save_profile(st, key, {{"MC", 0}}, rtx::tune::measured_under("cpu:test"), 0);
  Proposal t = sample("tuner", key, {{"MC", 0}}, {{"MC", 64}});
  t.changeset["base_version"] = 1;
  sign(t, k);
  const int64_t tid = insert_proposal(st, t, 0);
  mark(st, tid, "approved");
  // Tampering with the stored envelope is refused at promotion, and nothing changes.
  st.exec("UPDATE proposals SET json = json_set(json, '$.changeset.candidate.MC', 128) WHERE id = " + std::to_string(tid));
  try {
    promote(st, tid, k, "me");
    FAIL("tampered envelope promoted");
  } catch (const rtx::Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("modified after signing"));
  }
  CHECK(current_profile(st, key)->version == 1);
  st.exec("UPDATE proposals SET json = json_set(json, '$.changeset.candidate.MC', 64) WHERE id = " + std::to_string(tid));
  const DeployResult td = promote(st, tid, k, "me");
  CHECK(*td.from_version == 1);
  CHECK(*td.to_version == 2);
  CHECK(current_profile(st, key)->config["MC"] == 64);
  // The promotions table logs it too.
  auto& q = st.prepare("SELECT COUNT(*) FROM promotions WHERE proposal_id = ?1");
  q.bind(1, tid);
  q.step();
  CHECK(q.column_int64(0) == 1);
  q.reset();
  // Tampered after promotion: rollback refused too.
  st.exec("UPDATE proposals SET json = json_set(json, '$.key', 'x|y') WHERE id = " + std::to_string(tid));
  CHECK_THROWS_AS(rollback(st, tid, k, "me"), rtx::Error);
  CHECK(current_profile(st, key)->version == 2);
  st.exec("UPDATE proposals SET json = json_set(json, '$.key', '" + key + "') WHERE id = " + std::to_string(tid));
  // A later change supersedes it: rollback refused, naming the later version.
  rtx::tune::save_profile(st, key, {{"MC", 32}}, rtx::tune::measured_under("cpu:test"), 0);
  CHECK_THROWS_AS(rollback(st, tid, k, "me"), rtx::Error);
  CHECK(current_profile(st, key)->version == 3);

  // A proposal validated against v1 cannot be promoted once the baseline moved to v3.
  Proposal late = sample("tuner", key, {{"MC", 0}}, {{"MC", 16}});
  late.changeset["base_version"] = 1;
  sign(late, k);
  const int64_t lid = insert_proposal(st, late, 0);
  mark(st, lid, "approved");
  CHECK_THROWS_AS(promote(st, lid, k, "me"), rtx::Error);
  CHECK(current_profile(st, key)->version == 3);
  CHECK(st.integrity_check() == std::vector<std::string>{"ok"});
}

TEST_CASE("evolve proposal: the failed-before prior matches fingerprint and SKU", "[cpu]") {
  rtx::store::Store st(":memory:");
  Proposal p = sample("parallelism", "parallelism|cpu:test", {{"threads", 2}}, {{"threads", 1}});
  const int64_t id = insert_proposal(st, p, 0);
  CHECK_FALSE(failed_before(st, p.fingerprint, "cpu:test"));
  set_status(st, id, "failed", json{{"gates", json::array()}});
  CHECK(failed_before(st, p.fingerprint, "cpu:test"));
  CHECK_FALSE(failed_before(st, p.fingerprint, "cpu:other"));
  CHECK_FALSE(failed_before(st, make_fingerprint("parallelism", p.key, {{"threads", 4}}), "cpu:test"));
  CHECK(list_proposals(st, "failed", 10) == std::vector<int64_t>{id});
  CHECK(load_proposal(st, id).validation.contains("gates"));

  // Undecided performance (the host's noise decided) is not a learned failure; a decisive
  // failure of any other gate next to it is.
  auto failed_with = [&](const json& threads, const std::vector<GateResult>& gates) {
    Proposal q = sample("parallelism", "parallelism|cpu:test", {{"threads", 2}}, {{"threads", threads}});
    const int64_t qid = insert_proposal(st, q, 0);
    record_gates(st, qid, 0, gates);
    set_status(st, qid, "failed", json{{"gates", json::array()}});
    return failed_before(st, q.fingerprint, "cpu:test");
  };
  const GateResult undecided{"performance", false, "improvement_lo_frac", -0.01, 0.03, {{"undecided", true}}};
  const GateResult decided{"performance", false, "improvement_lo_frac", -0.2, 0.03, {{"undecided", false}}};
  const GateResult det_fail{"determinism", false, "mismatches", 1, 0, json::object()};
  const GateResult det_pass{"determinism", true, "mismatches", 0, 0, json::object()};
  CHECK_FALSE(failed_with(5, {det_pass, undecided}));
  CHECK(failed_with(6, {det_pass, decided}));
  CHECK(failed_with(7, {det_fail, undecided}));
  CHECK(failed_with(8, {GateResult{"performance", false, "improvement_lo_frac", -0.2, 0.03, json::object()}}));
  CHECK_THROWS_AS(load_proposal(st, 999), rtx::Error);
  CHECK_THROWS_AS(set_status(st, 999, "failed"), rtx::Error);
}

TEST_CASE("evolve deploy: kill -9 in the middle of promotions and rollbacks leaves a consistent store", "[cpu]") {
  const std::string dir = rtx::test::temp_dir(), db = dir + "/rtx.db";
  const KeyPair k = generate_key(dir + "/k", false);
  int64_t id = 0;
  {
    rtx::store::Store st(db);
    Proposal p = sample("scheduler", "scheduler|cpu:test", json::object(), {{"max_batch", 8}});
    sign(p, k);
    id = insert_proposal(st, p, 0);
    set_status(st, id, "approved");
    promote(st, id, k, "me");
  }
  for (int i = 0; i < 12; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      try {
        rtx::store::Store st(db);
        for (;;) rehearse(st, id, k, "loop");  // rollback + promote, forever
      } catch (...) {
      }
      ::_exit(1);
    }
    ::usleep(static_cast<useconds_t>(20000 + 7919 * i % 60000));
    ::kill(pid, SIGKILL);
    int wst = 0;
    ::waitpid(pid, &wst, 0);
    REQUIRE(WIFSIGNALED(wst));  // it was still looping: killed mid-way
    rtx::store::Store st(db);
    REQUIRE(st.integrity_check() == std::vector<std::string>{"ok"});
    const std::string status = load_proposal(st, id).status;
    const auto cur = current_config(st, "scheduler|cpu:test");
    if (status == "promoted") {
      REQUIRE(cur);
      CHECK(cur->version == 1);
      CHECK(cur->config["max_batch"] == 8);
    } else {
      CHECK(status == "rolled_back");
      CHECK_FALSE(cur);
      promote(st, id, k, "me");  // put it back for the next round
    }
    auto& q = st.prepare("SELECT COUNT(*) FROM evolve_configs WHERE key = 'scheduler|cpu:test'");
    q.step();
    CHECK(q.column_int64(0) == 1);  // re-promotion reuses the version
    q.reset();
  }
}

TEST_CASE("evolve deploy: a later promotion supersedes; rolling it back restores the earlier one", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const KeyPair k = generate_key(dir + "/k", false);
  Proposal a = sample("memory", "memory|cpu:test", json::object(), {{"round_bytes", 256}});
  sign(a, k);
  const int64_t ia = insert_proposal(st, a, 0);
  set_status(st, ia, "approved");
  promote(st, ia, k, "me");
  Proposal b = sample("memory", "memory|cpu:test", {{"round_bytes", 256}}, {{"round_bytes", 1024}});
  b.changeset["base_version"] = 1;
  sign(b, k);
  const int64_t ib = insert_proposal(st, b, 0);
  set_status(st, ib, "approved");
  CHECK(*promote(st, ib, k, "me").to_version == 2);
  CHECK(load_proposal(st, ia).status == "superseded");
  CHECK_THROWS_AS(rollback(st, ia, k, "me"), rtx::Error);  // not in force
  rollback(st, ib, k, "me");
  CHECK(current_config(st, "memory|cpu:test")->version == 1);
  CHECK(load_proposal(st, ia).status == "promoted");
  CHECK(load_proposal(st, ib).status == "rolled_back");
  rollback(st, ia, k, "me");
  CHECK_FALSE(current_config(st, "memory|cpu:test"));
}

TEST_CASE("evolve proposal: a stored row edited into unreadable JSON is an Input error naming the row", "[cpu]") {
  rtx::store::Store st(":memory:");
  Proposal p = sample("memory", "memory|cpu:test", json::object(), {{"round_bytes", 256}});
  const int64_t id = insert_proposal(st, p, 0);
  Proposal q = sample("memory", "memory|cpu:test", json::object(), {{"round_bytes", 512}});
  const int64_t ok = insert_proposal(st, q, 0);
  record_gates(st, ok, 0, {GateResult{"safety", true, "violations", 0, 0, json{{"n", 1}}}});
  auto input_error = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const rtx::Error& e) {
      CHECK(e.category() == rtx::ErrorCategory::Input);
      return std::string(e.what());
    }
    FAIL("no rtx::Error thrown");
    return std::string();
  };
  const std::string sid = std::to_string(id);
  // Invalid UTF-8 inside a string (the finding's repro: plan.why = "A\xFFB").
  st.exec("UPDATE proposals SET json = json_set(json, '$.plan.why', CAST(X'41FF42' AS TEXT)) WHERE id = " + sid);
  std::string msg = input_error([&] { load_proposal(st, id); });
  CHECK(msg.find("proposal " + sid + " in :memory:") != std::string::npos);
  CHECK(msg.find("stored JSON is unreadable") != std::string::npos);
  // (The table's CHECK (json_valid(json)) keeps truncated JSON out; invalid UTF-8 gets past it.)
  // JSON that is not an envelope names the row too.
  st.exec("UPDATE proposals SET json = '[1]' WHERE id = " + sid);
  msg = input_error([&] { load_proposal(st, id); });
  CHECK(msg.find("proposal " + sid) != std::string::npos);
  // The other row still loads; a gate row with unreadable detail names gate and proposal.
  CHECK(load_proposal(st, ok).changeset["candidate"]["round_bytes"] == 512);
  REQUIRE(gate_results(st, ok).size() == 1);
  CHECK(gate_results(st, ok)[0].detail["n"] == 1);
  st.exec("UPDATE gate_results SET detail_json = CAST(X'7B2261223A2241FF42227D' AS TEXT) WHERE proposal_id = " + std::to_string(ok));
  msg = input_error([&] { gate_results(st, ok); });
  CHECK(msg.find("gate 'safety' of proposal " + std::to_string(ok)) != std::string::npos);
  CHECK(load_proposal(st, ok).id == ok);  // the statement was reset: the store still works
}

TEST_CASE("evolve tuner: a trial timed on a busy host is neither cited nor proposed", "[cpu]") {
  // Recorded trials of one matmul key: the defaults at 1 ms, a point at 10 us measured on a busy
  // host (an artefact: on a quiet host it is not 100x faster), another at 0.8 ms on a quiet host.
  const std::string dir = rtx::test::temp_dir();
  rtx::store::Store st(dir + "/rtx.db");
  const auto& reg = rtx::app::bench::registry();
  const auto& v = reg.variant("matmul_forward", "cpu.blocked");
  rtx::app::bench::BenchCase bc;
  bc.id = "mm/cpu.blocked/M=16,N=24,K=8/f32";
  bc.name = "mm";
  bc.op = "matmul_forward";
  bc.variant = "cpu.blocked";
  bc.shape = {{"M", 16}, {"N", 24}, {"K", 8}};
  const std::string sku = "cpu:busy-test";
  rtx::tune::TrialStore trials(st, rtx::tune::TuneKey{bc.op, bc.variant, bc.shape, rtx::DType::F32,
                                                      rtx::kernels::Backend::CPU, sku});
  const rtx::tune::Space sp = rtx::tune::variant_space(v, bc.shape);
  const rtx::kernels::Params base = sp.defaults();
  std::vector<rtx::kernels::Params> others;
  for (size_t i = 0; i < sp.size() && others.size() < 2; ++i) {
    const rtx::kernels::Params q = sp.at(i);
    if (q != base && (!sp.validate || sp.validate(q).empty())) others.push_back(q);
  }
  REQUIRE(others.size() == 2);
  auto put = [&](const rtx::kernels::Params& p, double s, bool busy) {
    rtx::tune::Evaluation e;
    e.status = rtx::tune::Evaluation::Status::Ok;
    e.samples = {s, s, s, s, s};
    e.median = s;
    e.contended = busy;
    e.contention_reason = busy ? "PSI cpu stall 61% of the window (> 10%)" : "";
    trials.put(p, e, 0);
  };
  put(base, 1e-3, false);
  put(others[0], 1e-5, true);
  put(others[1], 8e-4, false);
  std::ostringstream log;
  ProposeContext ctx;
  ctx.st = &st;
  ctx.reg = &reg;
  ctx.sku = sku;
  ctx.cases = {bc};
  ctx.seed = 3;
  ctx.budget = 2;
  ctx.explore_evals = 0;  // propose from the records only: nothing is measured here
  ctx.log = &log;
  std::unique_ptr<Proposer> tuner;
  for (auto& p : default_proposers())
    if (p->domain() == "tuner") tuner = std::move(p);
  REQUIRE(tuner);
  std::vector<Proposal> ps = tuner->propose(ctx);
  INFO(log.str());
  REQUIRE(ps.size() == 1);
  CHECK(ps[0].changeset["candidate"] == json(others[1]));
  const std::string why = ps[0].plan["why"].get<std::string>();
  CHECK_THAT(why, Catch::Contains("runs in 0.0008 s vs 0.001 s"));
  CHECK(why.find("1e-05") == std::string::npos);
  CHECK(ps[0].plan["expected"]["improvement"].get<double>() == Approx(0.2));
  CHECK_THAT(log.str(), Catch::Contains("1 recorded trial measured on a busy host not cited (first: PSI cpu stall 61%"));
}

TEST_CASE("evolve proposal store: transitions, interrupted validations, rows and one transaction per validation", "[cpu]") {
  rtx::store::Store st(":memory:");
  Proposal a = sample("tuner", "k1", json{{"MC", 64}}, json{{"MC", 32}});
  a.status = "proposed";
  const int64_t ia = insert_proposal(st, a, 0);
  Proposal b = sample("tuner", "k2", json{{"MC", 64}}, json{{"MC", 16}});
  b.status = "proposed";
  const int64_t ib = insert_proposal(st, b, 0);
  const auto json_status = [&](int64_t id) {
    auto& q = st.prepare("SELECT json_extract(json, '$.status') FROM proposals WHERE id = ?1");
    q.bind(1, id);
    REQUIRE(q.step());
    const std::string s = q.column_text(0);
    q.reset();
    return s;
  };
  // A transition from the wrong status writes nothing; from the right one, column and JSON agree.
  {
    rtx::store::Transaction tx(st);
    CHECK_FALSE(write_transition(st, ia, "passed", "approved"));
    CHECK(write_transition(st, ia, "proposed", "passed"));
    CHECK_FALSE(write_transition(st, 999, "proposed", "passed"));
    tx.commit();
  }
  CHECK(load_proposal(st, ia).status == "passed");
  CHECK(json_status(ia) == "passed");
  CHECK(load_proposal(st, ib).status == "proposed");
  // A run killed while validating: its proposals become "interrupted", counted once.
  set_status(st, ia, "validating");
  set_status(st, ib, "validating");
  CHECK(mark_interrupted_validations(st) == 2);
  CHECK(mark_interrupted_validations(st) == 0);
  CHECK(load_proposal(st, ib).status == "interrupted");
  CHECK(json_status(ib) == "interrupted");
  // Rows as stored, and the time filter (as instants).
  const auto rows = stored_proposals(st);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].id == ia);
  CHECK(rows[1].id == ib);
  CHECK(rows[1].status == "interrupted");
  CHECK(json::parse(rows[0].json)["key"] == "k1");
  CHECK_FALSE(rows[0].run_id.has_value());
  const auto all = proposals_since(st, "");
  REQUIRE(all.size() == 2);
  CHECK(all[0].first == ib);  // newest first
  CHECK(proposals_since(st, "2999-01-01T00:00:00Z").empty());
  CHECK(proposals_since(st, "2000-01-01T00:00:00+01:00").size() == 2);
  CHECK_FALSE(latest_promoted(st).has_value());
  // record_validation with a status: gates and status in one transaction; for an unknown
  // proposal it throws and writes nothing.
  GateResult g;
  g.gate = "safety";
  g.passed = true;
  record_validation(st, ia, 0, 1, {g}, {}, "passed", json{{"gates", json::array()}});
  CHECK(load_proposal(st, ia).status == "passed");
  CHECK(gate_results(st, ia).size() == 1);
  CHECK_THROWS_AS(record_validation(st, 12345, 0, 1, {g}, {}, "failed"), rtx::Error);
  CHECK(gate_results(st, 12345).empty());
}
