// Tests of the non-matmul CPU ops: every ISA path against float64, known answers, determinism
// across thread counts and parameters, and bad input (rtx::Error(Input) naming the dim).
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

/// Restores the active ISA level when a test ends.
struct IsaGuard {
  Isa saved = cpu_isa_active();
  ~IsaGuard() { set_cpu_isa(saved); }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::vector<float> uniform(size_t n, uint64_t subseq, float lo, float hi) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, 99, subseq, lo, hi);
  return v;
}

template <class F>
ErrorCategory category_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.category();
  }
  return ErrorCategory::Internal;  // no throw: the caller's CHECK fails
}

template <class F>
std::string where_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.where();
  }
  return "(no throw)";
}

}  // namespace

TEST_CASE("ops: every ISA path of the bandwidth-bound ops matches float64", "[cpu]") {
  IsaGuard guard;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    set_cpu_isa(isa);
    if (cpu_isa_active() != isa) {
      WARN("CPU lacks " << isa_name(isa) << ": that path is not tested here");
      continue;
    }
    for (const char* name : {"softmax_forward", "layernorm_forward", "layernorm_backward", "gelu_forward",
                             "gelu_backward", "residual_forward", "adamw_update"}) {
      const OpDef& op = registry().op(name);
      const Variant& v = registry().variant(name, "cpu.vec");
      for (const Shape& s : op.test_shapes) {
        INFO(isa_name(isa) << " " << name << " " << shape_to_string(s));
        auto a = v.make(s, DType::F32, v.space.defaults(), 7);
        const CheckResult r = a->check();
        INFO("max_rel_err " << r.max_rel_err << ": " << r.detail);
        CHECK(r.ok);
        auto b = v.make(s, DType::F32, v.space.defaults(), 7);
        b->check();
        CHECK(a->checksum() == b->checksum());
      }
    }
  }
}

