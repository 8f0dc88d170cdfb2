// CUDA launchers of the graph / sparse ops (the "cuda.v1" variants): simple sorted-segment
// kernels, one warp or thread per output row in a fixed order, no float atomics, so the same
// inputs give the same bits run to run. All pointers are device pointers; `stream` is a
// cudaStream_t. Patterns must be valid (check them on the host with csr_check: the kernels do
// not bounds-check indices). Shape letters as in sparse.hpp.
#pragma once
#include <cstdint>

namespace rtx::kernels::cuda {

/// Y (N,F) = A X, entry k's value val[perm ? perm[k] : k]; row_ptr (N+1), col_idx (E); warp per row.
void spmm_forward(float* Y, const int32_t* row_ptr, const int32_t* col_idx, const float* val, const int32_t* perm,
                  const float* X, int64_t N, int64_t F, void* stream);
/// out (E)[k] = dot(P[row k], Q[col k]); P (N,F), Q (M,F); warp per row, lanes over F.
void sddmm(float* out, const int32_t* row_ptr, const int32_t* col_idx, const float* P, const float* Q, int64_t N,
           int64_t F, void* stream);
/// Edge softmax per row, H heads: scores, out (E,H); thread per (row, head).
void edge_softmax_forward(float* out, const int32_t* row_ptr, const float* scores, int64_t N, int64_t H, void* stream);
/// dscores = y (dy - sum_row y dy); thread per (row, head).
void edge_softmax_backward(float* dscores, const int32_t* row_ptr, const float* y, const float* dy, int64_t N,
                           int64_t H, void* stream);
/// kind 0 sum, 1 mean, 2 max (SegmentReduce): out (S,F) from x (L,F); thread per (segment, feature).
void segment_reduce_forward(float* out, const int32_t* offsets, const float* x, int64_t S, int64_t F, int kind,
                            void* stream);
/// dx (L,F) from dy (S,F) (x for max); thread per (segment, feature).
void segment_reduce_backward(float* dx, const int32_t* offsets, const float* x, const float* dy, int64_t S, int64_t F,
                             int kind, void* stream);
/// out (L,F) = x[idx]; thread per element.
void gather_rows(float* out, const int32_t* idx, const float* x, int64_t L, int64_t F, void* stream);
/// out (M,F) += src rows listed for each target: start (M+1), order (L) from a stable sort of
/// idx (host side); thread per (target, feature), sources in increasing order.
void scatter_add_rows_sorted(float* out, const int32_t* start, const int32_t* order, const float* src, int64_t M,
                             int64_t F, void* stream);
/// GCN normalisation into norm (E); dinv (N) is scratch; w may be null (1).
void gcn_norm(float* norm, float* dinv, const int32_t* row_ptr, const int32_t* col_idx, const float* w, int64_t N,
              void* stream);

}  // namespace rtx::kernels::cuda
