// matmul-specific tests: both CPU variants x {f32, bf16} x odd shapes x every ISA path x
// sampled tile parameters against the float64 reference; determinism; validate; bad input.
// (The generic registry walker test lives elsewhere.)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "rtx/core/dtype.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/gguf.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/matmul.hpp"
#include "rtx/kernels/registry.hpp"
#include "test_util.hpp"

using namespace rtx::kernels;
using rtx::DType;

namespace {

const Isa kIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512};

/// Restores the process's ISA and thread count when a test ends.
struct IsaGuard {
  Isa saved = cpu_isa_active();
  int threads = omp_get_max_threads();
  ~IsaGuard() {
    set_cpu_isa(saved);
    set_avx512_vnni_disabled(false);
    omp_set_num_threads(threads);
  }
};

/// The 8-bit-activation paths to check: each ISA this CPU has, plus, on a CPU with AVX-512
/// VNNI, AVX-512 with VNNI switched off (the lane-stable K-quant tile, Q8_0's x8 layout), which
/// no CI machine with VNNI would otherwise run.
struct IsaVariant {
  Isa isa;
  bool no_vnni;
};
std::vector<IsaVariant> int8_variants() {
  std::vector<IsaVariant> v;
  for (Isa isa : kIsas)
    if (static_cast<int>(isa) <= static_cast<int>(cpu_isa_supported())) v.push_back({isa, false});
  if (cpu_isa_supported() == Isa::Avx512 && cpu_has_avx512_vnni()) v.push_back({Isa::Avx512, true});
  return v;
}

/// Candidate tile points per ISA (small blocks so odd shapes cross MC/NC/KC boundaries);
/// only those validate accepts are used, and each ISA must keep at least two.
std::vector<Params> sampled_params(const Variant& v, const Shape& s) {
  if (v.name == "cpu.blas") return {Params{}};
  const std::vector<Params> cands = {
      {},
      {{"MC", 48}, {"NC", 192}, {"KC", 64}, {"MR", 4}, {"NR", 8}},
      {{"MC", 96}, {"NC", 192}, {"KC", 64}, {"MR", 6}, {"NR", 16}},
      {{"MC", 48}, {"NC", 384}, {"KC", 128}, {"MR", 4}, {"NR", 24}},
      {{"MC", 168}, {"NC", 192}, {"KC", 64}, {"MR", 14}, {"NR", 32}},
      {{"MC", 96}, {"NC", 192}, {"KC", 128}, {"MR", 8}, {"NR", 48}},
      {{"MC", 48}, {"NC", 192}, {"KC", 192}, {"MR", 6}, {"NR", 64}},
  };
  std::vector<Params> out;
  for (const auto& p : cands)
    if (v.validate(s, p).empty()) out.push_back(p);
  return out;
}

std::vector<Shape> shapes_for(const OpDef& op) {
  std::vector<Shape> s = op.test_shapes;
  s.push_back({{"M", 5}, {"N", 1000}, {"K", 129}});  // fewer M-panels than threads: N split
  return s;
}

}  // namespace

