// Helpers every op's Instance uses: seeded input fill, output poisoning, comparison
// against a float64 reference, and output checksums. CPU-side; CUDA instances copy back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "rtx/core/hash.hpp"
#include "rtx/kernels/registry.hpp"

namespace rtx::kernels {

/// Fill x[0..n) with uniform values in [lo, hi) from Philox stream (seed, subseq).
/// Same values as the CUDA fill for the same arguments.
void fill_uniform(float* x, size_t n, uint64_t seed, uint64_t subseq, float lo = -1.f, float hi = 1.f);
/// Fill integer ids uniformly in [0, vocab) (for embedding / cross-entropy targets).
void fill_ids(int32_t* x, size_t n, uint64_t seed, uint64_t subseq, int32_t vocab);
/// Write quiet NaN into every element so unwritten outputs are detectable.
void poison(float* x, size_t n);
/// Count elements still holding the exact poison bit pattern.
size_t count_poison(const float* x, size_t n);

/// Compare `out` (n floats) with `ref` (n doubles), accumulating into `r`:
/// error = max_i |out_i - ref_i| / max_j |ref_j| (max-norm relative error, per tensor; the
/// result is the max over tensors). A poisoned (unwritten) or non-finite element fails.
/// `name` labels the tensor in r.detail. Call once per output tensor; then finish_check.
void compare(const float* out, const double* ref, size_t n, const char* name, CheckResult& r);
/// Set r.tolerance and r.ok from the accumulated error.
void finish_check(CheckResult& r, double tolerance);

/// FNV-1a 64-bit over bytes; `h` chains several buffers (its home is core/hash.hpp).
using rtx::fnv1a64;

}  // namespace rtx::kernels
