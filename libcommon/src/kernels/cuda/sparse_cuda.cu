// CUDA kernels of the graph / sparse ops (sparse_cuda.hpp): one warp or thread per output row,
// entries summed in their stored order, warp sums by a fixed shuffle tree: reproducible bits, no
// float atomics. Simple first versions (v1); tuned variants come later.
#include <cmath>

#include "cuda_common.cuh"
#include "rtx/kernels/sparse_cuda.hpp"

namespace rtx::kernels::cuda {
namespace {

using detail::as_stream;
using detail::ceil_div;
using detail::warp_sum;

constexpr int kWarps = 8;

unsigned blocks(int64_t n, int per) { return static_cast<unsigned>(ceil_div(n, per)); }

// Y (N,F): warp per row, lanes over F.
__global__ void spmm_kernel(float* __restrict__ Y, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                            const float* __restrict__ val, const int32_t* __restrict__ perm,
                            const float* __restrict__ X, int64_t N, int64_t F) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  for (int64_t f0 = 0; f0 < F; f0 += 32) {
    const int64_t f = f0 + lane;
    float acc = 0.f;
    for (int32_t k = rp[row]; k < rp[row + 1]; ++k) {
      const float a = val ? val[perm ? perm[k] : k] : 1.f;
      if (f < F) acc += a * X[static_cast<int64_t>(ci[k]) * F + f];
    }
    if (f < F) Y[row * F + f] = acc;
  }
}

__global__ void sddmm_kernel(float* __restrict__ out, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                             const float* __restrict__ P, const float* __restrict__ Q, int64_t N, int64_t F) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  for (int32_t k = rp[row]; k < rp[row + 1]; ++k) {
    float s = 0.f;
    for (int64_t f = lane; f < F; f += 32) s += P[row * F + f] * Q[static_cast<int64_t>(ci[k]) * F + f];
    s = warp_sum(s);
    if (lane == 0) out[k] = s;
  }
}

__global__ void edge_softmax_kernel(float* __restrict__ out, const int32_t* __restrict__ rp,
                                    const float* __restrict__ sc, int64_t N, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * H) return;
  const int64_t row = i / H, h = i % H;
  float m = -INFINITY;
  for (int32_t k = rp[row]; k < rp[row + 1]; ++k) m = fmaxf(m, sc[k * H + h]);
  double sum = 0;
  for (int32_t k = rp[row]; k < rp[row + 1]; ++k) sum += expf(sc[k * H + h] - m);
  const float inv = static_cast<float>(1.0 / sum);
  for (int32_t k = rp[row]; k < rp[row + 1]; ++k) out[k * H + h] = expf(sc[k * H + h] - m) * inv;
}

__global__ void edge_softmax_bwd_kernel(float* __restrict__ ds, const int32_t* __restrict__ rp,
                                        const float* __restrict__ y, const float* __restrict__ dy, int64_t N, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * H) return;
  const int64_t row = i / H, h = i % H;
  double dot = 0;
  for (int32_t k = rp[row]; k < rp[row + 1]; ++k) dot += static_cast<double>(y[k * H + h]) * dy[k * H + h];
  const float d = static_cast<float>(dot);
  for (int32_t k = rp[row]; k < rp[row + 1]; ++k) ds[k * H + h] = y[k * H + h] * (dy[k * H + h] - d);
}

__global__ void segment_fwd_kernel(float* __restrict__ out, const int32_t* __restrict__ off,
                                   const float* __restrict__ x, int64_t S, int64_t F, int kind) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= S * F) return;
  const int64_t s = i / F, f = i % F;
  const int32_t b = off[s], e = off[s + 1];
  float acc = 0.f;
  if (b < e) {
    if (kind == 2) {
      acc = x[b * F + f];
      for (int32_t l = b + 1; l < e; ++l) acc = fmaxf(acc, x[l * F + f]);
    } else {
      for (int32_t l = b; l < e; ++l) acc += x[l * F + f];
      if (kind == 1) acc *= 1.f / static_cast<float>(e - b);
    }
  }
  out[i] = acc;
}