TEST_CASE("matmul: every variant, dtype, odd shape, ISA path and sampled params matches float64", "[cpu][matmul]") {
  IsaGuard guard;
  for (const char* op_name : {"matmul_forward", "matmul_backward"}) {
    const OpDef& op = registry().op(op_name);
    REQUIRE(std::count_if(op.variants.begin(), op.variants.end(),
                          [](const Variant& v) { return v.backend == Backend::CPU; }) == 2);
    for (Isa isa : kIsas) {
      if (static_cast<int>(isa) > static_cast<int>(cpu_isa_supported())) {
        WARN(std::string("CPU lacks ") + isa_name(isa) + ": path not exercised");
        continue;
      }
      set_cpu_isa(isa);
      REQUIRE(cpu_isa_active() == isa);
      for (const Variant& v : op.variants) {
        if (v.backend != Backend::CPU) continue;  // CUDA variants: tests/kernels/cuda_*_test.cpp
        for (DType dt : {DType::F32, DType::BF16}) {
          for (const Shape& s : shapes_for(op)) {
            const auto ps = sampled_params(v, s);
            if (v.name == "cpu.blocked") REQUIRE(ps.size() >= 3);
            for (const Params& p : ps) {
              INFO(op_name << " " << v.name << " " << isa_name(isa) << " " << rtx::dtype_name(dt) << " "
                           << shape_to_string(s) << " {" << params_to_string(p) << "}");
              auto in = v.make(s, dt, p, 42);
              const CheckResult r = in->check();
              INFO(r.detail);
              CHECK(r.unwritten == 0);
              CHECK(r.nonfinite == 0);
              CHECK(r.max_rel_err <= op.tolerance(dt));
              CHECK(r.ok);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("matmul: same seed, params and threads give bitwise-identical output", "[cpu][matmul]") {
  IsaGuard guard;
  const Shape s{{"M", 67}, {"N", 129}, {"K", 300}};
  for (const char* op_name : {"matmul_forward", "matmul_backward"}) {
    const OpDef& op = registry().op(op_name);
    for (const Variant& v : op.variants)
      for (DType dt : {DType::F32, DType::BF16}) {
        if (v.backend != Backend::CPU) continue;
        INFO(op_name << " " << v.name << " " << rtx::dtype_name(dt));
        auto a = v.make(s, dt, {}, 7), b = v.make(s, dt, {}, 7), c = v.make(s, dt, {}, 8);
        REQUIRE(a->check().ok);
        REQUIRE(b->check().ok);
        REQUIRE(c->check().ok);
        const uint64_t ha = a->checksum();
        CHECK(ha == b->checksum());
        CHECK(ha != c->checksum());  // a different seed gives different data
        a->check();                  // re-run (outputs reset) gives the same bits again
        CHECK(a->checksum() == ha);
      }
  }
}

TEST_CASE("matmul blocked: result depends on KC only, not on threads or other tiles", "[cpu][matmul]") {
  IsaGuard guard;
  const Shape s{{"M", 131}, {"N", 200}, {"K", 333}};
  const OpDef& op = registry().op("matmul_forward");
  const Variant& v = registry().variant("matmul_forward", "cpu.blocked");
  for (Isa isa : kIsas) {
    if (static_cast<int>(isa) > static_cast<int>(cpu_isa_supported())) continue;
    set_cpu_isa(isa);
    INFO(isa_name(isa));
    std::vector<Params> ps = {{{"KC", 128}}, {{"KC", 128}, {"MC", 48}, {"NC", 192}, {"MR", 4}, {"NR", 16}},
                              {{"KC", 128}, {"MC", 96}, {"NC", 384}, {"MR", 6}, {"NR", 8}}};
    uint64_t first = 0;
    int used = 0;
    for (const Params& p : ps) {
      if (!v.validate(s, p).empty()) continue;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        auto in = v.make(s, DType::F32, p, 3);
        REQUIRE(in->check().ok);
        if (used++ == 0) first = in->checksum();
        else CHECK(in->checksum() == first);
      }
    }
    CHECK(used >= 6);
    (void)op;
  }
}

TEST_CASE("matmul blocked: validate rejects invalid tile combinations with a reason", "[cpu][matmul]") {
  IsaGuard guard;
  const Shape s{{"M", 64}, {"N", 64}, {"K", 64}};
  const Variant& v = registry().variant("matmul_forward", "cpu.blocked");
  auto reason = [&](const Params& p) { return v.validate(s, p); };

  CHECK(reason({}).empty());  // defaults are valid on every path
  CHECK_THAT(reason({{"MC", 100}, {"MR", 6}}), Catch::Contains("not a multiple of MR"));
  CHECK_THAT(reason({{"NC", 200}, {"NR", 16}}), Catch::Contains("not a multiple of NR"));
  CHECK_THAT(reason({{"MR", 15}, {"NR", 16}}), Catch::Contains("exceeds"));
  CHECK_THAT(reason({{"MC", -48}}), Catch::Contains(">= 0"));
  CHECK_THAT(reason({{"KC", 1 << 20}}), Catch::Contains("<="));
  CHECK_THAT(reason({{"MR", int64_t{1} << 40}}), Catch::Contains("out of range"));

  if (cpu_isa_supported() == Isa::Avx512) {
    set_cpu_isa(Isa::Avx512);
    CHECK_THAT(reason({{"NR", 24}, {"NC", 192}}), Catch::Contains("vector width 16"));
    CHECK_THAT(reason({{"MR", 14}, {"NR", 64}}), Catch::Contains("registers"));
    CHECK_THAT(reason({{"MR", 12}, {"NR", 48}}), Catch::Contains("registers"));
    CHECK(reason({{"MR", 6}, {"NR", 64}, {"MC", 48}}).empty());
    CHECK_THROWS_AS(v.make(s, DType::F32, {{"MR", 14}, {"NR", 64}}, 1), rtx::Error);
  }
  if (static_cast<int>(cpu_isa_supported()) >= static_cast<int>(Isa::Avx2)) {
    set_cpu_isa(Isa::Avx2);
    CHECK_THAT(reason({{"NR", 12}}), Catch::Contains("vector width 8"));
    CHECK_THAT(reason({{"MR", 8}, {"NR", 16}}), Catch::Contains("registers"));
    CHECK(reason({{"MR", 6}, {"NR", 16}}).empty());
    CHECK(reason({{"MR", 4}, {"NR", 24}, {"MC", 48}}).empty());
  }
  set_cpu_isa(Isa::Scalar);
  CHECK(reason({{"MR", 14}, {"NR", 64}, {"MC", 336}}).empty());  // scalar: no register budget
  CHECK_THAT(reason({{"NC", 100}, {"NR", 64}}), Catch::Contains("not a multiple of NR"));

  const Variant& blas = registry().variant("matmul_forward", "cpu.blas");
  CHECK(blas.validate(s, {}).empty());
  CHECK_THAT(blas.validate(s, {{"MC", 48}}), Catch::Contains("no parameters"));
}

TEST_CASE("matmul: bad shapes and dtypes are rejected naming the dim", "[cpu][matmul]") {
  for (const char* op_name : {"matmul_forward", "matmul_backward"}) {
    for (const Variant& v : registry().op(op_name).variants) {
      if (v.backend != Backend::CPU) continue;
      INFO(op_name << " " << v.name);
      auto expect_input_error = [&](const Shape& s, DType dt, const std::string& needle) {
        INFO(shape_to_string(s));
        try {
          (void)v.make(s, dt, {}, 1);
          FAIL("no error for a bad shape");
        } catch (const rtx::Error& e) {
          CHECK(e.category() == rtx::ErrorCategory::Input);
          CHECK_THAT(std::string(e.what()), Catch::Contains(needle));
        }
      };
      expect_input_error({{"M", 4}, {"N", 4}}, DType::F32, "no dim K");
      expect_input_error({{"M", 0}, {"N", 4}, {"K", 4}}, DType::F32, "dim M");
      expect_input_error({{"M", 4}, {"N", -3}, {"K", 4}}, DType::F32, "dim N");
      expect_input_error({{"M", 1 << 20}, {"N", 1}, {"K", 1 << 20}}, DType::F32, "M*K");
      expect_input_error({{"M", 1}, {"N", 1 << 20}, {"K", 1 << 20}}, DType::F32, "N*K");
      expect_input_error({{"M", 4}, {"N", 4}, {"K", 4}, {"Q", 1}}, DType::F32, "unknown shape dim 'Q'");
      expect_input_error({{"M", 4}, {"N", 4}, {"K", 4}}, DType::F16, "f16");
    }
  }
  CHECK_THROWS_AS(registry().variant("matmul_forward", "cpu.blas").make({{"M", 2}, {"N", 2}, {"K", 2}, {"bias", 2}},
                                                                        DType::F32, {}, 1),
                  rtx::Error);
}

TEST_CASE("matmul API: plain pointers, null params, no bias, errors", "[cpu][matmul]") {
  // out (2,3) = inp (2,4) @ weight (3,4)^T (+ bias): a known-answer case.
  const float inp[8] = {1, 2, 3, 4, -1, 0.5f, 0, 2};
  const float w[12] = {1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1};
  const float bias[3] = {10, 20, 30};
  const float want[6] = {1, 2, 10, -1, 0.5f, 1.5f};
  for (MatmulImpl impl : {MatmulImpl::Blocked, MatmulImpl::Blas}) {
    MatmulParams mp;
    mp.impl = impl;
    float out[6];
    matmul_forward(out, inp, w, nullptr, 2, 3, 4, &mp);
    for (int i = 0; i < 6; ++i) CHECK(out[i] == want[i]);
    matmul_forward(out, inp, w, bias, 2, 3, 4, impl == MatmulImpl::Blocked ? nullptr : &mp);
    for (int i = 0; i < 6; ++i) CHECK(out[i] == want[i] + bias[i % 3]);
    uint16_t ib[8], wb[12], bb[3];
    for (int i = 0; i < 8; ++i) ib[i] = rtx::f32_to_bf16(inp[i]);
    for (int i = 0; i < 12; ++i) wb[i] = rtx::f32_to_bf16(w[i]);
    for (int i = 0; i < 3; ++i) bb[i] = rtx::f32_to_bf16(bias[i]);
    matmul_forward(out, ib, wb, bb, 2, 3, 4, &mp);
    for (int i = 0; i < 6; ++i) CHECK(out[i] == want[i] + bias[i % 3]);

    // backward: dinp = dout @ w; dweight += dout^T @ inp; dbias += colsum(dout)
    const float dout[6] = {1, 0, 2, 0, -1, 1};
    float dinp[8], dw[12] = {}, db[3] = {1, 1, 1};
    matmul_backward(dinp, dw, db, dout, inp, w, 2, 3, 4, &mp);
    const float want_dinp[8] = {3, 2, 2, 2, 1, 0, 1, 1};
    for (int i = 0; i < 8; ++i) CHECK(dinp[i] == want_dinp[i]);
    CHECK(dw[0] == 1);   // dweight[0][0] = 1*1 + 0*(-1)
    CHECK(dw[4] == 1);   // dweight[1][0] = 0*1 + (-1)*(-1)
    CHECK(dw[11] == 10); // dweight[2][3] = 2*4 + 1*2
    CHECK(db[0] == 2);
    CHECK(db[1] == 0);
    CHECK(db[2] == 4);
    matmul_backward(dinp, dw, nullptr, dout, inp, w, 2, 3, 4, &mp);  // no bias gradient
    CHECK(dw[11] == 20);

    CHECK_THROWS_AS(matmul_forward(out, inp, w, nullptr, 0, 3, 4, &mp), rtx::Error);
    CHECK_THROWS_AS(matmul_forward(out, inp, w, nullptr, 2, 3, -1, &mp), rtx::Error);
    CHECK_THROWS_AS(matmul_backward(dinp, dw, db, dout, inp, w, 2, 0, 4, &mp), rtx::Error);
  }
  MatmulParams bad;
  bad.MC = 100;
  bad.MR = 6;
  float out[6];
  CHECK_THROWS_AS(matmul_forward(out, inp, w, nullptr, 2, 3, 4, &bad), rtx::Error);
}

TEST_CASE("matmul_forward_t: every transpose pair, bias, accumulate vs float64; bits of matmul_forward/backward", "[cpu][matmul]") {
  // odd shapes crossing the micro-tile edges
  const int M = 37, N = 29, K = 45;
  rtx::Philox rng(5, 0);
  auto rnd = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng.next_normal());
    return v;
  };
  const std::vector<float> a = rnd(static_cast<size_t>(M) * K), b = rnd(static_cast<size_t>(K) * N), bias = rnd(N),
                           init = rnd(static_cast<size_t>(M) * N);
  for (MatmulImpl impl : {MatmulImpl::Blocked, MatmulImpl::Blas})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int mode = 0; mode < 3; ++mode) {  // plain, bias, accumulate
          INFO("impl " << (impl == MatmulImpl::Blas ? "blas" : "blocked") << " ta " << ta << " tb " << tb << " mode " << mode);
          MatmulParams mp;
          mp.impl = impl;
          // A(i,k) = a[i*K+k] or (ta) a[k*M+i]; B(k,j) = b[k*N+j] or (tb) b[j*K+k]
          std::vector<float> out = mode == 2 ? init : std::vector<float>(static_cast<size_t>(M) * N, 0.0f);
          matmul_forward_t(out.data(), a.data(), ta, b.data(), tb, mode == 1 ? bias.data() : nullptr, M, N, K, mode == 2, &mp);
          double worst = 0;
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              double ref = mode == 1 ? bias[j] : mode == 2 ? init[static_cast<size_t>(i) * N + j] : 0.0, mag = std::fabs(ref);
              for (int k = 0; k < K; ++k) {
                const double x = ta ? a[static_cast<size_t>(k) * M + i] : a[static_cast<size_t>(i) * K + k];
                const double y = tb ? b[static_cast<size_t>(j) * K + k] : b[static_cast<size_t>(k) * N + j];
                ref += x * y;
                mag += std::fabs(x * y);
              }
              worst = std::max(worst, std::fabs(out[static_cast<size_t>(i) * N + j] - ref) / mag);
            }
          CHECK(worst <= 1e-6);
        }
  // Blocked: (ta=false, tb=true) is matmul_forward's bits; (false,false) matmul_backward's dinp,
  // (true,false, accumulate) its dweight.
  std::vector<float> o1(static_cast<size_t>(M) * N), o2(o1.size());
  const std::vector<float> w = rnd(static_cast<size_t>(N) * K);  // (N,K)
  matmul_forward(o1.data(), a.data(), w.data(), bias.data(), M, N, K);
  matmul_forward_t(o2.data(), a.data(), false, w.data(), true, bias.data(), M, N, K, false);
  CHECK(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)) == 0);
  const std::vector<float> dout = rnd(static_cast<size_t>(M) * N);
  std::vector<float> dinp(static_cast<size_t>(M) * K), dw(static_cast<size_t>(N) * K, 0.0f), dinp2(dinp.size()), dw2(dw.size(), 0.0f);
  matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), a.data(), w.data(), M, N, K);
  matmul_forward_t(dinp2.data(), dout.data(), false, w.data(), false, nullptr, M, K, N, false);
  matmul_forward_t(dw2.data(), dout.data(), true, a.data(), false, nullptr, N, K, M, true);
  CHECK(std::memcmp(dinp.data(), dinp2.data(), dinp.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(dw.data(), dw2.data(), dw.size() * sizeof(float)) == 0);
  CHECK_THROWS_WITH(matmul_forward_t(o2.data(), a.data(), false, w.data(), true, bias.data(), M, N, K, true),
                    Catch::Contains("bias with accumulate"));
  CHECK_THROWS_WITH(matmul_forward_t(o2.data(), nullptr, false, w.data(), true, nullptr, M, N, K, false), Catch::Contains("null"));
  CHECK_THROWS_AS(matmul_forward_t(o2.data(), a.data(), false, w.data(), true, nullptr, M, 0, K, false), rtx::Error);
}

