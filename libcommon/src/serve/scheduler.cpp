// The continuous-batching scheduler of rtx-serve (rtx/serve/scheduler.hpp).
#include "rtx/serve/scheduler.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "rtx/core/error.hpp"
#include "rtx/telemetry/bus.hpp"

namespace rtx::serve {

using Clock = std::chrono::steady_clock;

namespace {
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

// ---- config ------------------------------------------------------------------------------

void SchedulerConfig::validate(const std::string& at) const {
  const auto need = [&at](bool ok, const char* what, const std::string& rule) {
    if (!ok) throw_input(at + ": " + what + " " + rule, what);
  };
  need(max_batch >= 1 && max_batch <= 4096, "max_batch", "must be in [1, 4096]");
  need(token_budget >= max_batch && token_budget <= (1 << 20), "token_budget",
       "must be >= max_batch (every running sequence decodes each step) and <= 2^20");
  need(prefill_chunk >= 1 && prefill_chunk <= token_budget, "prefill_chunk", "must be in [1, token_budget]");
  need(std::isfinite(batch_window_ms) && batch_window_ms >= 0 && batch_window_ms <= 10000, "batch_window_ms",
       "must be in [0, 10000]");
  need(kv_block_tokens >= 1 && kv_block_tokens <= 4096, "kv_block_tokens", "must be in [1, 4096]");
  need(kv_blocks >= 0 && kv_blocks <= (1 << 24), "kv_blocks", "must be in [0, 2^24] (0 = max_batch full contexts)");
  need(max_queue >= 0 && max_queue <= (1 << 20), "max_queue", "must be in [0, 2^20]");
  need(std::isfinite(request_timeout_s) && request_timeout_s > 0, "request_timeout_s", "must be > 0");
  need(std::isfinite(interactive_target_ms) && interactive_target_ms > 0, "interactive_target_ms", "must be > 0");
  need(std::isfinite(batch_target_ms) && batch_target_ms > 0, "batch_target_ms", "must be > 0");
  need(std::isfinite(tpot_target_ms) && tpot_target_ms >= 0 && tpot_target_ms <= 600000, "tpot_target_ms",
       "must be in [0, 600000] (0 = off)");
}

nlohmann::json SchedulerConfig::to_json() const {
  return {{"max_batch", max_batch},         {"token_budget", token_budget},
          {"prefill_chunk", prefill_chunk}, {"batch_window_ms", batch_window_ms},
          {"kv_block_tokens", kv_block_tokens}, {"kv_blocks", kv_blocks},
          {"max_queue", max_queue},         {"request_timeout_s", request_timeout_s},
          {"interactive_target_ms", interactive_target_ms}, {"batch_target_ms", batch_target_ms},
          {"tpot_target_ms", tpot_target_ms}, {"prefix_cache", prefix_cache},
          {"kv_type", kv_type_name(kv_type)}};
}

SchedulerConfig SchedulerConfig::from_json(const nlohmann::json& j, const std::string& where) {
  const std::string at = where.empty() ? "scheduler config" : where;
  if (!j.is_object()) throw_input(at + ": expected a JSON object", at);
  SchedulerConfig c;
  for (const auto& item : j.items()) {
    // Named copies: lambdas may not capture structured bindings in C++17 (clang refuses).
    const std::string k = item.key();
    const nlohmann::json& v = item.value();
    const auto as_int = [&](int& dst) {
      if (!v.is_number_integer() || v.get<int64_t>() < std::numeric_limits<int>::min() ||
          v.get<int64_t>() > std::numeric_limits<int>::max())
        throw_input(at + ": \"" + k + "\" must be an integer", k);
      dst = v.get<int>();
    };
    const auto as_num = [&](double& dst) {
      if (!v.is_number()) throw_input(at + ": \"" + k + "\" must be a number", k);
      dst = v.get<double>();
    };
    if (k == "max_batch") as_int(c.max_batch);
    else if (k == "token_budget") as_int(c.token_budget);
    else if (k == "prefill_chunk") as_int(c.prefill_chunk);
    else if (k == "batch_window_ms") as_num(c.batch_window_ms);
    else if (k == "kv_block_tokens") as_int(c.kv_block_tokens);
    else if (k == "kv_blocks") as_int(c.kv_blocks);
    else if (k == "max_queue") as_int(c.max_queue);
    else if (k == "request_timeout_s") as_num(c.request_timeout_s);
    else if (k == "interactive_target_ms") as_num(c.interactive_target_ms);
    else if (k == "batch_target_ms") as_num(c.batch_target_ms);
    else if (k == "tpot_target_ms") as_num(c.tpot_target_ms);
    else if (k == "prefix_cache") {
      if (!v.is_boolean()) throw_input(at + ": \"" + k + "\" must be true or false", k);
      c.prefix_cache = v.get<bool>();
    }
    else if (k == "kv_type") {
      if (!v.is_string()) throw_input(at + ": \"" + k + "\" must be a string (f32 or f16)", k);
      c.kv_type = parse_kv_type(v.get<std::string>(), at + ": \"kv_type\"");
    }
    else throw_input(at + ": unknown key \"" + k + "\"", k, "see SchedulerConfig in rtx/serve/scheduler.hpp");
  }
  c.validate(where.empty() ? "scheduler" : at);  // names the document that held the bad value
  return c;
}

const char* lane_name(Lane l) { return l == Lane::Interactive ? "interactive" : "batch"; }

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Cancelled: return "cancelled";
    case Finish::Timeout: return "timeout";
    case Finish::Error: return "error";
    case Finish::None: break;
  }
  return "none";
}

