// CUDA embedding (encoder) forward/backward and cross-entropy forward/backward (f32).
// Backward scatters are deterministic: no atomics, each output element has one owner thread.
#include "cuda_common.cuh"
#include "rtx/kernels/cuda_ops.hpp"

namespace rtx::kernels::cuda {
namespace {

using detail::as_stream;
using detail::ceil_div;
using detail::warp_max;
using detail::warp_sum;

constexpr int kRowWarps = 8;

// out (B,T,C) = wte[ids] + wpe[t]
__global__ void encoder_forward_kernel(float* __restrict__ out, const int32_t* __restrict__ ids,
                                      const float* __restrict__ wte, const float* __restrict__ wpe, int BT, int T,
                                      int C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(BT) * C) return;
  const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C), t = bt % T;
  out[i] = wte[static_cast<int64_t>(ids[bt]) * C + c] + wpe[static_cast<int64_t>(t) * C + c];
}

// dwpe (T,C): thread (t,c) sums dout[b,t,c] over b in order.
__global__ void encoder_backward_wpe_kernel(float* __restrict__ dwpe, const float* __restrict__ dout, int B, int T,
                                           int C, int acc) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(T) * C) return;
  float s = 0.f;
  for (int b = 0; b < B; ++b) s += dout[static_cast<int64_t>(b) * T * C + i];
  dwpe[i] = acc ? dwpe[i] + s : s;
}

// dwte (V,C): thread c owns channel c of every row and walks positions in (b,t) order.
__global__ void encoder_backward_wte_kernel(float* __restrict__ dwte, const float* __restrict__ dout,
                                           const int32_t* __restrict__ ids, int BT, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < BT; ++bt) dwte[static_cast<int64_t>(ids[bt]) * C + c] += dout[static_cast<int64_t>(bt) * C + c];
}

// losses (N) from logits (N,V); one warp per row.
__global__ void crossentropy_forward_kernel(float* __restrict__ losses, const float* __restrict__ logits,
                                            const int32_t* __restrict__ targets, int N, int V) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = logits + static_cast<int64_t>(row) * V;
  float mx = -INFINITY;
  for (int v = lane; v < V; v += 32) mx = fmaxf(mx, x[v]);
  mx = warp_max(mx);
  float s = 0.f;
  for (int v = lane; v < V; v += 32) s += expf(x[v] - mx);
  s = warp_sum(s);
  if (lane == 0) losses[row] = logf(s) + mx - x[targets[row]];
}

// dlogits (N,V) [+]= (softmax - onehot) / N; one warp per row.
__global__ void crossentropy_backward_kernel(float* __restrict__ dlogits, const float* __restrict__ logits,
                                             const int32_t* __restrict__ targets, int N, int V, int acc) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const int64_t off = static_cast<int64_t>(row) * V;
  const float* x = logits + off;
  float mx = -INFINITY;
  for (int v = lane; v < V; v += 32) mx = fmaxf(mx, x[v]);
  mx = warp_max(mx);
  float s = 0.f;
  for (int v = lane; v < V; v += 32) s += expf(x[v] - mx);
  s = warp_sum(s);
  const float inv = 1.f / s, dloss = 1.f / N;
  const int tgt = targets[row];
  for (int v = lane; v < V; v += 32) {
    const float g = (expf(x[v] - mx) * inv - (v == tgt ? 1.f : 0.f)) * dloss;
    dlogits[off + v] = acc ? dlogits[off + v] + g : g;
  }
}

}  // namespace

void encoder_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int B, int T, int C,
                     void* stream) {
  detail::require_positive(B, "encoder_forward", "B");
  detail::require_positive(T, "encoder_forward", "T");
  detail::require_positive(C, "encoder_forward", "C");
  const int64_t n = static_cast<int64_t>(B) * T * C;
  RTX_NOTE_LAUNCH(encoder_forward_kernel, static_cast<unsigned>(ceil_div(n, 256)), 256, 0);
  encoder_forward_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, as_stream(stream)>>>(out, ids, wte, wpe,
                                                                                                 B * T, T, C);
  RTX_CUDA_CHECK_LAUNCH();
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int B, int T, int C, int V,
                      bool accumulate, void* stream) {
  detail::require_positive(B, "encoder_backward", "B");
  detail::require_positive(T, "encoder_backward", "T");
  detail::require_positive(C, "encoder_backward", "C");
  detail::require_positive(V, "encoder_backward", "V");
  cudaStream_t st = as_stream(stream);
  if (!accumulate) RTX_CUDA_CHECK(cudaMemsetAsync(dwte, 0, static_cast<size_t>(V) * C * sizeof(float), st));
  const int64_t tc = static_cast<int64_t>(T) * C;
  RTX_NOTE_LAUNCH(encoder_backward_wpe_kernel, static_cast<unsigned>(ceil_div(tc, 256)), 256, 0);
  encoder_backward_wpe_kernel<<<static_cast<unsigned>(ceil_div(tc, 256)), 256, 0, st>>>(dwpe, dout, B, T, C,
                                                                                        accumulate ? 1 : 0);
  RTX_CUDA_CHECK_LAUNCH();
  RTX_NOTE_LAUNCH(encoder_backward_wte_kernel, static_cast<unsigned>(ceil_div(C, 64)), 64, 0);
  encoder_backward_wte_kernel<<<static_cast<unsigned>(ceil_div(C, 64)), 64, 0, st>>>(dwte, dout, ids, B * T, C);
  RTX_CUDA_CHECK_LAUNCH();
}

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, void* stream) {
  detail::require_positive(N, "crossentropy_forward", "N");
  detail::require_positive(V, "crossentropy_forward", "V");
  RTX_NOTE_LAUNCH(crossentropy_forward_kernel, static_cast<unsigned>(ceil_div(N, kRowWarps)), kRowWarps * 32, 0);
  crossentropy_forward_kernel<<<static_cast<unsigned>(ceil_div(N, kRowWarps)), kRowWarps * 32, 0,
                                as_stream(stream)>>>(losses, logits, targets, N, V);
  RTX_CUDA_CHECK_LAUNCH();
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V, bool accumulate,
                           void* stream) {
  detail::require_positive(N, "crossentropy_backward", "N");
  detail::require_positive(V, "crossentropy_backward", "V");
  RTX_NOTE_LAUNCH(crossentropy_backward_kernel, static_cast<unsigned>(ceil_div(N, kRowWarps)), kRowWarps * 32, 0);
  crossentropy_backward_kernel<<<static_cast<unsigned>(ceil_div(N, kRowWarps)), kRowWarps * 32, 0,
                                 as_stream(stream)>>>(dlogits, logits, targets, N, V, accumulate ? 1 : 0);
  RTX_CUDA_CHECK_LAUNCH();
}

}  // namespace rtx::kernels::cuda
