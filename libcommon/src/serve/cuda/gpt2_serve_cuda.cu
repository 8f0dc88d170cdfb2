// GPT-2 serving model on CUDA (gpt2_serve_cuda.hpp): the CPU model's batched forward over a
// paged KV cache (gpt2_serve.cpp), with the weights, activations and KV pool on one device.
//
// Batch invariance (rtx/serve/model.hpp) holds on the device as on the CPU: every kernel here
// computes a row's outputs from that row alone, in an order fixed by the shapes of the model and
// never by the batch:
//   - the GEMM gives each output element to one warp: lane j sums k = 4j.., 4j+128.., ... in
//     order, then a fixed butterfly over the 32 lanes (no split-K, no tile-size choice by M);
//   - attention walks a row's keys in position order, in chunks of 32 (one key per lane for the
//     scores, then the values key by key), whatever the block size or the other rows;
//   - layernorm, GELU and the residual are the training ops (rtx/kernels/cuda_ops.hpp), per row.
// So a sequence's logits are bitwise equal served alone or among others, and however its prompt
// was chunked; they differ from the CPU model's by rounding only.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "rtx/core/cuda_check.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/cuda_ops.hpp"
#include "serve/gpt2_serve_cuda.hpp"

namespace rtx::serve::detail {

namespace {

namespace ck = rtx::kernels::cuda;
using models::Gpt2Config;

constexpr unsigned kFull = 0xffffffffu;
constexpr int kGemmWarps = 4;   // output columns per block of the GEMM
constexpr int kGemmRows = 8;    // rows per warp pass (one weight row read serves 8 rows)
constexpr int kGemmMaxGridY = 65535;  // column blocks per launch
constexpr int kAttnWarps = 4;   // (row, head) pairs per block of the attention
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ float warp_sum(float v) {
  // A butterfly: every lane adds the same two values at every level, so all lanes end equal.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// out (M,N) = A (M,K) @ W (N,K)^T [+ bias (N)]; one warp per output column (blockIdx.y picks
// kGemmWarps columns) and pass of up to kGemmRows rows (blockIdx.x, the fastest grid dimension,
// so the passes over one weight row run together and share it in L2); lanes strided over K
// (lane j: k = 4j.., 4j+128.., ... when kVec4: K % 4 == 0 and 16-byte aligned rows; else
// k = j, j+32, ...). Each output is one warp's fixed-order sum: independent of M.
template <bool kVec4>
__global__ void __launch_bounds__(kGemmWarps * 32)
    gemm_nt_kernel(float* __restrict__ out, const float* __restrict__ A, const float* __restrict__ W,
                   const float* __restrict__ bias, int M, int N, int ldo, int K) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.y * kGemmWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const int r0 = blockIdx.x * kGemmRows;
  const int rows = min(kGemmRows, M - r0);
  const float* w = W + static_cast<int64_t>(n) * K;
  const float* a = A + static_cast<int64_t>(r0) * K;
  float acc[kGemmRows];
#pragma unroll
  for (int i = 0; i < kGemmRows; ++i) acc[i] = 0.f;
  if (kVec4) {
#pragma unroll 4
    for (int k = lane * 4; k < K; k += 128) {
      const float4 wv = __ldg(reinterpret_cast<const float4*>(w + k));
#pragma unroll
      for (int i = 0; i < kGemmRows; ++i)
        if (i < rows) {
          const float4 av = *reinterpret_cast<const float4*>(a + static_cast<int64_t>(i) * K + k);
          acc[i] = fmaf(av.x, wv.x, acc[i]);
          acc[i] = fmaf(av.y, wv.y, acc[i]);
          acc[i] = fmaf(av.z, wv.z, acc[i]);
          acc[i] = fmaf(av.w, wv.w, acc[i]);
        }
    }
  } else {
#pragma unroll 4
    for (int k = lane; k < K; k += 32) {
      const float wv = __ldg(w + k);
#pragma unroll
      for (int i = 0; i < kGemmRows; ++i)
        if (i < rows) acc[i] = fmaf(a[static_cast<int64_t>(i) * K + k], wv, acc[i]);
    }
  }
  const float b = bias ? bias[n] : 0.f;
#pragma unroll
  for (int i = 0; i < kGemmRows; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == i && i < rows) out[static_cast<int64_t>(r0 + i) * ldo + n] = s + b;
  }
}

// x (R,C) = wte[ids[r]] + wpe[pos[r]].
__global__ void embed_kernel(float* __restrict__ x, const int32_t* __restrict__ ids, const int32_t* __restrict__ pos,
                             const float* __restrict__ wte, const float* __restrict__ wpe, int R, int C) {
  const int64_t n = static_cast<int64_t>(R) * C;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(e / C), c = static_cast<int>(e % C);
    x[e] = wte[static_cast<int64_t>(ids[r]) * C + c] + wpe[static_cast<int64_t>(pos[r]) * C + c];
  }
}