// ---- step time model ---------------------------------------------------------------------

void StepShape::add(int n, int pos, bool decode) {
  rows += n;
  if (decode) decode_keys += pos + 1.0;
  else prefill_pairs += attended_pairs(n, pos);
}

StepTimeModel::StepTimeModel(double forget) : forget_(forget) {
  if (!(forget > 0 && forget <= 1)) throw_input("StepTimeModel: forget must be in (0, 1]", "forget");
}

void StepTimeModel::observe(const StepShape& x, double seconds) {
  const double f[kTerms] = {1, x.rows, x.decode_keys, x.prefill_pairs};
  for (double v : f)
    if (!std::isfinite(v) || v < 0) return;
  if (!std::isfinite(seconds) || seconds < 0) return;
  for (int i = 0; i < kTerms; ++i) {
    for (int j = 0; j < kTerms; ++j) s_[i][j] = forget_ * s_[i][j] + f[i] * f[j];
    st_[i] = forget_ * st_[i] + f[i] * seconds;
  }
  stt_ = forget_ * stt_ + seconds * seconds;
  ++n_;
  refit();
}

void StepTimeModel::refit() {
  constexpr double kPrior = 1e-3;
  // Least squares on each feature subset that contains the constant (bit i of `mask` = term
  // i + 1); keep the best fit whose coefficients are all >= 0. Each feature is scaled to its
  // weighted RMS first, so the normal equations are well conditioned whatever the units.
  constexpr int K = kTerms;
  double scale[K];
  for (int i = 0; i < K; ++i) scale[i] = s_[i][i] > 0 ? std::sqrt(s_[i][i] / s_[0][0]) : 1;
  double best_err = std::numeric_limits<double>::infinity(), best[K] = {};
  for (int mask = (1 << (K - 1)) - 1; mask >= 0; --mask) {  // the full set first: it wins ties
    int idx[K], m = 0;
    idx[m++] = 0;
    for (int i = 1; i < K; ++i)
      if (mask >> (i - 1) & 1) idx[m++] = i;
    double A[K][K + 1];
    for (int r = 0; r < m; ++r) {
      for (int c = 0; c < m; ++c) A[r][c] = s_[idx[r]][idx[c]] / (scale[idx[r]] * scale[idx[c]]);
      A[r][m] = st_[idx[r]] / scale[idx[r]];
      // A weak prior at the previous fit (ridge toward it, kPrior of the data's weight) for the
      // non-constant terms: a term the recent steps do not vary (rows during a steady decode,
      // prompt pairs while no prompt comes) keeps its last estimate instead of dropping to 0
      // as its old observations are forgotten.
      if (idx[r] > 0) {
        A[r][r] += kPrior * s_[0][0];
        A[r][m] += kPrior * s_[0][0] * beta_[idx[r]] * scale[idx[r]];
      }
    }
    // Gauss-Jordan elimination with partial pivoting; a (near-)singular system skips the subset.
    bool singular = false;
    for (int col = 0; col < m && !singular; ++col) {
      int piv = col;
      for (int r = col + 1; r < m; ++r)
        if (std::fabs(A[r][col]) > std::fabs(A[piv][col])) piv = r;
      if (!(std::fabs(A[piv][col]) > 1e-9 * s_[0][0])) {
        singular = true;
        break;
      }
      for (int c = 0; c <= m; ++c) std::swap(A[col][c], A[piv][c]);
      for (int r = 0; r < m; ++r) {
        if (r == col) continue;
        const double q = A[r][col] / A[col][col];
        for (int c = col; c <= m; ++c) A[r][c] -= q * A[col][c];
      }
    }
    if (singular) continue;
    double beta[K] = {};
    bool ok = true;
    for (int r = 0; r < m; ++r) {
      beta[idx[r]] = A[r][m] / A[r][r] / scale[idx[r]];
      if (!(beta[idx[r]] >= 0)) ok = false;
    }
    if (!ok) continue;
    // Weighted squared error: sum t^2 - 2 beta.St + beta' S beta.
    double err = stt_;
    for (int i = 0; i < K; ++i) {
      err -= 2 * beta[i] * st_[i];
      for (int j = 0; j < K; ++j) err += beta[i] * s_[i][j] * beta[j];
    }
    // A smaller subset replaces a larger one only when clearly better (then the larger one's
    // prior pull cost more than its terms gave): ties keep the terms and their estimates.
    if (err < best_err * (1 - 1e-6) - 1e-12 * stt_) {
      best_err = err;
      for (int i = 0; i < K; ++i) best[i] = beta[i];
    }
  }
  for (int i = 0; i < K; ++i) beta_[i] = best[i];
}

