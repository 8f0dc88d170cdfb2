// GPT-2 inference on the CPU with a KV cache (one sequence, f32), token sampling (temperature,
// top-k, top-p) seeded by Philox, and a streaming generate loop. Not the training model (gpt2.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rtx/core/philox.hpp"
#include "rtx/kernels/matmul.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/models/gpt2.hpp"

namespace rtx::models {

// Shape letters (fixed for this file): T positions, Tm = block_size, C = n_embd, NH heads,
// HS = C/NH head size, L layers, V vocab.

/// Kernel parameters of the decoder's projections and row ops (defaults: the blocked matmul
/// with the active ISA's tiles).
struct DecoderParams {
  kernels::MatmulParams matmul{};
  kernels::OpParams elementwise{};
};

/// Incremental GPT-2 forward for one sequence with a KV cache, CPU, f32.
///
/// Parameters are read in place from `params`: gpt2_num_params(cfg) floats in the canonical
/// layout of gpt2.hpp (wte, wpe, per-layer tensors, ln_f; output head tied to wte). The decoder
/// does NOT copy them: the buffer must stay alive and unchanged while the decoder is used.
///
/// Cache: per layer K and V, each (NH, Tm, HS), so a head's keys are contiguous for the q.k dot
/// products. Activations are held for chunks of up to `chunk` positions (a longer prefill runs
/// chunk by chunk, giving the same logits), so memory is 2 L Tm C floats of cache plus
/// O(chunk C + V) floats whatever the prompt length.
///
/// Positions past block_size are an Error(Input): learned position embeddings exist only for
/// Tm rows (the caller stops or crops the context and calls reset()). A failed call leaves the
/// decoder as it was. Same params, thread count and ISA: bitwise-identical logits; with the
/// blocked matmul, step-by-step and one-prefill logits are identical too.
class Gpt2Decoder {
 public:
  /// Validates cfg (Error(Input)), throws Error(Input) when params is null or chunk < 1.
  Gpt2Decoder(const Gpt2Config& cfg, const float* params, const DecoderParams& kp = {}, int chunk = 64);
  Gpt2Decoder(const Gpt2Decoder&) = delete;
  Gpt2Decoder& operator=(const Gpt2Decoder&) = delete;

  /// Appends n positions ids (n) int32 in [0,V) at position() (batched matmuls with M = n) and
  /// returns the logits (V) of the last one; the reference is valid until the next call.
  /// Error(Input) when n < 1, ids is null, an id is out of range, or position()+n > block_size.
  const std::vector<float>& prefill(const int32_t* ids, int n);
  /// Appends one token (matmuls with M = 1) and returns its logits (V); same errors as prefill.
  const std::vector<float>& step(int32_t token);
  /// Forgets the sequence (position 0). The cache memory is kept.
  void reset();
  /// Positions held in the cache, in [0, block_size].
  int position() const { return pos_; }
  /// block_size: the most positions the cache holds.
  int capacity() const { return cfg_.block_size; }
  const Gpt2Config& config() const { return cfg_; }
  /// Bytes of the KV cache plus activations the decoder allocated (parameters excluded).
  size_t memory_bytes() const;

 private:
  void forward_chunk(const int32_t* ids, int n);
  void check_tokens(const int32_t* ids, int n, const char* fn) const;