// Where position p of a sequence (block table `tab`) keeps its keys for (layer, kv head): the
// host KvCache's layout, ((block * L + layer) * 2 + 0) * block_floats + (head * BT + slot) * HS;
// the values follow block_floats later.
__device__ __forceinline__ int64_t kv_offset(const int32_t* tab, int p, int layer, int L, int BT, int64_t block_floats,
                                             int head, int HS) {
  const int64_t blk = tab[p / BT];
  return (blk * L + layer) * 2 * block_floats + (static_cast<int64_t>(head) * BT + p % BT) * HS;
}

// Writes row r's keys and values (qkv columns [C, 2C) and [2C, 3C) of GPT-2's fused projection,
// KVC = n_kv_head * HS floats each) into the pool at position pos[r].
__global__ void kv_store_kernel(float* __restrict__ pool, const float* __restrict__ qkv, const int32_t* __restrict__ pos,
                                const int32_t* __restrict__ toff, const int32_t* __restrict__ tables, int R, int KVC,
                                int qkv_stride, int k_col, int v_col, int layer, int L, int BT, int64_t block_floats,
                                int HS) {
  const int64_t n = static_cast<int64_t>(R) * KVC;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(e / KVC), c = static_cast<int>(e % KVC);
    const int64_t o = kv_offset(tables + toff[r], pos[r], layer, L, BT, block_floats, c / HS, HS) + c % HS;
    const float* q = qkv + static_cast<int64_t>(r) * qkv_stride;
    pool[o] = q[k_col + c];
    pool[o + block_floats] = q[v_col + c];
  }
}

