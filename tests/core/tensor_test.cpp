// rtx::Tensor: views and strides against hand-computed layouts, odd sizes, shape/argument
// errors, 64-byte alignment, and dtype conversions against a float64 rounding reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/core/tensor.hpp"
#include "test_util.hpp"

using namespace rtx;

namespace {

// Expect `f` to throw rtx::Error of category `c` whose where() is `where`.
template <class F>
void expect_error(F&& f, ErrorCategory c, const std::string& where) {
  try {
    f();
    FAIL("no rtx::Error thrown (expected one naming '" << where << "')");
  } catch (const Error& e) {
    CHECK(e.category() == c);
    CHECK(e.where() == where);
  }
}

Tensor iota(const std::vector<int64_t>& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i);
  return t;
}

std::vector<float> values(const Tensor& t) {
  Tensor c = t.contiguous();
  const float* p = c.data_as<float>();
  return std::vector<float>(p, p + c.numel());
}

// Float64 reference: round x (finite, |x| within range) to `mant` stored mantissa bits with
// round-to-nearest-even, ignoring exponent range (fine for the normal values used here).
double round_to_bits(double x, int mant) {
  if (x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  const double ulp = std::ldexp(1.0, e - 1 - mant);
  const double q = x / ulp;  // exact: scaling by a power of two
  const double fl = std::floor(q);
  const double frac = q - fl;
  double r = fl;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0)) r = fl + 1;
  return r * ulp;
}

}  // namespace

TEST_CASE("transpose then contiguous on a 2x3x4 tensor", "[cpu]") {
  Tensor t = iota({2, 3, 4});  // t[i][j][k] = 12 i + 4 j + k
  CHECK(t.strides() == std::vector<int64_t>{12, 4, 1});
  CHECK(t.is_contiguous());
  Tensor tt = t.transpose(0, 2);  // tt[k][j][i] = t[i][j][k]
  CHECK(tt.shape() == std::vector<int64_t>{4, 3, 2});
  CHECK(tt.strides() == std::vector<int64_t>{1, 4, 12});
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.shares_storage(t));
  Tensor c = tt.contiguous();
  CHECK(c.is_contiguous());
  CHECK_FALSE(c.shares_storage(t));
  CHECK(c.strides() == std::vector<int64_t>{6, 2, 1});
  const std::vector<float> want = {0, 12, 4, 16, 8, 20, 1, 13, 5, 17, 9, 21,
                                   2, 14, 6, 18, 10, 22, 3, 15, 7, 19, 11, 23};
  CHECK(values(c) == want);
  CHECK(tt.get({3, 1, 1}) == 12 + 4 + 3);
  CHECK(tt.element_offset({3, 1, 1}) == 19);

  // permute {1,2,0}: p[j][k][i] = t[i][j][k]
  Tensor p = t.permute({1, 2, 0});
  CHECK(p.shape() == std::vector<int64_t>{3, 4, 2});
  CHECK(p.strides() == std::vector<int64_t>{4, 1, 12});
  const std::vector<float> want_p = {0, 12, 1, 13, 2, 14, 3, 15, 4, 16, 5, 17,
                                     6, 18, 7, 19, 8, 20, 9, 21, 10, 22, 11, 23};
  CHECK(values(p) == want_p);
  // contiguous() of a contiguous tensor is the same view
  CHECK(t.contiguous().data() == t.data());
}

