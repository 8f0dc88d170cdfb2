// Seeded fill, poison, float64 comparison and checksums for op instances.
#include "rtx/kernels/check.hpp"

#include <cmath>
#include <cstring>
#include <list>
#include <mutex>

#include "rtx/core/philox.hpp"
#include "rtx/kernels/problem.hpp"

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


namespace {

uint64_t problem_key(const Problem& p) {
  const char* fn = p.reference.target_type().name();
  uint64_t h = fnv1a64(fn, std::strlen(fn));
  const std::string shape = shape_to_string(p.shape);
  h = fnv1a64(shape.data(), shape.size(), h);
  const auto dt = static_cast<uint8_t>(p.dtype);
  h = fnv1a64(&dt, 1, h);
  for (const auto& t : p.inputs) {
    h = fnv1a64(t.name.data(), t.name.size(), h);
    h = fnv1a64(t.data.data(), t.data.size() * sizeof(float), h);
  }
  h = fnv1a64(p.ids.data(), p.ids.size() * sizeof(int32_t), h);
  for (const auto& o : p.outputs) {
    h = fnv1a64(o.name.data(), o.name.size(), h);
    const uint64_t n = o.size;
    h = fnv1a64(&n, sizeof n, h);
    h = fnv1a64(o.init.data(), o.init.size() * sizeof(float), h);
  }
  return h;
}

struct RefCache {
  std::mutex mu;
  std::list<std::pair<uint64_t, std::shared_ptr<const Reference>>> lru;  // most recent first
  size_t bytes = 0;
};

size_t ref_bytes(const Reference& r) {
  size_t n = 0;
  for (const auto& v : r) n += v.size() * sizeof(double);
  return n;
}

}  // namespace

std::shared_ptr<const Reference> reference_of(const Problem& p) {
  static RefCache cache;
  constexpr size_t kMaxBytes = size_t{2} << 30;
  const uint64_t key = problem_key(p);
  {
    std::lock_guard<std::mutex> lk(cache.mu);
    for (auto it = cache.lru.begin(); it != cache.lru.end(); ++it)
      if (it->first == key) {
        cache.lru.splice(cache.lru.begin(), cache.lru, it);
        return it->second;
      }
  }
  auto ref = std::make_shared<const Reference>(p.reference(p));  // computed outside the lock
  const size_t b = ref_bytes(*ref);
  std::lock_guard<std::mutex> lk(cache.mu);
  if (b <= kMaxBytes) {
    cache.lru.emplace_front(key, ref);
    cache.bytes += b;
    while (cache.bytes > kMaxBytes && cache.lru.size() > 1) {
      cache.bytes -= ref_bytes(*cache.lru.back().second);
      cache.lru.pop_back();
    }
  }
  return ref;
}

}  // namespace rtx::kernels