TEST_CASE("matmul packed weight: bitwise equal to matmul_forward for every M, and rows independent of M", "[cpu][matmul]") {
  IsaGuard guard;
  for (Isa isa : kIsas) {
    if (static_cast<int>(isa) > static_cast<int>(cpu_isa_supported())) continue;
    set_cpu_isa(isa);
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      // K past one KC block and not a multiple of it; N not a multiple of NR.
      for (auto [N, K] : {std::pair{7, 5}, std::pair{127, 129}, std::pair{1000, 777}}) {
        MatmulParams p;
        p.KC = 128;
        std::vector<float> w(static_cast<size_t>(N) * K), bias(N);
        for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37 * static_cast<double>(i)) * 0.5f;
        for (int j = 0; j < N; ++j) bias[j] = 0.01f * static_cast<float>(j % 13) - 0.05f;
        const PackedMatmulWeight pw(w.data(), N, K, &p);
        REQUIRE(pw.N() == N);
        REQUIRE(pw.K() == K);
        const int Mmax = 19;
        std::vector<float> x(static_cast<size_t>(Mmax) * K);
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11 * static_cast<double>(i));
        // float64 reference of row 0 (with bias), tolerance of the matmul class.
        std::vector<float> one(N, NAN);
        matmul_forward_packed(one.data(), x.data(), pw, bias.data(), 1);
        for (int j = 0; j < N; ++j) {
          double ref = bias[j];
          for (int k = 0; k < K; ++k) ref += static_cast<double>(x[k]) * w[static_cast<size_t>(j) * K + k];
          REQUIRE(std::fabs(one[j] - ref) <= 1e-4 * (1 + std::fabs(ref)));
        }
        for (int M : {1, 2, 3, 7, 15, 19}) {
          std::vector<float> got(static_cast<size_t>(M) * N, NAN), want(static_cast<size_t>(M) * N, NAN);
          const float* b = (M % 2) ? bias.data() : nullptr;
          matmul_forward_packed(got.data(), x.data(), pw, b, M);
          matmul_forward(want.data(), x.data(), w.data(), b, M, N, K, &p);
          INFO("isa " << isa_name(isa) << " threads " << threads << " N " << N << " K " << K << " M " << M);
          REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
          // Row 0 is the same bits whatever M is (batch invariance of the serving engine).
          if (b) REQUIRE(std::memcmp(got.data(), one.data(), N * sizeof(float)) == 0);
        }
      }
    }
  }
  const float w1 = 1.f;
  CHECK_THROWS_AS(PackedMatmulWeight(&w1, 0, 1), rtx::Error);
  CHECK_THROWS_AS(PackedMatmulWeight(nullptr, 1, 1), rtx::Error);
  MatmulParams blas;
  blas.impl = MatmulImpl::Blas;
  CHECK_THROWS_AS(PackedMatmulWeight(&w1, 1, 1, &blas), rtx::Error);
  float out = 0;
  CHECK_THROWS_AS(matmul_forward_packed(&out, &w1, PackedMatmulWeight(), nullptr, 1), rtx::Error);
  CHECK_THROWS_AS(matmul_forward_packed(&out, &w1, PackedMatmulWeight(&w1, 1, 1), nullptr, 0), rtx::Error);
}

