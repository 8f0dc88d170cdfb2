// Llama serving model on CUDA (cuda_models.hpp): the CPU model's batched forward (models/llama.cpp)
// with the weights, activations and KV pool on one device. The shared kernels and the
// batch-invariance argument are in serve_cuda_common.cuh; RMSNorm, RoPE and SwiGLU below work per
// row or per element.
//
// Shape letters: R rows, C dim, NH query heads, NKV key/value heads, HS head size, F ffn dim,
// V vocab, QKV = C + 2 NKV HS (the fused projection's width), NR = n_rot / 2 rotated pairs.
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "rtx/kernels/cuda_ops.hpp"
#include "serve/cuda/serve_cuda_common.cuh"
#include "serve/cuda_models.hpp"

namespace rtx::serve::detail {

namespace {

namespace ck = rtx::kernels::cuda;

// out (R,C) = x / sqrt(mean(x^2) + eps) * w (RMSNorm, Zhang & Sennrich 2019); one warp per row,
// lane j summing c = j, j+32, ... in order, then the butterfly.
__global__ void rmsnorm_kernel(float* __restrict__ out, const float* __restrict__ x, const float* __restrict__ w, int R,
                               int C, float eps) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (r >= R) return;
  const float* xr = x + static_cast<int64_t>(r) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s = fmaf(xr[c], xr[c], s);
  s = warp_sum(s);
  const float k = 1.f / sqrtf(s / static_cast<float>(C) + eps);
  float* o = out + static_cast<int64_t>(r) * C;
  for (int c = lane; c < C; c += 32) o[c] = xr[c] * k * w[c];
}

// RoPE in llama.cpp's normal mode on the NH query and NKV key heads of every row's qkv: dims
// (2i, 2i+1), i < NR, of each head rotated by pos * inv_freq[i] (angle in float64, as the CPU).
__global__ void rope_kernel(float* __restrict__ qkv, const int32_t* __restrict__ pos, const double* __restrict__ inv_freq,
                            int R, int heads, int HS, int NR, int QKV) {
  const int64_t n = static_cast<int64_t>(R) * heads * NR;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(e % NR);
    const int h = static_cast<int>((e / NR) % heads);
    const int r = static_cast<int>(e / (static_cast<int64_t>(NR) * heads));
    const double a = static_cast<double>(pos[r]) * inv_freq[i];
    const float c = static_cast<float>(cos(a)), s = static_cast<float>(sin(a));
    float* v = qkv + static_cast<int64_t>(r) * QKV + static_cast<int64_t>(h) * HS + 2 * i;
    const float x0 = v[0], x1 = v[1];
    v[0] = x0 * c - x1 * s;
    v[1] = x0 * s + x1 * c;
  }
}

// h (R,F) = silu(g) * u with g, u the two halves of each row of gu (R, 2F) (SwiGLU, Shazeer 2020).
__global__ void swiglu_kernel(float* __restrict__ h, const float* __restrict__ gu, int R, int F) {
  const int64_t n = static_cast<int64_t>(R) * F;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / F, i = e % F;
    const float g = gu[r * 2 * F + i], u = gu[r * 2 * F + F + i];
    h[e] = g / (1.f + expf(-g)) * u;
  }
}

constexpr int kNormWarps = 4;  // rows per block of rmsnorm_kernel

