// The public CPU ops of rtx/kernels/ops.hpp other than attention and allreduce: argument checks,
// OpenMP split over rows/chunks, and the ISA table (ops_simd.hpp) chosen by cpu_isa_active().
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops_simd.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::kernels {

const SimdOps& simd_ops() {
  switch (cpu_isa_active()) {
    case Isa::Avx512: return kSimdAvx512;
    case Isa::Avx2: return kSimdAvx2;
    case Isa::Scalar: break;
  }
  return kSimdScalar;
}

namespace {

void need_dim(int64_t v, const char* dim, const char* fn) {
  if (v <= 0)
    throw_input(std::string(fn) + ": dimension " + dim + " = " + std::to_string(v) + " must be positive", dim,
                "pass a positive size");
}
void need_ptr(const void* p, const char* name, const char* fn) {
  if (!p) throw_input(std::string(fn) + ": pointer '" + name + "' is null", name, "pass an allocated buffer");
}
/// Whether an op writing `bytes` of output should use non-temporal stores: when the output is larger
/// than half the last-level cache (sysconf; 32 MiB assumed when unknown) it would be evicted before any
/// reuse, and streaming it skips the read-for-ownership of every output line (1/3 of a copy's traffic).
bool stream_output(int64_t bytes) {
  static const int64_t limit = [] {
    const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return llc > 0 ? static_cast<int64_t>(llc) / 2 : int64_t{16} << 20;
  }();
  return bytes > limit;
}
int64_t chunk_or(const OpParams* p, int64_t dflt) { return (p && p->chunk > 0) ? p->chunk : dflt; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Runs f(begin, end) over [0, n) in chunks of `chunk` with OpenMP (static schedule: results
// do not depend on the split because every element is computed independently).
template <class F>
void for_chunks(int64_t n, int64_t chunk, F&& f) {
  const int64_t nchunks = ceil_div(n, chunk);
  if (nchunks == 1) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; ++c) f(c * chunk, std::min(n, (c + 1) * chunk));
}

void check_ids(const int32_t* ids, int64_t n, int64_t V, const char* what, const char* fn) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      throw_input(std::string(fn) + ": " + what + "[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                      " is outside [0, V=" + std::to_string(V) + ")",
                  what, "token ids must be smaller than the vocabulary size V");
}

}  // namespace

void softmax_forward(float* out, const float* inp, int64_t N, int64_t C, const OpParams* p) {
  core::KernelRun run("softmax_forward", isa_name(cpu_isa_active()), {{"N", N}, {"C", C}});
  need_dim(N, "N", "softmax_forward");
  need_dim(C, "C", "softmax_forward");
  need_ptr(out, "out", "softmax_forward");
  need_ptr(inp, "inp", "softmax_forward");
  const SimdOps& k = simd_ops();
  const bool nt = stream_output(N * C * 4);
  for_chunks(N, chunk_or(p, 8), [&](int64_t b, int64_t e) { k.softmax_rows(out + b * C, inp + b * C, e - b, C, nt); });
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, const OpParams* p) {
  core::KernelRun run("layernorm_forward", isa_name(cpu_isa_active()), {{"N", N}, {"C", C}});
  need_dim(N, "N", "layernorm_forward");
  need_dim(C, "C", "layernorm_forward");
  for (auto [q, n] : {std::pair<const void*, const char*>{out, "out"}, {mean, "mean"}, {rstd, "rstd"}, {inp, "inp"},
                      {weight, "weight"}, {bias, "bias"}})
    need_ptr(q, n, "layernorm_forward");
  const SimdOps& k = simd_ops();
  const bool nt = stream_output(N * C * 4);
  for_chunks(N, chunk_or(p, 8), [&](int64_t b, int64_t e) {
    k.layernorm_rows(out + b * C, mean + b, rstd + b, inp + b * C, weight, bias, e - b, C, nt);
  });
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        const OpParams* p) {
  core::KernelRun run("layernorm_backward", "cpu.f64", {{"N", N}, {"C", C}});
  need_dim(N, "N", "layernorm_backward");
  need_dim(C, "C", "layernorm_backward");
  for (auto [q, n] : {std::pair<const void*, const char*>{dinp, "dinp"}, {dweight, "dweight"}, {dbias, "dbias"},
                      {dout, "dout"}, {inp, "inp"}, {weight, "weight"}, {mean, "mean"}, {rstd, "rstd"}})
    need_ptr(q, n, "layernorm_backward");
  // Float64 arithmetic, one rounding per output: the result cancels terms of the tensor's scale
  // (dnorm - mean(dnorm) - norm*mean(dnorm*norm)) and sums N rows, so float32 would miss 1e-5
  // against check.cpp's floor. dinp: rows are independent.
  for_chunks(N, chunk_or(p, 8), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      float* dx = dinp + n * C;
      const double mu = mean[n], rs = rstd[n];
      double dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double norm = (x[c] - mu) * rs;
        const double dnorm = static_cast<double>(weight[c]) * dy[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= static_cast<double>(C);
      dnorm_norm_mean /= static_cast<double>(C);
      for (int64_t c = 0; c < C; ++c) {
        const double norm = (x[c] - mu) * rs;
        const double dnorm = static_cast<double>(weight[c]) * dy[c];
        dx[c] = static_cast<float>(dx[c] + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs);
      }
    }
  });
  // dweight, dbias: each work item owns 64 channels and sums rows 0..N-1 in order.
  for_chunks(C, 64, [&](int64_t b, int64_t e) {
    double dw[64], db[64];
    for (int64_t c = b; c < e; ++c) dw[c - b] = db[c - b] = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      const double mu = mean[n], rs = rstd[n];
      for (int64_t c = b; c < e; ++c) {
        db[c - b] += dy[c];
        dw[c - b] += (x[c] - mu) * rs * dy[c];
      }
    }
    for (int64_t c = b; c < e; ++c) {
      dweight[c] = static_cast<float>(dweight[c] + dw[c - b]);
      dbias[c] = static_cast<float>(dbias[c] + db[c - b]);
    }
  });
}

