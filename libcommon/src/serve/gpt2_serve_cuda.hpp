// Internal: the CUDA GPT-2 serving model's factory (gpt2_serve_cuda.cu), called by
// make_gpt2_model when LoadOptions::cuda_device >= 0. Without the CUDA toolkit the fallback in
// gpt2_serve.cpp throws Error(Environment).
#pragma once
#include <memory>
#include <vector>

#include "rtx/io/tokenizer.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve::detail {

/// GPT-2 on CUDA device `device`: `params` (gpt2_num_params(cfg) f32 in gpt2.hpp's canonical
/// layout) are copied to the device once; forward() runs every matrix in f32 with a
/// batch-invariant GEMM (one warp per output column, each row's dot in a fixed order), paged
/// attention over a device copy of the KV pool attached to the KvCache, and returns the wanted
/// logits to the host. `info` carries name/path; the geometry fields are filled here. The
/// caller (make_gpt2_model) has checked cfg, the parameter count and the tokenizer.
/// Error(Environment) when the device does not exist; Error(Input) for a head size above 256.
std::unique_ptr<Model> make_gpt2_cuda_model(const models::Gpt2Config& cfg, const std::vector<float>& params,
                                            std::unique_ptr<io::Tokenizer> tok, ModelInfo info, int device);

}  // namespace rtx::serve::detail