TEST_CASE("narrow of a narrow, select, views share storage", "[cpu]") {
  Tensor t = Tensor::empty({7, 127}, DType::F32);
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 127; ++c) t.at<float>({r, c}) = static_cast<float>(r * 1000 + c);
  Tensor n1 = t.narrow(1, 5, 100);   // columns 5..104
  Tensor n2 = n1.narrow(1, 10, 7);   // columns 15..21
  Tensor n3 = n2.narrow(0, 2, 3);    // rows 2..4
  CHECK(n3.shape() == std::vector<int64_t>{3, 7});
  CHECK(n3.strides() == std::vector<int64_t>{127, 1});
  CHECK(n3.offset() == 2 * 127 + 15);
  CHECK_FALSE(n3.is_contiguous());
  CHECK(n3.shares_storage(t));
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 7; ++c) CHECK(n3.get({r, c}) == (r + 2) * 1000 + (c + 15));
  CHECK(static_cast<float*>(n3.data()) == t.data_as<float>() + 2 * 127 + 15);
  // writes through the view land in the base
  n3.at<float>({1, 6}) = -1.0f;
  CHECK(t.get({3, 21}) == -1.0);
  // a view keeps the storage alive after the base is gone
  Tensor keep;
  {
    Tensor base = iota({7});
    keep = base.narrow(0, 6, 1);
  }
  CHECK(keep.get({0}) == 6.0);
  CHECK(keep.storage().use_count() == 1);
  // select drops a dim
  Tensor row = t.select(0, 4);
  CHECK(row.shape() == std::vector<int64_t>{127});
  CHECK(row.get({126}) == 4126.0);
  Tensor col = t.select(-1, 3);
  CHECK(col.shape() == std::vector<int64_t>{7});
  CHECK(col.stride(0) == 127);
  CHECK(col.get({6}) == 6003.0);
  // empty narrow
  CHECK(t.narrow(0, 7, 0).numel() == 0);
  CHECK(t.narrow(0, 7, 0).is_contiguous());
}

TEST_CASE("odd sizes 1, 7, 127: numel, nbytes, strides, alignment, clone", "[cpu]") {
  const std::vector<std::vector<int64_t>> shapes = {{1}, {7}, {127}, {1, 1, 1}, {7, 127}, {127, 7, 1}, {1, 7, 1, 127}};
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I8, DType::U8}) {
    for (const auto& s : shapes) {
      int64_t n = 1;
      for (int64_t v : s) n *= v;
      Tensor t = Tensor::zeros(s, dt);
      INFO(t.str());
      CHECK(t.numel() == n);
      CHECK(t.nbytes() == static_cast<size_t>(n) * dtype_size(dt));
      CHECK(t.ndim() == static_cast<int>(s.size()));
      CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
      CHECK(t.is_contiguous());
      int64_t stride = 1;
      for (int d = t.ndim() - 1; d >= 0; --d) {
        CHECK(t.stride(d) == stride);
        stride *= s[d];
      }
      // zero-filled; fill through set(), clone, compare
      Tensor f = t.reshape({n});
      bool all_zero = true;
      for (int64_t i = 0; i < n; ++i) all_zero = all_zero && f.get({i}) == 0.0;
      CHECK(all_zero);
      for (int64_t i = 0; i < n; ++i) f.set({i}, static_cast<double>(i % 100));
      Tensor c = t.clone();
      CHECK_FALSE(c.shares_storage(t));
      CHECK(std::memcmp(c.data(), t.data(), t.nbytes()) == 0);
    }
  }
  // 0-dim tensor holds one element
  Tensor s = Tensor::zeros({}, DType::F32);
  CHECK(s.numel() == 1);
  CHECK(s.ndim() == 0);
  s.set({}, 2.5);
  CHECK(s.get({}) == 2.5);
  CHECK_FALSE(Tensor().defined());
  CHECK(Tensor().numel() == 0);
}

TEST_CASE("64-byte alignment of host storage", "[cpu]") {
  for (int64_t n : {1, 7, 63, 64, 65, 127, 1000, 4097}) {
    for (DType dt : {DType::F32, DType::BF16, DType::I8}) {
      Tensor t = Tensor::empty({n}, dt);
      CHECK(reinterpret_cast<uintptr_t>(t.data()) % kHostAlign == 0);
      CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
    }
  }
  CHECK(reinterpret_cast<uintptr_t>(Tensor::empty({0}, DType::F32).data()) % 64 == 0);
}

TEST_CASE("reshape of contiguous tensors", "[cpu]") {
  Tensor t = iota({2, 3, 4});
  Tensor r = t.reshape({4, -1});
  CHECK(r.shape() == std::vector<int64_t>{4, 6});
  CHECK(r.strides() == std::vector<int64_t>{6, 1});
  CHECK(r.shares_storage(t));
  CHECK(r.get({3, 5}) == 23.0);
  Tensor v = t.narrow(0, 1, 1).reshape({12});  // contiguous narrow with an offset
  CHECK(v.offset() == 12);
  CHECK(v.get({0}) == 12.0);
  CHECK(v.get({11}) == 23.0);
  expect_error([&] { t.transpose(0, 1).reshape({24}); }, ErrorCategory::Usage, "Tensor::reshape");
  expect_error([&] { t.reshape({5, 5}); }, ErrorCategory::Usage, "shape");
  expect_error([&] { t.reshape({-1, -1}); }, ErrorCategory::Usage, "shape");
  expect_error([&] { t.reshape({7, -1}); }, ErrorCategory::Usage, "shape");
}

