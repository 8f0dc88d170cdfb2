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
/// `q8` maps parameter names of the four per-layer matrices and "wte" (the tied head) to raw
/// Q8_0 blocks (rows of the (out, in) matrix, K/32 blocks of 34 bytes each); those matrices are
/// held as Q8_0 (kernels::PackedMatmulWeight::q8_0), the rest packed f32 from `params`.
std::unique_ptr<Model> make_gpt2_model(const models::Gpt2Config& cfg, std::vector<float> params,
                                       std::unique_ptr<io::Tokenizer> tok, ModelInfo base, const LoadOptions& opt = {},
                                       const std::map<std::string, std::vector<uint8_t>>& q8 = {});

/// GPT-2 from an opened GGUF (general.architecture "gpt2"): gpt2.* hyperparameters, the
/// tensors of export.hpp's naming (F32, F16, BF16 or a quantized type ggml_dequantize reads;
/// Q8_0 matrices stay Q8_0 unless opt.keep_q8_0 is false; output.weight, if present, must equal
/// token_embd.weight since this model ties them), and the tokenizer from tokenizer.ggml.*
/// ("gpt2": tokens + merges; "rwkv": one-character tokens as rtx-train's char vocabulary).
/// Error(Input) naming the file and the key or tensor at fault.
std::unique_ptr<Model> load_gpt2_gguf(const io::GgufFile& f, const LoadOptions& opt = {});

/// GPT-2 from an rtx checkpoint (rtx.checkpoint.v1, with its tokenizer). Error(Input) when the
/// file is not a valid checkpoint or holds no tokenizer.
std::unique_ptr<Model> load_gpt2_checkpoint(const std::string& path, const LoadOptions& opt = {});

}  // namespace rtx::serve
