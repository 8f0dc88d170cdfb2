// dtype sizes, names and bf16/f16 conversion round trips against exact expectations.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"

using namespace rtx;

TEST_CASE("dtype sizes and names", "[cpu]") {
  CHECK(dtype_size(DType::F32) == 4);
  CHECK(dtype_size(DType::BF16) == 2);
  CHECK(dtype_size(DType::F16) == 2);
  CHECK(dtype_size(DType::I32) == 4);
  CHECK(dtype_size(DType::I8) == 1);
  CHECK(dtype_size(DType::U8) == 1);
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I8, DType::U8})
    CHECK(parse_dtype(dtype_name(t)) == t);
  CHECK_THROWS_AS(parse_dtype("f64x"), Error);
}

TEST_CASE("bf16 round-to-nearest-even", "[cpu]") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0)
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(f32_to_bf16(-2.5f) == 0xc020);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::max()))));
  // every bf16 value round-trips exactly
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_bf16(f) == h);
  }
}

TEST_CASE("f16 conversions match IEEE binary16", "[cpu]") {
  CHECK(f32_to_f16(1.0f) == 0x3c00);
  CHECK(f32_to_f16(-2.0f) == 0xc000);
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);            // rounds to inf
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // tie to even -> 0
  CHECK(f32_to_f16(std::ldexp(3.0f, -26)) == 0x0001);  // 0.75 ulp -> 1
  CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  // every f16 value round-trips exactly; and conversion of each f16 value equals double math
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_f16(f) == h);
    const uint32_t e = (h >> 10) & 31, m = h & 1023;
    if (e != 31) {
      double want = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, int(e) - 15);
      if (h & 0x8000) want = -want;
      REQUIRE(double(f) == want);
    }
  }
}
