// Philox 4x32-10 counter-based RNG (Salmon, Moraes, Dror, Shaw: "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011). Header-only and __host__ __device__, so CPU and CUDA
// produce the same stream for the same (seed, offset). Not a cryptographic generator.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define RTX_HD __host__ __device__ __forceinline__
#else
#define RTX_HD inline
#endif

namespace rtx {

/// Four 32-bit words: a Philox counter or output block.
struct U32x4 {
  uint32_t v[4];
};

/// Philox 4x32 with 10 rounds: the bijection of the paper (round constants M0=0xD2511F53,
/// M1=0xCD9E8D57, Weyl key bumps W0=0x9E3779B9, W1=0xBB67AE85).
RTX_HD U32x4 philox4x32_10(U32x4 ctr, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = U32x4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

/// The rtx stream: element i (u32) of stream (seed, subsequence) is word i%4 of
/// philox(counter = {lo(i/4), hi(i/4), lo(subseq), hi(subseq)}, key = {lo(seed), hi(seed)}).
RTX_HD uint32_t philox_u32(uint64_t seed, uint64_t subseq, uint64_t i) {
  const uint64_t blk = i >> 2;
  U32x4 c{{static_cast<uint32_t>(blk), static_cast<uint32_t>(blk >> 32), static_cast<uint32_t>(subseq),
           static_cast<uint32_t>(subseq >> 32)}};
  U32x4 r = philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return r.v[i & 3];
}

/// u32 -> float uniform in [0, 1): the top 24 bits times 2^-24 (exact in f32).
RTX_HD float u32_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

/// Uniform float in [lo, hi) for element i of stream (seed, subseq). Same on CPU and CUDA.
RTX_HD float philox_uniform(uint64_t seed, uint64_t subseq, uint64_t i, float lo, float hi) {
  return lo + (hi - lo) * u32_to_unit_float(philox_u32(seed, subseq, i));
}

/// Sequential CPU convenience wrapper over the counter-based stream (seed, subseq, offset).
class Philox {
 public:
  explicit Philox(uint64_t seed, uint64_t subseq = 0, uint64_t offset = 0)
      : seed_(seed), subseq_(subseq), offset_(offset) {}
  uint32_t next_u32() { return philox_u32(seed_, subseq_, offset_++); }
  /// Uniform in [0, 1).
  float next_float() { return u32_to_unit_float(next_u32()); }
  /// Uniform double in [0, 1) from 53 bits of two draws.
  double next_double() {
    const uint64_t a = next_u32() >> 5, b = next_u32() >> 6;
    return (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) * (1.0 / 9007199254740992.0);
  }
  /// Standard normal (Box-Muller on two uniforms).
  float next_normal();
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  uint64_t subseq() const { return subseq_; }

 private:
  uint64_t seed_, subseq_, offset_;
};

}  // namespace rtx
