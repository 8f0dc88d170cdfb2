// Philox4x32-10 against the known-answer vectors of Random123 (kat_vectors, philox4x32_10).
#include <catch2/catch.hpp>

#include "rtx/core/philox.hpp"

using namespace rtx;

static void kat(U32x4 ctr, uint32_t k0, uint32_t k1, U32x4 want) {
  U32x4 got = philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i) CHECK(got.v[i] == want.v[i]);
}

TEST_CASE("philox4x32-10 known answers", "[cpu]") {
  kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  kat({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
      {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  kat({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
      {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST_CASE("philox stream is addressable by offset", "[cpu]") {
  Philox a(42, 7);
  for (int i = 0; i < 10; ++i) a.next_u32();
  Philox b(42, 7, 10);
  CHECK(a.next_u32() == b.next_u32());
  CHECK(philox_u32(42, 7, 11) == b.next_u32());
  // different subsequences and seeds differ
  CHECK(philox_u32(42, 7, 0) != philox_u32(42, 8, 0));
  CHECK(philox_u32(42, 7, 0) != philox_u32(43, 7, 0));
}

TEST_CASE("philox uniforms are in range with the right mean", "[cpu]") {
  Philox p(1);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    float u = p.next_float();
    REQUIRE(u >= 0.f);
    REQUIRE(u < 1.f);
    sum += u;
  }
  CHECK(sum / n == Approx(0.5).margin(0.005));
  double s1 = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    double z = p.next_normal();
    s1 += z;
    s2 += z * z;
  }
  CHECK(s1 / n == Approx(0.0).margin(0.01));
  CHECK(s2 / n == Approx(1.0).margin(0.02));
}