// Causal attention of row r, head h over its sequence's positions [0, pos[r]] read from the
// pool: one warp per (row, head). Keys go 32 at a time, one per lane for the score (q . k in
// d order, q pre-scaled in shared memory), then a running max and sum (online softmax, Milakov
// & Gimelshein 2018) and the values key by key, lane j holding output dims j, j+32, ...
template <bool kVec4>
__global__ void __launch_bounds__(kAttnWarps * 32)
    paged_attention_kernel(float* __restrict__ out, const float* __restrict__ qkv, const float* __restrict__ pool,
                           const int32_t* __restrict__ pos, const int32_t* __restrict__ toff,
                           const int32_t* __restrict__ tables, int R, int NH, int NKV, int HS, int qkv_stride,
                           int out_stride, int layer, int L, int BT, int64_t block_floats, float scale) {
  __shared__ __align__(16) float qs[kAttnWarps][kMaxHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kAttnWarps + warp;
  if (u >= static_cast<int64_t>(R) * NH) return;  // the whole warp leaves; no block barrier below
  const int r = static_cast<int>(u / NH), h = static_cast<int>(u % NH), kvh = h / (NH / NKV);
  const float* q = qkv + static_cast<int64_t>(r) * qkv_stride + static_cast<int64_t>(h) * HS;
  float* qw = qs[warp];
  for (int d = lane; d < HS; d += 32) qw[d] = q[d] * scale;
  __syncwarp();
  const int P = pos[r] + 1;
  const int32_t* tab = tables + toff[r];
  constexpr int kPer = kMaxHeadDim / 32;
  float acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int t0 = 0; t0 < P; t0 += 32) {
    const int t = t0 + lane;
    float s = -INFINITY;
    long long koff = 0;  // lane's key row; its value row is block_floats further
    if (t < P) {
      koff = kv_offset(tab, t, layer, L, BT, block_floats, kvh, HS);
      const float* k = pool + koff;
      float dot = 0.f;
      if (kVec4) {
        for (int d = 0; d < HS; d += 4) {
          const float4 kv = *reinterpret_cast<const float4*>(k + d);
          const float4 qv = *reinterpret_cast<const float4*>(qw + d);
          dot = fmaf(qv.x, kv.x, dot);
          dot = fmaf(qv.y, kv.y, dot);
          dot = fmaf(qv.z, kv.z, dot);
          dot = fmaf(qv.w, kv.w, dot);
        }
      } else {
        for (int d = 0; d < HS; ++d) dot = fmaf(qw[d], k[d], dot);
      }
      s = dot;
    }
    const float mn = fmaxf(m, warp_max(s));  // finite: key t0 is always < P
    const float corr = expf(m - mn);         // 0 on the first chunk (m = -inf)
    const float p = t < P ? expf(s - mn) : 0.f;
    l = l * corr + warp_sum(p);
    m = mn;
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[i] *= corr;
    const int nk = min(32, P - t0);
    // Key j's weight and row come from lane j by shuffle (no dependent block-table load here),
    // so the unrolled iterations' value loads are independent.
#pragma unroll 4
    for (int j = 0; j < nk; ++j) {
      const float pj = __shfl_sync(kFull, p, j);
      const float* v = pool + __shfl_sync(kFull, koff, j) + block_floats;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int d = lane + 32 * i;
        if (d < HS) acc[i] = fmaf(pj, v[d], acc[i]);
      }
    }
  }
  float* o = out + static_cast<int64_t>(r) * out_stride + static_cast<int64_t>(h) * HS;
  const float inv = 1.f / l;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    if (d < HS) o[d] = acc[i] * inv;
  }
}

// dst (W,C) = src rows idx[w].
__global__ void gather_rows_kernel(float* __restrict__ dst, const float* __restrict__ src, const int32_t* __restrict__ idx,
                                   int W, int C) {
  const int64_t n = static_cast<int64_t>(W) * C;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[e] = src[static_cast<int64_t>(idx[e / C]) * C + e % C];
}

int elem_blocks(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536)); }

