// Float64 reference math shared by the op registry's oracles (kernels/problems_*.cpp) and the
// Polygraph IR's float64 interpreter (ir/exec.cpp): one home per formula.
#pragma once
#include <cmath>
#include <cstdint>

namespace rtx::kernels::reference {

/// LayerNorm over the last dim (GPT-2's, eps 1e-5, biased variance), in float64 whatever the
/// input type T: x (N, C), w and b (C) -> y (N, C), mean (N), rstd (N) = 1 / sqrt(var + 1e-5).
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, double* y, double* mean, double* rstd, int64_t N, int64_t C) {
  for (int64_t r = 0; r < N; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[r * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[r * C + c] - m) * (x[r * C + c] - m);
    v /= C;
    const double rs = 1.0 / std::sqrt(v + 1e-5);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - m) * rs * w[c] + b[c];
    mean[r] = m;
    rstd[r] = rs;
  }
}

}  // namespace rtx::kernels::reference