__global__ void segment_bwd_kernel(float* __restrict__ dx, const int32_t* __restrict__ off,
                                   const float* __restrict__ x, const float* __restrict__ dy, int64_t S, int64_t F,
                                   int kind) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= S * F) return;
  const int64_t s = i / F, f = i % F;
  const int32_t b = off[s], e = off[s + 1];
  const float g = dy[i];
  if (kind == 2) {
    int32_t arg = b;
    for (int32_t l = b; l < e; ++l) {
      if (x[l * F + f] > x[arg * F + f]) arg = l;
      dx[l * F + f] = 0.f;
    }
    if (b < e) dx[arg * F + f] = g;
  } else {
    const float sc = kind == 1 ? 1.f / static_cast<float>(e > b ? e - b : 1) : 1.f;
    for (int32_t l = b; l < e; ++l) dx[l * F + f] = g * sc;
  }
}

__global__ void gather_kernel(float* __restrict__ out, const int32_t* __restrict__ idx, const float* __restrict__ x,
                              int64_t L, int64_t F) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= L * F) return;
  out[i] = x[static_cast<int64_t>(idx[i / F]) * F + i % F];
}

__global__ void scatter_sorted_kernel(float* __restrict__ out, const int32_t* __restrict__ start,
                                      const int32_t* __restrict__ order, const float* __restrict__ src, int64_t M,
                                      int64_t F) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M * F) return;
  const int64_t m = i / F, f = i % F;
  float acc = out[i];
  for (int32_t j = start[m]; j < start[m + 1]; ++j) acc += src[static_cast<int64_t>(order[j]) * F + f];
  out[i] = acc;
}

__global__ void gcn_deg_kernel(float* __restrict__ dinv, const int32_t* __restrict__ rp, const float* __restrict__ w,
                               int64_t N) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= N) return;
  double d = 0;
  for (int32_t k = rp[r]; k < rp[r + 1]; ++k) d += w ? w[k] : 1.0;
  dinv[r] = d > 0 ? static_cast<float>(1.0 / sqrt(d)) : 0.f;
}

__global__ void gcn_norm_kernel(float* __restrict__ norm, const float* __restrict__ dinv,
                                const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                const float* __restrict__ w, int64_t N) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= N) return;
  for (int32_t k = rp[r]; k < rp[r + 1]; ++k) norm[k] = dinv[r] * (w ? w[k] : 1.f) * dinv[ci[k]];
}

}  // namespace

void spmm_forward(float* Y, const int32_t* row_ptr, const int32_t* col_idx, const float* val, const int32_t* perm,
                  const float* X, int64_t N, int64_t F, void* stream) {
  detail::require_positive(N, "spmm_forward", "N");
  detail::require_positive(F, "spmm_forward", "F");
  RTX_NOTE_LAUNCH(spmm_kernel, blocks(N, kWarps), 32 * kWarps, 0);
  spmm_kernel<<<blocks(N, kWarps), 32 * kWarps, 0, as_stream(stream)>>>(Y, row_ptr, col_idx, val, perm, X, N, F);
  RTX_CUDA_CHECK_LAUNCH();
}

void sddmm(float* out, const int32_t* row_ptr, const int32_t* col_idx, const float* P, const float* Q, int64_t N,
           int64_t F, void* stream) {
  detail::require_positive(N, "sddmm", "N");
  detail::require_positive(F, "sddmm", "F");
  RTX_NOTE_LAUNCH(sddmm_kernel, blocks(N, kWarps), 32 * kWarps, 0);
  sddmm_kernel<<<blocks(N, kWarps), 32 * kWarps, 0, as_stream(stream)>>>(out, row_ptr, col_idx, P, Q, N, F);
  RTX_CUDA_CHECK_LAUNCH();
}

