// CUDA causal multi-head attention (f32, llm.c layout qkv (B,T,3C) -> out (B,T,C)): flash
// forward (online softmax, Dao et al. 2022), a naive materialising forward, and a
// recomputation-based backward. Every output element is one thread's ordered sum (no atomics).
#include "cuda_common.cuh"
#include "rtx/kernels/cuda_ops.hpp"

namespace rtx::kernels::cuda {
namespace {

using detail::as_stream;
using detail::ceil_div;
using detail::warp_max;
using detail::warp_sum;

constexpr int kMaxHS = 128;  // 4 output dims per lane in the flash kernel

// Grid (ceil(T/Br), B*NH), block Br warps (up to 32: the launch bounds keep it <= 64 registers).
// Warp w owns query row q = blockIdx.x*Br + w.
// Shared: Q (Br,HS), K and V tiles (Bc,HS+1), scores/probabilities P (Br,Bc).
__global__ void __launch_bounds__(1024)
    flash_forward_kernel(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ qkv, int T, int NH,
                         int HS, int Br, int Bc, float scale) {
  extern __shared__ float smem[];
  const int C = NH * HS, C3 = 3 * C, LDK = HS + 1;
  float* Qs = smem;
  float* Ks = Qs + Br * HS;
  float* Vs = Ks + Bc * LDK;
  float* Ps = Vs + Bc * LDK;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nthreads = blockDim.x;
  const int q0 = blockIdx.x * Br, q = q0 + warp;
  const bool valid = q < T;
  const float* base = qkv + static_cast<int64_t>(b) * T * C3;
  for (int i = threadIdx.x; i < Br * HS; i += nthreads) {
    const int r = i / HS, d = i % HS, t = q0 + r;
    Qs[i] = t < T ? base[static_cast<int64_t>(t) * C3 + h * HS + d] : 0.f;
  }
  float o[kMaxHS / 32];
#pragma unroll
  for (int i = 0; i < kMaxHS / 32; ++i) o[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int qmax = min(T - 1, q0 + Br - 1);
  float* P = Ps + warp * Bc;
  const float* Q = Qs + warp * HS;
  for (int j0 = 0; j0 <= qmax; j0 += Bc) {
    __syncthreads();
    for (int i = threadIdx.x; i < Bc * HS; i += nthreads) {
      const int r = i / HS, d = i % HS, t = j0 + r;
      const int64_t g = static_cast<int64_t>(t) * C3 + h * HS + d;
      Ks[r * LDK + d] = t < T ? base[g + C] : 0.f;
      Vs[r * LDK + d] = t < T ? base[g + 2 * C] : 0.f;
    }
    __syncthreads();
    if (!valid || j0 > q) continue;  // whole tile masked for this row (warp-uniform)
    float mt = -INFINITY;
    for (int j = lane; j < Bc; j += 32) {
      float s = -INFINITY;
      if (j0 + j <= q) {
        float acc = 0.f;
        for (int d = 0; d < HS; ++d) acc += Q[d] * Ks[j * LDK + d];
        s = acc * scale;
      }
      P[j] = s;
      mt = fmaxf(mt, s);
    }
    mt = warp_max(mt);
    const float mn = fmaxf(m, mt);
    const float corr = expf(m - mn);  // m = -inf on the first tile: corr = 0, o and l are 0
    float ls = 0.f;
    for (int j = lane; j < Bc; j += 32) {
      const float p = expf(P[j] - mn);  // masked: exp(-inf) = 0
      P[j] = p;
      ls += p;
    }
    l = l * corr + warp_sum(ls);
    m = mn;
    __syncwarp();
    const int jn = min(Bc, q - j0 + 1);
#pragma unroll
    for (int i = 0; i < kMaxHS / 32; ++i) {
      const int d = lane + 32 * i;
      if (d >= HS) break;
      float acc = o[i] * corr;
      for (int j = 0; j < jn; ++j) acc += P[j] * Vs[j * LDK + d];
      o[i] = acc;
    }
    __syncwarp();
  }
  if (!valid) return;
  float* y = out + (static_cast<int64_t>(b) * T + q) * C + h * HS;
  const float inv = 1.f / l;
#pragma unroll
  for (int i = 0; i < kMaxHS / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < HS) y[d] = o[i] * inv;
  }
  if (lse && lane == 0) lse[static_cast<int64_t>(bh) * T + q] = m + logf(l);
}

// One warp per score row (b,h,t): att[t,:] = softmax over s <= t of q_t.k_s * scale, zeros after t.
// With dout non-null (backward), also dpre[t,s] = att[t,s] * (datt[t,s] - sum_s' att datt).
// With lse non-null, lse[b,h,t] = logsumexp of the scaled scores of the row.
__global__ void attention_rows_kernel(float* __restrict__ att, float* __restrict__ dpre, float* __restrict__ lse,
                                      const float* __restrict__ qkv, const float* __restrict__ dout, int B, int T,
                                      int NH, int HS, float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= static_cast<int64_t>(B) * NH * T) return;
  const int t = static_cast<int>(row % T), h = static_cast<int>((row / T) % NH), b = static_cast<int>(row / (T * NH));
  const int C = NH * HS, C3 = 3 * C;
  const float* base = qkv + static_cast<int64_t>(b) * T * C3;
  const float* q = base + static_cast<int64_t>(t) * C3 + h * HS;
  float* a = att + row * T;
  float mx = -INFINITY;
  for (int s = lane; s <= t; s += 32) {
    const float* k = base + static_cast<int64_t>(s) * C3 + C + h * HS;
    float acc = 0.f;
    for (int d = 0; d < HS; ++d) acc += q[d] * k[d];
    a[s] = acc * scale;
    mx = fmaxf(mx, acc * scale);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int s = lane; s <= t; s += 32) {
    const float e = expf(a[s] - mx);
    a[s] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  if (lse && lane == 0) lse[row] = mx + logf(sum);
  const float inv = 1.f / sum;
  for (int s = lane; s < T; s += 32) a[s] = s <= t ? a[s] * inv : 0.f;
  if (!dout) return;
  const float* go = dout + (static_cast<int64_t>(b) * T + t) * C + h * HS;
  float* dp = dpre + row * T;
  float dot = 0.f;
  for (int s = lane; s <= t; s += 32) {
    const float* v = base + static_cast<int64_t>(s) * C3 + 2 * C + h * HS;
    float acc = 0.f;
    for (int d = 0; d < HS; ++d) acc += go[d] * v[d];
    dp[s] = acc;
    dot += a[s] * acc;
  }
  dot = warp_sum(dot);
  for (int s = lane; s < T; s += 32) dp[s] = s <= t ? a[s] * (dp[s] - dot) : 0.f;
}

// out[b,t,h,d] = sum_{s<=t} att[b,h,t,s] * v[b,s,h,d]; one thread per output element.
__global__ void attention_av_kernel(float* __restrict__ out, const float* __restrict__ att,
                                    const float* __restrict__ qkv, int B, int T, int NH, int HS) {
  const int C = NH * HS;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(B) * T * C) return;
  const int d = static_cast<int>(i % HS), h = static_cast<int>((i / HS) % NH), t = static_cast<int>((i / C) % T),
            b = static_cast<int>(i / (static_cast<int64_t>(T) * C));
  const float* a = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
  const float* v = qkv + static_cast<int64_t>(b) * T * 3 * C + 2 * C + h * HS + d;
  float acc = 0.f;
  for (int s = 0; s <= t; ++s) acc += a[s] * v[static_cast<int64_t>(s) * 3 * C];
  out[i] = acc;
}

// dq, dk, dv of element (b,t,h,d) from att and dpre (B,NH,T,T); one thread per element.
__global__ void attention_dqkv_kernel(float* __restrict__ dqkv, const float* __restrict__ att,
                                      const float* __restrict__ dpre, const float* __restrict__ qkv,
                                      const float* __restrict__ dout, int B, int T, int NH, int HS, float scale,
                                      int accumulate) {
  const int C = NH * HS, C3 = 3 * C;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(B) * T * C) return;
  const int d = static_cast<int>(i % HS), h = static_cast<int>((i / HS) % NH), t = static_cast<int>((i / C) % T),
            b = static_cast<int>(i / (static_cast<int64_t>(T) * C));
  const int64_t hb = (static_cast<int64_t>(b) * NH + h) * T;  // row index base of (b,h) in (B,NH,T,T)
  const float* base = qkv + static_cast<int64_t>(b) * T * C3 + h * HS + d;
  const float* gout = dout + static_cast<int64_t>(b) * T * C + h * HS + d;
  float dq = 0.f, dk = 0.f, dv = 0.f;
  for (int s = 0; s <= t; ++s) dq += dpre[(hb + t) * T + s] * base[static_cast<int64_t>(s) * C3 + C];
  for (int r = t; r < T; ++r) {
    dk += dpre[(hb + r) * T + t] * base[static_cast<int64_t>(r) * C3];
    dv += att[(hb + r) * T + t] * gout[static_cast<int64_t>(r) * C];
  }
  float* g = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * HS + d;
  dq *= scale;
  dk *= scale;
  g[0] = accumulate ? g[0] + dq : dq;
  g[C] = accumulate ? g[C] + dk : dk;
  g[2 * C] = accumulate ? g[2 * C] + dv : dv;
}

