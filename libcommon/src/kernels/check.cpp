// Seeded fill, poison, float64 comparison and checksums for op instances.
#include "rtx/kernels/check.hpp"

#include <cmath>
#include <cstring>

#include "rtx/core/philox.hpp"

namespace rtx::kernels {

static constexpr uint32_t kPoisonBits = 0x7fc0dead;  // a quiet NaN no kernel produces

void fill_uniform(float* x, size_t n, uint64_t seed, uint64_t subseq, float lo, float hi) {
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (long long i = 0; i < static_cast<long long>(n); ++i) x[i] = philox_uniform(seed, subseq, i, lo, hi);
}

void fill_ids(int32_t* x, size_t n, uint64_t seed, uint64_t subseq, int32_t vocab) {
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<int32_t>((static_cast<uint64_t>(philox_u32(seed, subseq, i)) * static_cast<uint64_t>(vocab)) >> 32);
}

void poison(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) std::memcpy(&x[i], &kPoisonBits, 4);
}

size_t count_poison(const float* x, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    c += (b == kPoisonBits);
  }
  return c;
}

void compare(const float* out, const double* ref, size_t n, const char* name, CheckResult& r) {
  // Max-norm relative error: max_i |out_i - ref_i| / max_j |ref_j| (each tensor on its own
  // scale). Unlike a per-element relative error it does not blow up on elements that cancel
  // to ~0 (a length-K dot product in fp32 has absolute error ~ sqrt(K) eps |terms|), yet a
  // single wrong element of a tensor still shows at full size.
  double amax = 0;
  for (size_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(ref[i]));
  const double scale = amax > 0 ? amax : 1.0;
  const size_t unwritten = count_poison(out, n);
  if (unwritten && r.unwritten == 0) r.detail = std::string(name) + ": " + std::to_string(unwritten) + " elements unwritten";
  r.unwritten += unwritten;
  for (size_t i = 0; i < n; ++i) {
    const double o = out[i];
    if (!std::isfinite(o)) {
      if (std::isfinite(ref[i])) {
        if (r.nonfinite == 0 && r.detail.empty())
          r.detail = std::string(name) + "[" + std::to_string(i) + "] is not finite";
        ++r.nonfinite;
      }
      continue;
    }
    const double e = std::fabs(o - ref[i]) / scale;
    if (e > r.max_rel_err) {
      r.max_rel_err = e;
      if (r.unwritten == 0 && r.nonfinite == 0)
        r.detail = std::string(name) + "[" + std::to_string(i) + "]: got " + std::to_string(o) + ", want " + std::to_string(ref[i]);
    }
  }
}

void finish_check(CheckResult& r, double tolerance) {
  r.tolerance = tolerance;
  r.ok = r.max_rel_err <= tolerance && r.unwritten == 0 && r.nonfinite == 0;
}

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace rtx::kernels
