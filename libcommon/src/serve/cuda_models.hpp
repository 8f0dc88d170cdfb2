// Internal: the factories of the CUDA serving models (cuda/gpt2_serve_cuda.cu,
// cuda/llama_serve_cuda.cu), called by make_gpt2_model and load_llama_gguf when
// LoadOptions::cuda_device >= 0. Without the CUDA toolkit the fallbacks in gpt2_serve.cpp and
// models/llama.cpp throw Error(Environment).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "rtx/io/tokenizer.hpp"
#include "rtx/models/gpt2.hpp"
#include "rtx/serve/llama.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve::detail {

/// The largest head size the CUDA attention takes (8 values per lane of a warp).
constexpr int kCudaMaxHeadDim = 256;

/// Checks, before any loading, that a CUDA model can be made: Error(Input) when `head_dim` is
/// above kCudaMaxHeadDim, Error(Environment) naming --device when rtx was built without CUDA,
/// no device is usable, or `device` does not exist. `what` names the model in messages.
void require_cuda_model(int device, int head_dim, const std::string& what, const std::string& path);

/// GPT-2 on CUDA device `device`: `params` (gpt2_num_params(cfg) f32 in gpt2.hpp's canonical
/// layout) are copied to the device once; forward() runs every matrix in f32 with a
/// batch-invariant GEMM (one warp per output column, each row's dot in a fixed order), paged
/// attention over a device copy of the KV pool attached to the KvCache, and returns the wanted
/// logits to the host. `info` carries name/path; the geometry fields are filled here. The
/// caller (make_gpt2_model) has checked cfg, the parameter count and the tokenizer.
/// The caller has run require_cuda_model (device and head size).
std::unique_ptr<Model> make_gpt2_cuda_model(const models::Gpt2Config& cfg, const std::vector<float>& params,
                                            std::unique_ptr<io::Tokenizer> tok, ModelInfo info, int device);

/// A Llama's weights as f32 on the host, matrices (N, K) row-major (out, in), the fused
/// projections stacked as the CPU model stacks them: what the CUDA model uploads.
struct LlamaHostWeights {
  serve::LlamaConfig cfg;
  std::vector<float> emb;  ///< (V, C)
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;  ///< (C)
    std::vector<float> wqkv;                 ///< (C + 2 NKV HS, C): Wq | Wk | Wv
    std::vector<float> wo;                   ///< (C, C)
    std::vector<float> wgu;                  ///< (2F, C): Wgate | Wup
    std::vector<float> wdown;                ///< (C, F)
  };
  std::vector<Layer> layers;
  std::vector<float> out_norm;  ///< (C)
  std::vector<float> wout;      ///< (V, C): output.weight; empty when the head is tied to emb
  std::vector<double> inv_freq; ///< (n_rot / 2): theta^(-2i / n_rot), RoPE's frequencies
};

/// Llama on CUDA device `device`: the CPU model's forward (models/llama.cpp: RMSNorm, RoPE in
/// llama.cpp's normal mode, grouped-query attention over the paged KV cache, SwiGLU) with every
/// matrix in f32 and the same batch-invariant kernels as the GPT-2 model. `info` is complete but
/// for `device`, `weights` and `param_bytes`, filled here. The caller has run
/// require_cuda_model (device and head size).
std::unique_ptr<Model> make_llama_cuda_model(const LlamaHostWeights& w, std::unique_ptr<io::Tokenizer> tok,
                                             ModelInfo info, int device);

}  // namespace rtx::serve::detail