void check_dims(const char* fn, int B, int T, int NH, int HS) {
  detail::require_positive(B, fn, "B");
  detail::require_positive(T, fn, "T");
  detail::require_positive(NH, fn, "NH");
  detail::require_positive(HS, fn, "HS");
}

}  // namespace

size_t attention_naive_scratch(int B, int T, int NH) { return static_cast<size_t>(B) * NH * T * T; }
size_t attention_backward_scratch(int B, int T, int NH) { return 2 * attention_naive_scratch(B, T, NH); }

void attention_forward_flash(float* out, float* lse, const float* qkv, int B, int T, int NH, int HS, int Br, int Bc,
                             void* stream) {
  check_dims("attention_forward_flash", B, T, NH, HS);
  if (HS > kMaxHS) throw_input("attention_forward_flash: HS " + std::to_string(HS) + " > 128", "HS");
  if (Br < 1 || Br > 32) throw_input("attention_forward_flash: Br must be in [1,32]", "Br");
  if (Bc < 1 || Bc > 256) throw_input("attention_forward_flash: Bc must be in [1,256]", "Bc");
  const size_t smem = (static_cast<size_t>(Br) * HS + 2 * static_cast<size_t>(Bc) * (HS + 1) +
                       static_cast<size_t>(Br) * Bc) * sizeof(float);
  if (smem > 227 * 1024) throw_input("attention_forward_flash: tile needs " + std::to_string(smem) + " B shared memory", "Br,Bc");
  detail::allow_dynamic_smem(reinterpret_cast<const void*>(flash_forward_kernel), smem);
  if (static_cast<int64_t>(B) * NH > 65535)  // grid.y limit (CUDA programming guide, compute capabilities)
    throw_input("attention_forward_flash: B * NH = " + std::to_string(static_cast<int64_t>(B) * NH) + " > 65535",
                "B,NH", "split the batch");
  const dim3 grid(static_cast<unsigned>(ceil_div(T, Br)), static_cast<unsigned>(B * NH));
  RTX_NOTE_LAUNCH(flash_forward_kernel, grid, Br * 32, smem);
  flash_forward_kernel<<<grid, Br * 32, smem, as_stream(stream)>>>(out, lse, qkv, T, NH, HS, Br, Bc,
                                                                   1.f / sqrtf(static_cast<float>(HS)));
  RTX_CUDA_CHECK_LAUNCH();
}