TEST_CASE("bad shapes, dims and indices are rejected naming the argument", "[cpu]") {
  // 8 dims is the maximum
  Tensor t8 = Tensor::zeros(std::vector<int64_t>(8, 1), DType::F32);
  CHECK(t8.ndim() == 8);
  expect_error([] { Tensor::empty(std::vector<int64_t>(9, 1), DType::F32); }, ErrorCategory::Input, "shape");
  expect_error([] { Tensor::empty({2, -3}, DType::F32); }, ErrorCategory::Input, "shape");
  expect_error([] { Tensor::empty({int64_t(1) << 40, int64_t(1) << 40}, DType::F32); }, ErrorCategory::Input,
               "shape");
  expect_error([] { contiguous_strides(std::vector<int64_t>(9, 2)); }, ErrorCategory::Input, "shape");
  float buf[4] = {0, 1, 2, 3};
  expect_error([&] { Tensor::from_blob(buf, std::vector<int64_t>(9, 1), DType::F32); }, ErrorCategory::Input, "shape");
  Tensor t = iota({7, 127});
  Tensor t7 = t8.reshape(std::vector<int64_t>(7, 1));
  expect_error([&] { t7.reshape(std::vector<int64_t>(9, 1)); }, ErrorCategory::Input, "shape");
  expect_error([&] { t.narrow(2, 0, 1); }, ErrorCategory::Usage, "dim");
  expect_error([&] { t.narrow(-3, 0, 1); }, ErrorCategory::Usage, "dim");
  expect_error([&] { t.narrow(0, -1, 1); }, ErrorCategory::Usage, "start");
  expect_error([&] { t.narrow(0, 8, 0); }, ErrorCategory::Usage, "start");
  expect_error([&] { t.narrow(1, 120, 8); }, ErrorCategory::Usage, "length");
  expect_error([&] { t.narrow(1, 0, -1); }, ErrorCategory::Usage, "length");
  expect_error([&] { t.select(0, 7); }, ErrorCategory::Usage, "index");
  expect_error([&] { t.get({7, 0}); }, ErrorCategory::Usage, "index[0]");
  expect_error([&] { t.get({0, 127}); }, ErrorCategory::Usage, "index[1]");
  expect_error([&] { t.get({0}); }, ErrorCategory::Usage, "index");
  expect_error([&] { t.permute({0, 0}); }, ErrorCategory::Usage, "order");
  expect_error([&] { t.permute({0}); }, ErrorCategory::Usage, "order");
  expect_error([&] { t.permute({0, 2}); }, ErrorCategory::Usage, "order");
  expect_error([&] { t.transpose(0, 5); }, ErrorCategory::Usage, "d1");
  expect_error([&] { t.size(2); }, ErrorCategory::Usage, "dim");
  expect_error([&] { t.data_as<int32_t>(); }, ErrorCategory::Usage, "data_as");
  expect_error([&] { t.at<uint8_t>({0, 0}); }, ErrorCategory::Usage, "at");
  expect_error([&] { Tensor::from_blob(nullptr, {3}, DType::F32); }, ErrorCategory::Usage, "data");
  expect_error([&] { Tensor::from_blob(buf, {2, 2}, DType::F32, Device::cpu(), {1}); }, ErrorCategory::Usage,
               "strides");
  expect_error([&] { Tensor::from_vector({1, 2, 3}, {2, 2}); }, ErrorCategory::Usage, "values");
  Tensor a = iota({2, 3});
  expect_error([&] { a.copy_from(iota({3, 2})); }, ErrorCategory::Usage, "Tensor::copy_from");
  expect_error([&] { a.copy_from(a.to(DType::BF16)); }, ErrorCategory::Usage, "Tensor::copy_from");
}