  Gpt2Config cfg_;
  const float* params_;
  DecoderParams kp_;
  int chunk_;
  int pos_ = 0;
  std::vector<size_t> offsets_;  // layout offsets (floats), in gpt2_param_layout order
  std::vector<float> kcache_, vcache_;  // (L, NH, Tm, HS) each
  // Activations for one chunk of up to `chunk` positions.
  std::vector<float> x_, x2_;      // (chunk, C) residual stream, ping-pong
  std::vector<float> ln_;          // (chunk, C) layernorm output
  std::vector<float> mean_, rstd_; // (chunk)
  std::vector<float> qkv_;         // (chunk, 3C)
  std::vector<float> atty_;        // (chunk, C) attention output before c_proj
  std::vector<float> proj_;        // (chunk, C)
  std::vector<float> fch_, fcg_;   // (chunk, 4C) MLP hidden before / after GELU
  std::vector<float> scores_;      // (threads, Tm) attention scratch
  std::vector<float> logits_;      // (V)
};

/// Sampling settings. temperature 0 = greedy argmax (top_k, top_p and the seed unused);
/// top_k 0 = off; top_p 1 = off; the random stream is Philox(seed, subsequence 0).
struct SamplerConfig {
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  /// Draw only ids < vocab_limit (0 = all V): the rows a padded vocabulary adds beyond the
  /// tokenizer's tokens are never sampled (greedy argmax included). Error(Input) when < 0.
  int vocab_limit = 0;
  /// OpenAI's penalties (API reference, "frequency and presence penalties"): the logit of a
  /// token sampled c > 0 times so far in this sequence is lowered by c * frequency_penalty +
  /// presence_penalty. Each in [-2, 2] (Error(Input) otherwise); 0 = off. Prompt tokens do not
  /// count (as OpenAI and vLLM).
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  /// CTRL's repetition penalty (Keskar et al. 2019, eq. 2, as HF transformers and vLLM apply
  /// it): the logit x of every token in the prompt or sampled so far becomes x / r when x > 0,
  /// x * r otherwise. In (0, 10] (Error(Input) otherwise); 1 = off.
  float repetition_penalty = 1.0f;
  /// OpenAI's logit_bias: (token id, bias) pairs, each bias in [-100, 100] added to that
  /// token's logit before everything else. Ids must be >= 0 (Error(Input)); an id >= V is
  /// ignored at sample time (the caller checks ids against its vocabulary).
  std::vector<std::pair<int32_t, float>> logit_bias{};
  /// True when any of the four above changes the logits.
  bool adjusts_logits() const {
    return frequency_penalty != 0.0f || presence_penalty != 0.0f || repetition_penalty != 1.0f || !logit_bias.empty();
  }
};

/// Draws token ids from logits. The logits are first adjusted (when SamplerConfig asks): add
/// logit_bias, apply repetition_penalty, then subtract the frequency and presence penalties, in
/// float32 on a copy (the order of llama.cpp's and vLLM's samplers); greedy decoding takes the
/// argmax of the adjusted logits. Then the filters (as HF transformers' warpers): divide by the
/// temperature, keep the top_k largest logits (ties: lower id first), softmax in float64, keep
/// the nucleus (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"): the
/// smallest prefix of the tokens sorted by probability whose mass reaches top_p (at least one
/// token), renormalise, then pick with one uniform double u (two u32 of the stream): the first
/// token in candidate order whose cumulative probability exceeds u. Deterministic for a seed:
/// the n-th non-greedy sample uses stream elements 2n and 2n+1.
class Sampler {
 public:
  /// Error(Input) naming the field when temperature < 0 or not finite, top_k < 0, top_p
  /// outside (0, 1], a penalty or bias outside its range, or a logit_bias id < 0.
  explicit Sampler(const SamplerConfig& cfg);
  /// Starts a sequence: forgets the tokens sampled so far (the penalties' counts) and records
  /// the prompt's ids for repetition_penalty. The random stream is not reset. Ids < 0 are
  /// Error(Input).
  void begin_sequence(const int32_t* prompt, int n);
  void begin_sequence(const std::vector<int32_t>& prompt) {
    begin_sequence(prompt.data(), static_cast<int>(prompt.size()));
  }
  /// One token id in [0, V) from logits (V), counted for the penalties. Error(Input) when V < 1,
  /// logits is null, or a logit is NaN or infinite.
  int32_t sample(const float* logits, int V);
  int32_t sample(const std::vector<float>& logits) { return sample(logits.data(), static_cast<int>(logits.size())); }
  /// The distribution sample() would draw from now (V probabilities summing to 1, zero outside
  /// the kept set; penalties as of the tokens sampled so far); consumes no randomness and counts
  /// nothing. Same errors as sample().
  std::vector<double> distribution(const float* logits, int V) const;
  /// Times `id` was sampled since begin_sequence() (0 for an id never drawn).
  int sampled_count(int32_t id) const;
  const SamplerConfig& config() const { return cfg_; }
  /// Random u32 consumed so far.
  uint64_t draws() const { return rng_.offset(); }