void attention_forward_naive(float* out, float* lse, float* scratch, const float* qkv, int B, int T, int NH, int HS,
                             void* stream) {
  check_dims("attention_forward_naive", B, T, NH, HS);
  cudaStream_t st = as_stream(stream);
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
  RTX_NOTE_LAUNCH(attention_rows_kernel, static_cast<unsigned>(ceil_div(rows, 8)), 256, 0);
  attention_rows_kernel<<<static_cast<unsigned>(ceil_div(rows, 8)), 256, 0, st>>>(
      scratch, nullptr, lse, qkv, nullptr, B, T, NH, HS, 1.f / sqrtf(static_cast<float>(HS)));
  RTX_CUDA_CHECK_LAUNCH();
  const int64_t n = static_cast<int64_t>(B) * T * NH * HS;
  RTX_NOTE_LAUNCH(attention_av_kernel, static_cast<unsigned>(ceil_div(n, 256)), 256, 0);
  attention_av_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, st>>>(out, scratch, qkv, B, T, NH, HS);
  RTX_CUDA_CHECK_LAUNCH();
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, int B, int T, int NH, int HS,
                        bool accumulate, void* stream) {
  check_dims("attention_backward", B, T, NH, HS);
  cudaStream_t st = as_stream(stream);
  const float scale = 1.f / sqrtf(static_cast<float>(HS));
  float* att = scratch;
  float* dpre = scratch + attention_naive_scratch(B, T, NH);
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
  RTX_NOTE_LAUNCH(attention_rows_kernel, static_cast<unsigned>(ceil_div(rows, 8)), 256, 0);
  attention_rows_kernel<<<static_cast<unsigned>(ceil_div(rows, 8)), 256, 0, st>>>(att, dpre, nullptr, qkv, dout, B, T, NH, HS,
                                                                                  scale);
  RTX_CUDA_CHECK_LAUNCH();
  const int64_t n = static_cast<int64_t>(B) * T * NH * HS;
  RTX_NOTE_LAUNCH(attention_dqkv_kernel, static_cast<unsigned>(ceil_div(n, 256)), 256, 0);
  attention_dqkv_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, st>>>(dqkv, att, dpre, qkv, dout, B, T, NH,
                                                                                 HS, scale, accumulate ? 1 : 0);
  RTX_CUDA_CHECK_LAUNCH();
}

}  // namespace rtx::kernels::cuda