void gelu_forward(float* out, const float* inp, int64_t N, const OpParams* p) {
  core::KernelRun run("gelu_forward", isa_name(cpu_isa_active()), {{"N", N}});
  need_dim(N, "N", "gelu_forward");
  need_ptr(out, "out", "gelu_forward");
  need_ptr(inp, "inp", "gelu_forward");
  const SimdOps& k = simd_ops();
  const bool nt = stream_output(N * 4);
  for_chunks(N, chunk_or(p, 16384), [&](int64_t b, int64_t e) { k.gelu_forward(out + b, inp + b, e - b, nt); });
#ifdef RTX_PLANT_GELU_SLOWDOWN
  // Benchmark power tests only (cmake -DRTX_PLANT_GELU_SLOWDOWN=ON, bench/compare_false_alarms.sh):
  // redo the first 10% of the elements, 10% more work with the same output.
  const int64_t extra = N / 10;
  if (extra > 0) for_chunks(extra, chunk_or(p, 16384), [&](int64_t b, int64_t e) { k.gelu_forward(out + b, inp + b, e - b, nt); });
#endif
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N, const OpParams* p) {
  core::KernelRun run("gelu_backward", isa_name(cpu_isa_active()), {{"N", N}});
  need_dim(N, "N", "gelu_backward");
  need_ptr(dinp, "dinp", "gelu_backward");
  need_ptr(inp, "inp", "gelu_backward");
  need_ptr(dout, "dout", "gelu_backward");
  const SimdOps& k = simd_ops();
  for_chunks(N, chunk_or(p, 16384), [&](int64_t b, int64_t e) { k.gelu_backward(dinp + b, inp + b, dout + b, e - b); });
}

void residual_forward(float* out, const float* inp1, const float* inp2, int64_t N, const OpParams* p) {
  core::KernelRun run("residual_forward", isa_name(cpu_isa_active()), {{"N", N}});
  need_dim(N, "N", "residual_forward");
  need_ptr(out, "out", "residual_forward");
  need_ptr(inp1, "inp1", "residual_forward");
  need_ptr(inp2, "inp2", "residual_forward");
  const SimdOps& k = simd_ops();
  const bool nt = stream_output(N * 4);
  for_chunks(N, chunk_or(p, 16384), [&](int64_t b, int64_t e) { k.residual(out + b, inp1 + b, inp2 + b, e - b, nt); });
}