// ---- histogram ---------------------------------------------------------------------------

Histogram::Histogram(std::vector<double> ub) : ub_(std::move(ub)), counts_(ub_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> g(mu_);
  size_t i = 0;
  while (i < ub_.size() && v > ub_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> g(mu_);
  return n_;
}

std::string Histogram::prometheus(const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> g(mu_);
  std::ostringstream o;
  o.precision(9);
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < ub_.size(); ++i) {
    cum += counts_[i];
    o << name << "_bucket{" << labels << sep << "le=\"" << ub_[i] << "\"} " << cum << "\n";
  }
  cum += counts_.back();
  o << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << cum << "\n";
  const std::string lb = labels.empty() ? "" : "{" + labels + "}";
  o << name << "_sum" << lb << " " << sum_ << "\n" << name << "_count" << lb << " " << n_ << "\n";
  return o.str();
}

namespace {
std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40};
}
}  // namespace

// ---- requests ----------------------------------------------------------------------------

struct RequestState {
  RequestState(GenRequest r, EventFn f) : req(std::move(r)), on_event(std::move(f)), sampler(req.sampling) {
    sampler.begin_sequence(req.prompt);  // the penalties count this request's tokens only
  }
  GenRequest req;
  EventFn on_event;
  models::Sampler sampler;
  std::vector<int32_t> blocks;
  std::vector<int32_t> toks;  // the tokens whose keys and values are in the cache (size pos)
  int cached = 0;         // leading blocks that are prefix-cache nodes held by this sequence
  bool uncacheable = false;  // set when caching its blocks failed (Scheduler::cache_blocks)
  int reserve = 0;        // blocks reserved at admission
  int pos = 0;            // positions in the cache
  int prompt_done = 0;    // prompt tokens prefilled
  int generated = 0;
  int32_t next = -1;      // sampled token to feed next step
  std::atomic<bool> cancel{false};
  bool done = false;
  Clock::time_point t_submit, t_last;
  RequestTimes times;
};

// ---- scheduler ---------------------------------------------------------------------------

namespace {
int pool_blocks(const SchedulerConfig& c, const ModelInfo& m) {
  c.validate();
  if (c.kv_blocks > 0) return c.kv_blocks;
  const int per_seq = (m.context + c.kv_block_tokens - 1) / c.kv_block_tokens;
  return std::max(1, per_seq * c.max_batch);
}
}  // namespace

