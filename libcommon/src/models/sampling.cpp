// Token sampling (temperature, top-k, top-p over float64 probabilities, Philox-seeded) and the
// streaming generate loop over a Gpt2Decoder. Tokenizer-agnostic: ids in, ids out.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>

#include "rtx/core/error.hpp"
#include "rtx/models/infer.hpp"

namespace rtx::models {

namespace {

void check_logits(const float* logits, int V, const char* fn) {
  if (V < 1) throw_input(std::string(fn) + ": V = " + std::to_string(V) + " must be >= 1", "V", "pass the vocabulary size");
  if (!logits) throw_input(std::string(fn) + ": logits pointer is null", "logits", "pass V logits");
  for (int v = 0; v < V; ++v)
    if (!std::isfinite(logits[v]))
      throw_input(std::string(fn) + ": logit " + std::to_string(v) + " is " + (std::isnan(logits[v]) ? "NaN" : "infinite"),
                  "logits", "check the model's weights (a non-finite parameter or activation)");
}

}  // namespace

int32_t argmax(const float* logits, int V) {
  if (V < 1) throw_input("argmax: V = " + std::to_string(V) + " must be >= 1", "V", "pass the vocabulary size");
  if (!logits) throw_input("argmax: logits pointer is null", "logits", "pass V logits");
  int32_t best = 0;
  for (int v = 1; v < V; ++v)
    if (logits[v] > logits[best]) best = v;
  return best;
}

Sampler::Sampler(const SamplerConfig& cfg) : cfg_(cfg), rng_(cfg.seed, 0, 0) {
  if (!(std::isfinite(cfg.temperature) && cfg.temperature >= 0.0f))
    throw_input("sampler: temperature = " + std::to_string(cfg.temperature) + " must be a finite value >= 0",
                "temperature", "use 0 for greedy decoding, 1 for the model's distribution");
  if (cfg.vocab_limit < 0)
    throw_input("sampler: vocab_limit = " + std::to_string(cfg.vocab_limit) + " must be >= 0", "vocab_limit");
  if (cfg.top_k < 0)
    throw_input("sampler: top_k = " + std::to_string(cfg.top_k) + " must be >= 0", "top_k", "use 0 to disable top-k");
  if (!(cfg.top_p > 0.0f && cfg.top_p <= 1.0f))
    throw_input("sampler: top_p = " + std::to_string(cfg.top_p) + " must be in (0, 1]", "top_p",
                "use 1 to disable nucleus sampling");
  for (const auto& [name, v] : {std::pair<const char*, float>{"frequency_penalty", cfg.frequency_penalty},
                                {"presence_penalty", cfg.presence_penalty}})
    if (!(v >= -2.0f && v <= 2.0f))
      throw_input(std::string("sampler: ") + name + " = " + std::to_string(v) + " must be in [-2, 2]", name,
                  "use 0 to disable it");
  if (!(cfg.repetition_penalty > 0.0f && cfg.repetition_penalty <= 10.0f))
    throw_input("sampler: repetition_penalty = " + std::to_string(cfg.repetition_penalty) + " must be in (0, 10]",
                "repetition_penalty", "use 1 to disable it");
  for (const auto& [id, b] : cfg.logit_bias) {
    if (id < 0)
      throw_input("sampler: logit_bias names token id " + std::to_string(id) + ", which is < 0", "logit_bias");
    if (!(b >= -100.0f && b <= 100.0f))
      throw_input("sampler: logit_bias of token " + std::to_string(id) + " = " + std::to_string(b) +
                      " must be in [-100, 100]",
                  "logit_bias");
  }
}

void Sampler::begin_sequence(const int32_t* prompt, int n) {
  if (n < 0 || (n > 0 && !prompt)) throw_input("sampler: begin_sequence needs n >= 0 prompt ids", "prompt");
  for (int i = 0; i < n; ++i)
    if (prompt[i] < 0)
      throw_input("sampler: prompt id " + std::to_string(prompt[i]) + " at index " + std::to_string(i) + " is < 0",
                  "prompt");
  counts_.clear();
  prompt_ids_.clear();
  if (cfg_.repetition_penalty == 1.0f) return;  // only the repetition penalty reads the prompt
  prompt_ids_.assign(prompt, prompt + n);
  std::sort(prompt_ids_.begin(), prompt_ids_.end());
  prompt_ids_.erase(std::unique(prompt_ids_.begin(), prompt_ids_.end()), prompt_ids_.end());
}

int Sampler::sampled_count(int32_t id) const {
  const auto it = counts_.find(id);
  return it == counts_.end() ? 0 : it->second;
}

const float* Sampler::adjusted(const float* logits, int V, std::vector<float>& out) const {
  if (!cfg_.adjusts_logits()) return logits;
  out.assign(logits, logits + V);
  for (const auto& [id, b] : cfg_.logit_bias)
    if (id < V) out[id] += b;
  const float r = cfg_.repetition_penalty;
  const auto repeat = [&](int32_t id) { out[id] = out[id] > 0.0f ? out[id] / r : out[id] * r; };
  if (r != 1.0f) {
    for (int32_t id : prompt_ids_)
      if (id < V) repeat(id);
    for (const auto& [id, c] : counts_)
      if (id < V && !std::binary_search(prompt_ids_.begin(), prompt_ids_.end(), id)) repeat(id);
  }
  if (cfg_.frequency_penalty != 0.0f || cfg_.presence_penalty != 0.0f)
    for (const auto& [id, c] : counts_) {
      if (id >= V) continue;
      out[id] -= static_cast<float>(c) * cfg_.frequency_penalty;
      out[id] -= cfg_.presence_penalty;
    }
  return out.data();
}

void Sampler::candidates(const float* logits, int V, std::vector<int32_t>& ids, std::vector<double>& w) const {
  const auto before = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  ids.resize(V);
  std::iota(ids.begin(), ids.end(), 0);
  bool sorted = false;
  if (cfg_.top_k > 0 && cfg_.top_k < V) {
    std::partial_sort(ids.begin(), ids.begin() + cfg_.top_k, ids.end(), before);
    ids.resize(cfg_.top_k);
    sorted = true;
  }
  float mx = logits[ids[0]];
  for (int32_t id : ids) mx = std::max(mx, logits[id]);
  const double inv_t = 1.0 / static_cast<double>(cfg_.temperature);
  if (cfg_.top_p < 1.0f) {
    if (!sorted) std::sort(ids.begin(), ids.end(), before);
    w.resize(ids.size());
    double total = 0;
    for (size_t i = 0; i < ids.size(); ++i) total += w[i] = std::exp((static_cast<double>(logits[ids[i]]) - mx) * inv_t);
    // Smallest prefix (in descending probability) whose mass reaches top_p of the total.
    const double need = static_cast<double>(cfg_.top_p) * total;
    double cum = 0;
    size_t keep = 0;
    while (keep < ids.size()) {
      cum += w[keep++];
      if (cum >= need) break;
    }
    ids.resize(keep);
    w.resize(keep);
    return;
  }
  w.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) w[i] = std::exp((static_cast<double>(logits[ids[i]]) - mx) * inv_t);
}

