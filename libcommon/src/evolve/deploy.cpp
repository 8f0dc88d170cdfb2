// Approval, promotion and rollback of proposals: each one store transaction, signatures checked first.
#include "rtx/evolve/deploy.hpp"

#include <chrono>
#include <filesystem>

#include "rtx/core/error.hpp"
#include "rtx/tune/records.hpp"

namespace rtx::evolve {

using nlohmann::json;

namespace {

std::optional<int64_t> opt_version(const json& j) {
  if (j.is_number_integer()) return j.get<int64_t>();
  return std::nullopt;
}

std::string vtext(const std::optional<int64_t>& v) { return v ? "v" + std::to_string(*v) : "none (defaults)"; }

std::optional<int64_t> current_version(store::Store& st, const std::string& target, const std::string& key) {
  auto& q = st.prepare(target == "profile" ? "SELECT version FROM profile_current WHERE key = ?1"
                                           : "SELECT version FROM evolve_config_current WHERE key = ?1");
  q.bind(1, key);
  std::optional<int64_t> v;
  if (q.step()) v = q.column_int64(0);
  q.reset();
  return v;
}

void set_current(store::Store& st, const std::string& target, const std::string& key, const std::optional<int64_t>& v) {
  const bool prof = target == "profile";
  if (!v) {
    auto& d = st.prepare(prof ? "DELETE FROM profile_current WHERE key = ?1" : "DELETE FROM evolve_config_current WHERE key = ?1");
    d.bind(1, key);
    d.run();
    return;
  }
  auto& q = st.prepare(prof ? "INSERT INTO profile_current (key, version) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET "
                              "version = excluded.version, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now')"
                            : "INSERT INTO evolve_config_current (key, version) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET "
                              "version = excluded.version, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now')");
  q.bind(1, key);
  q.bind(2, *v);
  q.run();
}

void log_deployment(store::Store& st, const Proposal& p, const std::optional<int64_t>& from, const std::optional<int64_t>& to,
                    const std::string& action, const std::string& actor) {
  auto& q = st.prepare(
      "INSERT INTO evolve_deployments (proposal_id, target, key, from_version, to_version, action, actor, signature) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  q.bind(1, p.id);
  q.bind(2, p.target);
  q.bind(3, p.key);
  if (from) q.bind(4, *from); else q.bind(4, nullptr);
  if (to) q.bind(5, *to); else q.bind(5, nullptr);
  q.bind(6, action);
  q.bind(7, actor);
  q.bind(8, p.signature.value("sig", std::string()));
  q.run();
  if (p.target == "profile" && to) {
    auto& r = st.prepare(
        "INSERT INTO promotions (proposal_id, key, from_version, to_version, action, actor, signature) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    r.bind(1, p.id);
    r.bind(2, p.key);
    if (from) r.bind(3, *from); else r.bind(3, nullptr);
    r.bind(4, *to);
    r.bind(5, action);
    r.bind(6, actor);
    r.bind(7, p.signature.value("sig", std::string()));
    r.run();
  }
}

void check_signature(const Proposal& p, const KeyPair& key, const char* what) {
  const std::string why = verify(p, key);
  if (!why.empty())
    throw_input(std::string("refusing to ") + what + " proposal " + std::to_string(p.id) + ": " + why,
                "proposal " + std::to_string(p.id), "re-submit the proposal so it is validated and signed again");
}

}  // namespace

std::optional<ConfigVersion> current_config(store::Store& st, const std::string& key) {
  auto& q = st.prepare(
      "SELECT c.version, v.config_json FROM evolve_config_current c JOIN evolve_configs v ON v.key = c.key AND "
      "v.version = c.version WHERE c.key = ?1");
  q.bind(1, key);
  std::optional<ConfigVersion> r;
  if (q.step()) r = ConfigVersion{q.column_int64(0), json::parse(q.column_text(1))};
  q.reset();
  return r;
}

std::optional<ConfigVersion> current_profile(store::Store& st, const std::string& key) {
  auto& q = st.prepare(
      "SELECT c.version, p.params_json FROM profile_current c JOIN profiles p ON p.key = c.key AND p.version = c.version "
      "WHERE c.key = ?1");
  q.bind(1, key);
  std::optional<ConfigVersion> r;
  if (q.step()) r = ConfigVersion{q.column_int64(0), json::parse(q.column_text(1))};
  q.reset();
  return r;
}

PromotedConfigs promoted_configs(const std::string& db_path, const std::string& sku) {
  PromotedConfigs pc;
  pc.sku = sku;
  std::error_code ec;
  if (!std::filesystem::exists(db_path, ec)) {
    pc.note = "no store at " + db_path;
    return pc;
  }
  try {
    store::Store st(db_path);
    for (const auto& d : known_domains()) {
      if (target_of(d) != "config") continue;
      if (auto c = current_config(st, d + "|" + sku)) pc.by_domain.emplace(d, std::move(*c));
    }
  } catch (const Error& e) {
    pc.note = std::string("store not read (") + e.what() + ")";
  }
  return pc;
}

std::optional<int> promoted_threads(const json& config, int max_threads, std::string* why) {
  const json t = config.is_object() ? config.value("threads", json()) : json();
  if (t.is_number_integer() && t.get<int64_t>() >= 1 && t.get<int64_t>() <= max_threads) return static_cast<int>(t.get<int64_t>());
  if (why) *why = "invalid here: 'threads' must be an integer in [1, " + std::to_string(max_threads) + "], not " + t.dump();
  return std::nullopt;
}

std::string describe(const PromotedConfigs& pc, const std::map<std::string, std::string>& outcome) {
  if (!pc.note.empty()) return "promoted configs: " + pc.note + "; defaults";
  std::string applied, ignored;
  for (const auto& [d, why] : outcome) {
    auto it = pc.by_domain.find(d);
    if (it == pc.by_domain.end()) continue;
    const std::string item = d + " v" + std::to_string(it->second.version);
    if (why.empty()) applied += (applied.empty() ? "" : ", ") + item + " " + it->second.config.dump(-1, ' ', false, json::error_handler_t::replace);
    else ignored += (ignored.empty() ? "" : ", ") + item + " (" + why + ")";
  }
  if (applied.empty() && ignored.empty()) return "promoted configs: none for " + pc.sku + "; defaults";
  std::string s = "promoted configs for " + pc.sku + ":";
  if (!applied.empty()) s += " applied " + applied;
  if (!ignored.empty()) s += std::string(applied.empty() ? "" : ";") + " ignored " + ignored;
  return s;
}

void approve(store::Store& st, int64_t id, const std::string& actor, const std::string& mode) {
  const Proposal p = load_proposal(st, id);
  if (p.status != "passed")
    throw_usage("proposal " + std::to_string(id) + " is '" + p.status + "', only a proposal that passed every gate can be approved",
                "ID", "see `rtx-evolve status`");
  store::Transaction tx(st);
  auto& q = st.prepare(
      "INSERT INTO gate_results (proposal_id, gate, passed, metric, value, threshold, detail_json) "
      "VALUES (?1, 'approval', 1, 'approved', 1, 1, ?2)");
  q.bind(1, id);
  q.bind(2, json{{"actor", actor}, {"mode", mode}}.dump());
  q.run();
  if (!write_transition(st, id, "passed", "approved")) throw_usage("proposal " + std::to_string(id) + " changed status concurrently", "ID");
  tx.commit();
}

DeployResult promote(store::Store& st, int64_t id, const KeyPair& key, const std::string& actor) {
  const auto t0 = std::chrono::steady_clock::now();
  const Proposal p = load_proposal(st, id);
  if (p.status != "approved" && p.status != "rolled_back")
    throw_usage("proposal " + std::to_string(id) + " is '" + p.status + "': promotion needs an approved proposal", "ID",
                p.status == "passed" ? "approve it first: rtx-evolve approve " + std::to_string(id) : "");
  check_signature(p, key, "promote");
  if (!missing_fields(p).empty()) throw_input("proposal " + std::to_string(id) + " is incomplete", "proposal");
  const std::optional<int64_t> base = opt_version(p.changeset.value("base_version", json(nullptr)));

  store::Transaction tx(st);
  const std::optional<int64_t> cur = current_version(st, p.target, p.key);
  // A re-promotion (after a rollback) reuses the version the first promotion created.
  std::optional<int64_t> to;
  {
    auto& q = st.prepare("SELECT to_version FROM evolve_deployments WHERE proposal_id = ?1 AND action = 'promote' "
                         "ORDER BY id LIMIT 1");
    q.bind(1, id);
    if (q.step()) to = q.column_opt_int64(0);
    q.reset();
  }
  if (cur != base)
    throw_input("the current version of '" + p.key + "' is " + vtext(cur) + ", the proposal was validated against " + vtext(base) +
                    ": the baseline moved",
                "proposal " + std::to_string(id), "re-validate: submit the change again");
  if (!to) {
    const bool prof = p.target == "profile";
    auto& mx = st.prepare(prof ? "SELECT COALESCE(MAX(version), 0) FROM profiles WHERE key = ?1"
                               : "SELECT COALESCE(MAX(version), 0) FROM evolve_configs WHERE key = ?1");
    mx.bind(1, p.key);
    mx.step();
    const int64_t v = mx.column_int64(0) + 1;
    mx.reset();
    if (prof) {
      json under = tune::measured_under(tune::TuneKey::parse(p.key).sku);
      under["result"] = {{"proposal_id", id}};
      auto& ins = st.prepare("INSERT INTO profiles (key, version, params_json, measured_under_json) VALUES (?1, ?2, ?3, ?4)");
      ins.bind(1, p.key);
      ins.bind(2, v);
      ins.bind(3, p.changeset["candidate"].dump());
      ins.bind(4, under.dump());
      ins.run();
    } else {
      auto& ins = st.prepare("INSERT INTO evolve_configs (key, version, config_json, proposal_id) VALUES (?1, ?2, ?3, ?4)");
      ins.bind(1, p.key);
      ins.bind(2, v);
      ins.bind(3, p.changeset["candidate"].dump());
      ins.bind(4, id);
      ins.run();
    }
    to = v;
  }
  set_current(st, p.target, p.key, to);
  log_deployment(st, p, cur, to, "promote", actor);
  // The proposal this one replaces stays on record as superseded (rolling this one back
  // makes it current again).
  write_superseded(st, p.key, id);
  write_status(st, id, "promoted");
  tx.commit();
  DeployResult r{id, p.target, p.key, cur, to, 0};
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

DeployResult rollback(store::Store& st, int64_t id, const KeyPair& key, const std::string& actor) {
  const auto t0 = std::chrono::steady_clock::now();
  const Proposal p = load_proposal(st, id);
  if (p.status != "promoted")
    throw_usage("proposal " + std::to_string(id) + " is '" + p.status + "': only a promoted proposal can be rolled back", "ID");
  check_signature(p, key, "roll back");
  store::Transaction tx(st);
  std::optional<int64_t> from, to;
  {
    auto& q = st.prepare("SELECT from_version, to_version FROM evolve_deployments WHERE proposal_id = ?1 AND action = 'promote' "
                         "ORDER BY id DESC LIMIT 1");
    q.bind(1, id);
    if (!q.step()) {
      q.reset();
      throw_internal("proposal " + std::to_string(id) + " is 'promoted' but has no promotion record", st.path());
    }
    from = q.column_opt_int64(0);
    to = q.column_opt_int64(1);
    q.reset();
  }
  const std::optional<int64_t> cur = current_version(st, p.target, p.key);
  if (cur != to)
    throw_input("'" + p.key + "' is now at " + vtext(cur) + ", not the " + vtext(to) + " proposal " + std::to_string(id) +
                    " promoted: a later change superseded it",
                "proposal " + std::to_string(id), "roll back the later promotion first (rtx-evolve status lists them)");
  set_current(st, p.target, p.key, from);
  log_deployment(st, p, to, from, "rollback", actor);
  if (from) {
    // The superseded proposal whose version is current again is in force again.
    write_promoted_again(st, p.key, *from, id);
  }
  write_status(st, id, "rolled_back");
  tx.commit();
  DeployResult r{id, p.target, p.key, to, from, 0};
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

Rehearsal rehearse(store::Store& st, int64_t id, const KeyPair& key, const std::string& actor) {
  const auto t0 = std::chrono::steady_clock::now();
  Rehearsal r;
  r.back = rollback(st, id, key, actor + " (rehearsal)");
  r.forward = promote(st, id, key, actor + " (rehearsal)");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace rtx::evolve
