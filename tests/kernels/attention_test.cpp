// Tests of causal attention: flash vs naive vs the float64 reference on odd T and odd tiles, the
// lse output, backward with and without the forward's out/lse, accumulation, ISA paths, bad tiles.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/kernels/registry.hpp"

using namespace rtx;
using namespace rtx::kernels;

namespace {
std::vector<float> uniform(size_t n, uint64_t subseq) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, 42, subseq, -1.f, 1.f);
  return v;
}
struct IsaGuard {
  Isa saved = cpu_isa_active();
  ~IsaGuard() { set_cpu_isa(saved); }
};
}  // namespace

TEST_CASE("attention: flash tiles of any size match the float64 reference", "[cpu]") {
  for (const char* name : {"attention_forward", "attention_backward"}) {
    const OpDef& op = registry().op(name);
    const Variant& v = registry().variant(name, "cpu.flash");
    for (Shape s : {Shape{{"B", 1}, {"T", 1}, {"NH", 1}, {"HS", 8}}, Shape{{"B", 2}, {"T", 7}, {"NH", 3}, {"HS", 8}},
                    Shape{{"B", 1}, {"T", 127}, {"NH", 2}, {"HS", 16}}, Shape{{"B", 1}, {"T", 65}, {"NH", 1}, {"HS", 64}}}) {
      for (Params p : {Params{{"Br", 1}, {"Bc", 1}}, Params{{"Br", 7}, {"Bc", 5}}, Params{{"Br", 64}, {"Bc", 16}},
                       Params{{"Br", 512}, {"Bc", 512}}}) {
        INFO(name << " " << shape_to_string(s) << " " << params_to_string(p));
        REQUIRE(v.validate(s, p).empty());
        const CheckResult r = v.make(s, DType::F32, p, 3)->check();
        INFO("max_rel_err " << r.max_rel_err << ": " << r.detail);
        CHECK(r.ok);
        CHECK(r.tolerance == op.tol_f32);
      }
    }
  }
}

TEST_CASE("attention: every ISA path of flash matches the reference", "[cpu]") {
  IsaGuard guard;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    set_cpu_isa(isa);
    if (cpu_isa_active() != isa) continue;
    for (const char* name : {"attention_forward", "attention_backward"}) {
      const Variant& v = registry().variant(name, "cpu.flash");
      const Shape s{{"B", 2}, {"T", 65}, {"NH", 2}, {"HS", 16}};
      INFO(isa_name(isa) << " " << name);
      const CheckResult r = v.make(s, DType::F32, v.space.defaults(), 9)->check();
      INFO("max_rel_err " << r.max_rel_err << ": " << r.detail);
      CHECK(r.ok);
    }
  }
}

TEST_CASE("attention: odd T and head sizes on every ISA path match the float64 reference", "[cpu]") {
  // HS 1, 3, 20 leave partial vectors (and no full 16x16 transpose block), 80 is 5 AVX-512 / 10 AVX2
  // vectors; T 1, 7, 127 and tiles that are not multiples of the register blocks.
  IsaGuard guard;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    set_cpu_isa(isa);
    if (cpu_isa_active() != isa) continue;
    for (const char* name : {"attention_forward", "attention_backward"}) {
      const Variant& v = registry().variant(name, "cpu.flash");
      for (int64_t T : {1, 7, 127})
        for (int64_t HS : {1, 3, 20, 32, 64, 80})
          for (Params p : {Params{{"Br", 64}, {"Bc", 64}}, Params{{"Br", 13}, {"Bc", 9}}, Params{{"Br", 16}, {"Bc", 128}}}) {
            const Shape s{{"B", 2}, {"T", T}, {"NH", 2}, {"HS", HS}};
            INFO(isa_name(isa) << " " << name << " " << shape_to_string(s) << " " << params_to_string(p));
            const CheckResult r = v.make(s, DType::F32, p, 11)->check();
            INFO("max_rel_err " << r.max_rel_err << ": " << r.detail);
            CHECK(r.ok);
          }
    }
  }
}

TEST_CASE("attention: flash output and gradient are bitwise the same for 1 and 2 threads", "[cpu]") {
  const int64_t B = 3, T = 77, NH = 2, HS = 24, C = NH * HS;
  const auto qkv = uniform(B * T * 3 * C, 4), dout = uniform(B * T * C, 5);
  AttentionParams p;
  p.Br = 32;
  p.Bc = 16;
  const int saved = omp_get_max_threads();
  std::vector<float> out[2], lse[2], dq[2];
  for (int k = 0; k < 2; ++k) {
    omp_set_num_threads(k + 1);
    out[k].assign(B * T * C, 0.f);
    lse[k].assign(B * NH * T, 0.f);
    dq[k].assign(B * T * 3 * C, 0.f);
    attention_forward(out[k].data(), qkv.data(), B, T, NH, HS, &p, lse[k].data());
    attention_backward(dq[k].data(), dout.data(), qkv.data(), B, T, NH, HS, &p, out[k].data(), lse[k].data());
  }
  omp_set_num_threads(saved);
  CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4) == 0);
  CHECK(std::memcmp(lse[0].data(), lse[1].data(), lse[0].size() * 4) == 0);
  CHECK(std::memcmp(dq[0].data(), dq[1].data(), dq[0].size() * 4) == 0);
  double norm = 0;
  for (float x : dq[0]) norm += std::fabs(x);
  CHECK(norm > 1.0);
}