TEST_CASE("matmul Q8_0 weight: float64 reference at odd shapes, every ISA, rows independent of M", "[cpu][matmul]") {
  IsaGuard guard;
  for (Isa isa : kIsas) {
    if (static_cast<int>(isa) > static_cast<int>(cpu_isa_supported())) continue;
    set_cpu_isa(isa);
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (auto [N, K] : {std::pair{1, 32}, std::pair{7, 64}, std::pair{127, 96}, std::pair{1000, 768}}) {
        std::vector<float> w(static_cast<size_t>(N) * K), bias(N);
        for (size_t i = 0; i < w.size(); ++i)
          w[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * (0.5 + (i / 32) % 5));  // scale per block
        for (int j = 0; j < N; ++j) bias[j] = 0.01f * static_cast<float>(j % 13) - 0.05f;
        std::vector<double> deq;
        const std::vector<uint8_t> blocks = rtx::test::quantize_q8_0(w, &deq);
        const PackedMatmulWeight pw = PackedMatmulWeight::q8_0(blocks.data(), N, K);
        REQUIRE(pw.is_q8_0());
        REQUIRE(pw.N() == N);
        REQUIRE(pw.K() == K);
        CHECK(pw.bytes() == static_cast<size_t>(N) * K + static_cast<size_t>(N) * (K / 32) * 4);
        const int Mmax = 19;
        std::vector<float> x(static_cast<size_t>(Mmax) * K);
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
        std::vector<float> one(N, NAN);
        matmul_forward_packed(one.data(), x.data(), pw, bias.data(), 1);
        for (int M : {1, 2, 7, 8, 9, 19}) {
          INFO("isa " << isa_name(isa) << " threads " << threads << " N " << N << " K " << K << " M " << M);
          std::vector<float> got(static_cast<size_t>(M) * N, NAN);
          const float* b = (M % 2) ? bias.data() : nullptr;
          matmul_forward_packed(got.data(), x.data(), pw, b, M);
          double err = 0, scale = 0;
          for (int m = 0; m < M; ++m)
            for (int j = 0; j < N; ++j) {
              double ref = b ? b[j] : 0.0;
              for (int k = 0; k < K; ++k) ref += static_cast<double>(x[static_cast<size_t>(m) * K + k]) * deq[static_cast<size_t>(j) * K + k];
              const double g = got[static_cast<size_t>(m) * N + j];
              REQUIRE(std::isfinite(g));  // every output written (poisoned with NaN)
              err = std::max(err, std::fabs(g - ref));
              scale = std::max(scale, std::fabs(ref));
            }
          CHECK(err <= 1e-5 * std::max(1.0, scale));
          // Row 0 is the same bits whatever M is (batch invariance of the serving engine).
          if (b) REQUIRE(std::memcmp(got.data(), one.data(), N * sizeof(float)) == 0);
        }
      }
    }
  }
  std::vector<uint8_t> blocks(34 * 4);
  CHECK_THROWS_AS(PackedMatmulWeight::q8_0(blocks.data(), 2, 48), rtx::Error);  // K not a multiple of 32
  CHECK_THROWS_AS(PackedMatmulWeight::q8_0(blocks.data(), 0, 64), rtx::Error);
  CHECK_THROWS_AS(PackedMatmulWeight::q8_0(nullptr, 2, 64), rtx::Error);
}

