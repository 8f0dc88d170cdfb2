// Tuning rtx-serve's scheduler knobs and forward thread count the way rtx-tune tunes kernels:
// a discrete space (tune::Space), an objective that runs a seeded batch workload through a fresh
// serve::Scheduler and times it (seconds per output token), and the conversions between a
// tuned point and SchedulerConfig. rtx-evolve's serving trials use the same batch runner.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rtx/serve/model.hpp"
#include "rtx/serve/scheduler.hpp"
#include "rtx/tune/search.hpp"

namespace rtx::serve {

/// The tuning key's op name for scheduler profiles ("serve_scheduler|<model>|gen=..,prompt=..,
/// requests=..|f32|cpu|<sku>").
inline constexpr const char* kSchedulerTuneOp = "serve_scheduler";

/// The tuning key's variant for a model file: its file stem with characters outside
/// [A-Za-z0-9._-] replaced by '_' ("tinyllamas-stories-260k-f32" for ..-f32.gguf).
std::string tune_model_name(const std::string& model_path);

/// A batch workload: `requests` greedy requests (ignore_eos) submitted at once, each a BOS (when
/// the model has one) and `prompt_tokens` seeded ids (Philox, uniform over the vocabulary),
/// each generating `max_tokens` tokens.
struct BatchWorkload {
  int requests = 16;
  int prompt_tokens = 32;
  int max_tokens = 32;
  uint64_t seed = 0;
  /// As a tuning shape: {"requests", "prompt", "gen"}.
  kernels::Shape shape() const;
  /// From a tuning shape (missing dims keep the defaults). Error(Input) naming `where` for an
  /// unknown dim or a value outside [1, 4096] (requests, gen) / [1, 65536] (prompt).
  static BatchWorkload from_shape(const kernels::Shape& s, const std::string& where);
};

/// One run of a workload.
struct BatchRun {
  double seconds = 0;      ///< wall time from the first submit to the last token
  size_t tokens = 0;       ///< output tokens
  uint64_t checksum = 0;   ///< FNV-1a over every request's output ids, in request order
  std::vector<std::vector<int32_t>> outputs;  ///< per request, the generated ids
};

/// Run `w` once through a fresh Scheduler(model, cfg) and wait for it to finish.
/// Error(Input) when the scheduler refuses a request (naming it and why), or when no token
/// comes back; a prompt longer than the model's context is refused by the scheduler.
BatchRun run_batch(Model& model, const SchedulerConfig& cfg, const BatchWorkload& w);

/// The scheduler space: threads (1, 2, 4, ... up to `max_threads`, and `max_threads`; 0 = the
/// OpenMP default is the default point), max_batch {1..64 in powers of 2} (default 32),
/// token_budget {64..2048} (512), prefill_chunk {16..256} (256) and kv_block_tokens {8, 16, 32}
/// (16). validate: SchedulerConfig::validate of the point (token_budget >= max_batch,
/// prefill_chunk <= token_budget) and max_batch <= the workload's requests (larger batches
/// cannot fill: the same point under another name).
tune::Space scheduler_space(int max_threads, const BatchWorkload& w);

/// `base` with the space's knobs of `p` applied (threads is not a scheduler knob; see
/// tuned_threads). Error(Input) for a knob outside SchedulerConfig::validate.
SchedulerConfig scheduler_config_from(const tune::Params& p, SchedulerConfig base = {});
/// The "threads" value of a tuned point (0 when absent: the OpenMP default).
int tuned_threads(const tune::Params& p);

/// tune::Objective over the scheduler space for one model file and workload: each sample is one
/// run_batch (s per output token); one warm-up run per configuration. A configuration whose
/// greedy output ids differ from the default configuration's (batching must not change what a
/// request generates) is a Fail naming the first differing request. Models are loaded once per
/// thread count.
class SchedulerObjective : public tune::Objective {
 public:
  SchedulerObjective(std::string model_path, BatchWorkload w);
  tune::Evaluation evaluate(const tune::Params& p, const tune::EvalBudget& b) override;
  /// One warm-up batch each, then run_batch in ABBA order (s per output token).
  std::optional<std::pair<std::vector<double>, std::vector<double>>> interleaved(const tune::Params& a,
                                                                                 const tune::Params& b,
                                                                                 size_t n) override;

 private:
  Model& model_for(int threads);
  std::string path_;
  BatchWorkload w_;
  std::map<int, std::unique_ptr<Model>> models_;
  std::vector<std::vector<int32_t>> reference_;  ///< greedy ids under the default config
};

}  // namespace rtx::serve
