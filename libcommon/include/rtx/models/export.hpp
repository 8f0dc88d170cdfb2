// Export of a GPT-2 model to GGUF (architecture "gpt2") in the form llama.cpp's gpt2 loader
// reads (src/models/gpt2.cpp) and convert_hf_to_gguf.py's GPT2Model writes.
#pragma once
#include <cstddef>
#include <string>

#include "rtx/io/tokenizer.hpp"
#include "rtx/models/gpt2.hpp"

namespace rtx::models {

/// Options of export_gpt2_gguf.
struct GgufExportOptions {
  /// Store the 2-D matrices (embeddings and Linear weights) as F16 (general.file_type 1,
  /// MOSTLY_F16; round-to-nearest-even); 1-D tensors (biases, LayerNorm) stay F32 as in
  /// llama.cpp's converter. false: everything F32 (general.file_type 0, ALL_F32).
  bool f16 = false;
  /// general.name.
  std::string name = "rtx-gpt2";
};

/// GGUF tensor name of a layout tensor: "wte" -> "token_embd.weight", "wpe" ->
/// "position_embd.weight", "h.L.ln_1.*" -> "blk.L.attn_norm.*", "h.L.attn.c_attn.*" ->
/// "blk.L.attn_qkv.*", "h.L.attn.c_proj.*" -> "blk.L.attn_output.*", "h.L.ln_2.*" ->
/// "blk.L.ffn_norm.*", "h.L.mlp.c_fc.*" -> "blk.L.ffn_up.*", "h.L.mlp.c_proj.*" ->
/// "blk.L.ffn_down.*", "ln_f.*" -> "output_norm.*". Error(Usage) for any other name.
std::string gpt2_gguf_tensor_name(const std::string& layout_name);

/// GPT-2's bytes_to_unicode (openai/gpt-2 src/encoder.py): the printable code point standing
/// for byte `b` in byte-level BPE vocabularies, as UTF-8 (e.g. ' ' -> "Ġ", '\n' -> "Ċ").
std::string gpt2_byte_to_unicode(unsigned char b);

/// Write `params` (host f32, `n_params` == gpt2_num_params(cfg) floats in gpt2_param_layout
/// order) and `tok` to `path` as a GGUF v3 file of architecture "gpt2", atomically.
///
/// Tensors: each layout tensor under gpt2_gguf_tensor_name(), with ggml extents the reverse of
/// our row-major shape (an (out,in) weight is ne = [in, out]; no transposes: our Linear weights
/// are already (out,in), unlike HF's Conv1D). No output.weight: llama.cpp ties it to
/// token_embd.weight when absent. Metadata: general.architecture "gpt2", general.name,
/// general.file_type; gpt2.context_length (block_size), embedding_length, feed_forward_length
/// (4C), block_count, attention.head_count (u32), attention.layer_norm_epsilon (f32 1e-5);
/// tokenizer.ggml.token_type (1 normal, 3 control for the end-of-text token, 5 unused for
/// padding), .bos/.eos_token_id (the end-of-text id when the tokenizer has one), .add_bos_token
/// false, and by tokenizer:
/// - with merges (GPT-2 BPE): .model "gpt2", .pre "gpt-2", .merges ("a b"), .tokens (each token's
///   bytes mapped through bytes_to_unicode); padding rows "[PAD<id>]".
/// - without merges (the char tokenizer): .model "rwkv" (llama.cpp's greedy longest match over
///   token bytes, exact for one-character tokens), .tokens (bytes escaped as llama.cpp's
///   llama_unescape_rwkv_token reads them: \\, \n, \t, \r, \xNN for other control bytes);
///   padding rows "\xff[PAD<id>]" (byte 0xFF: no UTF-8 text matches them). Not "gpt2": llama.cpp's
///   BPE defaults BOS/EOS to id 11 when the file names none, so a real character would end
///   generation. Needs llama.cpp with the rwkv vocabulary (2024-09 or later).
/// When cfg.vocab_size exceeds the tokenizer's (a padded vocabulary), padding rows fill the rest.
///
/// Errors: Error(Usage) when n_params does not match the config or cfg.vocab_size is smaller
/// than tok.vocab_size(); Error(Input) for an invalid config, repeated token text, or a tokenizer
/// with merges but no end-of-text token; Error(Environment) on I/O failure
/// (the target is then untouched).
void export_gpt2_gguf(const Gpt2Config& cfg, const float* params, size_t n_params, const io::Tokenizer& tok,
                      const std::string& path, const GgufExportOptions& opt = {});

}  // namespace rtx::models
