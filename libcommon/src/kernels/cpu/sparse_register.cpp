// register_cpu_sparse: the OpDefs (dims, work model, tolerances, test shapes with empty rows and
// skewed degrees) and CPU variants of the graph / sparse ops of rtx/kernels/sparse.hpp.
// Runners unpack Problem::ids (layout in problems_sparse.cpp) and call the public functions.
#include <string>
#include <utility>
#include <vector>

#include "../problems.hpp"
#include "cpu_kernels.hpp"
#include "register_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/problem.hpp"
#include "rtx/kernels/sparse.hpp"

namespace rtx::kernels {
namespace {

using reg_util::D;
using reg_util::fin;
using reg_util::I;
using reg_util::param;

std::string positive(const Params& p, const char* name, int64_t mx) {
  auto it = p.find(name);
  if (it == p.end()) return std::string("parameter ") + name + " is missing";
  if (it->second <= 0 || it->second > mx)
    return std::string(name) + "=" + std::to_string(it->second) + " outside [1, " + std::to_string(mx) + "]";
  return "";
}


ParamSpace rows_space() {
  return ParamSpace{{Param{"ROWS", {1, 8, 64, 512}, 64, "rows (segments, targets) per OpenMP task"}}};
}
ParamSpace nnz_space() {
  return ParamSpace{{Param{"NNZ", {256, 2048, 8192, 65536}, 8192, "stored entries per merge-path task"}}};
}
std::string rows_valid(const Shape&, const Params& p) { return positive(p, "ROWS", 1 << 20); }
std::string nnz_valid(const Shape&, const Params& p) { return positive(p, "NNZ", int64_t{1} << 30); }

SparseParams rows_params(const RunArgs& a) {
  SparseParams sp;
  sp.rows = param(a, "ROWS", 64);
  return sp;
}
SparseParams merge_params(const RunArgs& a) {
  SparseParams sp;
  sp.split = SparseParams::Split::Merge;
  sp.nnz = param(a, "NNZ", 8192);
  return sp;
}

Csr csr_of(const RunArgs& a, int64_t N, int64_t M) { return Csr{N, M, a.ids, a.ids + N + 1}; }

OpDef op(std::string name, std::string doc, std::vector<std::string> dims, std::function<Work(const Shape&, DType)> work,
         std::vector<Shape> shapes, double tol_f32) {
  OpDef o;
  o.name = std::move(name);
  o.doc = std::move(doc);
  o.dims = std::move(dims);
  o.optional_dims = {"SKEW"};
  o.work = std::move(work);
  o.tol_f32 = tol_f32;
  o.tol_bf16 = 1e-2;
  o.test_shapes = std::move(shapes);
  return o;
}

// Odd CSR shapes: one entry; more rows than entries (empty rows); power-law, hub and R-MAT rows.
std::vector<Shape> csr_shapes(const char* f) {
  return {{{"N", 1}, {"M", 1}, {"E", 1}, {f, 1}},
          {{"N", 7}, {"M", 5}, {"E", 3}, {f, 7}},
          {{"N", 127}, {"M", 33}, {"E", 1000}, {f, 17}, {"SKEW", 1}},
          {{"N", 200}, {"M", 301}, {"E", 5001}, {f, 33}, {"SKEW", 2}},
          {{"N", 1000}, {"M", 999}, {"E", 20000}, {f, 16}, {"SKEW", 3}},
          {{"N", 64}, {"M", 64}, {"E", 4099}, {f, 1}, {"SKEW", 2}}};
}
std::vector<Shape> seg_shapes() {
  return {{{"S", 1}, {"L", 1}, {"F", 1}},
          {{"S", 9}, {"L", 4}, {"F", 7}},
          {{"S", 127}, {"L", 1000}, {"F", 17}, {"SKEW", 1}},
          {{"S", 50}, {"L", 3001}, {"F", 33}, {"SKEW", 2}}};
}
std::vector<Shape> idx_shapes() {
  return {{{"L", 1}, {"M", 1}, {"F", 1}},
          {{"L", 3}, {"M", 9}, {"F", 7}},
          {{"L", 1000}, {"M", 127}, {"F", 17}, {"SKEW", 1}},
          {{"L", 4001}, {"M", 300}, {"F", 33}, {"SKEW", 2}}};
}

// Work: index bytes 4 per entry and per row pointer; features read once (the least traffic).
Work spmm_work(const Shape& s, DType) {
  const double N = D(s, "N"), M = D(s, "M"), E = D(s, "E"), F = D(s, "F");
  return Work{2 * E * F, 4 * (N + 1 + 2 * E + M * F + N * F)};
}

template <SegmentReduce K, bool B>
void add_segment_op(Registry& r, const char* name, const char* doc) {
  OpDef o = op(name, doc, {"S", "L", "F"},
               [](const Shape& s, DType) {
                 const double S = D(s, "S"), L = D(s, "L"), F = D(s, "F");
                 return Work{L * F, 4 * (S + 1 + (B ? (2 * L * F + S * F) : (L * F + S * F)))};
               },
               seg_shapes(), 1e-5);
  o.variants.push_back(cpu_variant("cpu.rows", rows_space(), rows_valid, make_segment_problem<K, B>,
                                   [](const RunArgs& a) {
                                     const SparseParams sp = rows_params(a);
                                     const Shape& s = *a.shape;
                                     if constexpr (B)
                                       segment_reduce_backward(a.out[0], a.ids, I(s, "S"), fin(a, 0), fin(a, 1), I(s, "L"),
                                                               I(s, "F"), K, &sp);
                                     else
                                       segment_reduce_forward(a.out[0], a.ids, I(s, "S"), fin(a, 0), I(s, "L"), I(s, "F"),
                                                              K, &sp);
                                   },
                                   o.tol_f32));
  r.add(std::move(o));
}

}  // namespace

void register_cpu_sparse(Registry& r) {
  // Sums of up to E products in float32: the matmul-class bound (check.hpp's max-norm relative error).
  const double kSumTol = 1e-4;
  {
    OpDef o = op("spmm_forward", "CSR SpMM: A (N,M; E entries, values val (E)) @ X (M,F) -> Y (N,F)",
                 {"N", "M", "E", "F"}, spmm_work, csr_shapes("F"), kSumTol);
    auto fwd = [](const SparseParams sp) {
      return [sp](const RunArgs& a) {
        const Shape& s = *a.shape;
        spmm_forward(a.out[0], csr_of(a, I(s, "N"), I(s, "M")), fin(a, 0), nullptr, fin(a, 1), I(s, "F"), &sp);
      };
    };
    o.variants.push_back(cpu_variant("cpu.rows", rows_space(), rows_valid, make_spmm_forward_problem,
                                     [fwd](const RunArgs& a) { fwd(rows_params(a))(a); }, o.tol_f32));
    o.variants.push_back(cpu_variant("cpu.merge", nnz_space(), nnz_valid, make_spmm_forward_problem,
                                     [fwd](const RunArgs& a) { fwd(merge_params(a))(a); }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("spmm_backward",
                 "CSR SpMM backward: val (E), dY (N,F), X (M,F) -> dX = A^T dY (M,F) via the transpose, dval = SDDMM(dY,X) (E)",
                 {"N", "M", "E", "F"},
                 [](const Shape& s, DType) {
                   const double N = D(s, "N"), M = D(s, "M"), E = D(s, "E"), F = D(s, "F");
                   return Work{4 * E * F, 4 * (N + M + 2 + 5 * E + 2 * M * F + 2 * N * F)};
                 },
                 csr_shapes("F"), kSumTol);
    auto bwd = [](const SparseParams sp) {
      return [sp](const RunArgs& a) {
        const Shape& s = *a.shape;
        const int64_t N = I(s, "N"), M = I(s, "M"), E = I(s, "E");
        const int32_t* t = a.ids + N + 1 + E;
        const Csr AT{M, N, t, t + M + 1};
        spmm_backward(a.out[0], a.out[1], csr_of(a, N, M), AT, t + M + 1 + E, fin(a, 0), fin(a, 1), fin(a, 2),
                      I(s, "F"), &sp);
      };
    };
    o.variants.push_back(cpu_variant("cpu.rows", rows_space(), rows_valid, make_spmm_backward_problem,
                                     [bwd](const RunArgs& a) { bwd(rows_params(a))(a); }, o.tol_f32));
    o.variants.push_back(cpu_variant("cpu.merge", nnz_space(), nnz_valid, make_spmm_backward_problem,
                                     [bwd](const RunArgs& a) { bwd(merge_params(a))(a); }, o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("sddmm", "SDDMM: out[k] = dot(P[row k], Q[col k]) over A's entries; P (N,F), Q (M,F) -> out (E)",
                 {"N", "M", "E", "F"},
                 [](const Shape& s, DType) {
                   const double N = D(s, "N"), M = D(s, "M"), E = D(s, "E"), F = D(s, "F");
                   return Work{2 * E * F, 4 * (N + 1 + 2 * E + (N + M) * F)};
                 },
                 csr_shapes("F"), kSumTol);
    o.variants.push_back(cpu_variant("cpu.rows", rows_space(), rows_valid, make_sddmm_problem,
                                     [](const RunArgs& a) {
                                       const SparseParams sp = rows_params(a);
                                       const Shape& s = *a.shape;
                                       sddmm(a.out[0], csr_of(a, I(s, "N"), I(s, "M")), fin(a, 0), fin(a, 1), I(s, "F"),
                                             &sp);
                                     },
                                     o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("edge_softmax_forward", "softmax over each destination row's entries, H heads: scores (E,H) -> out (E,H)",
                 {"N", "M", "E", "H"},
                 [](const Shape& s, DType) {
                   const double N = D(s, "N"), E = D(s, "E"), H = D(s, "H");
                   return Work{5 * E * H, 4 * (N + 1 + 2 * E * H)};
                 },
                 csr_shapes("H"), 1e-5);
    o.variants.push_back(cpu_variant("cpu.rows", rows_space(), rows_valid, make_edge_softmax_forward_problem,
                                     [](const RunArgs& a) {
                                       const SparseParams sp = rows_params(a);
                                       const Shape& s = *a.shape;
                                       edge_softmax_forward(a.out[0], csr_of(a, I(s, "N"), I(s, "M")), fin(a, 0),
                                                            I(s, "H"), &sp);
                                     },
                                     o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("edge_softmax_backward", "edge softmax backward: y (E,H), dy (E,H) -> dscores (E,H)", {"N", "M", "E", "H"},
                 [](const Shape& s, DType) {
                   const double N = D(s, "N"), E = D(s, "E"), H = D(s, "H");
                   return Work{4 * E * H, 4 * (N + 1 + 3 * E * H)};
                 },
                 csr_shapes("H"), 1e-5);
    o.variants.push_back(cpu_variant("cpu.rows", rows_space(), rows_valid, make_edge_softmax_backward_problem,
                                     [](const RunArgs& a) {
                                       const SparseParams sp = rows_params(a);
                                       const Shape& s = *a.shape;
                                       edge_softmax_backward(a.out[0], csr_of(a, I(s, "N"), I(s, "M")), fin(a, 0),
                                                             fin(a, 1), I(s, "H"), &sp);
                                     },
                                     o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("gcn_norm", "GCN normalisation deg^-1/2 w deg^-1/2: A (N,N; E entries), w (E) -> norm (E)", {"N", "E"},
                 [](const Shape& s, DType) {
                   const double N = D(s, "N"), E = D(s, "E");
                   return Work{4 * E + 2 * N, 4 * (N + 1 + 3 * E)};
                 },
                 {{{"N", 1}, {"E", 1}},
                  {{"N", 9}, {"E", 4}},
                  {{"N", 127}, {"E", 1000}, {"SKEW", 1}},
                  {{"N", 300}, {"E", 5001}, {"SKEW", 2}},
                  {{"N", 1000}, {"E", 20000}, {"SKEW", 3}}},
                 1e-5);
    o.variants.push_back(cpu_variant("cpu.rows", ParamSpace{}, [](const Shape&, const Params&) { return std::string(); },
                                     make_gcn_norm_problem,
                                     [](const RunArgs& a) {
                                       const int64_t N = I(*a.shape, "N");
                                       gcn_norm(a.out[0], csr_of(a, N, N), fin(a, 0));
                                     },
                                     o.tol_f32));
    r.add(std::move(o));
  }
  add_segment_op<SegmentReduce::Sum, false>(r, "segment_sum_forward",
                                            "sum over sorted segments: offsets (S+1), x (L,F) -> out (S,F); empty -> 0");
  add_segment_op<SegmentReduce::Sum, true>(r, "segment_sum_backward", "segment sum backward: dy (S,F) -> dx (L,F)");
  add_segment_op<SegmentReduce::Mean, false>(r, "segment_mean_forward",
                                             "mean over sorted segments: offsets (S+1), x (L,F) -> out (S,F); empty -> 0");
  add_segment_op<SegmentReduce::Mean, true>(r, "segment_mean_backward", "segment mean backward: dy (S,F) -> dx (L,F)");
  add_segment_op<SegmentReduce::Max, false>(r, "segment_max_forward",
                                            "max over sorted segments: offsets (S+1), x (L,F) -> out (S,F); empty -> 0");
  add_segment_op<SegmentReduce::Max, true>(r, "segment_max_backward",
                                           "segment max backward: x (L,F), dy (S,F) -> dx (L,F), dy to the first argmax");
  {
    OpDef o = op("gather_rows", "gather: idx (L) in [0,M), x (M,F) -> out (L,F) = x[idx]", {"L", "M", "F"},
                 [](const Shape& s, DType) {
                   const double L = D(s, "L"), F = D(s, "F");
                   return Work{L * F, 4 * (L + 2 * L * F)};
                 },
                 idx_shapes(), 1e-5);
    o.variants.push_back(cpu_variant("cpu.rows", rows_space(), rows_valid, make_gather_rows_problem,
                                     [](const RunArgs& a) {
                                       const SparseParams sp = rows_params(a);
                                       const Shape& s = *a.shape;
                                       gather_rows(a.out[0], a.ids, I(s, "L"), fin(a, 0), I(s, "M"), I(s, "F"), &sp);
                                     },
                                     o.tol_f32));
    r.add(std::move(o));
  }
  {
    OpDef o = op("scatter_add_rows", "scatter-add: idx (L) in [0,M), src (L,F) -> out (M,F) += src at idx (sorted, no atomics)",
                 {"L", "M", "F"},
                 [](const Shape& s, DType) {
                   const double L = D(s, "L"), M = D(s, "M"), F = D(s, "F");
                   return Work{L * F, 4 * (L + L * F + 2 * M * F)};
                 },
                 idx_shapes(), kSumTol);
    o.variants.push_back(cpu_variant("cpu.rows", rows_space(), rows_valid, make_scatter_add_rows_problem,
                                     [](const RunArgs& a) {
                                       const SparseParams sp = rows_params(a);
                                       const Shape& s = *a.shape;
                                       scatter_add_rows(a.out[0], a.ids, I(s, "L"), fin(a, 0), I(s, "M"), I(s, "F"), &sp);
                                     },
                                     o.tol_f32));
    r.add(std::move(o));
  }
}

}  // namespace rtx::kernels
