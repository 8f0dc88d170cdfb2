// Run-time parameter lookup from tuned profiles: exact key, else the nearest shape of the same
// op/variant/dtype/backend/SKU, else the variant's defaults; with hit/miss/stale counters.
// install() wires it into kernels::set_param_lookup.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/kernels/registry.hpp"
#include "rtx/store/store.hpp"
#include "rtx/tune/records.hpp"

namespace rtx::tune {

/// Distance between two shapes of the same dims: sqrt(sum_d (log2(a_d) - log2(b_d))^2) over
/// the dims of `a` (a dim of value 0, e.g. bias=0, compares as 0 vs 0 exactly; a dim present in
/// one shape only, or a 0 against a non-zero, makes the shapes incomparable: +inf). Log space,
/// so 512 -> 1024 is as far as 1024 -> 2048: kernels' blocking depends on ratios, not sums.
double shape_distance(const kernels::Shape& a, const kernels::Shape& b);

/// Lookup counters (monotonic).
struct LookupStats {
  uint64_t exact = 0, nearest = 0, miss = 0, stale = 0, invalid = 0;
};

/// Profiles loaded from a store, answering kernels' parameter queries. Thread-safe counters;
/// the entries are immutable after construction.
class ProfileLookup {
 public:
  /// Load the current profile entries of `st`. Stale entries (stale_reason) are kept out of
  /// lookups and listed by stale(); `sku_for` maps a backend to this host's SKU key (default:
  /// telemetry::sku_key; a backend whose SKU is unknown, e.g. CUDA without a GPU, matches nothing).
  explicit ProfileLookup(store::Store& st);
  /// From explicit entries (tests); `cpu_sku`/`cuda_sku` are this host's keys.
  ProfileLookup(std::vector<ProfileEntry> entries, std::string cpu_sku, std::string cuda_sku);

  /// How an answer was found.
  enum class Source { Exact, Nearest, Default };
  struct Answer {
    std::optional<Params> params;  ///< nullopt: use the variant's defaults
    Source source = Source::Default;
    std::string key;               ///< the profile key used ("" for Default)
    double distance = 0;           ///< shape_distance for Nearest
  };
  /// Exact key first; else the entry of the same op, variant, dtype, backend and SKU whose
  /// shape is nearest (shape_distance, finite; ties: the lower key text); else Default. A
  /// candidate whose params the variant's validate rejects at `s` is passed over (counted
  /// `invalid`). `v` may be null (no validation).
  Answer find(const std::string& op, const kernels::Variant* v, const kernels::Shape& s, DType dt);
  /// find() by variant name, for keys that are not registry kernels (rtx-serve's
  /// "serve_scheduler|<model>|..."): the same exact-then-nearest rule, no validation.
  Answer find(const std::string& op, const std::string& variant, kernels::Backend backend, const kernels::Shape& s,
              DType dt);
  /// kernels::ParamLookup adapter: find() with the registry's variant; counts the outcome.
  std::optional<Params> operator()(const std::string& op, const std::string& variant, const kernels::Shape& s, DType dt);

  LookupStats stats() const;
  /// Entries not used because stale: (key, reason).
  const std::vector<std::pair<std::string, std::string>>& stale() const { return stale_; }
  size_t size() const { return entries_.size(); }
  /// Publish the counters as a telemetry event (topic "tune.lookup").
  void publish_stats() const;
  nlohmann::json stats_json() const;

 private:
  struct Entry {
    TuneKey key;
    std::string key_text;
    Params params;
  };
  void load(std::vector<ProfileEntry> entries);
  Answer find_impl(const std::string& op, const std::string& variant, kernels::Backend backend, const kernels::Shape& s,
                   DType dt, const kernels::Variant* v);
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, std::string>> stale_;
  std::string cpu_sku_, cuda_sku_;
  std::atomic<uint64_t> exact_{0}, nearest_{0}, miss_{0}, stale_count_{0}, invalid_{0};
};

/// `lookup` as a kernels::ParamLookup (it shares ownership); null gives an empty function
/// (defaults only). Pass it where kernels are set up (measure::ExpandOptions::lookup).
kernels::ParamLookup param_lookup(std::shared_ptr<ProfileLookup> lookup);

}  // namespace rtx::tune