class LlamaServeCuda final : public Model {
 public:
  LlamaServeCuda(const LlamaHostWeights& w, std::unique_ptr<io::Tokenizer> tok, ModelInfo info, int device)
      : cfg_(w.cfg), tok_(std::move(tok)), info_(std::move(info)), eng_(device) {
    // The head size and the device were checked by require_cuda_model before loading.
    // Every tensor in one allocation, each at a multiple of 4 floats (16-byte aligned rows for
    // the GEMM's float4 path when K % 4 == 0), copied tensor by tensor (no second host copy)
    // and waited for once. An empty wout means the head is tied to the embeddings.
    std::vector<const std::vector<float>*> all = {&w.emb, &w.out_norm, &w.wout};
    for (const auto& L : w.layers)
      for (const auto* t : {&L.attn_norm, &L.ffn_norm, &L.wqkv, &L.wo, &L.wgu, &L.wdown}) all.push_back(t);
    size_t total = 0;
    std::vector<size_t> off;
    for (const auto* t : all) {
      off.push_back(total);
      total += (t->size() + 3) / 4 * 4;
    }
    params_.reserve(total * sizeof(float));
    float* base = params_.as<float>();
    for (size_t i = 0; i < all.size(); ++i)
      if (!all[i]->empty())
        RTX_CUDA_CHECK(cudaMemcpyAsync(base + off[i], all[i]->data(), all[i]->size() * sizeof(float),
                                       cudaMemcpyHostToDevice, eng_.stream()));
    emb_ = base + off[0];
    out_norm_ = base + off[1];
    wout_ = w.wout.empty() ? emb_ : base + off[2];
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const size_t* o = &off[3 + 6 * l];
      layers_.push_back({base + o[0], base + o[1], base + o[2], base + o[3], base + o[4], base + o[5]});
    }
    inv_freq_.reserve(w.inv_freq.size() * sizeof(double) + sizeof(double));
    if (!w.inv_freq.empty())
      RTX_CUDA_CHECK(cudaMemcpyAsync(inv_freq_.p, w.inv_freq.data(), w.inv_freq.size() * sizeof(double),
                                     cudaMemcpyHostToDevice, eng_.stream()));
    eng_.sync();  // the host vectors may go once the copies have landed
    info_.param_bytes = total * sizeof(float);
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
    const int R = check_forward(batch, kv, info_, logits, "Llama CUDA forward");
    if (R == 0) return;  // an empty batch
    const int C = cfg_.dim, NH = cfg_.n_head, NKV = cfg_.n_kv_head, HS = cfg_.head_dim(), F = cfg_.ffn_dim;
    const int V = cfg_.vocab, QKV = C + 2 * NKV * HS, NR = cfg_.n_rot / 2;
    eng_.use();
    float* kvp = eng_.pool(kv);
    meta_.build(batch, kv, eng_);
    const int W = meta_.W;
    const size_t rows = static_cast<size_t>(R);
    x_.reserve(rows * C * sizeof(float));
    xn_.reserve(rows * C * sizeof(float));
    att_.reserve(rows * C * sizeof(float));
    qkv_.reserve(rows * QKV * sizeof(float));
    tmp_.reserve(rows * std::max(C, 2 * F) * sizeof(float));
    hb_.reserve(rows * F * sizeof(float));
    if (W > 0) logits_.reserve(static_cast<size_t>(W) * V * sizeof(float));
    cudaStream_t st = eng_.stream();
    float* x = x_.as<float>();
    float* xn = xn_.as<float>();
    float* att = att_.as<float>();
    float* qkv = qkv_.as<float>();
    float* tmp = tmp_.as<float>();
    float* hb = hb_.as<float>();
    const unsigned norm_grid = static_cast<unsigned>((R + kNormWarps - 1) / kNormWarps);

