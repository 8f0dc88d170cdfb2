// The proposals table behind one layer (rtx/evolve/proposal_store.hpp): every statement on a
// `proposals` row. Envelopes, hashes and signatures are proposal.cpp; gate rows stay there too.
#include "rtx/evolve/proposal_store.hpp"

#include "evolve/pipeline.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/proposal.hpp"
#include "rtx/store/store.hpp"

namespace rtx::evolve {

using nlohmann::json;
using detail::parse_stored;

int64_t insert_proposal(store::Store& st, Proposal& p, int64_t run_id) {
  store::Transaction tx(st);
  auto& q = st.prepare(
      "INSERT INTO proposals (run_id, key, base_version, status, json, content_sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (run_id) q.bind(1, run_id); else q.bind(1, nullptr);
  q.bind(2, p.key);
  const json& bv = p.changeset.contains("base_version") ? p.changeset["base_version"] : json(nullptr);
  if (bv.is_number_integer()) q.bind(3, bv.get<int64_t>()); else q.bind(3, nullptr);
  q.bind(4, p.status);
  q.bind(5, to_json(p).dump());
  q.bind(6, content_sha256(p));
  q.run();
  p.id = st.last_insert_rowid();
  // Store the id inside the document too (not part of the signed content).
  auto& u = st.prepare("UPDATE proposals SET json = ?1 WHERE id = ?2");
  u.bind(1, to_json(p).dump());
  u.bind(2, p.id);
  u.run();
  tx.commit();
  return p.id;
}

Proposal load_proposal(store::Store& st, int64_t id) {
  auto& q = st.prepare("SELECT json, status FROM proposals WHERE id = ?1");
  q.bind(1, id);
  if (!q.step()) {
    q.reset();
    throw_input("no proposal " + std::to_string(id) + " in " + st.path(), "ID", "list them with `rtx-evolve status`");
  }
  const std::string text = q.column_text(0), status = q.column_text(1);
  q.reset();
  const std::string row = "proposal " + std::to_string(id);
  Proposal p = from_json(parse_stored(text, row, st.path()), st.path() + ": " + row);
  p.id = id;
  p.status = status;
  return p;
}

std::vector<int64_t> list_proposals(store::Store& st, const std::string& status, size_t limit) {
  auto& q = st.prepare("SELECT id FROM proposals WHERE (?1 = '' OR status = ?1) ORDER BY id DESC LIMIT ?2");
  q.bind(1, status);
  q.bind(2, static_cast<int64_t>(limit));
  std::vector<int64_t> ids;
  while (q.step()) ids.push_back(q.column_int64(0));
  q.reset();
  return ids;
}

void write_status(store::Store& st, int64_t id, const std::string& status, const std::optional<json>& validation) {
  if (validation) {
    auto& q = st.prepare(
        "UPDATE proposals SET status = ?1, json = json_set(json, '$.validation', json(?2), '$.status', ?1), "
        "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE id = ?3");
    q.bind(1, status);
    q.bind(2, validation->dump());
    q.bind(3, id);
    q.run();
  } else {
    auto& q = st.prepare(
        "UPDATE proposals SET status = ?1, json = json_set(json, '$.status', ?1), "
        "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE id = ?2");
    q.bind(1, status);
    q.bind(2, id);
    q.run();
  }
  if (st.changes() != 1) throw_input("no proposal " + std::to_string(id) + " in " + st.path(), "ID");
}

void set_status(store::Store& st, int64_t id, const std::string& status, const std::optional<json>& validation) {
  store::Transaction tx(st);
  write_status(st, id, status, validation);
  tx.commit();
}

bool write_transition(store::Store& st, int64_t id, const std::string& from, const std::string& to) {
  auto& u = st.prepare("UPDATE proposals SET status = ?1, json = json_set(json, '$.status', ?1), "
                       "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE id = ?2 AND status = ?3");
  u.bind(1, to);
  u.bind(2, id);
  u.bind(3, from);
  u.run();
  return st.changes() == 1;
}

void write_superseded(store::Store& st, const std::string& key, int64_t except_id) {
  auto& sup = st.prepare("UPDATE proposals SET status = 'superseded', json = json_set(json, '$.status', 'superseded'), "
                         "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE key = ?1 AND status = 'promoted' AND id != ?2");
  sup.bind(1, key);
  sup.bind(2, except_id);
  sup.run();
}

void write_promoted_again(store::Store& st, const std::string& key, int64_t version, int64_t except_id) {
  auto& back = st.prepare(
      "UPDATE proposals SET status = 'promoted', json = json_set(json, '$.status', 'promoted'), "
      "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE status = 'superseded' AND key = ?1 AND id = "
      "(SELECT proposal_id FROM evolve_deployments WHERE key = ?1 AND action = 'promote' AND to_version = ?2 "
      "AND proposal_id != ?3 ORDER BY id DESC LIMIT 1)");
  back.bind(1, key);
  back.bind(2, version);
  back.bind(3, except_id);
  back.run();
}

int mark_interrupted_validations(store::Store& st) {
  store::Transaction tx(st);
  st.exec("UPDATE proposals SET status = 'interrupted', json = json_set(json, '$.status', 'interrupted') WHERE status = 'validating'");
  const int n = st.changes();
  tx.commit();
  return n;
}

std::optional<int64_t> latest_promoted(store::Store& st) {
  auto& q = st.prepare("SELECT id FROM proposals WHERE status = 'promoted' ORDER BY updated_at DESC, id DESC LIMIT 1");
  std::optional<int64_t> id;
  if (q.step()) id = q.column_int64(0);
  q.reset();
  return id;
}

std::vector<StoredProposal> stored_proposals(store::Store& st) {
  auto& q = st.prepare("SELECT id, status, json, created_at, run_id FROM proposals ORDER BY id");
  std::vector<StoredProposal> rows;
  while (q.step()) {
    StoredProposal r;
    r.id = q.column_int64(0);
    r.status = q.column_text(1);
    r.json = q.column_text(2);
    r.created_at = q.column_text(3);
    r.run_id = q.column_opt_int64(4);
    rows.push_back(std::move(r));
  }
  q.reset();
  return rows;
}

std::vector<std::pair<int64_t, std::string>> proposals_since(store::Store& st, const std::string& since) {
  std::vector<std::pair<int64_t, std::string>> rows;  // id, created_at
  auto& q = st.prepare(  // compared as instants, not as text
      "SELECT id, created_at FROM proposals WHERE ?1 = '' OR julianday(created_at) >= julianday(?1) ORDER BY id DESC");
  q.bind(1, since);
  while (q.step()) rows.emplace_back(q.column_int64(0), q.column_text(1));
  q.reset();
  return rows;
}

bool failed_before(store::Store& st, const std::string& fingerprint, const std::string& sku) {
  // A failure counts unless every failed gate of it was undecided (gate_undecided in status.cpp:
  // a performance CI that straddled the threshold after re-measuring, or a performance or
  // held-out gate with too few rounds for a CI: the host's noise or the run's --rounds decided).
  auto& q = st.prepare(
      "SELECT COUNT(*) FROM proposals p WHERE p.status = 'failed' AND json_extract(p.json, '$.fingerprint') = ?1 "
      "AND json_extract(p.json, '$.provenance.sku') = ?2 AND NOT ("
      " EXISTS (SELECT 1 FROM gate_results g WHERE g.proposal_id = p.id AND g.passed = 0"
      "  AND g.gate IN ('performance', 'heldout') AND json_extract(g.detail_json, '$.undecided') = 1)"
      " AND NOT EXISTS (SELECT 1 FROM gate_results g WHERE g.proposal_id = p.id AND g.passed = 0 AND g.gate <> 'approval'"
      "  AND NOT (g.gate IN ('performance', 'heldout') AND json_extract(g.detail_json, '$.undecided') = 1)))");
  q.bind(1, fingerprint);
  q.bind(2, sku);
  q.step();
  const bool yes = q.column_int64(0) > 0;
  q.reset();
  return yes;
}

}  // namespace rtx::evolve
