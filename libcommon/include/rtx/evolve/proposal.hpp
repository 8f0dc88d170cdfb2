// rtx::evolve proposals: the rtx.proposal.v1 envelope, its content hash (SHA-256) and Ed25519
// signature (libsodium), and its rows in the store (proposals, gate_results). Not the pipeline.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/core/hash.hpp"
#include "rtx/evolve/proposal_store.hpp"
#include "rtx/store/store.hpp"

namespace rtx::evolve {

inline constexpr const char* kProposalSchema = "rtx.proposal.v1";

/// The domains proposers cover ("tuner", "parallelism", "scheduler", "memory").
const std::vector<std::string>& known_domains();
/// "profile" (tuner: a kernel profile version) or "config" (the other domains: a versioned
/// configuration in evolve_configs). Throws rtx::Error(Input) for an unknown domain.
std::string target_of(const std::string& domain);

/// A proposal (rtx.proposal.v1). Fields signed and hashed: schema, domain, target, key, plan,
/// actions, changeset, rollback, provenance, fingerprint. Not hashed: id, status, validation,
/// signature (they change as the pipeline runs).
struct Proposal {
  int64_t id = 0;                 ///< store id (0 until inserted)
  std::string domain;             ///< known_domains()
  std::string target;             ///< target_of(domain)
  std::string key;                ///< profile key (TuneKey::str) or config key ("parallelism|<sku>")
  nlohmann::json plan = nlohmann::json::object();       ///< {"why": text, "proposer": name, "expected": {...}}
  nlohmann::json actions = nlohmann::json::array();     ///< [{"set": knob, "from": v, "to": v}]
  /// {"base_version": N|null, "base": config, "candidate": config}; config is a JSON object
  /// (kernel params for the tuner, SchedulerConfig/AllocatorConfig/threads otherwise).
  nlohmann::json changeset = nlohmann::json::object();
  nlohmann::json validation = nlohmann::json::object(); ///< filled by the pipeline (gates, numbers)
  nlohmann::json rollback = nlohmann::json::object();   ///< {"restore_version": N|null, "command"}
  /// {"git_sha", "sku", "code_sha256", "data_sha256", "env_sha256", "seeds": {...}}
  nlohmann::json provenance = nlohmann::json::object();
  std::string fingerprint;        ///< sha256 hex of domain|key|candidate: "same change" across runs
  std::string status = "new";     ///< new, validating, passed, failed, approved, promoted, superseded, rolled_back, interrupted
  /// {"alg": "ed25519", "public_key": hex, "sig": hex, "content_sha256": hex}; empty: unsigned.
  nlohmann::json signature = nlohmann::json::object();
};

/// The envelope as JSON (every field, schema first).
nlohmann::json to_json(const Proposal& p);
/// Parse and check an envelope: schema "rtx.proposal.v1", known domain, target matching the
/// domain, non-empty key, object changeset with "candidate" (object), array actions, object
/// plan/provenance. Throws rtx::Error(Input) naming `source` and the field.
Proposal from_json(const nlohmann::json& j, const std::string& source);
/// Fields a complete envelope must carry that `p` lacks (empty: complete): plan.why,
/// actions non-empty, changeset.candidate, rollback.command, provenance git_sha/sku/
/// code_sha256/data_sha256/env_sha256/seeds, fingerprint.
std::vector<std::string> missing_fields(const Proposal& p);

/// Lower-case hex SHA-256 of bytes (its home is core/hash.hpp).
using rtx::sha256_hex;
/// SHA-256 hex of a file's bytes; throws rtx::Error(Input) naming the file when unreadable.
std::string file_sha256(const std::string& path);
/// Canonical bytes of the signed content (compact dump, sorted keys) and their SHA-256.
std::string content_bytes(const Proposal& p);
std::string content_sha256(const Proposal& p);
/// sha256(domain + "|" + key + "|" + candidate.dump()).
std::string make_fingerprint(const std::string& domain, const std::string& key, const nlohmann::json& candidate);

/// An Ed25519 key pair (libsodium crypto_sign_*; RFC 8032).
struct KeyPair {
  std::vector<unsigned char> public_key;  ///< 32 bytes
  std::vector<unsigned char> secret_key;  ///< 64 bytes (seed + public key)
  std::string public_hex() const;
};
/// The key file next to a store: dirname(db_path) + "/evolve_ed25519.key" (so $RTX_HOME's).
std::string default_key_path(const std::string& db_path);
/// Create a key pair and write it (hex secret key, one line) to `path` with mode 0600
/// (atomically). Throws rtx::Error(Usage) when the file exists and !overwrite.
KeyPair generate_key(const std::string& path, bool overwrite);
/// Read a key file. Throws rtx::Error(Environment) when it is missing ("run rtx-evolve keygen"),
/// readable by group or others ("chmod 600"), or malformed (Input).
KeyPair load_key(const std::string& path);
/// Sign the content hash of `p` with `k` (fills p.signature).
void sign(Proposal& p, const KeyPair& k);
/// Why `p`'s signature does not hold against the trusted key `k` ("" when it does): unsigned,
/// another key, content hash differs (tampered), or signature invalid.
std::string verify(const Proposal& p, const KeyPair& k);

// ---- gate rows (the proposals rows: rtx/evolve/proposal_store.hpp) ----------------------------------------------------------------------------

/// One gate outcome (a gate_results row).
struct GateResult {
  std::string gate;          ///< "determinism", "performance", "heldout", "memory", "safety", "approval"
  bool passed = false;
  std::string metric;        ///< what `value` measures, with its unit ("improvement_lo_frac", "peak_rss_bytes")
  double value = 0;
  double threshold = 0;
  nlohmann::json detail = nlohmann::json::object();
};
/// Record gate results of a proposal (one transaction for all).
void record_gates(store::Store& st, int64_t proposal_id, int64_t run_id, const std::vector<GateResult>& g);
/// The same rows, inside the caller's open transaction (record_validation writes gates and
/// bench_results together).
void insert_gates(store::Store& st, int64_t proposal_id, int64_t run_id, const std::vector<GateResult>& g);
/// Gate results of a proposal, in insertion order. A detail_json that does not parse is
/// rtx::Error(Input) naming the gate and the proposal.
std::vector<GateResult> gate_results(store::Store& st, int64_t proposal_id);

}  // namespace rtx::evolve
