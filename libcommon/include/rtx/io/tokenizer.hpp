// Tokenizers for rtx-train and rtx-serve: character-level (nanoGPT's shakespeare_char) and
// GPT-2's byte-level BPE (Radford et al. 2019; OpenAI's encoder.json + vocab.bpe).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace rtx::io {

/// Text <-> token ids. Implementations are immutable after construction: every method is safe
/// to call from several threads at once (the GPT-2 word cache is guarded internally).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// "char" or "gpt2".
  virtual std::string kind() const = 0;
  virtual int vocab_size() const = 0;
  /// Token ids of UTF-8 `text`. Throws Error(Input) naming the character and its byte offset
  /// when the text holds something the vocabulary cannot represent (char tokenizer), or
  /// invalid UTF-8 where the tokenizer needs code points.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  /// The bytes of the ids, concatenated (may be a partial UTF-8 sequence for BPE pieces).
  /// Throws Error(Input) for an id outside [0, vocab_size).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// The raw bytes of one token (what decode({id}) gives).
  virtual std::string token_bytes(int32_t id) const = 0;
  /// True when encode() puts a space before the text (SentencePiece's add_space_prefix), so
  /// that a decoder drops it again at the start of a sequence.
  virtual bool adds_space_prefix() const { return false; }
  /// End-of-text id (GPT-2: 50256 "<|endoftext|>"), or -1 when the vocabulary has none.
  virtual int32_t eot_id() const = 0;
  /// Everything needed to rebuild this tokenizer without the source files (stored in
  /// meta.json and in checkpoints' __metadata__): {"kind":"char","chars":[...code points as
  /// UTF-8 strings...]} or {"kind":"gpt2","encoder":{...},"merges":[...]} (full tables).
  virtual nlohmann::json to_json() const = 0;
};

/// nanoGPT's char tokenizer: the vocabulary is the sorted set of distinct Unicode code points
/// of `text` (sorted by code point, as Python's sorted(set(data))). Throws Error(Input) on
/// invalid UTF-8 (naming the byte offset) or empty text.
std::unique_ptr<Tokenizer> make_char_tokenizer_from_text(std::string_view text);

/// GPT-2 BPE from `dir`/encoder.json and `dir`/vocab.bpe (OpenAI's files). Encoding: the
/// GPT-2 pre-tokenizer regex ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
/// \s+(?!\S)|\s+), bytes mapped through bytes_to_unicode, then BPE merges by rank.
/// \p{L} = general categories Lu Ll Lt Lm Lo, \p{N} = Nd Nl No, \s = Unicode White_Space (as
/// Python's `regex` module and tiktoken); classes come from ICU. Invalid UTF-8 input is an
/// Error(Input) naming the byte offset. "<|endoftext|>" in the text is encoded as ordinary text
/// (as tiktoken's encode_ordinary). Throws Error(Input) naming the file (and line/key) when a
/// file is missing or malformed (not a bytes_to_unicode key, ids not 0..N-1, a merge whose parts
/// or result are not in the encoder).
std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& dir);

/// Rebuild a tokenizer from Tokenizer::to_json() output. Error(Input) on a bad document.
std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j, const std::string& where = {});

}  // namespace rtx::io