namespace {

/// Checks out (M,N) of a matmul with 8-bit inputs against float64 sums over the dequantized
/// weights deq (N,K) plus bias: exact-grid inputs (exact true) to f32 rounding (1e-5), others
/// within the 8-bit rounding bound sum_k |w_k| * sx_k / 2 (sx = max|x| / 127 of k's 32-block).
/// Every output must be finite (callers poison with NaN).
template <typename D>
void check_8bit_inputs(const std::vector<float>& got, const std::vector<float>& x, const std::vector<D>& deq,
                       const std::vector<float>& bias, int M, int N, int K, bool exact) {
  double err = 0, scale = 0, excess = 0;
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < N; ++j) {
      double ref = bias[j], bound = 0;
      for (int k = 0; k < K; ++k) {
        const double wk = deq[static_cast<size_t>(j) * K + k];
        ref += wk * x[static_cast<size_t>(m) * K + k];
        double amax = 0;
        for (int t = k / 32 * 32; t < k / 32 * 32 + 32; ++t)
          amax = std::max(amax, std::fabs(static_cast<double>(x[static_cast<size_t>(m) * K + t])));
        bound += std::fabs(wk) * amax / 127.0 / 2;
      }
      const double g = got[static_cast<size_t>(m) * N + j];
      REQUIRE(std::isfinite(g));
      err = std::max(err, std::fabs(g - ref));
      excess = std::max(excess, std::fabs(g - ref) - bound);
      scale = std::max(scale, std::fabs(ref));
    }
  if (exact) CHECK(err <= 1e-5 * std::max(1.0, scale));
  else CHECK(excess <= 1e-5 * std::max(1.0, scale));
}

}  // namespace

TEST_CASE("matmul Q8_0 weight with 8-bit activations (W8A8): float64 references, every ISA", "[cpu][matmul]") {
  // On AVX2 and AVX-512, q8_0(..., true) regroups the weight rows (16 a group with VNNI, the
  // quants + 128; else 8, signed) and takes integer dot products on inputs quantized per 32
  // values (as the K-quants); on scalar it is the W8A32 kernel. Both must meet the 8-bit-input
  // bound against float64 sums over the dequantized weights: exact-grid inputs to f32 rounding,
  // smooth ones within sum |w| * sx / 2. Shapes: K 256 (one super-block), 512, 768 and 96.
  IsaGuard guard;
  for (const IsaVariant& iv : int8_variants()) {
    const Isa isa = iv.isa;
    set_cpu_isa(isa);
    set_avx512_vnni_disabled(iv.no_vnni);
    for (auto [N, K] : {std::pair{1, 256}, std::pair{7, 512}, std::pair{127, 768}, std::pair{5, 96}}) {
      std::vector<float> w(static_cast<size_t>(N) * K);
      for (size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * (0.5 + (i / 32) % 5));
      // Force the extreme quants -128/-127 and 127 into some blocks (the +128 offset's edges).
      for (size_t i = 0; i < w.size(); i += 97) w[i] = -6.0f;
      std::vector<double> deq;
      const std::vector<uint8_t> blocks = rtx::test::quantize_q8_0(w, &deq);
      const PackedMatmulWeight pw = PackedMatmulWeight::q8_0(blocks.data(), N, K, true);
      REQUIRE(pw.is_q8_0());
      const int Mmax = 9;
      std::vector<float> grid(static_cast<size_t>(Mmax) * K), smooth(grid.size()), bias(N);
      rtx::Philox rng(3 * N + K, 5);
      for (size_t b = 0; b < grid.size() / 32; ++b) {
        const float unit = std::ldexp(1.0f, -static_cast<int>(b % 9));
        for (int j = 0; j < 32; ++j) grid[32 * b + j] = static_cast<float>(static_cast<int>(rng.next_u32() % 255) - 127) * unit;
        grid[32 * b + (b % 32)] = (b % 2 ? -127.0f : 127.0f) * unit;
      }
      for (size_t i = 0; i < smooth.size(); ++i) smooth[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)) * (1 + i % 3));
      for (int j = 0; j < N; ++j) bias[j] = 0.01f * static_cast<float>(j % 13) - 0.05f;
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        for (const bool exact : {true, false}) {
          const std::vector<float>& x = exact ? grid : smooth;
          std::vector<float> one(N, NAN);
          matmul_forward_packed(one.data(), x.data(), pw, bias.data(), 1);
          for (int M : {1, 2, 7, 9}) {
            INFO("isa " << isa_name(isa) << (iv.no_vnni ? " (VNNI off)" : "") << " threads " << threads << " N " << N << " K " << K << " M " << M << (exact ? " grid" : " smooth"));
            std::vector<float> got(static_cast<size_t>(M) * N, NAN);
            matmul_forward_packed(got.data(), x.data(), pw, bias.data(), M);
            check_8bit_inputs(got, x, deq, bias, M, N, K, exact);
            REQUIRE(std::memcmp(got.data(), one.data(), N * sizeof(float)) == 0);  // row 0 whatever M is
          }
        }
      }
    }
  }
}

