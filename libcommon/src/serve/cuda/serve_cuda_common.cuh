// Internal to the CUDA serving models (gpt2_serve_cuda.cu, llama_serve_cuda.cu): the kernels
// they share and `Engine`, which holds a model's device and stream and launches them.
//
// Batch invariance (rtx/serve/model.hpp) holds on the device as on the CPU: every kernel here
// computes a row's outputs from that row alone, in an order fixed by the model's shapes, never
// by the batch:
//   - the GEMM gives each output element to one warp: lane j sums k = 4j.., 4j+128.., ... (or
//     j, j+32, ... without float4) in order, then a fixed butterfly over the 32 lanes (no
//     split-K, no tile-size choice by M);
//   - attention walks a row's keys in position order, in chunks of 32 (one key per lane for the
//     scores, then the values key by key), whatever the block size or the other rows;
//   - the row-wise ops (norms, activations, RoPE, residuals) work per row or per element.
// So a sequence's logits are bitwise equal served alone or among others, and however its prompt
// was chunked; they differ from the CPU models' by rounding only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/launch_note.cuh"
#include "rtx/core/cuda_check.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/serve/model.hpp"
#include "serve/cuda_models.hpp"

namespace rtx::serve::detail {

/// The device copy of a KvCache's pool, attached to it (KvCache::backing()). cudaFree needs no
/// cudaSetDevice under unified addressing, so destruction leaves the thread's device alone.
/// Outside the anonymous namespace: one type for every CUDA model, so a pool attached by one is
/// recognised by another of the same geometry.
struct DevicePool final : KvCache::Backing {
  float* ptr = nullptr;
  int device = 0;
  size_t bytes = 0;
  ~DevicePool() override {
    if (ptr) cudaFree(ptr);
  }
  /// A device-to-device copy, waited for (forward() runs on another stream).
  bool copy(size_t dst, size_t src, size_t n) override {
    int prev = 0;  // the caller's current device is restored
    RTX_CUDA_CHECK(cudaGetDevice(&prev));
    RTX_CUDA_CHECK(cudaSetDevice(device));
    RTX_CUDA_CHECK(cudaMemcpy(ptr + dst, ptr + src, n * sizeof(float), cudaMemcpyDeviceToDevice));
    RTX_CUDA_CHECK(cudaDeviceSynchronize());
    RTX_CUDA_CHECK(cudaSetDevice(prev));
    return true;
  }
};

namespace {


constexpr unsigned kFull = 0xffffffffu;
constexpr int kGemmWarps = 4;   // output columns per block of the GEMM
constexpr int kGemmRows = 8;    // rows per warp pass (one weight row read serves 8 rows)
constexpr int kGemmMaxGridY = 65535;  // column blocks per launch
constexpr int kAttnWarps = 4;   // (row, head) pairs per block of the attention
constexpr int kMaxHeadDim = kCudaMaxHeadDim;

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

// x (R,C) = wte[ids[r]] + wpe[pos[r]] (GPT-2), or wte[ids[r]] when wpe is null (Llama).
__global__ void embed_kernel(float* __restrict__ x, const int32_t* __restrict__ ids, const int32_t* __restrict__ pos,
                             const float* __restrict__ wte, const float* __restrict__ wpe, int R, int C) {
  const int64_t n = static_cast<int64_t>(R) * C;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(e / C), c = static_cast<int>(e % C);
    const float t = wte[static_cast<int64_t>(ids[r]) * C + c];
    x[e] = wpe ? t + wpe[static_cast<int64_t>(pos[r]) * C + c] : t;
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

inline int elem_blocks(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536)); }

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


/// A model's device and stream, and the launches both CUDA serving models share.
class Engine {
 public:
  /// Makes `device` current and creates the stream; the caller has run require_cuda_model
  /// (cuda_models.hpp), so the device exists. Error from the runtime otherwise.
  explicit Engine(int device) : device_(device) {
    RTX_CUDA_CHECK(cudaSetDevice(device_));
    cudaDeviceProp prop{};
    RTX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
    RTX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
  }
  int device() const { return device_; }
  /// "cuda:N (device name)", for ModelInfo::device.
  const std::string& name() const { return name_; }
  cudaStream_t stream() const { return stream_.s; }
  void use() const { RTX_CUDA_CHECK(cudaSetDevice(device_)); }
  void sync() const { RTX_CUDA_CHECK(cudaStreamSynchronize(stream_.s)); }

  /// Copies `n` host floats into `dst` (device) on the stream and waits: the stream does not
  /// order after the legacy default stream, and a pageable copy may return before it lands.
  void upload(float* dst, const float* src, size_t n) const {
    RTX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, stream_.s));
    sync();
  }

  /// The cache's device pool, allocated and zeroed (on the stream, waited for) on first use.
  float* pool(KvCache& kv) const {
    // The kernels index the pool as f32 (kv.bytes() of an f16 cache would be half the floats).
    if (kv.type() != KvType::F32)
      throw_input(std::string("CUDA models keep their KV pool in f32; this cache is ") + kv_type_name(kv.type()),
                  "kv_type", "use kv_type f32 with --device cuda");
    auto& b = kv.backing();
    if (auto* dp = dynamic_cast<DevicePool*>(b.get()); dp && dp->device == device_ && dp->bytes == kv.bytes())
      return dp->ptr;
    auto dp = std::make_unique<DevicePool>();
    dp->device = device_;
    dp->bytes = kv.bytes();
    RTX_CUDA_CHECK(cudaMalloc(&dp->ptr, dp->bytes));
    RTX_CUDA_CHECK(cudaMemsetAsync(dp->ptr, 0, dp->bytes, stream_.s));
    sync();
    float* ptr = dp->ptr;
    b = std::move(dp);
    return ptr;
  }

  /// out (M,N) = A (M,K) @ W (N,K)^T [+ bias], in launches of at most 65535 * 4 columns.
  void gemm(float* out, const float* A, const float* W, const float* bias, int M, int N, int K) const {
    // float4 loads need K % 4 == 0 and 16-byte aligned rows (a parameter's offset in a flat
    // layout is a multiple of 4 floats only when its row length is).
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

 private:
  int device_;
  std::string name_;
  OwnedStream stream_;
};

