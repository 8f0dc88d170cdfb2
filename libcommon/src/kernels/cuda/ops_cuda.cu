// CUDA row and element-wise ops (f32): softmax, layernorm forward/backward, GELU forward/
// backward, residual, AdamW. Row ops use one warp per row with shuffle reductions; channel
// reductions (dweight, dbias) use 32x32-thread blocks, 32 channels by 32 row groups, added in a
// fixed order (deterministic: no atomics).
#include <cmath>

#include "cuda_common.cuh"
#include "rtx/kernels/cuda_ops.hpp"

namespace rtx::kernels::cuda {
namespace {

using detail::as_stream;
using detail::ceil_div;
using detail::warp_max;
using detail::warp_sum;

constexpr int kRowWarps = 8;  // rows (warps) per block of the warp-per-row kernels
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

unsigned row_blocks(int N) { return static_cast<unsigned>(ceil_div(N, kRowWarps)); }
unsigned elem_blocks(int64_t n, int threads) { return static_cast<unsigned>(ceil_div(n, threads)); }

// inp (N,C), out (N,C)
__global__ void softmax_kernel(float* __restrict__ out, const float* __restrict__ inp, int N, int C) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + static_cast<int64_t>(row) * C;
  float* y = out + static_cast<int64_t>(row) * C;
  float mx = -INFINITY;
  for (int c = lane; c < C; c += 32) mx = fmaxf(mx, x[c]);
  mx = warp_max(mx);
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += expf(x[c] - mx);
  s = warp_sum(s);
  const float inv = 1.f / s;
  for (int c = lane; c < C; c += 32) y[c] = expf(x[c] - mx) * inv;
}

// inp (N,C), weight (C), bias (C); out (N,C), mean (N), rstd (N)
__global__ void layernorm_forward_kernel(float* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                         const float* __restrict__ inp, const float* __restrict__ weight,
                                         const float* __restrict__ bias, int N, int C) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + static_cast<int64_t>(row) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float rs = 1.f / sqrtf(warp_sum(v) / C + 1e-5f);
  float* y = out + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) y[c] = (x[c] - m) * rs * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// dinp (N,C) of layernorm backward; one warp per row. The two row reductions and the final
// combination run in float64 (as the CPU kernel does): when rstd is large (C small, variance ~0)
// dinp is a difference of nearly equal terms scaled by rstd, and float32 loses ~1e-5 of it.
__global__ void layernorm_backward_dinp_kernel(float* __restrict__ dinp, const float* __restrict__ dout,
                                               const float* __restrict__ inp, const float* __restrict__ weight,
                                               const float* __restrict__ mean, const float* __restrict__ rstd, int N,
                                               int C, int acc) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const int64_t off = static_cast<int64_t>(row) * C;
  const double m = mean[row], rs = rstd[row];
  double a = 0.0, b = 0.0;
  for (int c = lane; c < C; c += 32) {
    const double dn = static_cast<double>(weight[c]) * dout[off + c];
    a += dn;
    b += dn * (inp[off + c] - m) * rs;
  }
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  const double dnorm_mean = a / C, dnorm_norm_mean = b / C;
  for (int c = lane; c < C; c += 32) {
    const double norm = (inp[off + c] - m) * rs;
    const double g = (static_cast<double>(weight[c]) * dout[off + c] - dnorm_mean - norm * dnorm_norm_mean) * rs;
    dinp[off + c] = acc ? static_cast<float>(dinp[off + c] + g) : static_cast<float>(g);
  }
}

// dweight (C), dbias (C) of layernorm backward. Block (32, 32): threadIdx.x picks one of 32
// adjacent channels (coalesced row reads), threadIdx.y one of 32 row groups (rows y, y+32,
// ...); the 32 partial sums per channel are then added in y order in shared memory. The
// mapping depends only on (N, C), so results are bitwise reproducible run to run.
constexpr int kLnParamRows = 32;
__global__ void layernorm_backward_dparams_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                                  const float* __restrict__ dout, const float* __restrict__ inp,
                                                  const float* __restrict__ mean, const float* __restrict__ rstd,
                                                  int N, int C, int acc) {
  __shared__ float sw[kLnParamRows][33], sb[kLnParamRows][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float dw = 0.f, db = 0.f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += kLnParamRows) {
      const int64_t i = static_cast<int64_t>(n) * C + c;
      const float d = dout[i];
      db += d;
      dw += (inp[i] - mean[n]) * rstd[n] * d;
    }
  }
  sw[threadIdx.y][threadIdx.x] = dw;
  sb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.f, tb = 0.f;
    for (int y = 0; y < kLnParamRows; ++y) {
      tw += sw[y][threadIdx.x];
      tb += sb[y][threadIdx.x];
    }
    dweight[c] = acc ? dweight[c] + tw : tw;
    dbias[c] = acc ? dbias[c] + tb : tb;
  }
}

__global__ void gelu_forward_kernel(float* __restrict__ out, const float* __restrict__ inp, int64_t N) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N) return;
  const float x = inp[i];
  const float cube = 0.044715f * x * x * x;
  out[i] = 0.5f * x * (1.f + tanhf(kGeluScale * (x + cube)));
}

