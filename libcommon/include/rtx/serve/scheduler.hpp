// rtx-serve's scheduler: continuous (iteration-level) batching over a serving model (Yu et al.
// 2022, "Orca"), with chunked prefill under a per-step token budget (Agrawal et al. 2024,
// "Sarathi-Serve"), a paged KV cache (vLLM), a bounded queue with two priority lanes, request
// timeouts and cancellation. One thread runs the steps; callers submit from any thread.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/models/infer.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/prefix_cache.hpp"

namespace rtx::serve {

/// The knobs rtx-tune and rtx-evolve may change (and --flags of rtx-serve).
struct SchedulerConfig {
  int max_batch = 32;          ///< most sequences running at once
  int token_budget = 512;      ///< most rows (prompt + decode tokens) in one forward step
  int prefill_chunk = 256;     ///< most prompt tokens of one sequence in one step
  double batch_window_ms = 0;  ///< when idle, wait this long after an arrival for more to batch
  int kv_block_tokens = 16;    ///< positions per KV block
  int kv_blocks = 0;           ///< blocks in the pool; 0 = max_batch full contexts
  /// The KV pool's element type (KvType): f32 (the default; outputs bitwise equal to rtx-train
  /// sample) or f16 (half the pool and the attention reads; keys and values rounded on store).
  /// CPU models only: a CUDA model's pool is f32 (Error(Input) at start otherwise).
  KvType kv_type = KvType::F32;
  int max_queue = 256;         ///< waiting requests beyond which submit() refuses (HTTP 429)
  double request_timeout_s = 600;    ///< a request running longer ends with finish "timeout"
  double interactive_target_ms = 500;  ///< TTFT target of the interactive lane (SLO accounting)
  double batch_target_ms = 10000;      ///< TTFT target of the batch lane
  /// TPOT target of the interactive lane, ms; 0 = off. When > 0 and an interactive sequence is
  /// decoding, a step's prompt chunks are cut so that the step's predicted time (StepTimeModel,
  /// fitted online to the steps run so far) stays within it, as Sarathi-Serve sizes its token
  /// budget from a TPOT SLO, but per step and without an offline profile. Prefill never starves:
  /// when the decode rows alone are predicted over the target, the step may add prompt work
  /// predicted at kOverTargetPrefillShare of the target, and a step with decode rows takes at
  /// least kMinPrefillTokens prompt tokens (or what is left of the prompt). Results are
  /// unchanged (batch invariance); only TTFT and TPOT move.
  double tpot_target_ms = 0;
  /// Keep finished sequences' KV blocks and reuse them for prompts that start with the same
  /// tokens (PrefixCache): a hit skips that part of the prefill. Results are unchanged.
  bool prefix_cache = true;
  /// Error(Input) naming the first out-of-range knob (where = the key); the message starts
  /// with `at` ("scheduler", or the document that held the values).
  void validate(const std::string& at = "scheduler") const;
  /// {"max_batch":..,...}; from_json reads the same keys (missing keys keep defaults; unknown
  /// keys and wrong types are Error(Input) naming them).
  nlohmann::json to_json() const;
  static SchedulerConfig from_json(const nlohmann::json& j, const std::string& where = {});
};

/// The least prompt tokens a step with decode rows takes under SchedulerConfig::tpot_target_ms
/// (when a prompt is waiting): one KV block's worth at the default block size.
constexpr int kMinPrefillTokens = 16;
/// The share of SchedulerConfig::tpot_target_ms a step may spend on prompts when its decode
/// rows alone are predicted over the target.
constexpr double kOverTargetPrefillShare = 0.25;

/// The work of one scheduler step, the features of StepTimeModel.
struct StepShape {
  double rows = 0;           ///< token rows (decode + prompt): weights, matmuls, per-row work
  double decode_keys = 0;    ///< keys the decode rows read: sum over decode rows of pos + 1
  double prefill_pairs = 0;  ///< causal (query, key) pairs of the prompt chunks (attended_pairs)
  /// Adds `n` tokens of one sequence starting at position `pos` (n == 1 of a decoding
  /// sequence is a decode row; otherwise a prompt chunk).
  void add(int n, int pos, bool decode);
};

/// (query, key) pairs the attention of `n` tokens starting at position `pos` reads (causal):
/// n*pos + n*(n+1)/2.
inline double attended_pairs(int n, int pos) {
  return static_cast<double>(n) * pos + 0.5 * static_cast<double>(n) * (n + 1);
}

/// An online least-squares model of one scheduler step's wall time (forward pass + sampling):
///   t = a + b * rows + c * decode_keys + d * prefill_pairs   (seconds; StepShape).
/// Decode keys and prompt pairs are apart because they cost differently: a decode row streams
/// each key from DRAM once per query (~74 KB per key for GPT-2 small in f32), while a prompt
/// chunk's queries share each key while it is in cache. Observations are weighted by
/// exponential forgetting (each one's weight is multiplied by `forget` at every later one), so
/// the fit follows the machine's load. The coefficients are kept >= 0: the fit is the one with
/// the least weighted squared error among the feature subsets that contain the constant and
/// whose least-squares coefficients are all >= 0 (so predict() grows with every feature); on a
/// tie the larger subset is kept. A
/// weak ridge prior (1e-3 of the data's weight) at the previous fit keeps a term's estimate
/// while the recent steps do not vary it (rows in a steady decode; no prompts), instead of
/// losing it as its observations are forgotten. Not thread-safe (the step thread owns it).
class StepTimeModel {
 public:
  static constexpr int kTerms = 4;  ///< 1, rows, decode_keys, prefill_pairs
  /// `forget` in (0, 1]; Error(Input) otherwise.
  explicit StepTimeModel(double forget = 0.97);
  /// Adds one step. Ignored when a value is negative or not finite.
  void observe(const StepShape& x, double seconds);
  /// True after 3 observations (there is a fit).
  bool ready() const { return n_ >= 3; }
  /// Predicted seconds of a step; 0 when not ready().
  double predict(const StepShape& x) const {
    return ready() ? beta_[0] + beta_[1] * x.rows + beta_[2] * x.decode_keys + beta_[3] * x.prefill_pairs : 0;
  }
  /// The fitted coefficients: [0] seconds per step, [1] per row, [2] per decode key, [3] per
  /// prompt (query, key) pair.
  const double* coefficients() const { return beta_; }
  uint64_t observations() const { return n_; }