TEST_CASE("ops: results do not depend on thread count or chunk size", "[cpu]") {
  const int64_t N = 37, C = 1001, n = N * C;
  const auto x = uniform(n, 0, -3.f, 3.f), w = uniform(C, 1, -1.f, 1.f), bb = uniform(C, 2, -1.f, 1.f);
  auto run_all = [&](int threads, int64_t chunk) {
    omp_set_num_threads(threads);
    const OpParams p{chunk};
    std::vector<float> sm(n), ln(n), mean(N), rstd(N), ge(n), dinp(n, 0.5f), dw(C, 0.f), db(C, 0.f);
    softmax_forward(sm.data(), x.data(), N, C, &p);
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.data(), bb.data(), N, C, &p);
    gelu_forward(ge.data(), x.data(), n, &p);
    layernorm_backward(dinp.data(), dw.data(), db.data(), ge.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                       C, &p);
    std::vector<float> all;
    for (auto* v : {&sm, &ln, &mean, &rstd, &ge, &dinp, &dw, &db}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const auto ref = run_all(1, 1);
  CHECK(same_bits(ref, run_all(2, 1)));
  CHECK(same_bits(ref, run_all(2, 5)));
  CHECK(same_bits(ref, run_all(2, 4096)));
  omp_set_num_threads(omp_get_num_procs());
}

TEST_CASE("ops: known answers", "[cpu]") {
  IsaGuard guard;
  for (Isa isa : {Isa::Scalar, Isa::Avx512}) {
    set_cpu_isa(isa);
    INFO(isa_name(cpu_isa_active()));
    // softmax of a constant row is uniform; shifting a row changes nothing.
    std::vector<float> row(33, 4.25f), out(33);
    softmax_forward(out.data(), row.data(), 1, 33);
    for (float o : out) CHECK(o == Approx(1.0 / 33).epsilon(1e-6));
    std::vector<float> r2 = {1.f, 2.f, 3.f}, o2(3), r3 = {101.f, 102.f, 103.f}, o3(3);
    softmax_forward(o2.data(), r2.data(), 1, 3);
    softmax_forward(o3.data(), r3.data(), 1, 3);
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    for (int i = 0; i < 3; ++i) {
      CHECK(o2[i] == Approx(std::exp(i + 1.0) / z).epsilon(1e-6));
      CHECK(o3[i] == Approx(o2[i]).epsilon(1e-6));
    }
    // layernorm of a constant row: out = bias, rstd = 1/sqrt(1e-5).
    std::vector<float> c(7, 2.5f), w(7, 3.f), b = {0.f, 1.f, -1.f, 2.f, 0.5f, -0.25f, 7.f}, lo(7), mu(1), rs(1);
    layernorm_forward(lo.data(), mu.data(), rs.data(), c.data(), w.data(), b.data(), 1, 7);
    CHECK(mu[0] == 2.5f);
    CHECK(rs[0] == Approx(1.0 / std::sqrt(1e-5)).epsilon(1e-6));
    for (int i = 0; i < 7; ++i) CHECK(lo[i] == Approx(b[i]).margin(1e-6));
    // GELU tanh form at fixed points (values from the float64 formula).
    std::vector<float> gx = {0.f, 1.f, -1.f, 3.f, 30.f, -30.f}, gy(6);
    gelu_forward(gy.data(), gx.data(), 6);
    CHECK(gy[0] == 0.f);
    CHECK(gy[1] == Approx(0.8411919906082768).epsilon(1e-6));
    CHECK(gy[2] == Approx(-0.15880800939172324).epsilon(1e-6));
    CHECK(gy[3] == Approx(2.996362607918227).epsilon(1e-6));
    CHECK(gy[4] == 30.f);
    CHECK(std::fabs(gy[5]) < 1e-30f);
    // gelu'(0) = 0.5, accumulated onto 1.
    std::vector<float> d0 = {1.f}, x0 = {0.f}, g0 = {2.f};
    gelu_backward(d0.data(), x0.data(), g0.data(), 1);
    CHECK(d0[0] == Approx(2.0).epsilon(1e-7));
    // residual
    std::vector<float> ra = {1.5f, -2.f}, rb = {0.25f, 2.f}, ro(2);
    residual_forward(ro.data(), ra.data(), rb.data(), 2);
    CHECK(ro[0] == 1.75f);
    CHECK(ro[1] == 0.f);
    // AdamW first step from zero moments: m = 0.1 g, v = 0.001 g^2, mh = g, vh = g^2.
    std::vector<float> p = {1.f, -2.f}, m = {0.f, 0.f}, v = {0.f, 0.f}, g = {0.5f, -0.25f};
    adamw_update(p.data(), m.data(), v.data(), g.data(), 2, AdamWParams{});
    const double lr = 1e-3f, wd = 0.1f, eps = 1e-8f;
    CHECK(p[0] == Approx(1.0 - lr * (0.5 / (0.5 + eps) + wd * 1.0)).epsilon(1e-7));
    CHECK(p[1] == Approx(-2.0 - lr * (-0.25 / (0.25 + eps) + wd * -2.0)).epsilon(1e-7));
    CHECK(m[0] == Approx(0.05).epsilon(1e-6));
    CHECK(v[1] == Approx((1.0 - static_cast<double>(0.999f)) * 0.0625).epsilon(1e-6));
  }
  // cross-entropy of uniform logits is log V; the fused backward rows sum to zero.
  std::vector<float> logits(3 * 5, 0.7f), loss(3), dl(15);
  std::vector<int32_t> tg = {0, 4, 2};
  crossentropy_forward(loss.data(), logits.data(), tg.data(), 3, 5);
  for (float l : loss) CHECK(l == Approx(std::log(5.0)).epsilon(1e-6));
  crossentropy_backward(dl.data(), logits.data(), tg.data(), 3, 5);
  for (int n = 0; n < 3; ++n) {
    double s = 0;
    for (int v = 0; v < 5; ++v) s += dl[n * 5 + v];
    CHECK(std::fabs(s) < 1e-7);
    CHECK(dl[n * 5 + tg[n]] == Approx((0.2 - 1.0) / 3).epsilon(1e-6));
  }
  // encoder: out = wte[id] + wpe[t]; backward scatters back.
  std::vector<float> wte = {1, 2, 10, 20, 100, 200}, wpe = {0.5f, 0.25f, -1, -2}, eo(2 * 2 * 2);
  std::vector<int32_t> ids = {2, 0, 2, 2};
  encoder_forward(eo.data(), ids.data(), wte.data(), wpe.data(), 2, 2, 2, 3);
  CHECK(eo == std::vector<float>{100.5f, 200.25f, 0.f, 0.f, 100.5f, 200.25f, 99.f, 198.f});
  std::vector<float> dwte(6, 0.f), dwpe(4, 1.f), dout = {1, 2, 3, 4, 5, 6, 7, 8};
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), 2, 2, 2, 3);
  CHECK(dwte == std::vector<float>{3, 4, 0, 0, 13, 16});
  CHECK(dwpe == std::vector<float>{7, 9, 11, 13});
}

