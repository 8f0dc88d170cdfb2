// register_cpu_matmul: the ops matmul_forward / matmul_backward with their CPU variants
// "cpu.blocked" (own kernel, tunable MC/NC/KC/MR/NR) and "cpu.blas" (cblas_sgemm).
#include "../problems.hpp"
#include "cpu_kernels.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/matmul.hpp"

namespace rtx::kernels {
namespace {

/// The blocked kernel's space. 0 = the active ISA's default (cpu/matmul_configs.hpp), so the
/// default point is valid whichever ISA path runs.
ParamSpace blocked_space() {
  ParamSpace s;
  s.params = {
      {"MC", {0, 48, 96, 168, 192, 336, 384, 672}, 0, "rows of the M-side block packed per thread (L2); 0 = ISA default"},
      {"NC", {0, 192, 384, 768, 1536, 3072}, 0, "columns of the shared N-side panel (L3); 0 = ISA default"},
      {"KC", {0, 64, 128, 192, 256, 384, 512}, 0, "depth of one packed block (L1 micro-panel); 0 = ISA default"},
      {"MR", {0, 4, 6, 8, 12, 14}, 0, "micro-tile rows (registers); 0 = ISA default"},
      {"NR", {0, 8, 16, 24, 32, 48, 64}, 0, "micro-tile columns, multiple of the vector width; 0 = ISA default"},
  };
  return s;
}

std::string validate_blocked(const Shape&, const Params& p) {
  try {
    return matmul_params_invalid(matmul_params_from(p, MatmulImpl::Blocked), cpu_isa_active());
  } catch (const Error& e) {
    return e.message();
  }
}

std::string validate_blas(const Shape&, const Params& p) {
  return p.empty() ? "" : "cpu.blas takes no parameters (got " + params_to_string(p) + ")";
}

int as_int(const Shape& s, const char* d) { return static_cast<int>(s.at(d)); }

Runner forward_runner(MatmulImpl impl) {
  return [impl](const RunArgs& a) {
    const MatmulParams mp = matmul_params_from(*a.params, impl);
    const int M = as_int(*a.shape, "M"), N = as_int(*a.shape, "N"), K = as_int(*a.shape, "K");
    const bool bias = a.in.size() > 2;
    if (a.dtype == DType::BF16) {
      matmul_forward(a.out[0], static_cast<const uint16_t*>(a.in[0]), static_cast<const uint16_t*>(a.in[1]),
                     bias ? static_cast<const uint16_t*>(a.in[2]) : nullptr, M, N, K, &mp);
    } else {
      matmul_forward(a.out[0], static_cast<const float*>(a.in[0]), static_cast<const float*>(a.in[1]),
                     bias ? static_cast<const float*>(a.in[2]) : nullptr, M, N, K, &mp);
    }
  };
}

Runner backward_runner(MatmulImpl impl) {
  return [impl](const RunArgs& a) {
    const MatmulParams mp = matmul_params_from(*a.params, impl);
    const int M = as_int(*a.shape, "M"), N = as_int(*a.shape, "N"), K = as_int(*a.shape, "K");
    if (a.dtype == DType::BF16) {
      matmul_backward(a.out[0], a.out[1], a.out[2], static_cast<const uint16_t*>(a.in[0]),
                      static_cast<const uint16_t*>(a.in[1]), static_cast<const uint16_t*>(a.in[2]), M, N, K, &mp);
    } else {
      matmul_backward(a.out[0], a.out[1], a.out[2], static_cast<const float*>(a.in[0]),
                      static_cast<const float*>(a.in[1]), static_cast<const float*>(a.in[2]), M, N, K, &mp);
    }
  };
}

using Validate = std::string (*)(const Shape&, const Params&);

Variant make_variant(const std::string& name, ParamSpace space, Validate validate, ProblemFactory factory,
                     Runner runner, double tol_f32, double tol_bf16) {
  Variant v;
  v.name = name;
  v.backend = Backend::CPU;
  v.dtypes = {DType::F32, DType::BF16};
  v.space = std::move(space);
  v.validate = validate;
  v.make = [=](const Shape& s, DType dt, const Params& p, uint64_t seed) {
    Problem prob = factory(s, dt, seed);  // validates the shape first
    if (std::string why = validate(s, p); !why.empty())
      throw_input(name + ": parameters " + params_to_string(p) + " rejected: " + why, "params",
                  "pick a combination the variant's validate accepts");
    const double tol = (dt == DType::BF16) ? tol_bf16 : tol_f32;
    return make_cpu_instance(std::move(prob), p, tol, runner);
  };
  return v;
}

std::vector<Shape> test_shapes(bool with_bias_off) {
  std::vector<Shape> s = {
      {{"M", 1}, {"N", 1}, {"K", 1}},       {{"M", 7}, {"N", 7}, {"K", 7}},
      {{"M", 127}, {"N", 33}, {"K", 65}},   {{"M", 1000}, {"N", 7}, {"K", 127}},
      {{"M", 17}, {"N", 1000}, {"K", 129}}, {{"M", 130}, {"N", 97}, {"K", 531}},
  };
  if (with_bias_off) s.push_back({{"M", 33}, {"N", 65}, {"K", 31}, {"bias", 0}});
  return s;
}

}  // namespace

void register_cpu_matmul(Registry& r) {
  // Matmul-class bounds of the kernels issue under check.hpp's max-norm relative error:
  // f32 1e-4 (fp32 accumulation error grows ~sqrt(K) eps), bf16 inputs 1e-2.
  constexpr double kTolF32 = 1e-4, kTolBf16 = 1e-2;
  {
    OpDef op;
    op.name = "matmul_forward";
    op.doc = "out (M,N) = inp (M,K) @ weight (N,K)^T + bias (N); shape key bias=0|1 (default 1)";
    op.dims = {"M", "N", "K"};
    op.optional_dims = {"bias"};
    op.work = [](const Shape& s, DType dt) {
      const double M = s.at("M"), N = s.at("N"), K = s.at("K");
      const bool bias = !s.count("bias") || s.at("bias") != 0;
      const double e = static_cast<double>(dtype_size(dt));
      // inputs in the dtype, output f32
      return Work{2 * M * N * K + (bias ? M * N : 0), (M * K + N * K + (bias ? N : 0)) * e + M * N * 4};
    };
    op.tol_f32 = kTolF32;
    op.tol_bf16 = kTolBf16;
    op.test_shapes = test_shapes(true);
    op.variants.push_back(make_variant("cpu.blocked", blocked_space(), validate_blocked,
                                       make_matmul_forward_problem, forward_runner(MatmulImpl::Blocked), kTolF32, kTolBf16));
    op.variants.push_back(make_variant("cpu.blas", ParamSpace{}, validate_blas,
                                       make_matmul_forward_problem, forward_runner(MatmulImpl::Blas), kTolF32, kTolBf16));
    op.variants.back().uses_blas_pool = true;
    r.add(std::move(op));
  }
  {
    OpDef op;
    op.name = "matmul_backward";
    op.doc = "dinp (M,K) = dout (M,N) @ weight (N,K); dweight (N,K) += dout^T @ inp (M,K); dbias (N) += colsum(dout)";
    op.dims = {"M", "N", "K"};
    op.work = [](const Shape& s, DType dt) {
      const double M = s.at("M"), N = s.at("N"), K = s.at("K");
      const double e = static_cast<double>(dtype_size(dt));
      // reads dout, inp, weight (dtype); writes dinp; reads+writes dweight, dbias (f32)
      return Work{4 * M * N * K + M * N, (M * N + M * K + N * K) * e + M * K * 4 + (N * K + N) * 8};
    };
    op.tol_f32 = kTolF32;
    op.tol_bf16 = kTolBf16;
    op.test_shapes = test_shapes(false);
    op.variants.push_back(make_variant("cpu.blocked", blocked_space(), validate_blocked,
                                       make_matmul_backward_problem, backward_runner(MatmulImpl::Blocked), kTolF32, kTolBf16));
    op.variants.push_back(make_variant("cpu.blas", ParamSpace{}, validate_blas,
                                       make_matmul_backward_problem, backward_runner(MatmulImpl::Blas), kTolF32, kTolBf16));
    op.variants.back().uses_blas_pool = true;
    r.add(std::move(op));
  }
}

}  // namespace rtx::kernels
