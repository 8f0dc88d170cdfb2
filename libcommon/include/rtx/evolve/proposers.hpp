// rtx::evolve proposers ("agents"): one interface, one class per domain -- tuner (kernel
// profiles from rtx-tune trials), parallelism (OpenMP threads), scheduler (rtx-serve knobs),
// memory (caching-allocator knobs), fusion (fused vs unfused attention in GPT-2 training).
// Each returns signed-later, unvalidated proposals.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/measure/measure.hpp"
#include "rtx/evolve/proposal.hpp"
#include "rtx/store/store.hpp"

namespace rtx::evolve {

/// What proposers see.
struct ProposeContext {
  store::Store* st = nullptr;
  const kernels::Registry* reg = nullptr;
  std::string sku;                           ///< telemetry::sku_key("cpu")
  std::vector<measure::BenchCase> cases;  ///< the runnable cases of the selected pack subset
  std::string pack_path;                     ///< for provenance (data hash)
  std::string model_path;                    ///< serving model (stories260k GGUF); "" if absent
  uint64_t seed = 0;
  size_t budget = 2;                         ///< most proposals this proposer may return
  size_t explore_evals = 4;                  ///< tuner: configurations measured per key when trials are few
  /// Parallelism: data-parallel ranks (mpirun on this host) for the gradient bucket-size moves
  /// (dp_bucket_mb); 0 = not distributed, only thread-count moves.
  int dp_ranks = 0;
  std::ostream* log = nullptr;               ///< progress lines (may be null)
  /// Ctrl-C: asked between the tuner's exploration measurements (each at most 0.1 s of
  /// sampling); true ends the exploration early (what was measured is stored). May be null.
  std::function<bool()> should_stop;
};

/// A proposer: generates candidate changes of one domain, newest knowledge first. Proposals
/// whose fingerprint already failed on this SKU are left out (failed_before).
class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string domain() const = 0;
  virtual std::vector<Proposal> propose(ProposeContext& ctx) = 0;
};

/// The five proposers, in domain order tuner, parallelism, scheduler, memory, fusion (attention
/// fused: cpu.flash, or unfused: cpu.naive, in the GPT-2 CPU model).
std::vector<std::unique_ptr<Proposer>> default_proposers();

/// Config key of a non-profile domain on a SKU: "<domain>|<sku>".
std::string config_key(const std::string& domain, const std::string& sku);
/// The configuration a domain runs with now: the current evolve config when one is promoted,
/// else the built-in default ({"threads": omp_get_max_threads(), "dp_bucket_mb": 25}, SchedulerConfig{},
/// AllocatorConfig{}, {"attention": "fused"}). For the tuner: the current profile params, else the variant defaults.
nlohmann::json baseline_config(store::Store& st, const std::string& domain, const std::string& key,
                               const kernels::Registry& reg);

/// Provenance of a proposal made now: git sha, SKU, SHA-256 of this executable
/// (/proc/self/exe), of the data files given (pack, model), of the environment (hardware
/// profile, compiler, OMP_* variables), and the seeds.
nlohmann::json make_provenance(const std::string& sku, const std::vector<std::string>& data_files, uint64_t seed);

/// Fill fingerprint, rollback plan and (when empty) provenance of a freshly made proposal.
/// Throws rtx::Error(Input) naming the knob when a fusion candidate is not a valid config.
void finish_proposal(Proposal& p, const ProposeContext& ctx);

}  // namespace rtx::evolve
