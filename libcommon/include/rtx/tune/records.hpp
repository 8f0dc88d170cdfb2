// Tuning records in the rtx store: one tuning_trials row per (key, configuration) for resume
// and replay, versioned profiles (profiles / profile_current), and rtx.profile.v1 export/import.
// Schema: docs/store.md. Every write is one transaction.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/core/dtype.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/store/store.hpp"
#include "rtx/tune/search.hpp"

namespace rtx::tune {

inline constexpr const char* kProfileSchema = "rtx.profile.v1";

/// What a tuning result is for: op, variant, shape, dtype, backend and hardware SKU key.
struct TuneKey {
  std::string op, variant;
  kernels::Shape shape;
  DType dtype = DType::F32;
  kernels::Backend backend = kernels::Backend::CPU;
  std::string sku;  ///< telemetry::sku_key(backend), e.g. "cpu:intel-xeon-8481c:avx512"

  /// Profile key text: "op|variant|shape|dtype|backend|sku" with shape as shape_to_string
  /// ("matmul_forward|cpu.blocked|K=64,M=64,N=64|f32|cpu|cpu:amd-epyc-9b14:avx512").
  std::string str() const;
  /// Inverse of str(); throws rtx::Error(Input) naming the text when malformed.
  static TuneKey parse(const std::string& text);
};

/// Compact JSON with sorted keys of a params map (the store's config_json form).
std::string config_json(const Params& p);

/// One recorded trial (a tuning_trials row).
struct TrialRecord {
  Params config;
  Evaluation eval;  ///< status, reason, samples, median (reused = true)
  int64_t run_id = 0;
};

/// Trials of one key in a store.
class TrialStore {
 public:
  TrialStore(store::Store& st, TuneKey key) : st_(st), key_(std::move(key)) {}
  const TuneKey& key() const { return key_; }
  /// The recorded trial of configuration `p`, or nullopt.
  std::optional<TrialRecord> find(const Params& p);
  /// Insert or replace the trial of `p` (one row per configuration; a re-measurement with more
  /// samples replaces the row), with e.contended / e.contention_reason for an Ok trial (schema
  /// v4 columns; 0 and '' otherwise). One transaction. `run_id` 0: none.
  void put(const Params& p, const Evaluation& e, int64_t run_id);
  /// Every recorded trial of the key, in id order.
  std::vector<TrialRecord> all();

 private:
  store::Store& st_;
  TuneKey key_;
};

/// Resume: answers a configuration from its recorded trial when that trial is a skip or fail,
/// or an Ok (not aborted, not contended) with at least b.min_samples samples; otherwise measures
/// with `inner` and records the result (its contended flag and reason too). A trial recorded on
/// a busy host is measured again unless `reuse_contended`. Reused answers have `reused = true` (nothing measured).
class RecordingObjective : public Objective {
 public:
  /// `reuse_contended`: reuse busy-host records like quiet ones (rtx-tune run --include-busy).
  RecordingObjective(Objective& inner, TrialStore& trials, int64_t run_id, bool reuse_contended = false)
      : inner_(inner), trials_(trials), run_id_(run_id), reuse_contended_(reuse_contended) {}
  Evaluation evaluate(const Params& p, const EvalBudget& b) override;
  /// Records the skip (status "skip" with the reason) unless the configuration has a row.
  void skipped(const Params& p, const std::string& reason) override;
  /// The inner objective's (nothing recorded).
  std::optional<std::pair<std::vector<double>, std::vector<double>>> interleaved(const Params& a, const Params& b,
                                                                                 size_t n) override {
    return inner_.interleaved(a, b, n);
  }

 private:
  Objective& inner_;
  TrialStore& trials_;
  int64_t run_id_;
  bool reuse_contended_ = false;
};

/// Replay (Kernel Tuner's simulation mode): answers from recorded trials only, measuring
/// nothing; a record's contended flag and reason are passed on. An Ok trial answers with its first min(b.max_samples, n) samples (so successive
/// halving sees lower fidelity at low rungs) and their median; early abort is applied to those
/// samples as KernelObjective would. A configuration without a record is a Skip with reason
/// "replay: no recorded trial" that does not count toward the budget.
class ReplayObjective : public Objective {
 public:
  explicit ReplayObjective(std::vector<TrialRecord> records);
  Evaluation evaluate(const Params& p, const EvalBudget& b) override;
  size_t lookups() const { return lookups_; }

 private:
  std::vector<TrialRecord> records_;
  std::map<std::string, size_t> by_config_;
  size_t lookups_ = 0;
};

/// What a profile entry's numbers were measured under (the measured_under_json column):
/// {"rtx_sha", "rtx_version", "compiler", "cuda_compiler", "driver" (NVML driver string or ""),
///  "cuda_runtime", "sku", "hw_digest"} of this build and host, for `sku`.
nlohmann::json measured_under(const std::string& sku);

/// One profile entry (a profiles row).
struct ProfileEntry {
  std::string key;  ///< TuneKey::str()
  int64_t version = 0;
  Params params;
  nlohmann::json measured_under = nlohmann::json::object();  ///< plus "result": {"median_s", ...} when known
  int64_t run_id = 0;
  std::string created_at;
};

/// Record `params` as the best for `key`: when the current version has the same params and
/// measured_under (ignoring its "result" member: {"median_s", "default_median_s", ...}), nothing is written and its version is returned; otherwise a new version
/// (max + 1) is inserted and made current. Never updates a profiles row. One transaction.
int64_t save_profile(store::Store& st, const std::string& key, const Params& params, const nlohmann::json& measured_under,
                     int64_t run_id);
/// Current entry of every key (profile_current joined with profiles), ordered by key.
std::vector<ProfileEntry> current_profiles(store::Store& st);
/// Every version of `key`, oldest first.
std::vector<ProfileEntry> profile_versions(store::Store& st, const std::string& key);

/// Why an entry must not be used on this build/host ("" when it may): rtx major version,
/// compiler, or (CUDA backend) driver differs from measured_under(sku).
std::string stale_reason(const ProfileEntry& e, const TuneKey& key);

/// The rtx.profile.v1 document of the current profiles: {"schema", "created_at", "rtx_sha",
/// "hardware" (telemetry::to_json of this host), "identity", "entries": [{"key", "op",
/// "variant", "shape" (object), "dtype", "backend", "sku", "version", "params",
/// "measured_under"}]}.
nlohmann::json export_profiles(store::Store& st);

/// Result of an import.
struct ImportResult {
  size_t imported = 0;    ///< entries written as new versions
  size_t unchanged = 0;   ///< entries identical to the current version
  std::vector<std::string> foreign_skus;  ///< SKUs that differ from this host's (accepted with force)
};

/// Import an rtx.profile.v1 document: validates every field first (rtx::Error(Input) naming
/// `source` and the field), refuses entries whose SKU is not this host's SKU for their
/// backend (rtx::Error(Input) naming the SKUs, hint --force) unless `force`, then writes every
/// entry as a new current version in ONE transaction (all or nothing).
ImportResult import_profiles(store::Store& st, const nlohmann::json& doc, const std::string& source, bool force);

}  // namespace rtx::tune
