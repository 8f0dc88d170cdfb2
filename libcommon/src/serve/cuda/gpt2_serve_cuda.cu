// GPT-2 serving model on CUDA (cuda_models.hpp): the CPU model's batched forward over a paged
// KV cache (gpt2_serve.cpp), with the weights, activations and KV pool on one device. The
// kernels and the batch-invariance argument are in serve_cuda_common.cuh; layernorm, GELU and
// the residual are the training ops (rtx/kernels/cuda_ops.hpp), which work per row.
#include <cuda_runtime.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "rtx/kernels/cuda_ops.hpp"
#include "serve/cuda/serve_cuda_common.cuh"
#include "serve/cuda_models.hpp"

namespace rtx::serve::detail {

namespace {

namespace ck = rtx::kernels::cuda;
using models::Gpt2Config;

class Gpt2ServeCuda final : public Model {
 public:
  Gpt2ServeCuda(const Gpt2Config& cfg, const std::vector<float>& params, std::unique_ptr<io::Tokenizer> tok,
                ModelInfo info, int device)
      : cfg_(cfg), tok_(std::move(tok)), info_(std::move(info)), eng_(device) {
    // cfg, params, tok, the head size and the device were checked by make_gpt2_model.
    const int HS = cfg_.n_embd / cfg_.n_head;
    params_.reserve(params.size() * sizeof(float));
    eng_.upload(params_.as<float>(), params.data(), params.size());
    std::map<std::string, size_t> off;
    for (const auto& t : models::gpt2_param_layout(cfg_)) off[t.name] = t.offset;
    const auto at = [&](const std::string& name) { return params_.as<float>() + off.at(name); };
    wte_ = at("wte");
    wpe_ = at("wpe");
    lnfw_ = at("ln_f.weight");
    lnfb_ = at("ln_f.bias");
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      layers_.push_back({at(h + "ln_1.weight"), at(h + "ln_1.bias"), at(h + "attn.c_attn.weight"),
                         at(h + "attn.c_attn.bias"), at(h + "attn.c_proj.weight"), at(h + "attn.c_proj.bias"),
                         at(h + "ln_2.weight"), at(h + "ln_2.bias"), at(h + "mlp.c_fc.weight"),
                         at(h + "mlp.c_fc.bias"), at(h + "mlp.c_proj.weight"), at(h + "mlp.c_proj.bias")});
    }
    info_.arch = "gpt2";
    info_.vocab = cfg_.vocab_size;
    info_.context = cfg_.block_size;
    info_.n_layer = cfg_.n_layer;
    info_.n_kv_head = cfg_.n_head;
    info_.head_dim = HS;
    info_.bos = -1;
    info_.eos = tok_->eot_id();
    info_.param_bytes = params.size() * sizeof(float);
    info_.weights = "f32";
    info_.device = eng_.name();
  }

  const ModelInfo& info() const override { return info_; }
  const io::Tokenizer& tokenizer() const override { return *tok_; }

  void attach(KvCache& kv) override {
    eng_.use();
    eng_.pool(kv);
  }

