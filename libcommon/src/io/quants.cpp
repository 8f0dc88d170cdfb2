// Dequantization of ggml's block formats to f32, written from the block layouts of ggml's
// ggml-common.h (block_q4_0 ... block_q6_K) and the dequantize_row_* semantics of
// ggml-quants.c; checked against gguf-py's numpy dequantizer (tests/reference/
// gguf_quants_golden.py). All multi-byte fields are little-endian.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/gguf.hpp"

namespace rtx::io {

namespace {

inline float h2f(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// Q4_0: d (f16), 16 bytes of nibbles; element j is the low nibble of byte j, element j+16 the
// high nibble; value (q - 8) * d. 18 bytes per 32 values.
void q4_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}
// Q4_1: d, m (f16), 16 bytes of nibbles; value q * d + m. 20 bytes.
void q4_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[4 + j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}
// Q5_0: d, 4 bytes qh (bit j = 5th bit of element j), 16 bytes of nibbles; value (q - 16) * d. 22 bytes.
void q5_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    const int hi0 = ((qh >> j) & 1) << 4, hi1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>(((b[6 + j] & 0x0F) | hi0) - 16) * d;
    y[j + 16] = static_cast<float>(((b[6 + j] >> 4) | hi1) - 16) * d;
  }
}
// Q5_1: d, m, qh, nibbles; value q * d + m. 24 bytes.
void q5_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 16; ++j) {
    const int hi0 = ((qh >> j) & 1) << 4, hi1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>((b[8 + j] & 0x0F) | hi0) * d + m;
    y[j + 16] = static_cast<float>((b[8 + j] >> 4) | hi1) * d + m;
  }
}
// Q8_0: d, 32 int8; value q * d. 34 bytes.
void q8_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// K-quants: super-blocks of 256 values. The 12 scale bytes of Q4_K/Q5_K hold 8 6-bit scales and
// 8 6-bit mins: sub-block j < 4 in the low 6 bits of bytes j and j+4; j >= 4 in the nibbles of
// byte j+4 plus the top 2 bits of bytes j-4 (scale) and j (min).
void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}
// Q4_K: d, dmin (f16), scales[12], qs[128]; 64 values per pair of sub-blocks: the low nibbles of
// 32 bytes, then their high nibbles; value d*sc*q - dmin*m. 144 bytes.
void q4_k(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}
// Q5_K: d, dmin, scales[12], qh[32], qs[128]; as Q4_K with a 5th bit from qh (bit 2i for the low
// nibbles of pair i, bit 2i+1 for the high). 176 bytes.
void q5_k(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}
// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], d (f16); each half of 128
// values takes 64 ql bytes, 32 qh bytes and 8 scales; value d * scale * (q - 32). 210 bytes.
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = h2f(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is] * q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2] * q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4] * q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6] * q4);
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return q4_0;
    case GgmlType::Q4_1: return q4_1;
    case GgmlType::Q5_0: return q5_0;
    case GgmlType::Q5_1: return q5_1;
    case GgmlType::Q8_0: return q8_0;
    case GgmlType::Q4_K: return q4_k;
    case GgmlType::Q5_K: return q5_k;
    case GgmlType::Q6_K: return q6_k;
    default: return nullptr;
  }
}

}  // namespace

bool ggml_can_dequantize(uint32_t type) noexcept {
  const auto t = static_cast<GgmlType>(type);
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || block_fn(type) != nullptr;
}

void ggml_dequantize(uint32_t type, const uint8_t* src, float* dst, uint64_t n) {
  const auto t = static_cast<GgmlType>(type);
  if (n == 0 && ggml_can_dequantize(type)) return;  // an empty tensor: dst may be null (found by fuzzing)
  if (t == GgmlType::F32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint16_t h = static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8));
      dst[i] = t == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    return;
  }
  const BlockFn f = block_fn(type);
  const auto [block, bytes] = ggml_type_block(type);
  if (!f || block == 0) throw_input(std::string("ggml type ") + ggml_type_name(type) + " cannot be dequantized", "type");
  if (n % block != 0)
    throw_input(std::to_string(n) + " values are not a whole number of " + ggml_type_name(type) + " blocks of " +
                    std::to_string(block),
                "n");
  for (uint64_t i = 0; i < n / block; ++i) f(src + i * bytes, dst + i * block);
}

void require_finite(const std::vector<float>& v, const std::string& where) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw_input("non-finite weight (" + std::string(std::isnan(v[i]) ? "NaN" : "Inf") + ") at element " +
                      std::to_string(i),
                  where, "the file is corrupt or was written from a diverged run");
}

}  // namespace rtx::io
