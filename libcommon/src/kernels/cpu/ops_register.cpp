// register_cpu_ops: the OpDef (dims, work model, tolerances, test shapes) and CPU variants of every
// op except matmul. Runners adapt RunArgs to the public functions of rtx/kernels/ops.hpp.
#include <string>
#include <utility>
#include <vector>

#include "../problems.hpp"
#include "cpu_kernels.hpp"
#include "register_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/ops.hpp"
#include "rtx/kernels/problem.hpp"

namespace rtx::kernels {
namespace {

using reg_util::D;
using reg_util::fin;
using reg_util::I;
using reg_util::param;

/// Rejects params that are missing, non-positive or above `max` ("" when all fine).
std::string check_positive(const Params& p, const std::vector<std::pair<const char*, int64_t>>& names) {
  for (const auto& [n, mx] : names) {
    auto it = p.find(n);
    if (it == p.end()) return std::string("parameter ") + n + " is missing";
    if (it->second <= 0) return std::string(n) + "=" + std::to_string(it->second) + " must be positive";
    if (it->second > mx) return std::string(n) + "=" + std::to_string(it->second) + " exceeds " + std::to_string(mx);
  }
  return "";
}


ParamSpace rows_space() {
  return ParamSpace{{Param{"ROWS", {1, 4, 8, 32}, 8, "rows per OpenMP work item"}}};
}
ParamSpace chunk_space() {
  return ParamSpace{{Param{"CHUNK", {4096, 16384, 65536}, 16384, "elements per OpenMP work item"}}};
}
auto rows_valid = [](const Shape&, const Params& p) { return check_positive(p, {{"ROWS", 1 << 20}}); };
auto chunk_valid = [](const Shape&, const Params& p) { return check_positive(p, {{"CHUNK", int64_t{1} << 30}}); };
auto always_valid = [](const Shape&, const Params&) { return std::string(); };

std::vector<Shape> nc_shapes(const char* c) {
  return {{{"N", 1}, {c, 1}}, {{"N", 7}, {c, 7}}, {{"N", 1}, {c, 33}}, {{"N", 127}, {c, 129}}, {{"N", 1000}, {c, 33}},
          {{"N", 7}, {c, 1000}}};
}
std::vector<Shape> n_shapes() { return {{{"N", 1}}, {{"N", 7}}, {{"N", 127}}, {{"N", 1000}}, {{"N", 100003}}}; }
std::vector<Shape> attn_shapes() {
  return {{{"B", 1}, {"T", 1}, {"NH", 1}, {"HS", 8}},
          {{"B", 2}, {"T", 7}, {"NH", 3}, {"HS", 8}},
          {{"B", 1}, {"T", 65}, {"NH", 2}, {"HS", 16}},
          {{"B", 1}, {"T", 127}, {"NH", 3}, {"HS", 16}}};
}

OpDef op(std::string name, std::string doc, std::vector<std::string> dims, std::function<Work(const Shape&, DType)> work,
         std::vector<Shape> shapes, double tol_f32 = 1e-5) {
  OpDef o;
  o.name = std::move(name);
  o.doc = std::move(doc);
  o.dims = std::move(dims);
  o.work = std::move(work);
  o.tol_f32 = tol_f32;
  o.tol_bf16 = 1e-2;
  o.test_shapes = std::move(shapes);
  return o;
}

OpParams op_params(const RunArgs& a, const char* k) { return OpParams{param(a, k, 0)}; }

// Attention variants share the space of the flash tiles; the naive path has none.
ParamSpace flash_space() {
  return ParamSpace{{Param{"Br", {16, 32, 64, 128}, 64, "queries per tile"},
                     Param{"Bc", {16, 32, 64, 128, 256}, 64, "keys per tile"}}};
}
std::string flash_valid(const Shape&, const Params& p) { return check_positive(p, {{"Br", 512}, {"Bc", 512}}); }
AttentionParams attn_params(const RunArgs& a, bool flash) {
  AttentionParams ap;
  ap.algo = flash ? AttentionParams::Algo::Flash : AttentionParams::Algo::Naive;
  if (flash) {
    ap.Br = static_cast<int>(param(a, "Br", 64));
    ap.Bc = static_cast<int>(param(a, "Bc", 64));
  }
  return ap;
}

// Causal attention FLOP: QK^T and PV over the T(T+1)/2 visible pairs, 2 FLOP per multiply-add.
double attn_pairs(const Shape& s) { return D(s, "B") * D(s, "NH") * D(s, "T") * (D(s, "T") + 1) / 2; }

}  // namespace

void register_cpu_ops(Registry& r) {
  // Attention is matmul-class (sums of T products, q.k and p.v, accumulated in float32): the
  // kernels issue's matmul-class bound 1e-4 applies (check.hpp's max-norm relative error).
  const double kAttnTol = 1e-4;

  {
    OpDef o = op("softmax_forward", "numerically stable row softmax: inp (N,C) -> out (N,C)", {"N", "C"},
                 [](const Shape& s, DType) { return Work{5 * D(s, "N") * D(s, "C"), 8 * D(s, "N") * D(s, "C")}; },
                 nc_shapes("C"));
    o.variants.push_back(cpu_variant("cpu.vec", rows_space(), rows_valid, make_softmax_forward_problem,
                                     [](const RunArgs& a) {
                                       const OpParams p = op_params(a, "ROWS");
                                       softmax_forward(a.out[0], fin(a, 0), I(*a.shape, "N"), I(*a.shape, "C"), &p);
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("layernorm_forward", "layernorm (eps 1e-5): inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)",
                 {"N", "C"},
                 [](const Shape& s, DType) {
                   const double N = D(s, "N"), C = D(s, "C");
                   return Work{8 * N * C, 4 * (2 * N * C + 2 * C + 2 * N)};
                 },
                 nc_shapes("C"));
    o.variants.push_back(cpu_variant("cpu.vec", rows_space(), rows_valid, make_layernorm_forward_problem,
                                     [](const RunArgs& a) {
                                       const OpParams p = op_params(a, "ROWS");
                                       layernorm_forward(a.out[0], a.out[1], a.out[2], fin(a, 0), fin(a, 1), fin(a, 2),
                                                         I(*a.shape, "N"), I(*a.shape, "C"), &p);
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("layernorm_backward",
                 "layernorm backward: dout, inp (N,C), weight (C), mean, rstd (N) -> dinp (N,C) +=, dweight, dbias (C) +=",
                 {"N", "C"},
                 [](const Shape& s, DType) {
                   const double N = D(s, "N"), C = D(s, "C");
                   return Work{14 * N * C, 4 * (4 * N * C + 5 * C + 2 * N)};
                 },
                 nc_shapes("C"));
    o.variants.push_back(cpu_variant("cpu.vec", rows_space(), rows_valid, make_layernorm_backward_problem,
                                     [](const RunArgs& a) {
                                       const OpParams p = op_params(a, "ROWS");
                                       layernorm_backward(a.out[0], a.out[1], a.out[2], fin(a, 0), fin(a, 1), fin(a, 2),
                                                          fin(a, 3), fin(a, 4), I(*a.shape, "N"), I(*a.shape, "C"), &p);
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("gelu_forward", "GELU (tanh form): inp (N) -> out (N)", {"N"},
                 [](const Shape& s, DType) { return Work{16 * D(s, "N"), 8 * D(s, "N")}; }, n_shapes());
    o.variants.push_back(cpu_variant("cpu.vec", chunk_space(), chunk_valid, make_gelu_forward_problem,
                                     [](const RunArgs& a) {
                                       const OpParams p = op_params(a, "CHUNK");
                                       gelu_forward(a.out[0], fin(a, 0), I(*a.shape, "N"), &p);
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("gelu_backward", "GELU backward: inp (N), dout (N) -> dinp (N) +=", {"N"},
                 [](const Shape& s, DType) { return Work{24 * D(s, "N"), 16 * D(s, "N")}; }, n_shapes());
    o.variants.push_back(cpu_variant("cpu.vec", chunk_space(), chunk_valid, make_gelu_backward_problem,
                                     [](const RunArgs& a) {
                                       const OpParams p = op_params(a, "CHUNK");
                                       gelu_backward(a.out[0], fin(a, 0), fin(a, 1), I(*a.shape, "N"), &p);
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("residual_forward", "residual add: inp1 (N) + inp2 (N) -> out (N)", {"N"},
                 [](const Shape& s, DType) { return Work{D(s, "N"), 12 * D(s, "N")}; }, n_shapes());
    o.variants.push_back(cpu_variant("cpu.vec", chunk_space(), chunk_valid, make_residual_forward_problem,
                                     [](const RunArgs& a) {
                                       const OpParams p = op_params(a, "CHUNK");
                                       residual_forward(a.out[0], fin(a, 0), fin(a, 1), I(*a.shape, "N"), &p);
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  const std::vector<Shape> enc_shapes = {{{"B", 1}, {"T", 1}, {"C", 1}, {"V", 1}},
                                         {{"B", 1}, {"T", 7}, {"C", 5}, {"V", 3}},
                                         {{"B", 2}, {"T", 7}, {"C", 33}, {"V", 64}},
                                         {{"B", 3}, {"T", 127}, {"C", 7}, {"V", 1000}},
                                         {{"B", 2}, {"T", 65}, {"C", 129}, {"V", 517}}};
  {
    OpDef o = op("encoder_forward", "token+position embedding: ids (B,T), wte (V,C), wpe (T,C) -> out (B,T,C)",
                 {"B", "T", "C", "V"},
                 [](const Shape& s, DType) {
                   const double BT = D(s, "B") * D(s, "T"), C = D(s, "C");
                   return Work{BT * C, 4 * (BT + 2 * BT * C + D(s, "T") * C)};
                 },
                 enc_shapes);
    o.variants.push_back(cpu_variant("cpu.vec", ParamSpace{}, always_valid, make_encoder_forward_problem,
                                     [](const RunArgs& a) {
                                       const Shape& s = *a.shape;
                                       encoder_forward(a.out[0], a.ids, fin(a, 0), fin(a, 1), I(s, "B"), I(s, "T"),
                                                       I(s, "C"), I(s, "V"));
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("encoder_backward", "embedding backward: dout (B,T,C), ids (B,T) -> dwte (V,C) +=, dwpe (T,C) +=",
                 {"B", "T", "C", "V"},
                 [](const Shape& s, DType) {
                   const double BT = D(s, "B") * D(s, "T"), C = D(s, "C");
                   return Work{2 * BT * C, 4 * (BT + BT * C + 2 * (std::min(BT, D(s, "V")) + D(s, "T")) * C)};
                 },
                 enc_shapes);
    o.variants.push_back(cpu_variant("cpu.vec", ParamSpace{}, always_valid, make_encoder_backward_problem,
                                     [](const RunArgs& a) {
                                       const Shape& s = *a.shape;
                                       encoder_backward(a.out[0], a.out[1], fin(a, 0), a.ids, I(s, "B"), I(s, "T"),
                                                        I(s, "C"), I(s, "V"));
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  const std::vector<Shape> ce_shapes = {{{"N", 1}, {"V", 1}}, {{"N", 7}, {"V", 7}}, {{"N", 127}, {"V", 129}},
                                        {{"N", 1000}, {"V", 33}}, {{"N", 3}, {"V", 5000}}};
  {
    OpDef o = op("crossentropy_forward", "cross-entropy: logits (N,V), targets (N) -> losses (N)", {"N", "V"},
                 [](const Shape& s, DType) {
                   return Work{4 * D(s, "N") * D(s, "V"), 4 * (D(s, "N") * D(s, "V") + 2 * D(s, "N"))};
                 },
                 ce_shapes);
    o.variants.push_back(cpu_variant("cpu.vec", ParamSpace{}, always_valid, make_crossentropy_forward_problem,
                                     [](const RunArgs& a) {
                                       crossentropy_forward(a.out[0], fin(a, 0), a.ids, I(*a.shape, "N"),
                                                            I(*a.shape, "V"));
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("crossentropy_backward", "fused softmax+CE backward, dloss=1/N: logits (N,V), targets (N) -> dlogits (N,V)",
                 {"N", "V"},
                 [](const Shape& s, DType) {
                   return Work{6 * D(s, "N") * D(s, "V"), 4 * (2 * D(s, "N") * D(s, "V") + D(s, "N"))};
                 },
                 ce_shapes);
    o.variants.push_back(cpu_variant("cpu.vec", ParamSpace{}, always_valid, make_crossentropy_backward_problem,
                                     [](const RunArgs& a) {
                                       crossentropy_backward(a.out[0], fin(a, 0), a.ids, I(*a.shape, "N"),
                                                             I(*a.shape, "V"));
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("adamw_update",
                 "AdamW step t=3 (lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0.1): grad (N); param, m, v (N) in place",
                 {"N"}, [](const Shape& s, DType) { return Work{14 * D(s, "N"), 28 * D(s, "N")}; }, n_shapes());
    o.variants.push_back(cpu_variant("cpu.vec", chunk_space(), chunk_valid, make_adamw_update_problem,
                                     [](const RunArgs& a) {
                                       const OpParams p = op_params(a, "CHUNK");
                                       AdamWParams hp;
                                       hp.t = 3;
                                       adamw_update(a.out[0], a.out[1], a.out[2], fin(a, 0), I(*a.shape, "N"), hp, &p);
                                     }, o.tol_f32));
    r.add(std::move(o));
  }
  for (bool backward : {false, true}) {
    OpDef o = op(backward ? "attention_backward" : "attention_forward",
                 backward ? "causal MHA backward: qkv (B,T,3C), dout (B,T,C) -> dqkv (B,T,3C) +="
                          : "causal MHA, scale 1/sqrt(HS): qkv (B,T,3C) -> out (B,T,C), lse (B,NH,T)",
                 {"B", "T", "NH", "HS"},
                 [backward](const Shape& s, DType) {
                   const double BT = D(s, "B") * D(s, "T"), C = D(s, "NH") * D(s, "HS");
                   const double fwd = 4 * attn_pairs(s) * D(s, "HS");
                   return backward ? Work{2 * fwd, 4 * (3 * BT * C + BT * C + 2 * 3 * BT * C)}
                                   : Work{fwd, 4 * (3 * BT * C + BT * C + D(s, "B") * D(s, "NH") * D(s, "T"))};
                 },
                 attn_shapes(), kAttnTol);
    const ProblemFactory f = backward ? make_attention_backward_problem : make_attention_forward_problem;
    for (bool flash : {false, true}) {
      Runner run = [backward, flash](const RunArgs& a) {
        const Shape& s = *a.shape;
        const AttentionParams ap = attn_params(a, flash);
        if (backward)
          attention_backward(a.out[0], fin(a, 1), fin(a, 0), I(s, "B"), I(s, "T"), I(s, "NH"), I(s, "HS"), &ap);
        else
          attention_forward(a.out[0], fin(a, 0), I(s, "B"), I(s, "T"), I(s, "NH"), I(s, "HS"), &ap, a.out[1]);
      };
      if (flash)
        o.variants.push_back(cpu_variant("cpu.flash", flash_space(), flash_valid, f, run, o.tol_f32));
      else
        o.variants.push_back(cpu_variant("cpu.naive", ParamSpace{}, always_valid, f, run, o.tol_f32));
    }
    r.add(std::move(o));
  }
  {
    OpDef o = op("allreduce", "sum allreduce over R in-process ranks: bufs (R,N) in place", {"R", "N"},
                 [](const Shape& s, DType) {
                   const double R = D(s, "R"), N = D(s, "N");
                   return Work{(R > 1 ? R - 1 : 1) * N, 8 * R * N};
                 },
                 {{{"R", 1}, {"N", 1}}, {{"R", 2}, {"N", 7}}, {{"R", 3}, {"N", 127}}, {{"R", 8}, {"N", 1000}},
                  {{"R", 4}, {"N", 100003}}});
    o.variants.push_back(cpu_variant(
        "cpu.threads", ParamSpace{{Param{"CHUNK", {1024, 4096, 16384}, 4096, "elements per rank work item"}}},
        chunk_valid, make_allreduce_problem,
        [](const RunArgs& a) {
          const int64_t R = I(*a.shape, "R"), N = I(*a.shape, "N");
          std::vector<float*> bufs(static_cast<size_t>(R));
          for (int64_t q = 0; q < R; ++q) bufs[q] = a.out[0] + q * N;
          const AllreduceParams p{param(a, "CHUNK", 4096)};
          allreduce_sum(bufs.data(), R, N, &p);
        },
        o.tol_f32));
    r.add(std::move(o));
  }
}

}  // namespace rtx::kernels