TEST_CASE("from_blob is a non-owning strided view", "[cpu]") {
  std::vector<int32_t> buf(12);
  for (int i = 0; i < 12; ++i) buf[i] = i * 10;
  // a column-major 3x4 view of the buffer
  Tensor t = Tensor::from_blob(buf.data(), {3, 4}, DType::I32, Device::cpu(), {1, 3});
  CHECK(t.data() == buf.data());
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.at<int32_t>({2, 1}) == 50);
  t.at<int32_t>({0, 3}) = -7;
  CHECK(buf[9] == -7);
  Tensor c = t.contiguous();
  CHECK(c.at<int32_t>({1, 2}) == 70);
  CHECK(c.at<int32_t>({0, 3}) == -7);
  // copy_from into a strided destination
  Tensor dst = Tensor::zeros({4, 3}, DType::I32).transpose(0, 1);  // 3x4 view, strides {1, 3}
  dst.copy_from(c);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) CHECK(dst.at<int32_t>({i, j}) == t.at<int32_t>({i, j}));
  CHECK(t.storage()->deleter == nullptr);
}

TEST_CASE("Tensor::to(dtype): bf16/f16 rounding ties and round trips", "[cpu]") {
  const float one = 1.0f;
  // bf16 (7 stored bits): 1 + 2^-8 ties to 1.0 (even); 1 + 3*2^-8 ties up to 1 + 2^-6
  Tensor f = Tensor::from_vector({one + std::ldexp(1.0f, -8), one + 3 * std::ldexp(1.0f, -8), -2.5f,
                                  one + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)},
                                 {4});
  Tensor b = f.to(DType::BF16);
  CHECK(b.dtype() == DType::BF16);
  CHECK(b.at<uint16_t>({0}) == 0x3f80);
  CHECK(b.at<uint16_t>({1}) == 0x3f82);
  CHECK(b.at<uint16_t>({2}) == 0xc020);
  CHECK(b.at<uint16_t>({3}) == 0x3f81);  // just above the tie: rounds up
  // f16 (10 stored bits): 1 + 2^-11 ties to 1.0; 1 + 3*2^-11 ties up to 1 + 2^-9
  Tensor h = Tensor::from_vector({one + std::ldexp(1.0f, -11), one + 3 * std::ldexp(1.0f, -11), 65504.0f, 65520.0f},
                                 {4})
                 .to(DType::F16);
  CHECK(h.at<uint16_t>({0}) == 0x3c00);
  CHECK(h.at<uint16_t>({1}) == 0x3c02);
  CHECK(h.at<uint16_t>({2}) == 0x7bff);
  CHECK(h.at<uint16_t>({3}) == 0x7c00);  // rounds to inf

  // every bf16 and f16 pattern survives 16 -> f32 -> 16 through Tensor::to
  for (DType dt : {DType::BF16, DType::F16}) {
    Tensor all = Tensor::empty({65536}, dt);
    for (int64_t i = 0; i < 65536; ++i) all.at<uint16_t>({i}) = static_cast<uint16_t>(i);
    Tensor wide = all.to(DType::F32);
    Tensor back = wide.to(dt);
    int64_t bad = 0;
    for (int64_t i = 0; i < 65536; ++i) {
      const float v = wide.at<float>({i});
      if (std::isnan(v)) continue;
      if (back.at<uint16_t>({i}) != static_cast<uint16_t>(i)) ++bad;
    }
    CHECK(bad == 0);
  }

  // random f32 values against a float64 round-to-nearest-even reference
  Philox rng(1234);
  const int64_t n = 4099;
  Tensor r = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) {
    const double mag = std::ldexp(1.0 + rng.next_double(), static_cast<int>(rng.next_u32() % 20) - 10);
    r.at<float>({i}) = static_cast<float>((rng.next_u32() & 1) ? -mag : mag);
  }
  Tensor rb = r.to(DType::BF16).to(DType::F32);
  Tensor rh = r.to(DType::F16).to(DType::F32);
  for (int64_t i = 0; i < n; ++i) {
    const double x = r.at<float>({i});
    REQUIRE(rb.at<float>({i}) == round_to_bits(x, 7));
    REQUIRE(rh.at<float>({i}) == round_to_bits(x, 10));
  }

  // strided source: conversion follows the view
  Tensor tr = iota({3, 5}).transpose(0, 1).to(DType::BF16);
  CHECK(tr.is_contiguous());
  CHECK(tr.get({4, 2}) == 14.0);
}

