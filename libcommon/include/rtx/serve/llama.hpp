// Llama for rtx-serve: GGUF loading (architecture "llama", f32/f16 weights), llama.cpp's
// SentencePiece (SPM) tokenizer, and a batched forward over a paged KV cache (serve::Model).
// CPU only, inference only; no quantized types, no training.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/io/gguf.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve {

/// Hyperparameters of a Llama model (Touvron et al. 2023), as llama.cpp names them in GGUF
/// metadata (`llama.*` keys). C = dim, NH = n_head, NKV = n_kv_head, HS = C / NH, F = ffn_dim.
struct LlamaConfig {
  int n_layer = 0;           ///< llama.block_count
  int dim = 0;               ///< C, llama.embedding_length
  int n_head = 0;            ///< NH, llama.attention.head_count
  int n_kv_head = 0;         ///< NKV, llama.attention.head_count_kv (default NH); NH % NKV == 0
  int ffn_dim = 0;           ///< F, llama.feed_forward_length
  int vocab = 0;             ///< V, rows of token_embd.weight
  int context = 0;           ///< llama.context_length
  float rms_eps = 1e-5f;     ///< llama.attention.layer_norm_rms_epsilon
  float rope_theta = 10000;  ///< llama.rope.freq_base
  int n_rot = 0;             ///< llama.rope.dimension_count (default HS): rotated dims per head, even, <= HS
  int head_dim() const { return n_head > 0 ? dim / n_head : 0; }
  /// Error(Input) naming the field when a size is < 1 or the sizes do not fit together
  /// (C % NH, NH % NKV, n_rot even and <= HS, eps and theta > 0).
  void validate(const std::string& where = {}) const;
};

/// The `llama.*` hyperparameters of `f` (vocab from token_embd.weight). Error(Input) naming the
/// key and file when a required key is absent or of the wrong type, or validate() fails.
LlamaConfig llama_config_from_gguf(const io::GgufFile& f);

/// A SentencePiece vocabulary as llama.cpp stores it (`tokenizer.ggml.*`).
/// types: llama.cpp's token types 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte.
struct LlamaVocab {
  std::vector<std::string> tokens;  ///< pieces, U+2581 for a space
  std::vector<float> scores;        ///< merge priority (higher merges first); same size as tokens
  std::vector<int32_t> types;       ///< same size as tokens
  int32_t bos = -1, eos = -1, unk = -1;  ///< -1 = none
  bool add_bos = true;               ///< tokenizer.ggml.add_bos_token (llama.cpp's SPM default: true)
  bool add_space_prefix = true;      ///< tokenizer.ggml.add_space_prefix (default: true)
};

/// The vocabulary of `f` (tokenizer.ggml.model must be "llama"). Absent ids take llama.cpp's SPM
/// defaults (unk 0, bos 1, eos 2); absent scores 0, absent types normal. Error(Input) naming the
/// key and file when a required key is absent or of the wrong type.
LlamaVocab llama_vocab_from_gguf(const io::GgufFile& f);

/// llama.cpp's SPM tokenizer (llm_tokenizer_spm) over `v`. encode(): empty text -> no ids;
/// otherwise a space is prepended (add_space_prefix), spaces become U+2581, the text is split
/// into characters, and the adjacent pair whose concatenation is a piece with the highest score
/// is merged (leftmost on ties) until none is; a character that is no piece becomes the pieces
/// `<0xXX>` of its UTF-8 bytes (or `unk` when the vocabulary has no byte pieces; Error(Input)
/// naming the character when it has neither). No BOS is added (ModelInfo::bos says which one the
/// server prepends). Special pieces in the text are encoded as plain text. token_bytes(): U+2581
/// -> ' ', `<0xXX>` byte pieces -> that byte, control/unknown/unused -> "". decode() is the
/// concatenation of token_bytes() (so it keeps the prefix space: decode(encode("Hi")) == " Hi").
/// kind() "llama"; eot_id() = eos. Error(Input) naming `where` for inconsistent tables (sizes,
/// a type outside 1..6, a bos/eos/unk id out of range, a byte piece not named <0xXX>).
std::unique_ptr<io::Tokenizer> make_llama_tokenizer(LlamaVocab v, const std::string& where = {});
/// Same, from the GGUF metadata of `f`.
std::unique_ptr<io::Tokenizer> make_llama_tokenizer(const io::GgufFile& f);
/// Rebuilds a tokenizer from its to_json() document: {"kind":"llama","tokens":[...],
/// "scores":[...],"types":[...],"bos":..,"eos":..,"unk":..,"add_bos":..,"add_space_prefix":..}
/// ("unk", "add_bos", "add_space_prefix" optional). Error(Input) naming the field otherwise.
std::unique_ptr<io::Tokenizer> llama_tokenizer_from_json(const nlohmann::json& j, const std::string& where = {});

/// Loads a Llama GGUF (v1-v3, general.architecture "llama") for serving. Tensors:
/// token_embd.weight (V,C); per layer N blk.N.{attn_norm (C), attn_q (C,C), attn_k (NKV*HS,C),
/// attn_v (NKV*HS,C), attn_output (C,C), ffn_norm (C), ffn_gate (F,C), ffn_up (F,C),
/// ffn_down (C,F)}.weight; output_norm.weight (C); output.weight (V,C), absent = tied to
/// token_embd. Shapes are (rows, cols) row-major, i.e. GGUF ne = {cols, rows}. F32, F16 and BF16
/// tensors (converted to f32 at load); projections packed once (kernels::PackedMatmulWeight).
/// Error(Input) naming the file and the tensor for a missing tensor, a wrong shape or another
/// type, and naming the key for bad metadata.
///
/// forward(): per layer, for all rows of all sequences at once: RMSNorm (Zhang & Sennrich 2019),
/// the fused Q|K|V projection, RoPE (Su et al. 2021) in llama.cpp's "normal" mode (dims (2i, 2i+1)
/// rotated by pos * theta^(-2i/n_rot)), K and V written into the paged cache, causal attention
/// per (row, head) over keys 0..pos in a fixed order (two passes: max, then exp-sum and weighted
/// V sum), the output projection, RMSNorm, SwiGLU (Shazeer 2020: silu(gate) * up), the down
/// projection. Every reduction is per row or per (row, head) in an order fixed by the sequence,
/// so a sequence's logits are bitwise identical however it is batched or split across calls.
std::unique_ptr<serve::Model> load_llama_gguf(const std::string& path, const serve::LoadOptions& opt = {});

}  // namespace rtx::serve