TEST_CASE("attention: single token attends to itself; flash agrees with naive", "[cpu]") {
  const int64_t B = 2, T = 37, NH = 3, HS = 16, C = NH * HS;
  const auto qkv = uniform(B * T * 3 * C, 0);
  std::vector<float> of(B * T * C), on(B * T * C), lf(B * NH * T), ln(B * NH * T);
  AttentionParams flash, naive;
  flash.Br = 5;
  flash.Bc = 11;
  naive.algo = AttentionParams::Algo::Naive;
  attention_forward(of.data(), qkv.data(), B, T, NH, HS, &flash, lf.data());
  attention_forward(on.data(), qkv.data(), B, T, NH, HS, &naive, ln.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < C; ++e) CHECK(of[b * T * C + e] == Approx(qkv[b * T * 3 * C + 2 * C + e]).epsilon(1e-6));
  for (size_t i = 0; i < of.size(); ++i) REQUIRE(of[i] == Approx(on[i]).margin(1e-5));
  for (size_t i = 0; i < lf.size(); ++i) REQUIRE(lf[i] == Approx(ln[i]).epsilon(1e-5));
}

TEST_CASE("attention: backward accumulates, and reusing the forward's out/lse gives the same bits", "[cpu]") {
  const int64_t B = 1, T = 50, NH = 2, HS = 8, C = NH * HS;
  const auto qkv = uniform(B * T * 3 * C, 1), dout = uniform(B * T * C, 2), init = uniform(B * T * 3 * C, 3);
  AttentionParams p;
  p.Br = 16;
  p.Bc = 8;
  std::vector<float> out(B * T * C), lse(B * NH * T);
  attention_forward(out.data(), qkv.data(), B, T, NH, HS, &p, lse.data());
  std::vector<float> d1(B * T * 3 * C, 0.f), d2(B * T * 3 * C, 0.f), d3 = init;
  attention_backward(d1.data(), dout.data(), qkv.data(), B, T, NH, HS, &p);
  attention_backward(d2.data(), dout.data(), qkv.data(), B, T, NH, HS, &p, out.data(), lse.data());
  attention_backward(d3.data(), dout.data(), qkv.data(), B, T, NH, HS, &p);
  CHECK(std::memcmp(d1.data(), d2.data(), d1.size() * 4) == 0);
  double maxd = 0;
  for (size_t i = 0; i < d1.size(); ++i) maxd = std::max(maxd, std::fabs(double(d3[i]) - init[i] - d1[i]));
  CHECK(maxd < 1e-6);
  double norm = 0;
  for (float x : d1) norm += std::fabs(x);
  CHECK(norm > 1.0);  // the gradient is not trivially zero
  // the naive path gives the same gradient within float error
  AttentionParams naive;
  naive.algo = AttentionParams::Algo::Naive;
  std::vector<float> dn(B * T * 3 * C, 0.f);
  attention_backward(dn.data(), dout.data(), qkv.data(), B, T, NH, HS, &naive);
  for (size_t i = 0; i < dn.size(); ++i) REQUIRE(dn[i] == Approx(d1[i]).margin(2e-5));
}

TEST_CASE("attention: bad tiles and dims are rejected with a reason", "[cpu]") {
  const Variant& v = registry().variant("attention_forward", "cpu.flash");
  const Shape s{{"B", 1}, {"T", 7}, {"NH", 1}, {"HS", 8}};
  CHECK_FALSE(v.validate(s, {{"Br", 0}, {"Bc", 64}}).empty());
  CHECK_FALSE(v.validate(s, {{"Br", 64}, {"Bc", -3}}).empty());
  CHECK_FALSE(v.validate(s, {{"Br", 1024}, {"Bc", 64}}).empty());
  CHECK_FALSE(v.validate(s, {{"Br", 64}}).empty());
  CHECK(v.validate(s, v.space.defaults()).empty());
  CHECK_THROWS_AS(v.make(s, DType::F32, {{"Br", 0}, {"Bc", 64}}, 1), Error);
  std::vector<float> buf(7 * 3 * 8), out(7 * 8);
  AttentionParams p;
  p.Bc = 0;
  CHECK_THROWS_AS(attention_forward(out.data(), buf.data(), 1, 7, 1, 8, &p), Error);
  try {
    attention_forward(out.data(), buf.data(), 1, 7, 0, 8);
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(e.where() == "NH");
  }
  try {
    v.make({{"B", 1}, {"T", 7}, {"HS", 8}}, DType::F32, v.space.defaults(), 1);
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.where() == "NH");
  }
}
