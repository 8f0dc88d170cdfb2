// CUDA variants of every op except matmul and allreduce: "cuda.v1" (softmax, layernorm,
// GELU, residual, encoder, cross-entropy, AdamW, attention backward), attention_forward
// "cuda.flash" (tunable Br, Bc) and "cuda.naive". f32 only, like the problems of these ops.
#include <cuda_runtime_api.h>

#include <memory>

#include "cuda_register.hpp"
#include "kernels/problems.hpp"
#include "rtx/core/cuda_check.hpp"
#include "rtx/kernels/cuda_ops.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::kernels::cuda_reg {
namespace {

// AdamW step the adamw_update problem applies (problems_ops.cpp: AdamWParams{} with t = 3).
constexpr int kAdamWStep = 3;

std::shared_ptr<float> device_floats(size_t n) {
  void* p = nullptr;
  RTX_CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(float)));
  return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { cudaFree(q); });
}

const float* F(const RunArgs& a, size_t i) { return static_cast<const float*>(a.in[i]); }

/// A runner factory from a function of (problem, params) that needs only indices; shorthand.
template <typename Fn>
RunnerFactory rf(Fn fn) {
  return [fn](const Problem& p, const Params& params) -> Runner { return fn(p, params); };
}

int64_t dim64(const Shape& s, const char* d) {
  auto it = s.find(d);
  if (it == s.end() || it->second <= 0) throw_input(std::string("shape has no positive dim ") + d, d);
  return it->second;
}

constexpr size_t kSmemLimit = 227 * 1024;

size_t flash_smem(int64_t Br, int64_t Bc, int64_t HS) {
  return static_cast<size_t>(Br * HS + 2 * Bc * (HS + 1) + Br * Bc) * sizeof(float);
}

std::string flash_validate(const Shape& s, const Params& p) {
  const int64_t Br = param(p, "Br", 8), Bc = param(p, "Bc", 64);
  if (Br < 1 || Br > 32) return "Br (query rows = warps per block) must be in [1,32]";
  if (Bc < 1 || Bc > 256) return "Bc (keys per tile) must be in [1,256]";
  auto hs = s.find("HS");
  if (hs != s.end()) {
    if (hs->second > 128) return "HS " + std::to_string(hs->second) + " > 128 (4 output dims per lane)";
    const size_t smem = flash_smem(Br, Bc, hs->second);
    if (smem > kSmemLimit) return "tile needs " + std::to_string(smem) + " B shared memory (> 227 KiB)";
  }
  return "";
}

}  // namespace

void register_ops(Registry& r) {
  const std::vector<DType> f32 = {DType::F32};
  const ParamSpace none{};

  add_variant(r, "softmax_forward", "cuda.v1", f32, none, nullptr, make_softmax_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), C = dim(p.shape, "C");
                const size_t ii = input_index(p, "inp"), io = output_index(p, "out");
                return [=](const RunArgs& a) { cuda::softmax_forward(a.out[io], F(a, ii), N, C, a.stream); };
              }));

  add_variant(r, "layernorm_forward", "cuda.v1", f32, none, nullptr, make_layernorm_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), C = dim(p.shape, "C");
                const size_t ii = input_index(p, "inp"), iw = input_index(p, "weight"), ib = input_index(p, "bias");
                const size_t oo = output_index(p, "out"), om = output_index(p, "mean"), orr = output_index(p, "rstd");
                return [=](const RunArgs& a) {
                  cuda::layernorm_forward(a.out[oo], a.out[om], a.out[orr], F(a, ii), F(a, iw), F(a, ib), N, C,
                                          a.stream);
                };
              }));

  add_variant(r, "layernorm_backward", "cuda.v1", f32, none, nullptr, make_layernorm_backward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), C = dim(p.shape, "C");
                const size_t id = input_index(p, "dout"), ii = input_index(p, "inp"), iw = input_index(p, "weight"),
                             im = input_index(p, "mean"), ir = input_index(p, "rstd");
                const size_t odi = output_index(p, "dinp"), odw = output_index(p, "dweight"),
                             odb = output_index(p, "dbias");
                // One accumulate flag for the three outputs: the problem initialises all or none.
                const bool acc = accumulates(p, "dinp");
                if (acc != accumulates(p, "dweight") || acc != accumulates(p, "dbias"))
                  throw_internal("layernorm_backward: CUDA runner expects dinp, dweight, dbias all += or all =");
                return [=](const RunArgs& a) {
                  cuda::layernorm_backward(a.out[odi], a.out[odw], a.out[odb], F(a, id), F(a, ii), F(a, iw), F(a, im),
                                           F(a, ir), N, C, acc, a.stream);
                };
              }));

  add_variant(r, "gelu_forward", "cuda.v1", f32, none, nullptr, make_gelu_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int64_t N = dim64(p.shape, "N");
                const size_t ii = input_index(p, "inp"), io = output_index(p, "out");
                return [=](const RunArgs& a) { cuda::gelu_forward(a.out[io], F(a, ii), N, a.stream); };
              }));

  add_variant(r, "gelu_backward", "cuda.v1", f32, none, nullptr, make_gelu_backward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int64_t N = dim64(p.shape, "N");
                const size_t ii = input_index(p, "inp"), id = input_index(p, "dout"), oi = output_index(p, "dinp");
                const bool acc = accumulates(p, "dinp");
                return [=](const RunArgs& a) { cuda::gelu_backward(a.out[oi], F(a, ii), F(a, id), N, acc, a.stream); };
              }));

  add_variant(r, "residual_forward", "cuda.v1", f32, none, nullptr, make_residual_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int64_t N = dim64(p.shape, "N");
                const size_t i1 = input_index(p, "inp1"), i2 = input_index(p, "inp2"), io = output_index(p, "out");
                return [=](const RunArgs& a) { cuda::residual_forward(a.out[io], F(a, i1), F(a, i2), N, a.stream); };
              }));

  add_variant(r, "encoder_forward", "cuda.v1", f32, none, nullptr, make_encoder_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int B = dim(p.shape, "B"), T = dim(p.shape, "T"), C = dim(p.shape, "C");
                const size_t iwte = input_index(p, "wte"), iwpe = input_index(p, "wpe"), io = output_index(p, "out");
                return [=](const RunArgs& a) {
                  cuda::encoder_forward(a.out[io], a.ids, F(a, iwte), F(a, iwpe), B, T, C, a.stream);
                };
              }));

  add_variant(r, "encoder_backward", "cuda.v1", f32, none, nullptr, make_encoder_backward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int B = dim(p.shape, "B"), T = dim(p.shape, "T"), C = dim(p.shape, "C"), V = dim(p.shape, "V");
                const size_t id = input_index(p, "dout"), ow = output_index(p, "dwte"), op = output_index(p, "dwpe");
                const bool acc = accumulates(p, "dwte");
                if (acc != accumulates(p, "dwpe"))
                  throw_internal("encoder_backward: CUDA runner expects dwte and dwpe both += or both =");
                return [=](const RunArgs& a) {
                  cuda::encoder_backward(a.out[ow], a.out[op], F(a, id), a.ids, B, T, C, V, acc, a.stream);
                };
              }));

  add_variant(r, "crossentropy_forward", "cuda.v1", f32, none, nullptr, make_crossentropy_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), V = dim(p.shape, "V");
                const size_t il = input_index(p, "logits"), io = output_index(p, "losses");
                return [=](const RunArgs& a) { cuda::crossentropy_forward(a.out[io], F(a, il), a.ids, N, V, a.stream); };
              }));

  add_variant(r, "crossentropy_backward", "cuda.v1", f32, none, nullptr, make_crossentropy_backward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), V = dim(p.shape, "V");
                const size_t il = input_index(p, "logits"), io = output_index(p, "dlogits");
                const bool acc = accumulates(p, "dlogits");
                return [=](const RunArgs& a) {
                  cuda::crossentropy_backward(a.out[io], F(a, il), a.ids, N, V, acc, a.stream);
                };
              }));

  add_variant(r, "adamw_update", "cuda.v1", f32, none, nullptr, make_adamw_update_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int64_t N = dim64(p.shape, "N");
                const size_t ig = input_index(p, "grad"), opar = output_index(p, "param"), om = output_index(p, "m"),
                             ov = output_index(p, "v");
                const AdamWParams hp{};
                return [=](const RunArgs& a) {
                  cuda::adamw_update(a.out[opar], a.out[om], a.out[ov], F(a, ig), N, hp.lr, hp.beta1, hp.beta2, hp.eps,
                                     hp.weight_decay, kAdamWStep, a.stream);
                };
              }));
}

