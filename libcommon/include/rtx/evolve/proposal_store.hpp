// The proposals table (docs/store.md) behind one layer: every statement that reads or writes a
// `proposals` row lives in src/evolve/proposal_store.cpp. A status change is one transaction:
// the functions that open their own say so; the `write_*` ones run inside the caller's open
// store::Transaction, so a change that also writes other tables (gates and measurements of a
// validation, a promotion's config version and deployment log) commits all of it at once.
// Status words: proposed, validating, passed, failed, interrupted, approved, promoted,
// superseded, rolled_back. A row's JSON keeps "status" equal to its status column.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace rtx::store {
class Store;
}

namespace rtx::evolve {

struct Proposal;

/// Insert `p` (status as in p) into proposals; returns and sets p.id. `run_id` 0: none. One transaction.
int64_t insert_proposal(store::Store& st, Proposal& p, int64_t run_id);
/// Load a proposal by id from its stored JSON (the envelope as stored, id and status from the
/// row). Throws rtx::Error(Input) "no proposal N in <db>" when absent and "proposal N in <db>:
/// stored JSON is unreadable (...)" when the row's JSON does not parse (edited outside rtx).
Proposal load_proposal(store::Store& st, int64_t id);
/// Ids of proposals, newest first (status filter "" = all), at most `limit`.
std::vector<int64_t> list_proposals(store::Store& st, const std::string& status, size_t limit);
/// Set status (and the validation JSON when given) in one transaction. Error(Input) when there
/// is no proposal `id`.
void set_status(store::Store& st, int64_t id, const std::string& status,
                const std::optional<nlohmann::json>& validation = std::nullopt);
/// set_status inside the caller's open transaction.
void write_status(store::Store& st, int64_t id, const std::string& status,
                  const std::optional<nlohmann::json>& validation = std::nullopt);
/// Inside the caller's transaction: proposal `id` from status `from` to `to`; false (nothing
/// written) when its status is not `from` (changed concurrently) or it does not exist.
bool write_transition(store::Store& st, int64_t id, const std::string& from, const std::string& to);
/// Inside the caller's transaction: the promoted proposals of `key` other than `except_id`
/// become "superseded" (a promotion replaced them).
void write_superseded(store::Store& st, const std::string& key, int64_t except_id);
/// Inside the caller's transaction: the superseded proposal of `key` whose promotion made
/// version `version` current (the latest such promotion, not `except_id`) is "promoted" again
/// (a rollback made its version current).
void write_promoted_again(store::Store& st, const std::string& key, int64_t version, int64_t except_id);
/// Proposals left "validating" (a killed run) become "interrupted", never judged. One
/// transaction; returns how many.
int mark_interrupted_validations(store::Store& st);
/// The proposal promoted most recently (by updated_at, then id), if any.
std::optional<int64_t> latest_promoted(store::Store& st);

/// True when a proposal with this fingerprint already failed a gate on `sku` (the learned prior).
/// A failure whose only failed gates are undecided performance gates (detail.undecided: the CI
/// straddled the threshold after re-measuring) does not count: a later run may propose it again.
bool failed_before(store::Store& st, const std::string& fingerprint, const std::string& sku);

/// A proposals row as stored (the knowledge graph reads every row, its JSON unparsed).
struct StoredProposal {
  int64_t id = 0;
  std::string status;
  std::string json;        ///< the envelope's JSON text (may be unreadable: edited outside rtx)
  std::string created_at;  ///< UTC ISO-8601
  std::optional<int64_t> run_id;
};
/// Every row, by id.
std::vector<StoredProposal> stored_proposals(store::Store& st);
/// (id, created_at) of the proposals created at or after `since` (an ISO-8601 instant, compared
/// as an instant, not as text; "" = all), newest first.
std::vector<std::pair<int64_t, std::string>> proposals_since(store::Store& st, const std::string& since);

}  // namespace rtx::evolve
