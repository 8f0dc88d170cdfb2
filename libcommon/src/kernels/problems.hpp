// Internal: the Problem factory of every op (seeded inputs + float64 reference), shared by
// the CPU and CUDA variant files. Shape letters: M,N,K matmul (out (M,N) = inp (M,K) @
// weight (N,K)^T + bias (N)); N rows x C channels; B batch, T time, NH heads, HS head size,
// V vocab, R ranks. Each factory throws rtx::Error(Input) naming a missing/bad dim.
#pragma once
#include "rtx/kernels/problem.hpp"
#include "rtx/kernels/sparse.hpp"

namespace rtx::kernels {

/// Helpers of the problem factories (problems_*.cpp): an empty Problem carrying the shape,
/// dtype and seed; and input i's f32 data.
namespace problem_util {
inline Problem base(const Shape& s, DType dt, uint64_t seed) {
  Problem p;
  p.shape = s;
  p.dtype = dt;
  p.seed = seed;
  return p;
}
inline const std::vector<float>& in(const Problem& p, size_t i) { return p.inputs.at(i).data; }
}  // namespace problem_util

// matmul (cpu/matmul*.cpp)
Problem make_matmul_forward_problem(const Shape& s, DType dt, uint64_t seed);   // M,N,K [+bias 0|1, default 1]
Problem make_matmul_backward_problem(const Shape& s, DType dt, uint64_t seed);  // M,N,K: dinp, dweight(+=), dbias(+=)

// elementwise / normalisation / loss / optimizer (cpu/ops*.cpp)
Problem make_softmax_forward_problem(const Shape& s, DType dt, uint64_t seed);      // N,C
Problem make_layernorm_forward_problem(const Shape& s, DType dt, uint64_t seed);    // N,C: out, mean, rstd
Problem make_layernorm_backward_problem(const Shape& s, DType dt, uint64_t seed);   // N,C: dinp(+=), dweight(+=), dbias(+=)
Problem make_gelu_forward_problem(const Shape& s, DType dt, uint64_t seed);         // N (tanh form)
Problem make_gelu_backward_problem(const Shape& s, DType dt, uint64_t seed);        // N: dinp(+=)
Problem make_residual_forward_problem(const Shape& s, DType dt, uint64_t seed);     // N
Problem make_encoder_forward_problem(const Shape& s, DType dt, uint64_t seed);      // B,T,C,V
Problem make_encoder_backward_problem(const Shape& s, DType dt, uint64_t seed);     // B,T,C,V: dwte(+=), dwpe(+=)
Problem make_crossentropy_forward_problem(const Shape& s, DType dt, uint64_t seed); // N,V: losses (N)
Problem make_crossentropy_backward_problem(const Shape& s, DType dt, uint64_t seed);// N,V: dlogits (fused softmax+CE)
Problem make_adamw_update_problem(const Shape& s, DType dt, uint64_t seed);         // N: params, m, v in place
Problem make_attention_forward_problem(const Shape& s, DType dt, uint64_t seed);    // B,T,NH,HS: qkv (B,T,3C) -> out (B,T,C)
Problem make_attention_backward_problem(const Shape& s, DType dt, uint64_t seed);   // B,T,NH,HS: dqkv
Problem make_allreduce_problem(const Shape& s, DType dt, uint64_t seed);            // R,N: R buffers summed in place

// graph / sparse (cpu/sparse*.cpp, problems_sparse.cpp); optional dim SKEW 0..3 picks the pattern
Problem make_spmm_forward_problem(const Shape& s, DType dt, uint64_t seed);          // N,M,E,F: Y (N,F)
Problem make_spmm_backward_problem(const Shape& s, DType dt, uint64_t seed);         // N,M,E,F: dX (M,F), dval (E)
Problem make_sddmm_problem(const Shape& s, DType dt, uint64_t seed);                 // N,M,E,F: out (E)
Problem make_edge_softmax_forward_problem(const Shape& s, DType dt, uint64_t seed);  // N,M,E,H: out (E,H)
Problem make_edge_softmax_backward_problem(const Shape& s, DType dt, uint64_t seed); // N,M,E,H: dscores (E,H)
Problem make_gcn_norm_problem(const Shape& s, DType dt, uint64_t seed);              // N,E: norm (E)
Problem make_gather_rows_problem(const Shape& s, DType dt, uint64_t seed);           // L,M,F: out (L,F)
Problem make_scatter_add_rows_problem(const Shape& s, DType dt, uint64_t seed);      // L,M,F: out (M,F) +=
/// S,L,F: forward out (S,F); backward dx (L,F). Instantiated for the three kinds, both directions.
template <SegmentReduce kind, bool backward>
Problem make_segment_problem(const Shape& s, DType dt, uint64_t seed);

}  // namespace rtx::kernels
