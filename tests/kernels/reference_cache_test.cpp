// reference_of(): the float64 reference is computed once per distinct problem and shared.
#include <catch2/catch.hpp>

#include "kernels/problems.hpp"
#include "rtx/kernels/problem.hpp"

using namespace rtx::kernels;

TEST_CASE("reference_of shares one result per distinct problem", "[cpu]") {
  const Shape s{{"N", 7}, {"C", 33}};
  const Problem a = make_layernorm_forward_problem(s, rtx::DType::F32, 5);
  const Problem b = make_layernorm_forward_problem(s, rtx::DType::F32, 5);
  const auto ra = reference_of(a), rb = reference_of(b);
  CHECK(ra.get() == rb.get());  // same op, shape, dtype, seed: one computation
  CHECK(*ra == a.reference(a));  // and it is the reference itself

  const Problem other_seed = make_layernorm_forward_problem(s, rtx::DType::F32, 6);
  CHECK(reference_of(other_seed).get() != ra.get());
  // Same shape keys and seed, different op: never confused.
  const Problem softmax = make_softmax_forward_problem(s, rtx::DType::F32, 5);
  const auto rs = reference_of(softmax);
  CHECK(rs.get() != ra.get());
  CHECK(*rs == softmax.reference(softmax));
}
