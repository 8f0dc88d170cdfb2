// Element types of rtx tensors and scalar conversions (bf16, f16 <-> f32).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace rtx {

/// Tensor element types. bf16: bfloat16 (1-8-7); f16: IEEE 754 binary16 (1-5-10).
enum class DType : uint8_t { F32, BF16, F16, I32, I8, U8 };

/// Bytes per element: f32/i32 4, bf16/f16 2, i8/u8 1.
size_t dtype_size(DType t) noexcept;
/// Canonical lower-case name: "f32", "bf16", "f16", "i32", "i8", "u8".
const char* dtype_name(DType t) noexcept;
/// Parse a name ("f32", "float32", "bf16", "bfloat16", "f16", "float16", "i32", "i8", "u8").
/// Throws rtx::Error(Input) naming the bad value.
DType parse_dtype(const std::string& name);

/// f32 -> bf16 with round-to-nearest-even; NaN stays a (quiet) NaN; overflow rounds to inf.
inline uint16_t f32_to_bf16(float f) noexcept {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
/// bf16 -> f32, exact.
inline float bf16_to_f32(uint16_t h) noexcept {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// f32 -> IEEE binary16 with round-to-nearest-even, subnormals, inf and NaN handled.
uint16_t f32_to_f16(float f) noexcept;
/// IEEE binary16 -> f32, exact.
float f16_to_f32(uint16_t h) noexcept;

}  // namespace rtx