Scheduler::Scheduler(Model& model, const SchedulerConfig& cfg)
    : model_(model),
      cfg_(cfg),
      kv_(model.info().n_layer, model.info().n_kv_head, model.info().head_dim, cfg.kv_block_tokens,
          pool_blocks(cfg, model.info()), model.info().device == "cpu", cfg.kv_type),
      prefix_(cfg.prefix_cache ? std::make_unique<PrefixCache>(kv_) : nullptr),
      ttft_(latency_buckets()),
      tpot_(latency_buckets()),
      itl_(latency_buckets()) {
  stats_.kv_blocks_total = kv_.total_blocks();
  stats_.kv_bytes = kv_.bytes();
  model_.attach(kv_);
  // The step thread gets an OpenMP team of its own. The constructing thread's idle team (left
  // from loading the model: packing runs in parallel) would stay counted by libgomp, which then
  // believes the CPUs oversubscribed and cuts every barrier's spin-wait to ~100 iterations: each
  // of a step's ~60 parallel regions then pays a futex wake-up (GPT-2 f32 decode on 2 cores:
  // 25.8 instead of 19.1 ms per token). Releasing that team first avoids it.
  omp_pause_resource_all(omp_pause_soft);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  shutdown(0);
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_now_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

RequestHandle Scheduler::submit(GenRequest req, EventFn on_event, Refusal* why, std::string* detail) {
  const auto refuse = [&](Refusal r, const std::string& d) -> RequestHandle {
    if (why) *why = r;
    if (detail) *detail = d;
    std::lock_guard<std::mutex> g(mu_);
    ++stats_.requests_rejected;
    return nullptr;
  };
  if (why) *why = Refusal::None;
  const ModelInfo& mi = model_.info();
  if (req.prompt.empty()) return refuse(Refusal::BadRequest, "the prompt has no tokens");
  for (size_t i = 0; i < req.prompt.size(); ++i)
    if (req.prompt[i] < 0 || req.prompt[i] >= mi.vocab)
      return refuse(Refusal::BadRequest, "prompt token " + std::to_string(req.prompt[i]) + " at index " +
                                             std::to_string(i) + " is outside the vocabulary [0, " +
                                             std::to_string(mi.vocab) + ")");
  if (req.max_tokens < 0) return refuse(Refusal::BadRequest, "max_tokens must be >= 0");
  if (static_cast<long>(req.prompt.size()) + (req.max_tokens > 0 ? 1 : 0) > mi.context)
    return refuse(Refusal::TooLong, "the prompt has " + std::to_string(req.prompt.size()) +
                                        " tokens; the model's context is " + std::to_string(mi.context));
  try {
    models::Sampler check(req.sampling);
  } catch (const Error& e) {
    return refuse(Refusal::BadRequest, e.what());
  }
  for (const auto& [id, bias] : req.sampling.logit_bias)
    if (id >= mi.vocab)
      return refuse(Refusal::BadRequest, "logit_bias names token " + std::to_string(id) +
                                             ", outside the vocabulary [0, " + std::to_string(mi.vocab) + ")");
  const long want = std::min<long>(static_cast<long>(req.prompt.size()) + req.max_tokens, mi.context);
  const int reserve = kv_.blocks_for(static_cast<int>(want));
  if (reserve > kv_.total_blocks()) {
    const bool prompt_fits = kv_.blocks_for(static_cast<int>(req.prompt.size()) + 1) <= kv_.total_blocks();
    return refuse(prompt_fits ? Refusal::CompletionTooLong : Refusal::TooLong,
                  "prompt + max_tokens needs " + std::to_string(reserve) + " KV blocks; the pool has " +
                      std::to_string(kv_.total_blocks()) +
                      (prompt_fits ? " (reduce max_tokens)" : " (the prompt alone does not fit)"));
  }
  auto r = std::make_shared<RequestState>(std::move(req), std::move(on_event));
  r->reserve = reserve;
  r->t_submit = Clock::now();
  r->times.prompt_tokens = static_cast<int>(r->req.prompt.size());
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_) {
      ++stats_.requests_rejected;
      if (why) *why = Refusal::ShuttingDown;
      if (detail) *detail = "the server is shutting down";
      return nullptr;
    }
    const size_t waiting = queue_[0].size() + queue_[1].size();
    if (waiting >= static_cast<size_t>(cfg_.max_queue)) {
      ++stats_.requests_rejected;
      if (why) *why = Refusal::QueueFull;
      if (detail) *detail = "the queue holds " + std::to_string(waiting) + " requests (max_queue)";
      return nullptr;
    }
    queue_[static_cast<int>(r->req.lane)].push_back(r);
  }
  cv_.notify_all();
  return r;
}

void Scheduler::cancel(const RequestHandle& r) {
  if (!r) return;
  r->cancel.store(true);
  cv_.notify_all();
}

