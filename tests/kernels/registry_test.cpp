// The generic registry walk (as ggml's test-backend-ops): every op, variant, dtype, test shape and a
// few parameter points against the float64 reference with the op's bound, plus checksum determinism.
// Built twice: kernels_registry_test (CPU walk) and, with RTX_REGISTRY_CUDA_WALK, kernels_registry_cuda_test.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "rtx/app/bench.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/registry.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::kernels;

namespace {

/// The default point and up to 3 more spread over the grid (deterministic), without repeats.
std::vector<Params> sample_params(const ParamSpace& sp) {
  std::vector<Params> out{sp.defaults()};
  const size_t g = sp.grid_size();
  for (size_t k = 1; k <= 3 && g > 1; ++k) {
    const Params p = sp.at((k * 7919 + k * g / 4) % g);
    bool dup = false;
    for (const auto& q : out) dup = dup || q == p;
    if (!dup) out.push_back(p);
  }
  return out;
}

/// Runs every check for one variant; returns the number of (shape, params) cases run.
[[maybe_unused]] size_t walk_variant(const OpDef& op, const Variant& v) {
  size_t cases = 0;
  for (DType dt : v.dtypes) {
    for (const Shape& s : op.test_shapes) {
      for (const Params& p : sample_params(v.space)) {
        const std::string why = v.validate ? v.validate(s, p) : "";
        if (!why.empty()) continue;  // a rejected point is skipped, never run
        INFO(op.name << " " << v.name << " " << dtype_name(dt) << " " << shape_to_string(s) << " params {"
                     << params_to_string(p) << "}");
        auto inst = v.make(s, dt, p, 1234);
        inst->run();
        inst->sync();
        const CheckResult r = inst->check();
        INFO("max_rel_err " << r.max_rel_err << " tol " << r.tolerance << " unwritten " << r.unwritten
                            << " nonfinite " << r.nonfinite << ": " << r.detail);
        CHECK(r.ok);
        CHECK(r.tolerance == op.tolerance(dt));
        // Same seed, same params: bitwise-identical outputs (check() re-runs from the initial state).
        auto twin = v.make(s, dt, p, 1234);
        twin->check();
        CHECK(inst->checksum() == twin->checksum());
        CHECK(inst->footprint_bytes() > 0);
        ++cases;
      }
    }
  }
  return cases;
}

}  // namespace

#ifndef RTX_REGISTRY_CUDA_WALK
TEST_CASE("registry: every op declares dims, work, shapes and a CPU variant", "[cpu]") {
  const Registry& reg = rtx::app::bench::registry();  // kernels + model and dist macro ops
  std::set<std::string> expected = {"softmax_forward",    "layernorm_forward",   "layernorm_backward",
                                    "gelu_forward",       "gelu_backward",       "residual_forward",
                                    "encoder_forward",    "encoder_backward",    "crossentropy_forward",
                                    "crossentropy_backward", "adamw_update",     "attention_forward",
                                    "attention_backward", "allreduce",       "allreduce_world",
                                    "spmm_forward",       "spmm_backward",       "sddmm",
                                    "edge_softmax_forward", "edge_softmax_backward", "gcn_norm",
                                    "segment_sum_forward", "segment_sum_backward", "segment_mean_forward",
                                    "segment_mean_backward", "segment_max_forward", "segment_max_backward",
                                    "gather_rows",        "scatter_add_rows"};
  for (const OpDef& op : reg.ops()) {
    INFO(op.name);
    expected.erase(op.name);
    size_t cpu = 0;
    for (const auto& v : op.variants) cpu += v.backend == Backend::CPU;
    CHECK(cpu >= 1);
    CHECK(!op.dims.empty());
    REQUIRE(!op.test_shapes.empty());
    for (const Shape& s : op.test_shapes) {
      for (const auto& d : op.dims) CHECK(s.count(d) == 1);
      const Work w = op.work(s, DType::F32);
      CHECK(w.flops > 0);
      CHECK(w.bytes > 0);
    }
    CHECK(op.tol_f32 > 0);
  }
  INFO("ops missing from the registry");
  CHECK(expected.empty());
}