namespace {

/// Random K-quant super-blocks (ggml type 12/13/14): every quant and scale bit pattern is valid;
/// the f16 super-scales (d, dmin) are set to small finite values.
std::vector<uint8_t> random_kquant(uint32_t type, size_t nsb, uint64_t seed) {
  const size_t bytes = type == 12 ? 144 : type == 13 ? 176 : 210;
  const std::vector<size_t> f16_at = type == 14 ? std::vector<size_t>{208} : std::vector<size_t>{0, 2};
  std::vector<uint8_t> blocks(nsb * bytes);
  rtx::Philox rng(seed, 7);
  for (auto& b : blocks) b = static_cast<uint8_t>(rng.next_u32());
  for (size_t sb = 0; sb < nsb; ++sb)
    for (size_t at : f16_at) {
      const uint16_t h = rtx::f32_to_f16(static_cast<float>(1e-3 * (1 + rng.next_u32() % 1000) / 1000.0));
      blocks[sb * bytes + at] = static_cast<uint8_t>(h & 0xFF);
      blocks[sb * bytes + at + 1] = static_cast<uint8_t>(h >> 8);
    }
  return blocks;
}

}  // namespace

TEST_CASE("matmul K-quant weights (Q4_K, Q5_K, Q6_K): ggml's dequantized values exactly, float64 reference", "[cpu][matmul]") {
  IsaGuard guard;
  // Random super-blocks: every quant and scale bit pattern is a valid K-quant; the f16 super
  // scales d (and dmin) are set to small finite values. The reference is io::ggml_dequantize
  // (checked against gguf-py's numpy dequantizer in the io tests) and float64 sums.
  // With f32 activations (int8_activations false).
  for (uint32_t type : {12u, 13u, 14u}) {
    for (auto [N, K] : {std::pair{1, 256}, std::pair{7, 512}, std::pair{127, 768}}) {
      const size_t nsb = static_cast<size_t>(N) * (K / 256);
      const std::vector<uint8_t> blocks = random_kquant(type, nsb, type * 1000 + N);
      std::vector<float> deq(static_cast<size_t>(N) * K);
      rtx::io::ggml_dequantize(type, blocks.data(), deq.data(), deq.size());
      const PackedMatmulWeight pw = PackedMatmulWeight::kquant(type, blocks.data(), N, K, false);
      REQUIRE(pw.is_quantized());
      REQUIRE_FALSE(pw.is_q8_0());
      // The repacked super-blocks: 152, 184, 212 bytes per 256 weights (Q4_K, Q5_K, Q6_K).
      CHECK(pw.bytes() == static_cast<size_t>(N) * (K / 256) * (type == 12 ? 152 : type == 13 ? 184 : 212));
      for (Isa isa : kIsas) {
        if (static_cast<int>(isa) > static_cast<int>(cpu_isa_supported())) continue;
        set_cpu_isa(isa);
        const PackedMatmulWeight w = PackedMatmulWeight::kquant(type, blocks.data(), N, K, false);  // picks the ISA
        // One-hot inputs read single weights back: equal to ggml's values bit for bit.
        for (int k : {0, 17, K / 2 + 5, K - 1}) {
          std::vector<float> x(K, 0.0f), got(N, NAN);
          x[k] = 1.0f;
          matmul_forward_packed(got.data(), x.data(), w, nullptr, 1);
          for (int j = 0; j < N; ++j) {
            INFO(w.format() << " isa " << isa_name(isa) << " N " << N << " K " << K << " j " << j << " k " << k);
            REQUIRE(got[j] == deq[static_cast<size_t>(j) * K + k]);
          }
        }
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          const int Mmax = 9;
          std::vector<float> x(static_cast<size_t>(Mmax) * K), bias(N);
          for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
          for (int j = 0; j < N; ++j) bias[j] = 0.01f * static_cast<float>(j % 13) - 0.05f;
          std::vector<float> one(N, NAN);
          matmul_forward_packed(one.data(), x.data(), w, bias.data(), 1);
          for (int M : {1, 2, 7, 9}) {
            INFO(w.format() << " isa " << isa_name(isa) << " threads " << threads << " N " << N << " K " << K << " M " << M);
            std::vector<float> got(static_cast<size_t>(M) * N, NAN);
            matmul_forward_packed(got.data(), x.data(), w, bias.data(), M);
            double err = 0, scale = 0;
            for (int m = 0; m < M; ++m)
              for (int j = 0; j < N; ++j) {
                double ref = bias[j];
                for (int k = 0; k < K; ++k)
                  ref += static_cast<double>(x[static_cast<size_t>(m) * K + k]) * deq[static_cast<size_t>(j) * K + k];
                const double g = got[static_cast<size_t>(m) * N + j];
                REQUIRE(std::isfinite(g));  // every output written (poisoned with NaN)
                err = std::max(err, std::fabs(g - ref));
                scale = std::max(scale, std::fabs(ref));
              }
            CHECK(err <= 1e-5 * std::max(1.0, scale));
            REQUIRE(std::memcmp(got.data(), one.data(), N * sizeof(float)) == 0);  // row 0 whatever M is
          }
        }
      }
    }
  }
  std::vector<uint8_t> blocks(210 * 4);
  CHECK_THROWS_AS(PackedMatmulWeight::kquant(12, blocks.data(), 2, 128), rtx::Error);  // K not a multiple of 256
  CHECK_THROWS_AS(PackedMatmulWeight::kquant(8, blocks.data(), 2, 256), rtx::Error);   // Q8_0 is not a K-quant
  CHECK_THROWS_AS(PackedMatmulWeight::kquant(14, blocks.data(), 0, 256), rtx::Error);
  CHECK_THROWS_AS(PackedMatmulWeight::kquant(14, nullptr, 2, 256), rtx::Error);
}