RequestTimes Scheduler::times(const RequestHandle& r) const {
  std::lock_guard<std::mutex> g(mu_);
  return r ? r->times : RequestTimes{};
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  SchedulerStats s = stats_;
  s.queued = static_cast<int>(queue_[0].size() + queue_[1].size());
  s.running = static_cast<int>(running_.size());
  return s;
}

void Scheduler::shutdown(double deadline_s) {
  std::unique_lock<std::mutex> lk(mu_);
  const auto dl = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                     std::max(0.0, std::isfinite(deadline_s) ? deadline_s : 0.0)));
  if (!stopping_ || dl < drain_deadline_) drain_deadline_ = dl;
  stopping_ = true;
  cv_.notify_all();
  cv_.wait(lk, [&] { return queue_[0].empty() && queue_[1].empty() && running_.empty(); });
}

// Called with mu_ NOT held, on the loop thread.
void Scheduler::finish(const RequestHandle& r, Finish f, const std::string& error) {
  if (r->done) return;
  const auto now = Clock::now();
  TokenEvent ev;
  ev.finish = f;
  ev.error = error;
  {
    std::lock_guard<std::mutex> g(mu_);
    r->done = true;
    // The blocks' keys and values stay valid unless a forward failed (Error): cache them.
    if (f != Finish::Error) cache_blocks(*r, true);
    for (int b : r->blocks) prefix_ ? prefix_->release(b) : kv_.free(b);
    r->blocks.clear();
    r->times.e2e_s = seconds(r->t_submit, now);
    ++stats_.requests_finished;
    ++stats_.finished_by[static_cast<int>(f)];
    running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
    for (auto& q : queue_) q.erase(std::remove(q.begin(), q.end(), r), q.end());
    stats_.kv_blocks_used = blocks_held();
    stats_.kv_blocks_cached = prefix_ ? prefix_->unheld() : 0;
  }
  if (r->times.output_tokens > 1 && r->times.ttft_s >= 0)
    tpot_.observe((r->times.e2e_s - r->times.ttft_s) / (r->times.output_tokens - 1));
  // The callback is released with its last event: it holds the caller's state (the HTTP
  // server's Job), which holds this handle, so keeping it would leak both per request.
  EventFn last = std::move(r->on_event);
  r->on_event = nullptr;
  if (last) last(ev);
  cv_.notify_all();
}

int Scheduler::blocks_held() const { return kv_.used_blocks() - (prefix_ ? prefix_->unheld() : 0); }

bool Scheduler::admit(const RequestHandle& r) {
  std::vector<int32_t>& blocks = r->blocks;
  const std::vector<int32_t>& prompt = r->req.prompt;
  const int P = static_cast<int>(prompt.size());
  if (!prefix_) {
    if (r->reserve > kv_.free_blocks()) return false;
    for (int i = 0; i < r->reserve; ++i) blocks.push_back(kv_.alloc());
    return true;
  }
  // At least the last prompt token is computed: its logits give the first token.
  PrefixCache::Match m = r->req.cache_prompt ? prefix_->match(prompt.data(), P, P - 1) : PrefixCache::Match{};
  const int B = kv_.block_tokens();
  const int avail = prefix_->available();
  std::vector<int> pinned;
  // New blocks (the copy's target among them), plus the unheld nodes that holding takes out of
  // the reclaimable ones.
  const auto cost = [&] {
    pinned = m.shared;
    if (m.copy_from >= 0) pinned.push_back(m.copy_from);
    return r->reserve - static_cast<int>(m.shared.size()) + prefix_->unheld_among(pinned);
  };
  if (cost() > avail && m.copy_from >= 0) {  // pinning the copy's source is one block too many
    m.copy_from = -1;
    m.copy_tokens = 0;
  }
  // Without the copy the cost is at most the reservation (each shared block saves one new
  // block and pins at most one), so this waits only when the pool is short without any hit.
  if (cost() > avail) return false;  // wait for running sequences to end
  const int shared = static_cast<int>(m.shared.size());
  for (int b : pinned) prefix_->hold(b);
  const int hit = m.tokens(B);
  blocks.assign(m.shared.begin(), m.shared.end());
  while (static_cast<int>(blocks.size()) < r->reserve) {
    const int b = prefix_->alloc();
    RTX_CHECK(b >= 0, "scheduler: the KV pool ran out during admission");
    blocks.push_back(b);
  }
  int got = shared * B;
  if (m.copy_from >= 0) {
    if (kv_.copy_block(blocks[shared], m.copy_from)) got = hit;
    prefix_->release(m.copy_from);
  }
  r->cached = shared;
  r->pos = r->prompt_done = got;
  r->toks.assign(prompt.begin(), prompt.begin() + got);
  r->times.cached_tokens = got;
  if (r->req.cache_prompt) stats_.prefix_cache_queries += P;  // an opted-out prompt is not looked up
  stats_.prefix_cache_hits += got;
  return true;
}