int32_t Sampler::sample(const float* logits, int V) {
  const int32_t id = draw(logits, V);
  if (cfg_.adjusts_logits()) ++counts_[id];
  return id;
}

int32_t Sampler::draw(const float* logits, int V) {
  check_logits(logits, V, "Sampler::sample");
  if (cfg_.vocab_limit > 0 && cfg_.vocab_limit < V) V = cfg_.vocab_limit;
  logits = adjusted(logits, V, adj_);
  if (cfg_.temperature == 0.0f) return argmax(logits, V);
  candidates(logits, V, ids_, w_);
  double total = 0;
  for (double x : w_) total += x;
  const double target = rng_.next_double() * total;
  double cum = 0;
  for (size_t i = 0; i < ids_.size(); ++i) {
    cum += w_[i];
    if (target < cum) return ids_[i];
  }
  // Rounding left target at the very end: the last candidate with nonzero weight.
  for (size_t i = ids_.size(); i-- > 0;)
    if (w_[i] > 0) return ids_[i];
  return ids_[0];
}

std::vector<double> Sampler::distribution(const float* logits, int V) const {
  check_logits(logits, V, "Sampler::distribution");
  std::vector<double> p(V, 0.0);
  if (cfg_.vocab_limit > 0 && cfg_.vocab_limit < V) V = cfg_.vocab_limit;
  std::vector<float> adj;
  logits = adjusted(logits, V, adj);
  if (cfg_.temperature == 0.0f) {
    p[argmax(logits, V)] = 1.0;
    return p;
  }
  std::vector<int32_t> ids;
  std::vector<double> w;
  candidates(logits, V, ids, w);
  double total = 0;
  for (double x : w) total += x;
  for (size_t i = 0; i < ids.size(); ++i) p[ids[i]] = w[i] / total;
  return p;
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::StopToken: return "stop_token";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Callback: return "callback";
  }
  return "unknown";
}