/// A device allocation that grows (never shrinks) to the largest size asked of it.
struct DeviceBuffer {
  void* p = nullptr;
  size_t cap = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  void reserve(size_t bytes) {
    if (bytes <= cap) return;
    const size_t want = std::max(bytes, cap + cap / 2);
    if (p) RTX_CUDA_CHECK(cudaFree(p));
    p = nullptr;
    cap = 0;
    RTX_CUDA_CHECK(cudaMalloc(&p, want));
    cap = want;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

/// The device copy of a KvCache's pool, attached to it (KvCache::backing()). cudaFree needs no
/// cudaSetDevice under unified addressing, so destruction leaves the thread's device alone.
struct DevicePool final : KvCache::Backing {
  float* ptr = nullptr;
  int device = 0;
  size_t bytes = 0;
  ~DevicePool() override {
    if (ptr) cudaFree(ptr);
  }
};

/// An owned non-blocking stream (destroyed with its owner, also when a constructor throws).
struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() = default;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() {
    if (s) cudaStreamDestroy(s);
  }
};

class Gpt2ServeCuda final : public Model {
 public:
  Gpt2ServeCuda(const Gpt2Config& cfg, const std::vector<float>& params, std::unique_ptr<io::Tokenizer> tok,
                ModelInfo info, int device)
      : cfg_(cfg), tok_(std::move(tok)), info_(std::move(info)), device_(device) {
    // cfg, params and tok were checked by make_gpt2_model.
    const int HS = cfg_.n_embd / cfg_.n_head;
    if (HS > kMaxHeadDim)
      throw_input("GPT-2 CUDA model: head size " + std::to_string(HS) + " is above the CUDA attention's " +
                      std::to_string(kMaxHeadDim),
                  info_.path, "serve it on the CPU (--device cpu)");
    const int n = cuda_device_count();
    if (n == 0)
      throw Error(ErrorCategory::Environment, "no usable CUDA device (" + cuda_unavailable_reason() + ")", "--device",
                  "run on a machine with an NVIDIA GPU and driver, or serve on the CPU with --device cpu");
    if (device_ < 0 || device_ >= n)
      throw Error(ErrorCategory::Environment,
                  "CUDA device " + std::to_string(device_) + " does not exist (" + std::to_string(n) + " present)",
                  "--device", "pick a device in cuda:0 .. cuda:" + std::to_string(n - 1));
    RTX_CUDA_CHECK(cudaSetDevice(device_));
    cudaDeviceProp prop{};
    RTX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    RTX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
    params_.reserve(params.size() * sizeof(float));
    // On the model's stream and waited for: stream_ does not synchronize with the legacy default
    // stream, and a pageable copy may return before its last chunk lands.
    RTX_CUDA_CHECK(cudaMemcpyAsync(params_.p, params.data(), params.size() * sizeof(float), cudaMemcpyHostToDevice,
                                   stream_.s));
    RTX_CUDA_CHECK(cudaStreamSynchronize(stream_.s));
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
    info_.device = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
  }


  const ModelInfo& info() const override { return info_; }
  const io::Tokenizer& tokenizer() const override { return *tok_; }

  void attach(KvCache& kv) override {
    RTX_CUDA_CHECK(cudaSetDevice(device_));
    pool(kv);
  }