void encoder_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t B, int64_t T,
                     int64_t C, int64_t V) {
  core::KernelRun run("encoder_forward", "cpu", {{"B", B}, {"T", T}, {"C", C}, {"V", V}});
  need_dim(B, "B", "encoder_forward");
  need_dim(T, "T", "encoder_forward");
  need_dim(C, "C", "encoder_forward");
  need_dim(V, "V", "encoder_forward");
  for (auto [q, n] : {std::pair<const void*, const char*>{out, "out"}, {ids, "ids"}, {wte, "wte"}, {wpe, "wpe"}})
    need_ptr(q, n, "encoder_forward");
  check_ids(ids, B * T, V, "ids", "encoder_forward");
  for_chunks(B * T, 16, [&](int64_t b, int64_t e) {
    for (int64_t bt = b; bt < e; ++bt) {
      const float* te = wte + static_cast<int64_t>(ids[bt]) * C;
      const float* pe = wpe + (bt % T) * C;
      float* o = out + bt * C;
      for (int64_t c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
  });
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t B, int64_t T,
                      int64_t C, int64_t V) {
  core::KernelRun run("encoder_backward", "cpu", {{"B", B}, {"T", T}, {"C", C}, {"V", V}});
  need_dim(B, "B", "encoder_backward");
  need_dim(T, "T", "encoder_backward");
  need_dim(C, "C", "encoder_backward");
  need_dim(V, "V", "encoder_backward");
  for (auto [q, n] : {std::pair<const void*, const char*>{dwte, "dwte"}, {dwpe, "dwpe"}, {dout, "dout"}, {ids, "ids"}})
    need_ptr(q, n, "encoder_backward");
  check_ids(ids, B * T, V, "ids", "encoder_backward");
  // Positions grouped by token (stable: (b,t) order within a token). Each work item owns 64 channels;
  // a token's rows and a position's B rows are summed in float64 and added once, so the result is the
  // correctly rounded sum whatever the thread count.
  const int64_t BT = B * T;
  std::vector<int64_t> order(static_cast<size_t>(BT));
  for (int64_t i = 0; i < BT; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [ids](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  for_chunks(C, 64, [&](int64_t c0, int64_t c1) {
    double acc[64];
    for (int64_t g = 0; g < BT;) {
      const int32_t tok = ids[order[g]];
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] = 0;
      for (; g < BT && ids[order[g]] == tok; ++g) {
        const float* d = dout + order[g] * C;
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += d[c];
      }
      float* te = dwte + static_cast<int64_t>(tok) * C;
      for (int64_t c = c0; c < c1; ++c) te[c] = static_cast<float>(te[c] + acc[c - c0]);
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] = 0;
      for (int64_t b = 0; b < B; ++b) {
        const float* d = dout + (b * T + t) * C;
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += d[c];
      }
      float* pe = dwpe + t * C;
      for (int64_t c = c0; c < c1; ++c) pe[c] = static_cast<float>(pe[c] + acc[c - c0]);
    }
  });
}

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V) {
  core::KernelRun run("crossentropy_forward", "cpu", {{"N", N}, {"V", V}});
  need_dim(N, "N", "crossentropy_forward");
  need_dim(V, "V", "crossentropy_forward");
  for (auto [q, n] : {std::pair<const void*, const char*>{losses, "losses"}, {logits, "logits"}, {targets, "targets"}})
    need_ptr(q, n, "crossentropy_forward");
  check_ids(targets, N, V, "targets", "crossentropy_forward");
  for_chunks(N, 4, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* x = logits + n * V;
      float m = x[0];
      for (int64_t v = 1; v < V; ++v) m = std::max(m, x[v]);
      float s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(x[v] - m);
      losses[n] = (m + std::log(s)) - x[targets[n]];
    }
  });
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N, int64_t V) {
  core::KernelRun run("crossentropy_backward", "cpu", {{"N", N}, {"V", V}});
  need_dim(N, "N", "crossentropy_backward");
  need_dim(V, "V", "crossentropy_backward");
  for (auto [q, n] :
       {std::pair<const void*, const char*>{dlogits, "dlogits"}, {logits, "logits"}, {targets, "targets"}})
    need_ptr(q, n, "crossentropy_backward");
  check_ids(targets, N, V, "targets", "crossentropy_backward");
  const float dloss = 1.0f / static_cast<float>(N);
  for_chunks(N, 4, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float* x = logits + n * V;
      float* d = dlogits + n * V;
      float m = x[0];
      for (int64_t v = 1; v < V; ++v) m = std::max(m, x[v]);
      float s = 0;
      for (int64_t v = 0; v < V; ++v) {
        d[v] = std::exp(x[v] - m);
        s += d[v];
      }
      const float inv = 1.0f / s;
      const int64_t t = targets[n];
      for (int64_t v = 0; v < V; ++v) d[v] = (d[v] * inv - (v == t ? 1.0f : 0.0f)) * dloss;
    }
  });
}

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t N, const AdamWParams& hp,
                  const OpParams* p) {
  core::KernelRun run("adamw_update", isa_name(cpu_isa_active()), {{"N", N}});
  need_dim(N, "N", "adamw_update");
  for (auto [q, n] : {std::pair<const void*, const char*>{param, "param"}, {m, "m"}, {v, "v"}, {grad, "grad"}})
    need_ptr(q, n, "adamw_update");
  if (hp.t < 1) throw_input("adamw_update: step t = " + std::to_string(hp.t) + " must be >= 1", "t", "steps count from 1");
  const double bc1 = 1.0 - std::pow(static_cast<double>(hp.beta1), hp.t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(hp.beta2), hp.t);
  const SimdOps& k = simd_ops();
  for_chunks(N, chunk_or(p, 16384), [&](int64_t b, int64_t e) {
    k.adamw(param + b, m + b, v + b, grad + b, e - b, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, bc1, bc2);
  });
}

}  // namespace rtx::kernels