TEST_CASE("ops: allreduce gives every rank the same bits for every chunk size", "[cpu]") {
  for (int64_t R : {1, 2, 3, 8}) {
    const int64_t N = 10007;
    std::vector<float> init = uniform(R * N, 5, -1.f, 1.f);
    std::vector<float> ref;
    for (int64_t chunk : {1, 100, 4096, 1 << 20}) {
      std::vector<float> data = init;
      std::vector<float*> bufs;
      for (int64_t r = 0; r < R; ++r) bufs.push_back(data.data() + r * N);
      const AllreduceParams p{chunk};
      allreduce_sum(bufs.data(), R, N, &p);
      for (int64_t r = 1; r < R; ++r) CHECK(std::memcmp(bufs[0], bufs[r], N * 4) == 0);
      for (int64_t i = 0; i < N; i += 997) {
        double s = 0;
        for (int64_t r = 0; r < R; ++r) s += init[r * N + i];
        CHECK(bufs[0][i] == static_cast<float>(s));
      }
      if (ref.empty()) ref = data;
      CHECK(same_bits(ref, data));
    }
  }
}

TEST_CASE("ops: bad shapes, ids and parameters are Input errors naming the culprit", "[cpu]") {
  std::vector<float> buf(64);
  CHECK(category_of([&] { softmax_forward(buf.data(), buf.data(), 0, 4); }) == ErrorCategory::Input);
  CHECK(where_of([&] { softmax_forward(buf.data(), buf.data(), 4, -1); }) == "C");
  CHECK(where_of([&] { gelu_forward(buf.data(), nullptr, 4); }) == "inp");
  CHECK(where_of([&] { residual_forward(buf.data(), buf.data(), buf.data(), 0); }) == "N");
  std::vector<int32_t> bad = {0, 3};
  CHECK(where_of([&] { crossentropy_forward(buf.data(), buf.data(), bad.data(), 2, 3); }) == "targets");
  CHECK(where_of([&] { encoder_forward(buf.data(), bad.data(), buf.data(), buf.data(), 1, 2, 2, 3); }) == "ids");
  float* bufs[2] = {buf.data(), nullptr};
  CHECK(where_of([&] { allreduce_sum(bufs, 0, 4); }) == "R");
  CHECK(where_of([&] { allreduce_sum(bufs, 2, 4); }) == "bufs");
  AdamWParams hp;
  hp.t = 0;
  CHECK(where_of([&] { adamw_update(buf.data(), buf.data(), buf.data(), buf.data(), 4, hp); }) == "t");

  // Problem factories: a missing or non-positive dim, an unsupported dtype.
  const Variant& v = registry().variant("layernorm_forward", "cpu.vec");
  CHECK(where_of([&] { v.make({{"N", 4}}, DType::F32, v.space.defaults(), 1); }) == "C");
  CHECK(where_of([&] { v.make({{"N", 0}, {"C", 4}}, DType::F32, v.space.defaults(), 1); }) == "N");
  CHECK(where_of([&] { v.make({{"N", 4}, {"C", 4}}, DType::BF16, v.space.defaults(), 1); }) == "dtype");
  // Parameters validate() rejects are refused by make() with a reason.
  Params zero{{"ROWS", 0}};
  CHECK_FALSE(v.validate({{"N", 4}, {"C", 4}}, zero).empty());
  CHECK(category_of([&] { v.make({{"N", 4}, {"C", 4}}, DType::F32, zero, 1); }) == ErrorCategory::Input);
  const Variant& ar = registry().variant("allreduce", "cpu.threads");
  CHECK(where_of([&] { ar.make({{"R", 300}, {"N", 4}}, DType::F32, ar.space.defaults(), 1); }) == "R");
}
