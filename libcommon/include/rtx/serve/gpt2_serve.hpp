// GPT-2 as a serving model (rtx/serve/model.hpp): weights packed once for the blocked matmul,
// batched forward over the paged KV cache. Loaded from a GGUF of architecture "gpt2" (as
// `rtx-train export` and llama.cpp's convert_hf_to_gguf.py write it) or an rtx checkpoint.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rtx/io/gguf.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve {

/// A GPT-2 serving model over `params` (gpt2_num_params(cfg) floats in gpt2.hpp's canonical
/// layout; the model keeps them) and `tok`. `base` supplies name/path (the geometry fields are
/// filled here); eos = the tokenizer's end-of-text id, bos = none (GPT-2 prompts are used as
/// given). Error(Input) on a bad config or a parameter count that does not match it.
/// A matrix as a GGUF stores it: ggml type (8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K) and the rows
/// of the (out, in) matrix in that type's blocks.
struct QuantizedMatrix {
  uint32_t ggml_type = 8;
  std::vector<uint8_t> blocks;
};

/// `quantized` maps parameter names of the four per-layer matrices and "wte" (the tied head)
/// to their GGUF blocks; those matrices are held quantized (kernels::PackedMatmulWeight::q8_0
/// or kquant), the rest packed f32 from `params`.
std::unique_ptr<Model> make_gpt2_model(const models::Gpt2Config& cfg, std::vector<float> params,
                                       std::unique_ptr<io::Tokenizer> tok, ModelInfo base, const LoadOptions& opt = {},
                                       const std::map<std::string, QuantizedMatrix>& quantized = {});

/// GPT-2 from an opened GGUF (general.architecture "gpt2"): gpt2.* hyperparameters, the
/// tensors of export.hpp's naming (F32, F16, BF16 or a quantized type ggml_dequantize reads;
/// Q8_0, Q4_K, Q5_K and Q6_K matrices stay quantized unless opt.keep_quantized is false; output.weight, if present, must equal
/// token_embd.weight since this model ties them), and the tokenizer from tokenizer.ggml.*
/// ("gpt2": tokens + merges; "rwkv": one-character tokens as rtx-train's char vocabulary).
/// Error(Input) naming the file and the key or tensor at fault.
std::unique_ptr<Model> load_gpt2_gguf(const io::GgufFile& f, const LoadOptions& opt = {});

/// GPT-2 from an rtx checkpoint (rtx.checkpoint.v1, with its tokenizer). Error(Input) when the
/// file is not a valid checkpoint or holds no tokenizer.
std::unique_ptr<Model> load_gpt2_checkpoint(const std::string& path, const LoadOptions& opt = {});

}  // namespace rtx::serve