TEST_CASE("Tensor::to(dtype): integers round to nearest even and saturate", "[cpu]") {
  Tensor f = Tensor::from_vector({2.5f, 3.5f, -2.5f, 1e10f, -1e10f, std::nanf(""), 254.5f, -129.0f, 0.49f}, {9});
  Tensor i = f.to(DType::I32);
  const std::vector<int32_t> want_i = {2, 4, -2, std::numeric_limits<int32_t>::max(),
                                       std::numeric_limits<int32_t>::min(), 0, 254, -129, 0};
  for (int64_t k = 0; k < 9; ++k) CHECK(i.at<int32_t>({k}) == want_i[k]);
  Tensor u = f.to(DType::U8);
  const std::vector<int> want_u = {2, 4, 0, 255, 0, 0, 254, 0, 0};
  for (int64_t k = 0; k < 9; ++k) CHECK(static_cast<int>(u.at<uint8_t>({k})) == want_u[k]);
  Tensor s = f.to(DType::I8);
  const std::vector<int> want_s = {2, 4, -2, 127, -128, 0, 127, -128, 0};
  for (int64_t k = 0; k < 9; ++k) CHECK(static_cast<int>(s.at<int8_t>({k})) == want_s[k]);

  // i8 and u8 round-trip exactly through every float type
  Tensor a8 = Tensor::empty({256}, DType::I8), au = Tensor::empty({256}, DType::U8);
  for (int64_t k = 0; k < 256; ++k) {
    a8.at<int8_t>({k}) = static_cast<int8_t>(k - 128);
    au.at<uint8_t>({k}) = static_cast<uint8_t>(k);
  }
  for (DType mid : {DType::F32, DType::BF16, DType::F16, DType::I32}) {
    CHECK(std::memcmp(a8.to(mid).to(DType::I8).data(), a8.data(), 256) == 0);
    CHECK(std::memcmp(au.to(mid).to(DType::U8).data(), au.data(), 256) == 0);
  }

  // i32 -> bf16 rounds once: 2^24 + 2^16 + 1 is just above the bf16 tie between 2^24 and
  // 2^24 + 2^17, so it rounds up; going through f32 first would tie to 2^24 instead.
  Tensor big = Tensor::empty({3}, DType::I32);
  big.at<int32_t>({0}) = (1 << 24) + (1 << 16) + 1;
  big.at<int32_t>({1}) = (1 << 24) + (1 << 16);  // exact tie: to even (2^24)
  big.at<int32_t>({2}) = 70000;                  // above f16 max: inf in f16
  Tensor bb = big.to(DType::BF16);
  CHECK(bb.get({0}) == 16908288.0);
  CHECK(bb.get({1}) == 16777216.0);
  CHECK(bb.get({0}) == round_to_bits(16842753.0, 7));
  CHECK(std::isinf(big.to(DType::F16).get({2})));
  // i32 -> f16: 2049 is a tie between 2048 and 2050 (even mantissa 2048); 2051 -> 2052
  Tensor small = Tensor::empty({2}, DType::I32);
  small.at<int32_t>({0}) = 2049;
  small.at<int32_t>({1}) = 2051;
  Tensor sh = small.to(DType::F16);
  CHECK(sh.get({0}) == 2048.0);
  CHECK(sh.get({1}) == 2052.0);
}

TEST_CASE("CPU<->CUDA copies need a GPU", "[cpu]") {
  Tensor t = iota({7});
  if (rtx::test::have_gpu()) {
    WARN("a GPU is present: the no-GPU error path is not exercised here (see core_cuda_test)");
    return;
  }
  expect_error([&] { t.to(Device::cuda(0)); }, ErrorCategory::Environment, "Tensor::to(cuda:0) from cpu");
  try {
    Tensor::empty({7}, DType::F32, Device::cuda(0));
    FAIL("no error for a CUDA tensor without a GPU");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
  }
  CHECK(t.to(Device::cpu()).data() == t.data());
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK(Device::cpu() != Device::cuda(0));
}