  void forward(const std::vector<SeqBatch>& batch, KvCache& kv, float* logits) override {
    const int R = check_forward(batch, kv, info_, logits, "GPT-2 CUDA forward");
    if (R == 0) return;  // an empty batch
    const int C = cfg_.n_embd, NH = cfg_.n_head, HS = C / NH, V = cfg_.vocab_size, L = cfg_.n_layer;
    RTX_CUDA_CHECK(cudaSetDevice(device_));
    float* kvp = pool(kv);
    // Row metadata, one host array copied once: ids (R), pos (R), table offsets (R), the rows
    // whose logits are wanted (W), then every sequence's block table.
    int W = 0;
    size_t table_ints = 0;
    for (const SeqBatch& b : batch) {
      W += b.want_logits ? 1 : 0;
      table_ints += static_cast<size_t>(kv.blocks_for(b.pos + b.n));
    }
    meta_.assign(3 * static_cast<size_t>(R) + W + table_ints, 0);
    int32_t* ids = meta_.data();
    int32_t* pos = ids + R;
    int32_t* toff = pos + R;
    int32_t* gidx = toff + R;
    int32_t* tabs = gidx + W;
    {
      int r = 0, w = 0;
      size_t t = 0;
      for (const SeqBatch& b : batch) {
        const int nb = kv.blocks_for(b.pos + b.n);
        for (int i = 0; i < b.n; ++i, ++r) {
          ids[r] = b.tokens[i];
          pos[r] = b.pos + i;
          toff[r] = static_cast<int32_t>(t);
        }
        if (b.want_logits) gidx[w++] = r - 1;
        std::copy(b.blocks, b.blocks + nb, tabs + t);
        t += static_cast<size_t>(nb);
      }
    }
    if (meta_.size() > static_cast<size_t>(INT32_MAX)) throw_input("GPT-2 CUDA forward: batch too large", "batch");
    d_meta_.reserve(meta_.size() * sizeof(int32_t));
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
    cudaStream_t st = stream_.s;
    RTX_CUDA_CHECK(
        cudaMemcpyAsync(d_meta_.p, meta_.data(), meta_.size() * sizeof(int32_t), cudaMemcpyHostToDevice, st));
    const int32_t* d_ids = d_meta_.as<int32_t>();
    const int32_t* d_pos = d_ids + R;
    const int32_t* d_toff = d_pos + R;
    const int32_t* d_gidx = d_toff + R;
    const int32_t* d_tabs = d_gidx + W;
    float* x = x_.as<float>();
    float* ln = ln_.as<float>();
    float* att = att_.as<float>();
    float* proj = proj_.as<float>();
    float* qkv = qkv_.as<float>();
    float* fc = fc_.as<float>();
    float* fcg = fcg_.as<float>();
    float* mean = stats_.as<float>();
    float* rstd = mean + R;
    const int BT = kv.block_tokens();
    const int64_t block_floats = static_cast<int64_t>(info_.n_kv_head) * BT * HS;
    const float scale = 1.f / std::sqrt(static_cast<float>(HS));
    const bool vec_hs = HS % 4 == 0;

    embed_kernel<<<elem_blocks(rc), 256, 0, st>>>(x, d_ids, d_pos, wte_, wpe_, R, C);
    RTX_CUDA_CHECK_LAUNCH();
    for (int l = 0; l < L; ++l) {
      const Layer& w = layers_[l];
      ck::layernorm_forward(ln, mean, rstd, x, w.ln1w, w.ln1b, R, C, st);
      gemm(qkv, ln, w.qkvw, w.qkvb, R, 3 * C, C);
      kv_store_kernel<<<elem_blocks(rc), 256, 0, st>>>(kvp, qkv, d_pos, d_toff, d_tabs, R, C, 3 * C, C, 2 * C, l, L,
                                                      BT, block_floats, HS);
      RTX_CUDA_CHECK_LAUNCH();
      const int64_t units = static_cast<int64_t>(R) * NH;
      const unsigned grid = static_cast<unsigned>((units + kAttnWarps - 1) / kAttnWarps);
      if (vec_hs)
        paged_attention_kernel<true><<<grid, kAttnWarps * 32, 0, st>>>(att, qkv, kvp, d_pos, d_toff, d_tabs, R, NH, NH,
                                                                       HS, 3 * C, C, l, L, BT, block_floats, scale);
      else
        paged_attention_kernel<false><<<grid, kAttnWarps * 32, 0, st>>>(att, qkv, kvp, d_pos, d_toff, d_tabs, R, NH,
                                                                        NH, HS, 3 * C, C, l, L, BT, block_floats, scale);
      RTX_CUDA_CHECK_LAUNCH();
      gemm(proj, att, w.projw, w.projb, R, C, C);
      ck::residual_forward(x, x, proj, static_cast<int64_t>(rc), st);
      ck::layernorm_forward(ln, mean, rstd, x, w.ln2w, w.ln2b, R, C, st);
      gemm(fc, ln, w.fcw, w.fcb, R, 4 * C, C);
      ck::gelu_forward(fcg, fc, 4 * static_cast<int64_t>(rc), st);
      gemm(proj, fcg, w.fcprojw, w.fcprojb, R, C, 4 * C);
      ck::residual_forward(x, x, proj, static_cast<int64_t>(rc), st);
    }
    if (W > 0) {
      // Final norm and the tied head, only for the rows whose logits are wanted.
      gather_rows_kernel<<<elem_blocks(static_cast<int64_t>(W) * C), 256, 0, st>>>(ln, x, d_gidx, W, C);
      RTX_CUDA_CHECK_LAUNCH();
      ck::layernorm_forward(proj, mean, rstd, ln, lnfw_, lnfb_, W, C, st);
      gemm(logits_.as<float>(), proj, wte_, nullptr, W, V, C);
      RTX_CUDA_CHECK(cudaMemcpyAsync(logits, logits_.p, static_cast<size_t>(W) * V * sizeof(float),
                                     cudaMemcpyDeviceToHost, st));
    }
    RTX_CUDA_CHECK(cudaStreamSynchronize(st));
  }