 private:
  void refit();
  double forget_;
  double s_[kTerms][kTerms] = {};  // weighted sums of f_i * f_j, f = (1, rows, decode_keys, prefill_pairs)
  double st_[kTerms] = {};         // weighted sums of f_i * t
  double stt_ = 0;                 // weighted sum of t^2
  double beta_[kTerms] = {};
  uint64_t n_ = 0;
};

/// Priority lanes: interactive requests are admitted and prefilled before batch ones.
enum class Lane { Interactive = 0, Batch = 1 };
const char* lane_name(Lane l);

/// Why a request ended. Stop: EOS token or the caller's on_token returned false (stop string);
/// Length: max_tokens or the context; Cancelled: cancel() or shutdown; Timeout; Error.
enum class Finish { None, Stop, Length, Cancelled, Timeout, Error };
/// OpenAI's finish_reason strings where they exist ("stop", "length"), else "cancelled",
/// "timeout", "error".
const char* finish_name(Finish f);

/// One generation request (token ids in and out; text is the caller's business).
struct GenRequest {
  std::vector<int32_t> prompt;      ///< >= 1 ids (BOS included if the model wants it)
  int max_tokens = 16;              ///< >= 0 new tokens (0: prefill only)
  models::SamplerConfig sampling;   ///< temperature 0 = greedy
  bool ignore_eos = false;          ///< keep generating past EOS (benchmarks)
  bool cache_prompt = true;         ///< false: no prefix-cache reuse for this prompt (its blocks are still cached)
  int top_logprobs = -1;            ///< -1 none; k >= 0: the chosen token's logprob and the k best
  Lane lane = Lane::Interactive;
};

/// What the scheduler reports for each generated token, and once at the end.
struct TokenEvent {
  int32_t token = -1;       ///< -1 on the final event when no token comes with it
  float logprob = 0;        ///< log-softmax of the raw logits (temperature 1) at `token`
  std::vector<std::pair<int32_t, float>> top;  ///< the top_logprobs best (id, logprob), best first
  Finish finish = Finish::None;                ///< set on the last event only
  std::string error;                           ///< when finish == Error
};

/// Called on the scheduler thread for every token and for the final event (finish != None).
/// Return false to end the request after this token (finish Stop): a stop string matched.
/// Must be quick (it runs inside the step loop) and must not call back into the scheduler.
using EventFn = std::function<bool(const TokenEvent&)>;

/// Per-request timings (steady clock seconds since submit), for metrics and tests.
struct RequestTimes {
  double queued_s = 0;  ///< submit -> first scheduled
  double ttft_s = -1;   ///< submit -> first token
  double e2e_s = -1;    ///< submit -> finish
  int prompt_tokens = 0, output_tokens = 0;
  int cached_tokens = 0;  ///< prompt positions whose keys and values came from the prefix cache
};

/// A submitted request; cancel() through the scheduler.
struct RequestState;
using RequestHandle = std::shared_ptr<RequestState>;

/// A fixed-bucket histogram (Prometheus semantics: cumulative buckets, sum, count). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  /// Prometheus text lines for metric `name` with extra labels `labels` ("" or `a="b"`).
  std::string prometheus(const std::string& name, const std::string& labels) const;
  uint64_t count() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> ub_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

/// A consistent snapshot of the scheduler's state and counters.
struct SchedulerStats {
  int queued = 0, running = 0;
  int kv_blocks_used = 0, kv_blocks_total = 0;  ///< used: held by running sequences
  int kv_blocks_cached = 0;  ///< cached prefix blocks no sequence holds (reclaimable)
  uint64_t prefix_cache_queries = 0;  ///< prompt tokens looked up in the prefix cache
  uint64_t prefix_cache_hits = 0;     ///< of those, tokens whose keys and values were reused
  size_t kv_bytes = 0;
  int last_batch_seqs = 0, last_batch_rows = 0;
  uint64_t steps = 0, requests_finished = 0, requests_rejected = 0;
  uint64_t prompt_tokens = 0, output_tokens = 0;
  uint64_t finished_by[6] = {};  ///< indexed by Finish
  uint64_t lane_requests[2] = {}, lane_within_target[2] = {};  ///< TTFT SLO attainment per lane
  uint64_t steps_tpot_capped = 0;  ///< steps whose prompt chunks tpot_target_ms cut
  /// The step-time fit (StepTimeModel::coefficients): seconds per step, per row, per decode
  /// key, per prompt (query, key) pair.
  double step_time_coef[StepTimeModel::kTerms] = {};
};

/// The engine loop. Admission reserves the KV blocks for prompt + max_tokens up front (capped
/// at the context), so a running sequence never waits for memory and nothing is preempted;
/// a request whose reservation exceeds the whole pool is refused by submit(). With
/// SchedulerConfig::prefix_cache, admission first looks the prompt up in the prefix cache:
/// the cached full blocks are shared (they count toward the reservation), a partly matching
/// block is copied, and prefill starts after them; full blocks are cached as soon as they are
/// computed, and a finished sequence's last partial block when it ends.
class Scheduler {
 public:
  /// Takes `model` by reference (it must outlive the scheduler); starts the step thread.
  /// Error(Input) for an invalid config.
  Scheduler(Model& model, const SchedulerConfig& cfg);
  ~Scheduler();  ///< shutdown(0) then join
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Why a request cannot be submitted.
  enum class Refusal { None, QueueFull, TooLong, CompletionTooLong, ShuttingDown, BadRequest };
  /// Queues `req`; `on_event` gets its tokens. Returns the handle, or nullptr with `why` set:
  /// QueueFull (max_queue waiting: answer 429), TooLong (prompt + 1 > context, or the prompt
  /// and one token alone need more blocks than the pool has), CompletionTooLong (the prompt
  /// fits the pool but prompt + max_tokens does not), ShuttingDown, BadRequest (empty prompt, id out of range,
  /// max_tokens < 0, bad sampling settings; `detail` says which).
  RequestHandle submit(GenRequest req, EventFn on_event, Refusal* why = nullptr, std::string* detail = nullptr);
  /// Ends the request at the next step (finish Cancelled) and frees its KV blocks; no-op when
  /// it already finished.
  void cancel(const RequestHandle& r);
  /// Timings of a request (complete once its final event was delivered).
  RequestTimes times(const RequestHandle& r) const;
  /// Stop admitting; let running and queued requests finish until `deadline_s` from now, then
  /// cancel the rest; returns when none is left. Idempotent.
  void shutdown(double deadline_s);
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return cfg_; }
  /// Positions the whole KV pool holds (blocks x positions per block): the most prompt +
  /// max_tokens one request can reserve.
  long kv_pool_positions() const { return static_cast<long>(kv_.total_blocks()) * kv_.block_tokens(); }
  Model& model() { return model_; }
  const Histogram& ttft() const { return ttft_; }
  const Histogram& tpot() const { return tpot_; }
  const Histogram& itl() const { return itl_; }

 private:
  void loop();
  void step(std::vector<RequestHandle>& running);
  void finish(const RequestHandle& r, Finish f, const std::string& error = {});
  bool admit(const RequestHandle& r);          // mu_ held
  void cache_blocks(RequestState& r, bool last);  // mu_ held
  void cache_blocks_unchecked(RequestState& r, bool last);
  int blocks_held() const;                     // mu_ held

  Model& model_;
  SchedulerConfig cfg_;
  KvCache kv_;
  std::unique_ptr<PrefixCache> prefix_;  // null when prefix_cache is off
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestHandle> queue_[2];  // per lane
  std::vector<RequestHandle> running_;
  bool stopping_ = false, stop_now_ = false;
  std::chrono::steady_clock::time_point drain_deadline_{};
  SchedulerStats stats_;
  Histogram ttft_, tpot_, itl_;
  std::vector<float> logits_;
  StepTimeModel step_time_;  // step thread only
  std::thread thread_;
};

}  // namespace rtx::serve