TEST_CASE("matmul K-quant weights with 8-bit activations: float64 references, every ISA", "[cpu][matmul]") {
  // The recipe (PackedMatmulWeight::kquant): inputs quantized per 32 values (sx = max|x|/127,
  // xq = round(x/sx)) and exact integer dot products per 16 weights, i.e. sum w * xhat with
  // xhat = xq * sx. Two input sets, with the float64 sum over ggml's dequantized weights as the
  // reference:
  //  grid: every 32-block holds integers in [-127, 127] times 2^-e, one of them 127 * 2^-e, so
  //   quantization is exact and the kernel must match to f32 rounding (1e-5);
  //  smooth: cos values, within the rounding bound of 8-bit inputs: |xhat - x| <= sx/2 per
  //   element, so |error| <= sum_k |w_k| * sx_k / 2 (plus f32 rounding).
  IsaGuard guard;
  for (uint32_t type : {12u, 13u, 14u}) {
    for (auto [N, K] : {std::pair{1, 256}, std::pair{7, 512}, std::pair{127, 768}}) {
      const size_t nsb = static_cast<size_t>(N) * (K / 256);
      const std::vector<uint8_t> blocks = random_kquant(type, nsb, type * 77 + N);
      std::vector<float> deq(static_cast<size_t>(N) * K);
      rtx::io::ggml_dequantize(type, blocks.data(), deq.data(), deq.size());
      const int Mmax = 17;  // 17: three row tiles, the last of one row (unpacked-once path on AVX2)
      std::vector<float> grid(static_cast<size_t>(Mmax) * K), smooth(grid.size()), bias(N);
      rtx::Philox rng(type + 3 * N, 11);
      for (size_t b = 0; b < grid.size() / 32; ++b) {
        const float unit = std::ldexp(1.0f, -static_cast<int>(b % 9));
        for (int j = 0; j < 32; ++j) grid[32 * b + j] = static_cast<float>(static_cast<int>(rng.next_u32() % 255) - 127) * unit;
        grid[32 * b + (b % 32)] = (b % 2 ? -127.0f : 127.0f) * unit;
      }
      for (size_t i = 0; i < smooth.size(); ++i) smooth[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)) * (1 + i % 3));
      for (int j = 0; j < N; ++j) bias[j] = 0.01f * static_cast<float>(j % 13) - 0.05f;
      for (const IsaVariant& iv : int8_variants()) {
        const Isa isa = iv.isa;
        set_cpu_isa(isa);
        set_avx512_vnni_disabled(iv.no_vnni);
        const PackedMatmulWeight w = PackedMatmulWeight::kquant(type, blocks.data(), N, K, true);
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          for (const bool exact : {true, false}) {
            const std::vector<float>& x = exact ? grid : smooth;
            std::vector<float> one(N, NAN);
            matmul_forward_packed(one.data(), x.data(), w, bias.data(), 1);
            for (int M : {1, 2, 7, 9, 17}) {
              INFO(w.format() << " isa " << isa_name(isa) << (iv.no_vnni ? " (VNNI off)" : "") << " threads " << threads << " N " << N << " K " << K << " M " << M
                              << (exact ? " grid" : " smooth"));
              std::vector<float> got(static_cast<size_t>(M) * N, NAN);
              matmul_forward_packed(got.data(), x.data(), w, bias.data(), M);
              check_8bit_inputs(got, x, deq, bias, M, N, K, exact);
              REQUIRE(std::memcmp(got.data(), one.data(), N * sizeof(float)) == 0);  // row 0 whatever M is
            }
          }
        }
      }
    }
  }
}