void register_attention(Registry& r) {
  const std::vector<DType> f32 = {DType::F32};
  ParamSpace flash{{{"Br", {4, 8, 16, 32}, 8, "query rows per block (one warp each)"},
                    {"Bc", {32, 64, 128}, 64, "keys per shared-memory tile"}}};
  add_variant(r, "attention_forward", "cuda.flash", f32, flash, flash_validate, make_attention_forward_problem,
              rf([](const Problem& p, const Params& params) -> Runner {
                const int B = dim(p.shape, "B"), T = dim(p.shape, "T"), NH = dim(p.shape, "NH"), HS = dim(p.shape, "HS");
                const int Br = static_cast<int>(param(params, "Br", 8)), Bc = static_cast<int>(param(params, "Bc", 64));
                const size_t iq = input_index(p, "qkv"), io = output_index(p, "out"), ol = output_index(p, "lse");
                return [=](const RunArgs& a) {
                  cuda::attention_forward_flash(a.out[io], a.out[ol], F(a, iq), B, T, NH, HS, Br, Bc, a.stream);
                };
              }));

  add_variant(r, "attention_forward", "cuda.naive", f32, ParamSpace{}, nullptr, make_attention_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int B = dim(p.shape, "B"), T = dim(p.shape, "T"), NH = dim(p.shape, "NH"), HS = dim(p.shape, "HS");
                const size_t iq = input_index(p, "qkv"), io = output_index(p, "out"), ol = output_index(p, "lse");
                auto scratch = device_floats(cuda::attention_naive_scratch(B, T, NH));
                return [=](const RunArgs& a) {
                  cuda::attention_forward_naive(a.out[io], a.out[ol], scratch.get(), F(a, iq), B, T, NH, HS, a.stream);
                };
              }));

  add_variant(r, "attention_backward", "cuda.v1", f32, ParamSpace{}, nullptr, make_attention_backward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int B = dim(p.shape, "B"), T = dim(p.shape, "T"), NH = dim(p.shape, "NH"), HS = dim(p.shape, "HS");
                const size_t iq = input_index(p, "qkv"), id = input_index(p, "dout"), od = output_index(p, "dqkv");
                const bool acc = accumulates(p, "dqkv");
                auto scratch = device_floats(cuda::attention_backward_scratch(B, T, NH));
                return [=](const RunArgs& a) {
                  cuda::attention_backward(a.out[od], scratch.get(), F(a, id), F(a, iq), B, T, NH, HS, acc, a.stream);
                };
              }));
}

}  // namespace rtx::kernels::cuda_reg
