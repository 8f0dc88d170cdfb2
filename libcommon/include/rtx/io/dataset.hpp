// Token datasets in nanoGPT's layout: DIR/train.bin and DIR/val.bin (raw little-endian
// uint16 token ids, no header) plus DIR/meta.json (schema rtx.dataset.v1), and the batch
// sampler rtx-train reads them with.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "rtx/io/tokenizer.hpp"

namespace rtx::io {

/// What prepare_dataset produced.
struct PrepareResult {
  int64_t train_tokens = 0, val_tokens = 0;
  int vocab_size = 0;
};

/// Tokenize the UTF-8 file `input` with `tokenizer_kind` ("char", or "gpt2" using the files in
/// `gpt2_dir`) and write `out_dir`/{train.bin,val.bin,meta.json}; the first 90% of the
/// *characters* (char; nanoGPT's shakespeare_char/prepare.py) or of the text (gpt2;
/// shakespeare/prepare.py) go to train, the rest to val. Each file written atomically;
/// out_dir is created if missing. meta.json: {"schema":"rtx.dataset.v1","tokenizer":
/// Tokenizer::to_json(),"vocab_size":..,"train_tokens":..,"val_tokens":..,"dtype":"uint16",
/// "source":{"path":..,"bytes":..,"sha256":..}}. Throws Error(Input) for a missing/empty
/// input or vocab > 65536, Error(Environment) for write errors.
PrepareResult prepare_dataset(const std::string& input, const std::string& tokenizer_kind,
                              const std::string& gpt2_dir, const std::string& out_dir);

/// Offset of batch row `row`: uniform in [0, range), unbiased (Lemire, "Fast random integer
/// generation in an interval", ACM TOMACS 2019). Word j of the row's stream is
/// philox_u32(seed, subseq, (j << 32) | row). range <= 2^32: x = word 0, 1, ... (one per try),
/// m = x * range (64-bit), accept when low32(m) >= (2^32 - range) mod range, result high32(m).
/// range > 2^32: x = word(2k) << 32 | word(2k+1), m = x * range (128-bit), accept when
/// low64(m) >= (2^64 - range) mod range, result high64(m). Throws Error(Usage) for range 0 or
/// row >= 2^32.
uint64_t sample_offset(uint64_t seed, uint64_t subseq, uint64_t row, uint64_t range);

/// An opened dataset directory: both splits memory-mapped, the tokenizer rebuilt from meta.json.
class Dataset {
 public:
  /// Opens DIR; Error(Input) naming the file when meta.json is missing/invalid, a .bin size is
  /// odd or disagrees with meta.json, or a token id >= vocab_size (checked once at open).
  explicit Dataset(const std::string& dir);
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const Tokenizer& tokenizer() const;
  int vocab_size() const;
  int64_t tokens(bool val) const;
  const nlohmann::json& meta() const;
  /// Random batch as nanoGPT's get_batch: B offsets i_b uniform in [0, n - T - 1] (n = tokens of
  /// the split), ids[b,t] = tok[i_b + t], targets[b,t] = tok[i_b + t + 1]. Offsets drawn from
  /// rtx::philox_u32(seed, subseq, b) reduced without modulo bias (Lemire's method on 32 bits
  /// extended to the 64-bit range when needed): i_b = sample_offset(seed, subseq, b, n - T);
  /// stateless, so a (seed, subseq) pair gives the same batch on every run (subseq = the
  /// caller's batch counter). ids and targets: (B,T) row-major int32, caller-allocated.
  /// Throws Error(Input) when the split has fewer than T + 1 tokens, Error(Usage) for B < 1,
  /// T < 1 or null pointers.
  void sample_batch(bool val, int B, int T, uint64_t seed, uint64_t subseq, int32_t* ids, int32_t* targets) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rtx::io
