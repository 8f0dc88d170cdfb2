// rtx::evolve deployment: versioned configurations (evolve_configs / evolve_config_current),
// approval, signed promotion and rollback, each one store transaction. Not validation.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "rtx/evolve/proposal.hpp"
#include "rtx/store/store.hpp"

namespace rtx::evolve {

/// A current configuration version (evolve_config_current joined with evolve_configs).
struct ConfigVersion {
  int64_t version = 0;
  nlohmann::json config;
};
/// The current version of config `key`, or nullopt (the built-in defaults apply).
std::optional<ConfigVersion> current_config(store::Store& st, const std::string& key);
/// The current profile version of kernel profile `key` and its params, or nullopt.
std::optional<ConfigVersion> current_profile(store::Store& st, const std::string& key);

/// The promoted configurations a tool applies at start: for each config domain (parallelism,
/// scheduler, memory, fusion) the current version of `<domain>|<sku>`, if one was promoted.
struct PromotedConfigs {
  std::string sku;                            ///< the SKU key the configs were looked up for
  std::map<std::string, ConfigVersion> by_domain;
  std::string note;  ///< why nothing was read ("no store at ...", an error), empty otherwise
  /// The domain's promoted config, or nullptr.
  const nlohmann::json* get(const std::string& domain) const {
    auto it = by_domain.find(domain);
    return it == by_domain.end() ? nullptr : &it->second.config;
  }
};
/// Read the promoted configs for `sku` from the store at `db_path`, read-only. Never throws for a
/// missing or unreadable store: the tool then runs on its defaults and `note` says why.
PromotedConfigs promoted_configs(const std::string& db_path, const std::string& sku);
/// The thread count of a promoted parallelism config ({"threads": N}) when it is an integer in
/// [1, max_threads]; otherwise nullopt and `why` says what is wrong (for describe()).
std::optional<int> promoted_threads(const nlohmann::json& config, int max_threads, std::string* why);
/// One line for a tool's stderr about the promoted configs it looked at: `outcome` maps each
/// domain the tool uses to "" (applied) or why it was not ("--threads given", "invalid: ...");
/// domains the tool does not use are not mentioned. E.g. "promoted configs for cpu:...:
/// applied scheduler v2 {...}; ignored parallelism v1 (--threads given)", or the note.
std::string describe(const PromotedConfigs& pc, const std::map<std::string, std::string>& outcome);

/// Record approval of a "passed" proposal (gate "approval" with the actor and mode "manual" or
/// "auto-policy") and set status "approved". One transaction. Throws rtx::Error(Usage) when the
/// proposal's status is not "passed" (naming it).
void approve(store::Store& st, int64_t id, const std::string& actor, const std::string& mode);

/// What a promotion or rollback did.
struct DeployResult {
  int64_t proposal_id = 0;
  std::string target, key;
  std::optional<int64_t> from_version, to_version;
  double seconds = 0;   ///< wall time of the transaction
};

/// Promote an approved proposal: verify its signature against `key` (tampered or unsigned:
/// rtx::Error(Input), nothing written), check the current version still equals the proposal's
/// base_version (else rtx::Error(Input): "the baseline moved; re-validate"), then in ONE
/// transaction write the candidate as a new version (or reuse the version a previous promotion
/// of this proposal created), make it current, log it (evolve_deployments; promotions too for a
/// profile) and set status "promoted"; the proposal it replaces (if any) becomes "superseded". Status must be "approved" or "rolled_back" (re-promotion).
DeployResult promote(store::Store& st, int64_t id, const KeyPair& key, const std::string& actor);

/// Roll back a promoted proposal: verify its signature, check the current version is still the
/// one it promoted (else rtx::Error(Input) naming the later change), then in ONE transaction
/// restore the previous version (or remove the current row when there was none), log it and set
/// status "rolled_back"; a superseded proposal whose version is current again is "promoted" again.
DeployResult rollback(store::Store& st, int64_t id, const KeyPair& key, const std::string& actor);

/// `rtx-evolve rehearse`: roll a promoted proposal back and forward again (two transactions,
/// both logged), returning both results; the goal is < 1 s in all.
struct Rehearsal {
  DeployResult back, forward;
  double seconds = 0;
};
Rehearsal rehearse(store::Store& st, int64_t id, const KeyPair& key, const std::string& actor);


}  // namespace rtx::evolve
