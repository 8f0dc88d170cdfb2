// CUDA variants of matmul_forward / matmul_backward: "cuda.cublaslt" (cuBLASLt, heuristic algo
// index tunable) and "cuda.tiled" (own kernel: instantiated tile config, pipeline stages, vec).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>

#include "kernels/problems.hpp"
#include "cuda_register.hpp"
#include "rtx/core/cuda_check.hpp"
#include "rtx/kernels/cuda_ops.hpp"

namespace rtx::kernels::cuda_reg {
namespace {

using cuda::LtMatmul;

/// A device allocation owned by a runner (freed when the instance drops its runner).
std::shared_ptr<void> device_scratch(size_t bytes) {
  void* p = nullptr;
  RTX_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

DType input_dtype(const Problem& p, size_t i) { return p.inputs[i].always_f32 ? DType::F32 : p.dtype; }

ParamSpace lt_space() {
  return ParamSpace{{{"algo", {0, 1, 2, 3}, 0,
                      "index into cuBLASLt's heuristic list (0 = its first choice); an index beyond the "
                      "list for a shape makes make() throw Error(Input), recorded as a skipped candidate"}}};
}

ParamSpace tiled_space() {
  return ParamSpace{{
      {"config", {0, 1, 2, 3}, 0,
       "instantiated tile shape: 0 = 128x128x16 warp 32x64, 1 = 128x64x16 warp 32x32, "
       "2 = 64x64x32 warp 32x32, 3 = 32x32x32 warp 16x16"},
      {"stages", {1, 2, 3}, 3, "cp.async pipeline depth (1 = load then compute)"},
      {"vec", {1, 2, 4}, 4, "widest global load in elements; the kernel uses the widest width <= vec dividing K"},
  }};
}

std::string tiled_validate(const Shape&, const Params& p) {
  const int64_t c = param(p, "config", 0), st = param(p, "stages", 3), vec = param(p, "vec", 4);
  if (c < 0 || c >= cuda::kTiledConfigCount) return "config " + std::to_string(c) + " is not an instantiated tile shape";
  if (st < 1 || st > 3) return "stages must be 1, 2 or 3";
  if (vec != 1 && vec != 2 && vec != 4) return "vec must be 1, 2 or 4";
  const cuda::TiledConfig& t = cuda::kTiledConfigs[c];
  if (t.bm % t.wm || t.bn % t.wn || t.bk % 16) return "tile does not divide into warp tiles / 16-wide k steps";
  if ((t.bm / t.wm) * (t.bn / t.wn) * 32 > 1024) return "more than 1024 threads per block";
  const size_t smem = std::max(cuda::tiled_smem_bytes(static_cast<int>(c), static_cast<int>(st), DType::F32),
                               cuda::tiled_smem_bytes(static_cast<int>(c), static_cast<int>(st), DType::BF16));
  if (smem > 227 * 1024) return "needs " + std::to_string(smem) + " B shared memory (> 227 KiB)";
  return "";
}

Runner lt_forward(const Problem& p, const Params& params) {
  const int M = dim(p.shape, "M"), N = dim(p.shape, "N"), K = dim(p.shape, "K");
  const size_t ii = input_index(p, "inp"), iw = input_index(p, "weight");
  bool has_bias = false;
  size_t ib = 0;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    if (p.inputs[i].name == "bias") has_bias = true, ib = i;
  const size_t io = output_index(p, "out");
  auto plan = std::make_shared<LtMatmul>(LtMatmul::Kind::Forward, M, N, K, p.dtype, has_bias,
                                         has_bias ? input_dtype(p, ib) : DType::F32, accumulates(p, "out"),
                                         static_cast<int>(param(params, "algo", 0)));
  return [=](const RunArgs& a) { plan->run(a.out[io], a.in[ii], a.in[iw], has_bias ? a.in[ib] : nullptr, a.stream); };
}

Runner lt_backward(const Problem& p, const Params& params) {
  const int M = dim(p.shape, "M"), N = dim(p.shape, "N"), K = dim(p.shape, "K");
  const size_t id = input_index(p, "dout"), ii = input_index(p, "inp"), iw = input_index(p, "weight");
  const size_t odi = output_index(p, "dinp"), odw = output_index(p, "dweight"), odb = output_index(p, "dbias");
  const int algo = static_cast<int>(param(params, "algo", 0));
  auto pin = std::make_shared<LtMatmul>(LtMatmul::Kind::BackwardInput, M, N, K, p.dtype, false, DType::F32,
                                        accumulates(p, "dinp"), algo);
  auto pw = std::make_shared<LtMatmul>(LtMatmul::Kind::BackwardWeight, M, N, K, p.dtype, false, DType::F32,
                                       accumulates(p, "dweight"), algo);
  const bool acc_b = accumulates(p, "dbias");
  const DType dt = input_dtype(p, id);
  return [=](const RunArgs& a) {
    pin->run(a.out[odi], a.in[id], a.in[iw], nullptr, a.stream);
    pw->run(a.out[odw], a.in[id], a.in[ii], nullptr, a.stream);
    cuda::column_sum(a.out[odb], a.in[id], M, N, dt, acc_b, a.stream);
  };
}

Runner tiled_forward(const Problem& p, const Params& params) {
  const int M = dim(p.shape, "M"), N = dim(p.shape, "N"), K = dim(p.shape, "K");
  const size_t ii = input_index(p, "inp"), iw = input_index(p, "weight"), io = output_index(p, "out");
  bool has_bias = false;
  size_t ib = 0;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    if (p.inputs[i].name == "bias") has_bias = true, ib = i;
  const DType bias_dt = has_bias ? input_dtype(p, ib) : DType::F32;
  const bool acc = accumulates(p, "out");
  const DType dt = p.dtype;
  const int cfg = static_cast<int>(param(params, "config", 0)), st = static_cast<int>(param(params, "stages", 3)),
            vec = static_cast<int>(param(params, "vec", 4));
  return [=](const RunArgs& a) {
    cuda::matmul_tiled_nt(a.out[io], a.in[ii], a.in[iw], has_bias ? a.in[ib] : nullptr, bias_dt, M, N, K, dt, acc, cfg,
                          st, vec, a.stream);
  };
}

// Backward with the NT kernel: dinp = dout @ (W^T)^T and dweight += dout^T @ (inp^T)^T, the
// transposes materialised in runner-owned scratch (extra memory passes, documented cost).
Runner tiled_backward(const Problem& p, const Params& params) {
  const int M = dim(p.shape, "M"), N = dim(p.shape, "N"), K = dim(p.shape, "K");
  const size_t id = input_index(p, "dout"), ii = input_index(p, "inp"), iw = input_index(p, "weight");
  const size_t odi = output_index(p, "dinp"), odw = output_index(p, "dweight"), odb = output_index(p, "dbias");
  const bool acc_i = accumulates(p, "dinp"), acc_w = accumulates(p, "dweight"), acc_b = accumulates(p, "dbias");
  const DType dt = p.dtype;
  const size_t es = dtype_size(dt);
  auto wt = device_scratch(static_cast<size_t>(K) * N * es);     // W^T (K,N)
  auto doutt = device_scratch(static_cast<size_t>(N) * M * es);  // dout^T (N,M)
  auto inpt = device_scratch(static_cast<size_t>(K) * M * es);   // inp^T (K,M)
  const int cfg = static_cast<int>(param(params, "config", 0)), st = static_cast<int>(param(params, "stages", 3)),
            vec = static_cast<int>(param(params, "vec", 4));
  return [=](const RunArgs& a) {
    cuda::transpose(wt.get(), a.in[iw], N, K, dt, a.stream);
    cuda::transpose(doutt.get(), a.in[id], M, N, dt, a.stream);
    cuda::transpose(inpt.get(), a.in[ii], M, K, dt, a.stream);
    cuda::matmul_tiled_nt(a.out[odi], a.in[id], wt.get(), nullptr, DType::F32, M, K, N, dt, acc_i, cfg, st, vec,
                          a.stream);
    cuda::matmul_tiled_nt(a.out[odw], doutt.get(), inpt.get(), nullptr, DType::F32, N, K, M, dt, acc_w, cfg, st, vec,
                          a.stream);
    cuda::column_sum(a.out[odb], a.in[id], M, N, dt, acc_b, a.stream);
  };
}

}  // namespace

void register_matmul(Registry& r) {
  const std::vector<DType> dts = {DType::F32, DType::BF16};
  add_variant(r, "matmul_forward", "cuda.cublaslt", dts, lt_space(), nullptr, make_matmul_forward_problem, lt_forward);
  add_variant(r, "matmul_backward", "cuda.cublaslt", dts, lt_space(), nullptr, make_matmul_backward_problem,
              lt_backward);
  add_variant(r, "matmul_forward", "cuda.tiled", dts, tiled_space(), tiled_validate, make_matmul_forward_problem,
              tiled_forward);
  add_variant(r, "matmul_backward", "cuda.tiled", dts, tiled_space(), tiled_validate, make_matmul_backward_problem,
              tiled_backward);
}

}  // namespace rtx::kernels::cuda_reg
