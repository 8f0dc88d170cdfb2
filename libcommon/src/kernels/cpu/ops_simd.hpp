// Internal: the per-ISA bodies of the bandwidth-bound CPU ops (softmax, layernorm, GELU, residual,
// AdamW). One source (ops_simd.inc) compiled three times: AVX-512, AVX2, scalar (ops_{avx512,avx2,scalar}.cpp).
#pragma once
#include <cstdint>

namespace rtx::kernels {

/// The kernels of one ISA level; each works on a contiguous range, OpenMP stays in ops_cpu.cpp.
struct SimdOps {
  // nt: write `out` with non-temporal stores (for outputs larger than the cache).
  // inp (rows,C) -> out (rows,C)
  void (*softmax_rows)(float* out, const float* inp, int64_t rows, int64_t C, bool nt);
  // inp (rows,C), w (C), b (C) -> out (rows,C), mean (rows), rstd (rows)
  void (*layernorm_rows)(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t rows, int64_t C, bool nt);
  // inp (n) -> out (n)
  void (*gelu_forward)(float* out, const float* inp, int64_t n, bool nt);
  // inp (n), dout (n); dinp (n) +=
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, int64_t n);
  // a (n), b (n) -> out (n)
  void (*residual)(float* out, const float* a, const float* b, int64_t n, bool nt);
  // grad (n); param, m, v (n) in place; bc1 = 1-beta1^t, bc2 = 1-beta2^t
  void (*adamw)(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                float eps, float wd, double bc1, double bc2);
};

extern const SimdOps kSimdScalar;
extern const SimdOps kSimdAvx2;
extern const SimdOps kSimdAvx512;

/// The table for cpu_isa_active().
const SimdOps& simd_ops();

}  // namespace rtx::kernels