__global__ void gelu_backward_kernel(float* __restrict__ dinp, const float* __restrict__ inp,
                                     const float* __restrict__ dout, int64_t N, int acc) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N) return;
  const float x = inp[i];
  const float cube = 0.044715f * x * x * x;
  const float arg = kGeluScale * (x + cube);
  const float th = tanhf(arg);
  const float ch = coshf(arg);
  const float sech2 = 1.f / (ch * ch);
  const float grad = 0.5f * (1.f + th) + x * 0.5f * sech2 * kGeluScale * (1.f + 3.f * 0.044715f * x * x);
  const float g = grad * dout[i];
  dinp[i] = acc ? dinp[i] + g : g;
}

// No __restrict__: the serving forwards add in place (out == a, residual_forward(x, x, proj)),
// and restrict-qualified aliases are undefined behaviour (the compiler may read `a` through the
// non-coherent cache). Each element is read and written by one thread, so in place is safe.
__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t N) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < N) out[i] = a[i] + b[i];
}

__global__ void adamw_kernel(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ g, int64_t N, float lr, float b1, float b2, float eps, float wd,
                             float bc1, float bc2) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N) return;
  const float gi = g[i];
  const float mi = b1 * m[i] + (1.f - b1) * gi;
  const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
  const float mh = mi / bc1, vh = vi / bc2;
  m[i] = mi;
  v[i] = vi;
  p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
}

}  // namespace

void softmax_forward(float* out, const float* inp, int N, int C, void* stream) {
  detail::require_positive(N, "softmax_forward", "N");
  detail::require_positive(C, "softmax_forward", "C");
  RTX_NOTE_LAUNCH(softmax_kernel, row_blocks(N), kRowWarps * 32, 0);
  softmax_kernel<<<row_blocks(N), kRowWarps * 32, 0, as_stream(stream)>>>(out, inp, N, C);
  RTX_CUDA_CHECK_LAUNCH();
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, void* stream) {
  detail::require_positive(N, "layernorm_forward", "N");
  detail::require_positive(C, "layernorm_forward", "C");
  RTX_NOTE_LAUNCH(layernorm_forward_kernel, row_blocks(N), kRowWarps * 32, 0);
  layernorm_forward_kernel<<<row_blocks(N), kRowWarps * 32, 0, as_stream(stream)>>>(out, mean, rstd, inp, weight,
                                                                                     bias, N, C);
  RTX_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, bool accumulate,
                        void* stream) {
  detail::require_positive(N, "layernorm_backward", "N");
  detail::require_positive(C, "layernorm_backward", "C");
  const int acc = accumulate ? 1 : 0;
  RTX_NOTE_LAUNCH(layernorm_backward_dinp_kernel, row_blocks(N), kRowWarps * 32, 0);
  layernorm_backward_dinp_kernel<<<row_blocks(N), kRowWarps * 32, 0, as_stream(stream)>>>(dinp, dout, inp, weight,
                                                                                           mean, rstd, N, C, acc);
  RTX_CUDA_CHECK_LAUNCH();
  RTX_NOTE_LAUNCH(layernorm_backward_dparams_kernel, elem_blocks(C, 32), dim3(32, kLnParamRows), 0);
  layernorm_backward_dparams_kernel<<<elem_blocks(C, 32), dim3(32, kLnParamRows), 0, as_stream(stream)>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C, acc);
  RTX_CUDA_CHECK_LAUNCH();
}

void gelu_forward(float* out, const float* inp, int64_t N, void* stream) {
  detail::require_positive(N, "gelu_forward", "N");
  RTX_NOTE_LAUNCH(gelu_forward_kernel, elem_blocks(N, 256), 256, 0);
  gelu_forward_kernel<<<elem_blocks(N, 256), 256, 0, as_stream(stream)>>>(out, inp, N);
  RTX_CUDA_CHECK_LAUNCH();
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N, bool accumulate, void* stream) {
  detail::require_positive(N, "gelu_backward", "N");
  RTX_NOTE_LAUNCH(gelu_backward_kernel, elem_blocks(N, 256), 256, 0);
  gelu_backward_kernel<<<elem_blocks(N, 256), 256, 0, as_stream(stream)>>>(dinp, inp, dout, N, accumulate ? 1 : 0);
  RTX_CUDA_CHECK_LAUNCH();
}

void residual_forward(float* out, const float* inp1, const float* inp2, int64_t N, void* stream) {
  detail::require_positive(N, "residual_forward", "N");
  RTX_NOTE_LAUNCH(residual_kernel, elem_blocks(N, 256), 256, 0);
  residual_kernel<<<elem_blocks(N, 256), 256, 0, as_stream(stream)>>>(out, inp1, inp2, N);
  RTX_CUDA_CHECK_LAUNCH();
}

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t N, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t, void* stream) {
  detail::require_positive(N, "adamw_update", "N");
  detail::require_positive(t, "adamw_update", "t");
  // Bias corrections in double: 1 - 0.999^t is small, float powf would cost ~1e-5 relative.
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t));
  RTX_NOTE_LAUNCH(adamw_kernel, elem_blocks(N, 256), 256, 0);
  adamw_kernel<<<elem_blocks(N, 256), 256, 0, as_stream(stream)>>>(param, m, v, grad, N, lr, beta1, beta2, eps,
                                                                   weight_decay, bc1, bc2);
  RTX_CUDA_CHECK_LAUNCH();
}

}  // namespace rtx::kernels::cuda