    RTX_NOTE_LAUNCH(embed_kernel, elem_blocks(static_cast<int64_t>(rows) * C), 256, 0);
    embed_kernel<<<elem_blocks(static_cast<int64_t>(rows) * C), 256, 0, st>>>(x, meta_.ids, meta_.pos, emb_, nullptr,
                                                                              R, C);
    RTX_CUDA_CHECK_LAUNCH();
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const Layer& w = layers_[l];
      RTX_NOTE_LAUNCH(rmsnorm_kernel, norm_grid, kNormWarps * 32, 0);
      rmsnorm_kernel<<<norm_grid, kNormWarps * 32, 0, st>>>(xn, x, w.attn_norm, R, C, cfg_.rms_eps);
      RTX_CUDA_CHECK_LAUNCH();
      eng_.gemm(qkv, xn, w.wqkv, nullptr, R, QKV, C);
      if (NR > 0) {
        RTX_NOTE_LAUNCH(rope_kernel, elem_blocks(static_cast<int64_t>(R) * (NH + NKV) * NR), 256, 0);
        rope_kernel<<<elem_blocks(static_cast<int64_t>(R) * (NH + NKV) * NR), 256, 0, st>>>(
            qkv, meta_.pos, inv_freq_.as<double>(), R, NH + NKV, HS, NR, QKV);
        RTX_CUDA_CHECK_LAUNCH();
      }
      kv_store(eng_, kvp, qkv, meta_, NKV * HS, QKV, C, C + NKV * HS, l, kv);
      attention(eng_, att, C, qkv, QKV, kvp, meta_, NH, l, kv);
      eng_.gemm(tmp, att, w.wo, nullptr, R, C, C);
      ck::residual_forward(x, x, tmp, static_cast<int64_t>(rows) * C, st);
      RTX_NOTE_LAUNCH(rmsnorm_kernel, norm_grid, kNormWarps * 32, 0);
      rmsnorm_kernel<<<norm_grid, kNormWarps * 32, 0, st>>>(xn, x, w.ffn_norm, R, C, cfg_.rms_eps);
      RTX_CUDA_CHECK_LAUNCH();
      eng_.gemm(tmp, xn, w.wgu, nullptr, R, 2 * F, C);
      RTX_NOTE_LAUNCH(swiglu_kernel, elem_blocks(static_cast<int64_t>(rows) * F), 256, 0);
      swiglu_kernel<<<elem_blocks(static_cast<int64_t>(rows) * F), 256, 0, st>>>(hb, tmp, R, F);
      RTX_CUDA_CHECK_LAUNCH();
      eng_.gemm(tmp, hb, w.wdown, nullptr, R, C, F);
      ck::residual_forward(x, x, tmp, static_cast<int64_t>(rows) * C, st);
    }
    if (W > 0) {
      // The last row of each sequence that wants logits: RMSNorm, then the output matmul.
      gather_wanted(eng_, att, x, meta_, C);
      RTX_NOTE_LAUNCH(rmsnorm_kernel, static_cast<unsigned>((W + kNormWarps - 1) / kNormWarps), kNormWarps * 32, 0);
      rmsnorm_kernel<<<static_cast<unsigned>((W + kNormWarps - 1) / kNormWarps), kNormWarps * 32, 0, st>>>(
          xn, att, out_norm_, W, C, cfg_.rms_eps);
      RTX_CUDA_CHECK_LAUNCH();
      eng_.gemm(logits_.as<float>(), xn, wout_, nullptr, W, V, C);
      RTX_CUDA_CHECK(cudaMemcpyAsync(logits, logits_.p, static_cast<size_t>(W) * V * sizeof(float),
                                     cudaMemcpyDeviceToHost, st));
    }
    eng_.sync();
  }

 private:
  /// Device pointers of one layer's tensors.
  struct Layer {
    const float *attn_norm, *ffn_norm, *wqkv, *wo, *wgu, *wdown;
  };

  serve::LlamaConfig cfg_;
  std::unique_ptr<io::Tokenizer> tok_;
  ModelInfo info_;
  Engine eng_;  // declared before the buffers: destroyed after them
  DeviceBuffer params_, inv_freq_;
  const float *emb_ = nullptr, *out_norm_ = nullptr, *wout_ = nullptr;
  std::vector<Layer> layers_;
  // Scratch for one forward, grown to the largest batch seen.
  BatchMeta meta_;
  DeviceBuffer x_, xn_, att_, qkv_, tmp_, hb_, logits_;
};

}  // namespace

std::unique_ptr<Model> make_llama_cuda_model(const LlamaHostWeights& w, std::unique_ptr<io::Tokenizer> tok,
                                             ModelInfo info, int device) {
  return std::make_unique<LlamaServeCuda>(w, std::move(tok), std::move(info), device);
}

}  // namespace rtx::serve::detail