TEST_CASE("matmul Q8_0 and K-quants, 8-bit activations: AVX-512 VNNI x16 tiles give the AVX2 x8 tiles' bits", "[cpu][matmul]") {
  // x16 (vpdpbusd, 16 columns a group, 8-row tiles) and x8 (pmaddubsw, 8 columns, 4-row tiles)
  // compute the same exact integer sums and the same f32 operations per column, so every output
  // must match bit for bit; the x8 path itself is checked against float64 above. Odd N pads the
  // last group (1, 7, 17, 127 columns); M up to 33 covers partial row tiles of both.
  if (cpu_isa_supported() != Isa::Avx512 || !rtx::kernels::cpu_has_avx512_vnni()) {
    WARN("SKIPPED: this CPU has no AVX-512 VNNI (the x16 tiles are not built)");
    return;
  }
  IsaGuard guard;
  for (uint32_t type : {8u, 12u, 13u, 14u}) {
    for (auto [N, K] : {std::pair{1, 256}, std::pair{7, 512}, std::pair{17, 256}, std::pair{127, 768}, std::pair{5, 96}}) {
      if (type != 8 && K % 256 != 0) continue;
      std::vector<uint8_t> blocks;
      if (type == 8) {  // ggml Q8_0 blocks of sin weights, and one all -128 block (the extreme quant)
        std::vector<float> wf(static_cast<size_t>(N) * K);
        for (size_t i = 0; i < wf.size(); ++i) wf[i] = static_cast<float>(std::sin(0.29 * static_cast<double>(i)) * (1 + i % 3));
        blocks = rtx::test::quantize_q8_0(wf, nullptr);
        for (int j = 2; j < 34; ++j) blocks[j] = 0x80;
      } else {
        blocks = random_kquant(type, static_cast<size_t>(N) * (K / 256), type * 31 + N);
      }
      const int Mmax = 33;
      std::vector<float> x(static_cast<size_t>(Mmax) * K), bias(N);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.013 * static_cast<double>(i * i % 9973)) * (1 + i % 5));
      for (int j = 0; j < N; ++j) bias[j] = 0.02f * static_cast<float>(j % 7) - 0.06f;
      auto pack = [&](Isa isa) {
        set_cpu_isa(isa);
        return type == 8 ? PackedMatmulWeight::q8_0(blocks.data(), N, K, true) : PackedMatmulWeight::kquant(type, blocks.data(), N, K, true);
      };
      const PackedMatmulWeight w8 = pack(Isa::Avx2), w16 = pack(Isa::Avx512);
      REQUIRE(w16.int8_activations());
      // x16 stores 16 columns a group (the last padded): 1.125 bytes per Q8_0 weight (f32 scales), 152/184/212 per 256 K-quant weights.
      const size_t cols16 = static_cast<size_t>((N + 15) / 16 * 16);
      CHECK(w16.bytes() == (type == 8 ? cols16 * K + cols16 * (K / 32) * 4
                                      : cols16 * (K / 256) * (type == 12 ? 152 : type == 13 ? 184 : 212)));
      for (int M : {1, 3, 8, 9, 16, 33}) {
        INFO(w16.format() << " N " << N << " K " << K << " M " << M);
        std::vector<float> a(static_cast<size_t>(M) * N, NAN), b(a.size(), NAN);
        matmul_forward_packed(a.data(), x.data(), w8, bias.data(), M);
        matmul_forward_packed(b.data(), x.data(), w16, bias.data(), M);
        for (size_t i = 0; i < a.size(); ++i) REQUIRE(std::isfinite(a[i]));
        REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("matmul 8-bit activations: tiny, zero, NaN and Inf input blocks", "[cpu][matmul]") {
  // A block whose max |x| is below 1e-30 (127 / max|x| would overflow) contributes 0, like an
  // all-zero block; other blocks are unaffected. A NaN or Inf input never gives a finite
  // output (NaN on the 8-bit paths). Every 8-bit path: K-quants and Q8_0 (W8A8 where built).
  IsaGuard guard;
  const int N = 3, K = 256;
  for (const IsaVariant& iv : int8_variants()) {
    const Isa isa = iv.isa;
    set_cpu_isa(isa);
    set_avx512_vnni_disabled(iv.no_vnni);
    for (uint32_t type : {8u, 12u, 13u, 14u}) {
      INFO("isa " << isa_name(isa) << (iv.no_vnni ? " (VNNI off)" : "") << " type " << type);
      std::vector<uint8_t> blocks;
      std::vector<double> deq;
      if (type == 8) {
        std::vector<float> w(static_cast<size_t>(N) * K);
        for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
        blocks = rtx::test::quantize_q8_0(w, &deq);
      } else {
        blocks = random_kquant(type, static_cast<size_t>(N) * (K / 256), type * 5 + 1);
        std::vector<float> d(static_cast<size_t>(N) * K);
        rtx::io::ggml_dequantize(type, blocks.data(), d.data(), d.size());
        deq.assign(d.begin(), d.end());
      }
      const PackedMatmulWeight w = type == 8 ? PackedMatmulWeight::q8_0(blocks.data(), N, K, true)
                                             : PackedMatmulWeight::kquant(type, blocks.data(), N, K, true);
      for (float tiny : {1e-37f, 3e-38f, 1e-40f, 0.0f}) {
        std::vector<float> x(K, 0.0f), got(N, NAN);
        x[5] = tiny;                      // block 0: only tiny values
        for (int k = 32; k < 64; ++k) x[k] = 0.25f * static_cast<float>(k % 7) - 0.5f;  // block 1: ordinary
        matmul_forward_packed(got.data(), x.data(), w, nullptr, 1);
        for (int j = 0; j < N; ++j) {
          double ref = 0, bound = 0;  // block 1 only, with its 8-bit bound
          for (int k = 32; k < 64; ++k) {
            ref += deq[static_cast<size_t>(j) * K + k] * x[k];
            bound += std::fabs(deq[static_cast<size_t>(j) * K + k]) * 0.5 / 127.0 / 2;
          }
          INFO("tiny " << tiny << " j " << j << " got " << got[j] << " ref " << ref);
          REQUIRE(std::isfinite(got[j]));
          CHECK(std::fabs(got[j] - ref) <= bound + 1e-5 * std::max(1.0, std::fabs(ref)));
        }
        // The tiny block alone: any correct result is at most sum |w x| (|xhat| <= |x|), here
        // ~1e-37; overflowing scales gave 30-60x that, of either sign.
        std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
        matmul_forward_packed(got.data(), x.data(), w, nullptr, 1);
        for (int j = 0; j < N; ++j) {
          const double lim = std::fabs(deq[static_cast<size_t>(j) * K + 5] * tiny);
          INFO("tiny alone " << tiny << " j " << j << " got " << got[j] << " limit " << lim);
          CHECK(std::fabs(got[j]) <= lim * 1.001);
        }
      }
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        std::vector<float> x(K, 0.5f), got(N, 0.0f);
        x[70] = bad;
        matmul_forward_packed(got.data(), x.data(), w, nullptr, 1);
        for (int j = 0; j < N; ++j) {
          INFO("bad " << bad << " j " << j << " got " << got[j]);
          if (w.int8_activations()) CHECK(std::isnan(got[j]));  // 0 x Inf in the scale, on every layout
          else CHECK_FALSE(std::isfinite(got[j]));            // +-Inf or NaN where Q8_0 stays W8A32
        }
      }
    }
  }
}

TEST_CASE("blas_pool_parked_in_s: OpenBLAS's pthread workers spin 2^THREAD_TIMEOUT cycles after a call", "[cpu][matmul]") {
  const float inp[4] = {1, 2, 3, 4}, w[4] = {1, 0, 0, 1};
  float out[4];
  MatmulParams mp;
  mp.impl = MatmulImpl::Blas;
  matmul_forward(out, inp, w, nullptr, 2, 2, 2, &mp);
  CHECK(out[0] == 1);
  CHECK(out[3] == 4);
  const double spin_s = std::ldexp(1.0, 28) / 2e9;  // THREAD_TIMEOUT 28 at a 2 GHz TSC
  const double left = blas_pool_parked_in_s();
  INFO("left " << left);
  CHECK(left >= 0);
  CHECK(left <= spin_s);
  if (left > 0) {  // an OpenBLAS with its own pthread pool (Debian's default libopenblas0-pthread)
    CHECK(left > spin_s - 0.05);  // just after the call
    std::this_thread::sleep_for(std::chrono::duration<double>(left + 0.01));
    CHECK(blas_pool_parked_in_s() == 0);
    // OPENBLAS_THREAD_TIMEOUT (4..30) sets the spin; 4 is 16 cycles, parked at once.
    matmul_forward(out, inp, w, nullptr, 2, 2, 2, &mp);
    ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    CHECK(blas_pool_parked_in_s() < 1e-6);
    ::unsetenv("OPENBLAS_THREAD_TIMEOUT");
    CHECK(blas_pool_parked_in_s() > 0);
  }
}