void edge_softmax_forward(float* out, const int32_t* row_ptr, const float* scores, int64_t N, int64_t H, void* stream) {
  detail::require_positive(N * H, "edge_softmax_forward", "N*H");
  RTX_NOTE_LAUNCH(edge_softmax_kernel, blocks(N * H, 256), 256, 0);
  edge_softmax_kernel<<<blocks(N * H, 256), 256, 0, as_stream(stream)>>>(out, row_ptr, scores, N, H);
  RTX_CUDA_CHECK_LAUNCH();
}

void edge_softmax_backward(float* dscores, const int32_t* row_ptr, const float* y, const float* dy, int64_t N,
                           int64_t H, void* stream) {
  detail::require_positive(N * H, "edge_softmax_backward", "N*H");
  RTX_NOTE_LAUNCH(edge_softmax_bwd_kernel, blocks(N * H, 256), 256, 0);
  edge_softmax_bwd_kernel<<<blocks(N * H, 256), 256, 0, as_stream(stream)>>>(dscores, row_ptr, y, dy, N, H);
  RTX_CUDA_CHECK_LAUNCH();
}

void segment_reduce_forward(float* out, const int32_t* offsets, const float* x, int64_t S, int64_t F, int kind,
                            void* stream) {
  detail::require_positive(S * F, "segment_reduce_forward", "S*F");
  RTX_NOTE_LAUNCH(segment_fwd_kernel, blocks(S * F, 256), 256, 0);
  segment_fwd_kernel<<<blocks(S * F, 256), 256, 0, as_stream(stream)>>>(out, offsets, x, S, F, kind);
  RTX_CUDA_CHECK_LAUNCH();
}

void segment_reduce_backward(float* dx, const int32_t* offsets, const float* x, const float* dy, int64_t S, int64_t F,
                             int kind, void* stream) {
  detail::require_positive(S * F, "segment_reduce_backward", "S*F");
  RTX_NOTE_LAUNCH(segment_bwd_kernel, blocks(S * F, 256), 256, 0);
  segment_bwd_kernel<<<blocks(S * F, 256), 256, 0, as_stream(stream)>>>(dx, offsets, x, dy, S, F, kind);
  RTX_CUDA_CHECK_LAUNCH();
}

void gather_rows(float* out, const int32_t* idx, const float* x, int64_t L, int64_t F, void* stream) {
  detail::require_positive(L * F, "gather_rows", "L*F");
  RTX_NOTE_LAUNCH(gather_kernel, blocks(L * F, 256), 256, 0);
  gather_kernel<<<blocks(L * F, 256), 256, 0, as_stream(stream)>>>(out, idx, x, L, F);
  RTX_CUDA_CHECK_LAUNCH();
}

void scatter_add_rows_sorted(float* out, const int32_t* start, const int32_t* order, const float* src, int64_t M,
                             int64_t F, void* stream) {
  detail::require_positive(M * F, "scatter_add_rows", "M*F");
  RTX_NOTE_LAUNCH(scatter_sorted_kernel, blocks(M * F, 256), 256, 0);
  scatter_sorted_kernel<<<blocks(M * F, 256), 256, 0, as_stream(stream)>>>(out, start, order, src, M, F);
  RTX_CUDA_CHECK_LAUNCH();
}

void gcn_norm(float* norm, float* dinv, const int32_t* row_ptr, const int32_t* col_idx, const float* w, int64_t N,
              void* stream) {
  detail::require_positive(N, "gcn_norm", "N");
  RTX_NOTE_LAUNCH(gcn_deg_kernel, blocks(N, 256), 256, 0);
  gcn_deg_kernel<<<blocks(N, 256), 256, 0, as_stream(stream)>>>(dinv, row_ptr, w, N);
  RTX_CUDA_CHECK_LAUNCH();
  RTX_NOTE_LAUNCH(gcn_norm_kernel, blocks(N, 256), 256, 0);
  gcn_norm_kernel<<<blocks(N, 256), 256, 0, as_stream(stream)>>>(norm, dinv, row_ptr, col_idx, w, N);
  RTX_CUDA_CHECK_LAUNCH();
}

}  // namespace rtx::kernels::cuda