void Scheduler::cache_blocks(RequestState& r, bool last) {
  if (!prefix_ || r.uncacheable) return;
  try {
    cache_blocks_unchecked(r, last);
  } catch (const std::exception& e) {
    // A broken invariant of the block tree must not take the server down: this sequence's
    // blocks stay its own (freed at its end); the others go on.
    r.uncacheable = true;
    std::fprintf(stderr, "rtx-serve: prefix cache: %s; the request's blocks are not cached\n", e.what());
  }
}

void Scheduler::cache_blocks_unchecked(RequestState& r, bool last) {
  const int B = kv_.block_tokens();
  const int full = std::min(r.pos / B, static_cast<int>(r.blocks.size()));
  while (r.cached < full) {
    const int k = r.cached;
    const int own = r.blocks[k];
    const int node = prefix_->insert(k ? r.blocks[k - 1] : -1, r.toks.data() + static_cast<size_t>(k) * B, B, own);
    if (node != own) {  // the same tokens are cached already: use that block, give ours back
      prefix_->hold(node);
      prefix_->release(own);
      r.blocks[k] = node;
    }
    ++r.cached;
  }
  const int tail = r.pos - full * B;
  if (last && tail > 0 && r.cached == full && full < static_cast<int>(r.blocks.size()))
    prefix_->insert(full ? r.blocks[full - 1] : -1, r.toks.data() + static_cast<size_t>(full) * B, tail, r.blocks[full]);
  // (A partial block whose tokens are cached already stays the sequence's own: finish() frees it.)
}

void Scheduler::loop() {
  std::vector<RequestHandle> expired;
  for (;;) {
    std::vector<RequestHandle> running;
    {
      std::unique_lock<std::mutex> lk(mu_);
      const auto has_work = [&] {
        if (stop_now_ || !running_.empty() || !queue_[0].empty() || !queue_[1].empty()) return true;
        return false;
      };
      cv_.wait(lk, has_work);
      if (stop_now_ && running_.empty() && queue_[0].empty() && queue_[1].empty()) return;
      // Batch window: when idle, let more requests arrive before the first step.
      if (running_.empty() && cfg_.batch_window_ms > 0 && !stopping_) {
        cv_.wait_for(lk, std::chrono::duration<double, std::milli>(cfg_.batch_window_ms), [&] {
          return stop_now_ || stopping_ ||
                 queue_[0].size() + queue_[1].size() >= static_cast<size_t>(cfg_.max_batch);
        });
      }
      // Expired, cancelled, or past the drain deadline.
      const auto now = Clock::now();
      const bool drain_over = stopping_ && now >= drain_deadline_;
      expired.clear();
      for (auto* list : {&running_}) {
        for (const auto& r : *list)
          if (r->cancel.load() || drain_over || seconds(r->t_submit, now) > cfg_.request_timeout_s) expired.push_back(r);
      }
      for (auto& q : queue_)
        for (const auto& r : q)
          if (r->cancel.load() || drain_over || seconds(r->t_submit, now) > cfg_.request_timeout_s) expired.push_back(r);
      // Admission: interactive lane first; FIFO within a lane; a head that does not fit blocks
      // its lane and the lanes below it (no starvation of large requests).
      for (int lane = 0; lane < 2; ++lane) {
        bool blocked = false;
        while (!queue_[lane].empty() && static_cast<int>(running_.size()) < cfg_.max_batch) {
          const RequestHandle r = queue_[lane].front();
          if (std::find(expired.begin(), expired.end(), r) != expired.end()) break;
          if (!admit(r)) {
            blocked = true;
            break;
          }
          queue_[lane].pop_front();
          r->times.queued_s = seconds(r->t_submit, now);
          running_.push_back(r);
        }
        if (blocked) break;
      }
      stats_.kv_blocks_used = blocks_held();
      stats_.kv_blocks_cached = prefix_ ? prefix_->unheld() : 0;
      running = running_;
    }
    for (const auto& r : expired) {
      const auto now = Clock::now();
      Finish f = Finish::Cancelled;
      if (!r->cancel.load() && seconds(r->t_submit, now) > cfg_.request_timeout_s) f = Finish::Timeout;
      finish(r, f);
    }
    running.erase(std::remove_if(running.begin(), running.end(), [](const RequestHandle& r) { return r->done; }),
                  running.end());
    if (!running.empty()) step(running);
  }
}