 private:
  /// Kept token ids and their (unnormalised) weights, in draw order.
  void candidates(const float* logits, int V, std::vector<int32_t>& ids, std::vector<double>& w) const;
  /// sample() without counting the drawn id.
  int32_t draw(const float* logits, int V);
  /// `logits` itself when nothing adjusts them, else `out` (V floats) holding the adjusted copy.
  const float* adjusted(const float* logits, int V, std::vector<float>& out) const;

  SamplerConfig cfg_;
  Philox rng_;
  std::vector<int32_t> ids_;  // scratch of sample()
  std::vector<double> w_;
  std::vector<float> adj_;    // adjusted logits (scratch of sample())
  /// Per-sequence history for the penalties: times each id was sampled, and the prompt's
  /// distinct ids (sorted).
  std::unordered_map<int32_t, int> counts_;
  std::vector<int32_t> prompt_ids_;
};

/// Index of the largest logit (the lowest id among ties). Error(Input) when V < 1 or logits null.
int32_t argmax(const float* logits, int V);

/// Why generate() stopped.
enum class StopReason { MaxTokens, StopToken, ContextFull, Callback };
/// "max_tokens", "stop_token", "context_full", "callback".
const char* stop_reason_name(StopReason r);

/// What generate() did. Seconds are wall-clock (steady_clock).
struct GenerateResult {
  std::vector<int32_t> tokens;  ///< generated ids (the stop token excluded), in order
  StopReason stop = StopReason::MaxTokens;
  int prompt_tokens = 0;
  int decode_steps = 0;  ///< step() calls (one forward of one position each)
  double prefill_s = 0;  ///< prompt prefill and the first sample
  double decode_s = 0;   ///< every later step and sample, callbacks included
  /// Decode throughput: decode_steps / decode_s in tokens/s (0 when no step ran).
  double decode_tokens_per_s() const;
};

/// Called with each generated token id as soon as it is sampled; return false to stop.
using TokenCallback = std::function<bool(int32_t token)>;

/// What generate() drives: a sequence that is reset and prefilled, then fed one token at a time,
/// each call returning the next-token logits (vocab() floats, valid until the next call).
class LogitsSource {
 public:
  virtual ~LogitsSource() = default;
  /// Forgets the sequence, then appends `n` ids at position 0.
  virtual const float* reset_and_prefill(const int32_t* ids, int n) = 0;
  /// Appends one token at position().
  virtual const float* step(int32_t token) = 0;
  virtual int position() const = 0;
  virtual int capacity() const = 0;
  virtual int vocab() const = 0;
};

/// generate() over any LogitsSource (the Gpt2Decoder overload below, rtx-serve's models through
/// serve::SequenceRunner): same contract and errors as that overload, with src.capacity() as
/// the context.
GenerateResult generate(LogitsSource& src, const std::vector<int32_t>& prompt, int max_new_tokens, Sampler& sampler,
                        int32_t stop_token = -1, const TokenCallback& on_token = {});

/// Resets `dec`, prefills `prompt` (n >= 1 ids), then samples up to max_new_tokens ids, feeding
/// each back with step(). Stops on: max_new_tokens reached; stop_token sampled (not emitted;
/// stop_token < 0 = none); the cache full (position() == block_size, so the next step would not
/// fit); or the callback returning false (that token is emitted). The callback may be empty.
/// Error(Input) when the prompt is empty, longer than block_size or has an id out of range, or
/// max_new_tokens < 0. max_new_tokens 0 only prefills. The sampler's penalty history goes on
/// from earlier calls: call sampler.begin_sequence(prompt) first for a new sequence.
GenerateResult generate(Gpt2Decoder& dec, const std::vector<int32_t>& prompt, int max_new_tokens,
                        Sampler& sampler, int32_t stop_token = -1, const TokenCallback& on_token = {});

}  // namespace rtx::models