 private:
  /// Device pointers of one layer's parameters.
  struct Layer {
    const float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  };

  /// The cache's device pool, allocated (zeroed) on first use.
  float* pool(KvCache& kv) {
    auto& b = kv.backing();
    if (auto* dp = dynamic_cast<DevicePool*>(b.get()); dp && dp->device == device_ && dp->bytes == kv.bytes())
      return dp->ptr;
    auto dp = std::make_unique<DevicePool>();
    dp->device = device_;
    dp->bytes = kv.bytes();
    RTX_CUDA_CHECK(cudaMalloc(&dp->ptr, dp->bytes));
    // Zeroed on the model's stream (ordered before any kv_store) and waited for, so a failure
    // shows here (at attach(): server start) and no stale value is ever read as a key.
    RTX_CUDA_CHECK(cudaMemsetAsync(dp->ptr, 0, dp->bytes, stream_.s));
    RTX_CUDA_CHECK(cudaStreamSynchronize(stream_.s));
    float* ptr = dp->ptr;
    b = std::move(dp);
    return ptr;
  }

  /// out (M,N) = A (M,K) @ W (N,K)^T [+ bias], in launches of at most 65535 * 4 columns.
  void gemm(float* out, const float* A, const float* W, const float* bias, int M, int N, int K) {
    // float4 loads need K % 4 == 0 and 16-byte aligned rows (a parameter's offset in the flat
    // layout is a multiple of 4 floats only when C is).
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const bool vec = K % 4 == 0 && aligned(A) && aligned(W);
    const int max_cols = kGemmMaxGridY * kGemmWarps;
    for (int n0 = 0; n0 < N; n0 += max_cols) {
      // A column chunk is the same GEMM on W's rows [n0, n0 + n) writing out's columns there:
      // out keeps its row stride N, so the kernel sees an (M, n) view with stride N.
      const int n = std::min(max_cols, N - n0);
      const dim3 grid((M + kGemmRows - 1) / kGemmRows, (n + kGemmWarps - 1) / kGemmWarps);
      const float* w = W + static_cast<int64_t>(n0) * K;
      const float* b = bias ? bias + n0 : nullptr;
      if (vec) gemm_nt_kernel<true><<<grid, kGemmWarps * 32, 0, stream_.s>>>(out + n0, A, w, b, M, n, N, K);
      else gemm_nt_kernel<false><<<grid, kGemmWarps * 32, 0, stream_.s>>>(out + n0, A, w, b, M, n, N, K);
      RTX_CUDA_CHECK_LAUNCH();
    }
  }

  Gpt2Config cfg_;
  std::unique_ptr<io::Tokenizer> tok_;
  ModelInfo info_;
  int device_ = 0;
  // Members are destroyed in reverse order: buffers first, the stream last.
  OwnedStream stream_;
  DeviceBuffer params_;
  const float *wte_ = nullptr, *wpe_ = nullptr, *lnfw_ = nullptr, *lnfb_ = nullptr;
  std::vector<Layer> layers_;
  // Scratch for one forward, grown to the largest batch seen.
  std::vector<int32_t> meta_;
  DeviceBuffer d_meta_, x_, ln_, att_, proj_, qkv_, fc_, fcg_, stats_, logits_;
};

}  // namespace

std::unique_ptr<Model> make_gpt2_cuda_model(const models::Gpt2Config& cfg, const std::vector<float>& params,
                                            std::unique_ptr<io::Tokenizer> tok, ModelInfo info, int device) {
  return std::make_unique<Gpt2ServeCuda>(cfg, params, std::move(tok), std::move(info), device);
}

}  // namespace rtx::serve::detail