void Scheduler::step(std::vector<RequestHandle>& running) {
  const ModelInfo& mi = model_.info();
  const auto t_step = Clock::now();
  // Decode rows first (one per sequence past its prompt), then prompt chunks, interactive first.
  std::stable_sort(running.begin(), running.end(), [](const RequestHandle& a, const RequestHandle& b) {
    return static_cast<int>(a->req.lane) < static_cast<int>(b->req.lane);
  });
  std::vector<SeqBatch> batch;
  std::vector<RequestHandle> who;
  int budget = cfg_.token_budget;
  int rows = 0;
  StepShape shape;
  bool interactive_decoding = false;
  for (const auto& r : running) {
    if (r->prompt_done < static_cast<int>(r->req.prompt.size()) || budget < 1) continue;
    batch.push_back({&r->next, 1, r->pos, r->blocks.data(), static_cast<int>(r->blocks.size()), true});
    who.push_back(r);
    --budget;
    ++rows;
    shape.add(1, r->pos, true);
    interactive_decoding |= r->req.lane == Lane::Interactive;
  }
  // Under a TPOT target, a prompt chunk takes only the tokens that keep the step's predicted time
  // within it (predict() grows with every feature, so the largest such n is found by bisection).
  const bool capped = cfg_.tpot_target_ms > 0 && interactive_decoding && step_time_.ready();
  // When the decode rows alone are predicted over the target, prompts may still add a quarter
  // of the target's worth of work (the target cannot be met; new requests must not starve).
  const double target_s = capped ? std::max(cfg_.tpot_target_ms / 1000.0,
                                            step_time_.predict(shape) + kOverTargetPrefillShare * cfg_.tpot_target_ms / 1000.0)
                                 : 0;
  bool cut = false;
  int prefill = 0;
  for (const auto& r : running) {
    const int left = static_cast<int>(r->req.prompt.size()) - r->prompt_done;
    if (left <= 0 || budget < 1) continue;
    int n = std::min({left, cfg_.prefill_chunk, budget});
    if (capped) {
      int lo = 0, hi = n;
      while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        StepShape with = shape;
        with.add(mid, r->pos, false);
        if (step_time_.predict(with) <= target_s) lo = mid;
        else hi = mid - 1;
      }
      if (prefill == 0) lo = std::max(lo, std::min(n, kMinPrefillTokens));  // prefill never starves
      if (lo < n) cut = true;
      n = lo;
      if (n == 0) break;  // later prompts would not fit either
    }
    batch.push_back({r->req.prompt.data() + r->prompt_done, n, r->pos, r->blocks.data(),
                     static_cast<int>(r->blocks.size()), n == left});
    who.push_back(r);
    budget -= n;
    rows += n;
    prefill += n;
    shape.add(n, r->pos, false);
  }
  if (batch.empty()) return;
  int wanted = 0;
  for (const auto& b : batch) wanted += b.want_logits;
  logits_.resize(static_cast<size_t>(std::max(wanted, 1)) * mi.vocab);
  try {
    telemetry::ScopedSpan span("serve.step");
    model_.forward(batch, kv_, logits_.data());
  } catch (const std::exception& e) {
    for (const auto& r : who) finish(r, Finish::Error, e.what());
    return;
  }
  nlohmann::json iteration;
  {
    std::lock_guard<std::mutex> g(mu_);
    ++stats_.steps;
    stats_.last_batch_seqs = static_cast<int>(batch.size());
    stats_.last_batch_rows = rows;
    stats_.steps_tpot_capped += cut;
    // One event per scheduler iteration (rtx-trace; telemetry topic serve.scheduler): the
    // batch it ran, the queue behind it and the KV cache's use after admission. Built under the
    // lock, published after it (subscribers run in this thread and may call stats()).
    if (telemetry::enabled())
      iteration = {{"step", stats_.steps},
                   {"seqs", static_cast<int>(batch.size())},
                   {"tokens", rows},
                   {"prefill_tokens", prefill},
                   {"decode_tokens", rows - prefill},
                   {"queued", static_cast<int>(queue_[0].size() + queue_[1].size())},
                   {"running", static_cast<int>(running_.size())},
                   {"kv_blocks_used", stats_.kv_blocks_used},
                   {"kv_blocks_cached", stats_.kv_blocks_cached},
                   {"kv_blocks_total", stats_.kv_blocks_total},
                   {"tpot_capped", cut},
                   {"step_ms", std::chrono::duration<double, std::milli>(Clock::now() - t_step).count()}};
  }
  if (!iteration.is_null()) telemetry::publish(telemetry::topic::serve_scheduler, std::move(iteration));
  {
    std::lock_guard<std::mutex> g(mu_);
    for (size_t i = 0; i < batch.size(); ++i) {
      RequestState& r = *who[i];
      const SeqBatch& b = batch[i];
      r.toks.insert(r.toks.end(), b.tokens, b.tokens + b.n);  // b.tokens may be r.next: before it changes
      if (r.prompt_done < static_cast<int>(r.req.prompt.size())) r.prompt_done += b.n;
      r.pos += b.n;
      cache_blocks(r, false);  // the blocks this step filled: later prompts may share them at once
    }
  }
  int row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const RequestHandle& r = who[i];
    const SeqBatch& b = batch[i];
    if (!b.want_logits) continue;
    const float* lg = logits_.data() + static_cast<size_t>(row++) * mi.vocab;
    if (r->req.max_tokens == 0) {
      finish(r, Finish::Length);
      continue;
    }
    int32_t tok = 0;
    try {
      tok = r->sampler.sample(lg, mi.vocab);  // throws on NaN logits (e.g. a model with NaN weights)
    } catch (const std::exception& e) {
      finish(r, Finish::Error, e.what());  // this request fails; the engine and the others go on
      continue;
    }
    const auto now = Clock::now();
    if (tok == mi.eos && !r->req.ignore_eos) {
      finish(r, Finish::Stop);
      continue;
    }
    TokenEvent ev;
    ev.token = tok;
    if (r->req.top_logprobs >= 0) {
      // log-softmax of the raw logits in float64.
      double mx = -INFINITY;
      for (int v = 0; v < mi.vocab; ++v) mx = std::max(mx, static_cast<double>(lg[v]));
      double z = 0;
      for (int v = 0; v < mi.vocab; ++v) z += std::exp(static_cast<double>(lg[v]) - mx);
      const double lz = mx + std::log(z);
      ev.logprob = static_cast<float>(lg[tok] - lz);
      const int k = std::min(r->req.top_logprobs, mi.vocab);
      std::vector<int32_t> ids(mi.vocab);
      for (int v = 0; v < mi.vocab; ++v) ids[v] = v;
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                        [&](int32_t a, int32_t c) { return lg[a] > lg[c] || (lg[a] == lg[c] && a < c); });
      for (int j = 0; j < k; ++j) ev.top.emplace_back(ids[j], static_cast<float>(lg[ids[j]] - lz));
    }
    ++r->generated;
    {
      std::lock_guard<std::mutex> g(mu_);
      ++stats_.output_tokens;
      if (r->generated == 1) {
        r->times.ttft_s = seconds(r->t_submit, now);
        stats_.prompt_tokens += r->req.prompt.size();
        const int lane = static_cast<int>(r->req.lane);
        ++stats_.lane_requests[lane];
        const double target = (lane == 0 ? cfg_.interactive_target_ms : cfg_.batch_target_ms) / 1000.0;
        if (r->times.ttft_s <= target) ++stats_.lane_within_target[lane];
      }
      r->times.output_tokens = r->generated;
    }
    if (r->generated == 1) ttft_.observe(r->times.ttft_s);
    else itl_.observe(seconds(r->t_last, now));
    r->t_last = now;
    const bool go_on = r->on_event ? r->on_event(ev) : true;
    if (!go_on) finish(r, Finish::Stop);
    else if (r->generated >= r->req.max_tokens || r->pos + 1 > mi.context) finish(r, Finish::Length);
    else r->next = tok;
  }
  step_time_.observe(shape, seconds(t_step, Clock::now()));
  std::lock_guard<std::mutex> g(mu_);
  for (int i = 0; i < StepTimeModel::kTerms; ++i) stats_.step_time_coef[i] = step_time_.coefficients()[i];
}

}  // namespace rtx::serve