  void forward(const std::vector<SeqBatch>& batch, KvCache& kv, float* logits) override {
    const int R = check_forward(batch, kv, info_, logits, "GPT-2 CUDA forward");
    if (R == 0) return;  // an empty batch
    const int C = cfg_.n_embd, NH = cfg_.n_head, V = cfg_.vocab_size, L = cfg_.n_layer;
    eng_.use();
    float* kvp = eng_.pool(kv);
    meta_.build(batch, kv, eng_);
    const int W = meta_.W;
    const size_t rc = static_cast<size_t>(R) * C;
    x_.reserve(rc * sizeof(float));
    ln_.reserve(rc * sizeof(float));
    att_.reserve(rc * sizeof(float));
    proj_.reserve(rc * sizeof(float));
    qkv_.reserve(3 * rc * sizeof(float));
    fc_.reserve(4 * rc * sizeof(float));
    fcg_.reserve(4 * rc * sizeof(float));
    stats_.reserve(2 * static_cast<size_t>(R) * sizeof(float));
    if (W > 0) logits_.reserve(static_cast<size_t>(W) * V * sizeof(float));
    cudaStream_t st = eng_.stream();
    float* x = x_.as<float>();
    float* ln = ln_.as<float>();
    float* att = att_.as<float>();
    float* proj = proj_.as<float>();
    float* qkv = qkv_.as<float>();
    float* fc = fc_.as<float>();
    float* fcg = fcg_.as<float>();
    float* mean = stats_.as<float>();
    float* rstd = mean + R;

    RTX_NOTE_LAUNCH(embed_kernel, elem_blocks(static_cast<int64_t>(rc)), 256, 0);
    embed_kernel<<<elem_blocks(static_cast<int64_t>(rc)), 256, 0, st>>>(x, meta_.ids, meta_.pos, wte_, wpe_, R, C);
    RTX_CUDA_CHECK_LAUNCH();
    for (int l = 0; l < L; ++l) {
      const Layer& w = layers_[l];
      ck::layernorm_forward(ln, mean, rstd, x, w.ln1w, w.ln1b, R, C, st);
      eng_.gemm(qkv, ln, w.qkvw, w.qkvb, R, 3 * C, C);
      kv_store(eng_, kvp, qkv, meta_, C, 3 * C, C, 2 * C, l, kv);
      attention(eng_, att, C, qkv, 3 * C, kvp, meta_, NH, l, kv);
      eng_.gemm(proj, att, w.projw, w.projb, R, C, C);
      ck::residual_forward(x, x, proj, static_cast<int64_t>(rc), st);
      ck::layernorm_forward(ln, mean, rstd, x, w.ln2w, w.ln2b, R, C, st);
      eng_.gemm(fc, ln, w.fcw, w.fcb, R, 4 * C, C);
      ck::gelu_forward(fcg, fc, 4 * static_cast<int64_t>(rc), st);
      eng_.gemm(proj, fcg, w.fcprojw, w.fcprojb, R, C, 4 * C);
      ck::residual_forward(x, x, proj, static_cast<int64_t>(rc), st);
    }
    if (W > 0) {
      // Final norm and the tied head, only for the rows whose logits are wanted.
      gather_wanted(eng_, ln, x, meta_, C);
      ck::layernorm_forward(proj, mean, rstd, ln, lnfw_, lnfb_, W, C, st);
      eng_.gemm(logits_.as<float>(), proj, wte_, nullptr, W, V, C);
      RTX_CUDA_CHECK(cudaMemcpyAsync(logits, logits_.p, static_cast<size_t>(W) * V * sizeof(float),
                                     cudaMemcpyDeviceToHost, st));
    }
    eng_.sync();
  }

 private:
  /// Device pointers of one layer's parameters.
  struct Layer {
    const float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  };

  Gpt2Config cfg_;
  std::unique_ptr<io::Tokenizer> tok_;
  ModelInfo info_;
  Engine eng_;  // declared before the buffers: destroyed after them
  DeviceBuffer params_;
  const float *wte_ = nullptr, *wpe_ = nullptr, *lnfw_ = nullptr, *lnfb_ = nullptr;
  std::vector<Layer> layers_;
  // Scratch for one forward, grown to the largest batch seen.
  BatchMeta meta_;
  DeviceBuffer x_, ln_, att_, proj_, qkv_, fc_, fcg_, stats_, logits_;
};

}  // namespace

std::unique_ptr<Model> make_gpt2_cuda_model(const models::Gpt2Config& cfg, const std::vector<float>& params,
                                            std::unique_ptr<io::Tokenizer> tok, ModelInfo info, int device) {
  return std::make_unique<Gpt2ServeCuda>(cfg, params, std::move(tok), std::move(info), device);
}

}  // namespace rtx::serve::detail