TEST_CASE("registry: every CPU variant matches its float64 reference", "[cpu]") {
  size_t total = 0;
  for (const OpDef& op : rtx::app::bench::registry().ops())
    for (const Variant& v : op.variants)
      if (v.backend == Backend::CPU) {
        const size_t n = walk_variant(op, v);
        INFO(op.name << " " << v.name << " ran no case");
        CHECK(n > 0);
        total += n;
      }
  CHECK(total > 0);
}
#else
TEST_CASE("registry: every CUDA variant matches its float64 reference", "[cuda]") {
  if (!rtx::test::have_gpu()) {  // Catch2 v2 has no SKIP(): say why and leave the test case
    WARN("SKIPPED: no usable CUDA GPU (or built without CUDA): CUDA variants not run");
    return;
  }
  size_t cases = 0;
  for (const OpDef& op : rtx::app::bench::registry().ops()) {
    for (const Variant& v : op.variants) {
      if (v.backend != Backend::CUDA) continue;
      for (DType dt : v.dtypes) {
        for (const Shape& s : op.test_shapes) {
          for (const Params& p : sample_params(v.space)) {
            if (v.validate && !v.validate(s, p).empty()) continue;
            INFO(op.name << " " << v.name << " " << dtype_name(dt) << " " << shape_to_string(s) << " {"
                         << params_to_string(p) << "}");
            auto inst = v.make(s, dt, p, 1234);
            inst->run();
            inst->sync();
            const CheckResult r = inst->check();
            INFO("max_rel_err " << r.max_rel_err << " tol " << r.tolerance << ": " << r.detail);
            CHECK(r.ok);
            auto twin = v.make(s, dt, p, 1234);
            twin->check();
            CHECK(inst->checksum() == twin->checksum());
            ++cases;
          }
        }
      }
    }
  }
  if (cases == 0) WARN("no CUDA variants are registered in this build");
}
#endif  // RTX_REGISTRY_CUDA_WALK

TEST_CASE("grid enumeration: itertools.product order, digits round-trip, bounds", "[cpu]") {
  // The reference is Python's itertools.product(*values) order, written out as nested loops.
  const std::vector<Param> ps = {{"A", {1, 2}, 1, ""}, {"B", {10, 20, 30}, 10, ""}, {"C", {7}, 7, ""}, {"D", {-1, 5}, 5, ""}};
  std::vector<Params> want;
  for (int64_t a : ps[0].values)
    for (int64_t b : ps[1].values)
      for (int64_t c : ps[2].values)
        for (int64_t d : ps[3].values) want.push_back({{"A", a}, {"B", b}, {"C", c}, {"D", d}});
  REQUIRE(grid_size(ps) == want.size());
  ParamSpace sp{ps};
  CHECK(sp.grid_size() == 12);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("index " << i);
    CHECK(grid_point(ps, i) == want[i]);
    CHECK(sp.at(i) == want[i]);
    CHECK(grid_index(ps, grid_digits(ps, i)) == i);
  }
  CHECK(grid_digits(ps, 11) == std::vector<size_t>{1, 2, 0, 1});
  CHECK_THROWS_AS(grid_point(ps, 12), rtx::Error);
  CHECK_THROWS_AS(grid_index(ps, {0, 3, 0, 0}), rtx::Error);  // digit past B's 3 values
  CHECK_THROWS_AS(grid_index(ps, {0, 0}), rtx::Error);
  // No params: one point, the empty assignment. A param without values: no points.
  CHECK(grid_size({}) == 1);
  CHECK(grid_point({}, 0).empty());
  CHECK(grid_size({{"E", {}, 0, ""}, {"A", {1, 2}, 1, ""}}) == 0);
}