double GenerateResult::decode_tokens_per_s() const { return decode_s > 0 ? decode_steps / decode_s : 0.0; }

GenerateResult generate(LogitsSource& dec, const std::vector<int32_t>& prompt, int max_new_tokens, Sampler& sampler,
                        int32_t stop_token, const TokenCallback& on_token) {
  using clock = std::chrono::steady_clock;
  const auto secs = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  if (prompt.empty())
    throw_input("generate: the prompt is empty", "prompt", "pass at least one token id (e.g. a newline or BOS token)");
  if (prompt.size() > static_cast<size_t>(dec.capacity()))
    throw_input("generate: the prompt has " + std::to_string(prompt.size()) + " tokens, more than block_size " +
                    std::to_string(dec.capacity()),
                "prompt", "keep the last block_size tokens of the prompt");
  if (max_new_tokens < 0)
    throw_input("generate: max_new_tokens = " + std::to_string(max_new_tokens) + " must be >= 0", "max_new_tokens",
                "pass the number of tokens to generate");

  GenerateResult r;
  r.prompt_tokens = static_cast<int>(prompt.size());
  const auto t0 = clock::now();
  const float* logits = dec.reset_and_prefill(prompt.data(), static_cast<int>(prompt.size()));
  if (max_new_tokens == 0) {
    r.prefill_s = secs(t0, clock::now());
    return r;
  }
  clock::time_point t1 = t0;
  bool first = true;
  for (;;) {
    const int32_t tok = sampler.sample(logits, dec.vocab());
    if (first) {
      t1 = clock::now();
      r.prefill_s = secs(t0, t1);
      first = false;
    }
    if (tok == stop_token) {
      r.stop = StopReason::StopToken;
      break;
    }
    r.tokens.push_back(tok);
    if (on_token && !on_token(tok)) {
      r.stop = StopReason::Callback;
      break;
    }
    if (static_cast<int>(r.tokens.size()) >= max_new_tokens) {
      r.stop = StopReason::MaxTokens;
      break;
    }
    if (dec.position() >= dec.capacity()) {
      r.stop = StopReason::ContextFull;
      break;
    }
    logits = dec.step(tok);
    ++r.decode_steps;
  }
  r.decode_s = secs(t1, clock::now());
  return r;
}

namespace {
/// Gpt2Decoder as a LogitsSource.
class DecoderSource final : public LogitsSource {
 public:
  explicit DecoderSource(Gpt2Decoder& d) : d_(d) {}
  const float* reset_and_prefill(const int32_t* ids, int n) override {
    d_.reset();
    return d_.prefill(ids, n).data();
  }
  const float* step(int32_t token) override { return d_.step(token).data(); }
  int position() const override { return d_.position(); }
  int capacity() const override { return d_.capacity(); }
  int vocab() const override { return d_.config().vocab_size; }

 private:
  Gpt2Decoder& d_;
};
}  // namespace

GenerateResult generate(Gpt2Decoder& dec, const std::vector<int32_t>& prompt, int max_new_tokens, Sampler& sampler,
                        int32_t stop_token, const TokenCallback& on_token) {
  DecoderSource src(dec);
  return generate(static_cast<LogitsSource&>(src), prompt, max_new_tokens, sampler, stop_token, on_token);
}

}  // namespace rtx::models