/// One forward's row metadata on the device: per row its token id, position and block-table
/// offset; the rows whose logits are wanted (the last of each such sequence); every sequence's
/// block table. Built on the host and copied once.
struct BatchMeta {
  int R = 0, W = 0;
  const int32_t *ids = nullptr, *pos = nullptr, *toff = nullptr, *gidx = nullptr, *tables = nullptr;

  void build(const std::vector<SeqBatch>& batch, const KvCache& kv, const Engine& e) {
    R = W = 0;
    size_t table_ints = 0;
    for (const SeqBatch& b : batch) {
      R += b.n;
      W += b.want_logits ? 1 : 0;
      table_ints += static_cast<size_t>(kv.blocks_for(b.pos + b.n));
    }
    if (3 * static_cast<size_t>(R) + W + table_ints > static_cast<size_t>(INT32_MAX))
      throw_input("CUDA forward: a batch of " + std::to_string(R) + " rows and " + std::to_string(table_ints) +
                      " block-table entries is too large",
                  "batch", "split it over several calls");
    host_.assign(3 * static_cast<size_t>(R) + W + table_ints, 0);
    int32_t* h_ids = host_.data();
    int32_t* h_pos = h_ids + R;
    int32_t* h_toff = h_pos + R;
    int32_t* h_gidx = h_toff + R;
    int32_t* h_tabs = h_gidx + W;
    int r = 0, w = 0;
    size_t t = 0;
    for (const SeqBatch& b : batch) {
      const int nb = kv.blocks_for(b.pos + b.n);
      for (int i = 0; i < b.n; ++i, ++r) {
        h_ids[r] = b.tokens[i];
        h_pos[r] = b.pos + i;
        h_toff[r] = static_cast<int32_t>(t);
      }
      if (b.want_logits) h_gidx[w++] = r - 1;
      std::copy(b.blocks, b.blocks + nb, h_tabs + t);
      t += static_cast<size_t>(nb);
    }
    dev_.reserve(host_.size() * sizeof(int32_t));
    RTX_CUDA_CHECK(cudaMemcpyAsync(dev_.p, host_.data(), host_.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   e.stream()));
    ids = dev_.as<int32_t>();
    pos = ids + R;
    toff = pos + R;
    gidx = toff + R;
    tables = gidx + W;
  }

 private:
  std::vector<int32_t> host_;  // kept until the next build (the copy reads it asynchronously)
  DeviceBuffer dev_;
};

/// Writes the keys and values of every row (columns [k_col, k_col + KVC) and [v_col, ...) of the
/// row's qkv, KVC = n_kv_head * HS) into the pool at its position, for `layer`.
inline void kv_store(const Engine& e, float* pool, const float* qkv, const BatchMeta& m, int KVC, int qkv_stride,
                     int k_col, int v_col, int layer, const KvCache& kv) {
  const int64_t block_floats = static_cast<int64_t>(kv.n_kv_head()) * kv.block_tokens() * kv.head_dim();
  kv_store_kernel<<<elem_blocks(static_cast<int64_t>(m.R) * KVC), 256, 0, e.stream()>>>(
      pool, qkv, m.pos, m.toff, m.tables, m.R, KVC, qkv_stride, k_col, v_col, layer, kv.n_layer(), kv.block_tokens(),
      block_floats, kv.head_dim());
  RTX_CUDA_CHECK_LAUNCH();
}

/// out (R, out_stride): causal attention of every row's NH query heads (columns h * HS of its
/// qkv row) over its sequence's cached keys and values of `layer` (query head h reads key/value
/// head h / (NH / NKV)), scaled by 1/sqrt(HS).
inline void attention(const Engine& e, float* out, int out_stride, const float* qkv, int qkv_stride, const float* pool,
                      const BatchMeta& m, int NH, int layer, const KvCache& kv) {
  const int HS = kv.head_dim(), NKV = kv.n_kv_head(), BT = kv.block_tokens();
  const int64_t block_floats = static_cast<int64_t>(NKV) * BT * HS;
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
  const int64_t units = static_cast<int64_t>(m.R) * NH;
  const unsigned grid = static_cast<unsigned>((units + kAttnWarps - 1) / kAttnWarps);
  if (HS % 4 == 0)
    paged_attention_kernel<true><<<grid, kAttnWarps * 32, 0, e.stream()>>>(
        out, qkv, pool, m.pos, m.toff, m.tables, m.R, NH, NKV, HS, qkv_stride, out_stride, layer, kv.n_layer(), BT,
        block_floats, scale);
  else
    paged_attention_kernel<false><<<grid, kAttnWarps * 32, 0, e.stream()>>>(
        out, qkv, pool, m.pos, m.toff, m.tables, m.R, NH, NKV, HS, qkv_stride, out_stride, layer, kv.n_layer(), BT,
        block_floats, scale);
  RTX_CUDA_CHECK_LAUNCH();
}

/// dst (W, C) = src rows m.gidx (the rows whose logits are wanted).
inline void gather_wanted(const Engine& e, float* dst, const float* src, const BatchMeta& m, int C) {
  gather_rows_kernel<<<elem_blocks(static_cast<int64_t>(m.W) * C), 256, 0, e.stream()>>>(dst, src, m.gidx, m.W, C);
  RTX_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace rtx::serve::detail
