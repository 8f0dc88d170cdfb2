// Graph / sparse CPU ops: CSR SpMM and its backward, SDDMM, edge softmax, segment sum/mean/max,
// gather and scatter-add, GCN degree normalisation (issue 40). Not the models (geom/) nor the data.
// Shape letters: N rows (destination nodes), M columns (source nodes), E stored entries (edges),
// F features per row, H heads, S segments, L gathered/scattered rows.
// Graph convention: CSR row i lists the in-edges of destination i; col_idx holds their sources,
// so Y = A X aggregates source features into destinations (PyG's source_to_target flow).
// Determinism: every output element is summed by one thread in a fixed order (no atomics), so
// the same inputs and parameters give the same bits on any thread count.
#pragma once
#include <cstdint>
#include <vector>

namespace rtx::kernels {

/// A CSR pattern (a view: no ownership). row_ptr (rows+1) int32, col_idx (nnz) int32.
struct Csr {
  int64_t rows = 0;
  int64_t cols = 0;
  const int32_t* row_ptr = nullptr;
  const int32_t* col_idx = nullptr;
  /// Stored entries: row_ptr[rows] (row_ptr must be valid).
  int64_t nnz() const { return row_ptr[rows]; }
};

/// An owned CSR pattern. `perm` (optional, nnz): perm[k] is the index in the source matrix of
/// entry k (set by csr_transpose and csr_add_self_loops; -1 for an inserted entry).
struct CsrMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int32_t> row_ptr;  ///< (rows+1)
  std::vector<int32_t> col_idx;  ///< (nnz)
  std::vector<int32_t> perm;     ///< (nnz) or empty
  Csr view() const { return Csr{rows, cols, row_ptr.data(), col_idx.data()}; }
};

/// Checks a pattern: rows, cols >= 0 and < 2^31, row_ptr[0] == 0, row_ptr non-decreasing,
/// every col_idx in [0, cols). `sorted`: also columns strictly increasing within each row.
/// Throws rtx::Error(Input) naming `op` and the offending index ("col_idx[17] = 9 outside
/// [0, 5)", "row_ptr[3] = 2 < row_ptr[2] = 4"). O(nnz).
void csr_check(const Csr& a, const char* op, bool sorted = false);

/// Builds a CSR from an edge list src (E) -> dst (E): row = dst, col = src, entries of a row in
/// edge-list order (stable counting sort). `perm` maps each entry to its edge index.
/// Throws rtx::Error(Input) naming the offending edge.
CsrMatrix csr_from_edges(int64_t num_dst, int64_t num_src, const std::vector<int32_t>& src,
                         const std::vector<int32_t>& dst);
/// A^T as CSR (cols x rows): a stable counting sort, so row j of A^T lists the entries of column
/// j of A in increasing row order; perm[k] = index in A of A^T's entry k. Checks `a` first.
CsrMatrix csr_transpose(const Csr& a);
/// A with a self loop (i,i) in every row that lacks one (PyG's add_remaining_self_loops), the
/// loop placed at its sorted position among the row's columns when the row is sorted, else last.
/// perm[k] = the entry's index in `a`, or -1 for an inserted loop. Needs rows == cols.
CsrMatrix csr_add_self_loops(const Csr& a);

/// Tunables of the sparse ops (rtx-tune's space; 0 = the default).
struct SparseParams {
  enum class Split : int { Rows = 0, Merge = 1 };
  /// Rows: each task owns whole rows (`rows` per task, dynamic schedule). Merge: SpMM only,
  /// merge-path split: each task owns `nnz` consecutive entries (rows cut at task edges are
  /// summed as per-task partials combined in task order), so one huge row is shared out.
  Split split = Split::Rows;
  int64_t rows = 64;   ///< rows per OpenMP task (Rows split)
  int64_t nnz = 8192;  ///< entries per task (Merge split)
};

/// SpMM: Y (N,F) = A (N,M) X (M,F); the value of entry k is val[perm ? perm[k] : k] (val null: 1).
/// Empty rows give 0. X, Y row-major f32. `perm` lets A^T reuse A's values (spmm_backward).
/// Throws rtx::Error(Input) on an invalid pattern (csr_check) or F < 1.
void spmm_forward(float* Y, const Csr& A, const float* val, const int32_t* perm, const float* X, int64_t F,
                  const SparseParams* p = nullptr);
/// SpMM backward. dX (M,F) = A^T dY with AT, at_perm from csr_transpose(A) (at_perm maps AT's
/// entries to A's values); dval (E) = SDDMM(dY, X): dval[k] = dot(dY[row k], X[col k]).
/// Either output may be null. Throws rtx::Error(Input) when AT's size is not A's transpose's.
void spmm_backward(float* dX, float* dval, const Csr& A, const Csr& AT, const int32_t* at_perm, const float* val,
                   const float* dY, const float* X, int64_t F, const SparseParams* p = nullptr);
/// SDDMM: out[k] = dot(P[row k], Q[col k]) for every entry k of A; P (N,F), Q (M,F) -> out (E).
/// Sum order fixed (16 interleaved partial sums, then 0..15): same bits on every thread count.
void sddmm(float* out, const Csr& A, const float* P, const float* Q, int64_t F, const SparseParams* p = nullptr);

/// Edge softmax per destination row, H heads: out[k,h] = exp(s[k,h] - m) / sum over row's
/// entries, m the row's max (numerically stable). scores, out (E,H). Rows without entries
/// write nothing.
void edge_softmax_forward(float* out, const Csr& A, const float* scores, int64_t H, const SparseParams* p = nullptr);
/// Its backward: dscores[k,h] = y[k,h] (dy[k,h] - sum_{k' in row} y[k',h] dy[k',h]); y = forward out.
void edge_softmax_backward(float* dscores, const Csr& A, const float* y, const float* dy, int64_t H,
                           const SparseParams* p = nullptr);

/// Segment reductions over sorted segments: segment s covers rows [offsets[s], offsets[s+1]) of
/// x (L,F); out (S,F). An empty segment gives 0 (torch_scatter's convention). Max: the backward
/// sends dy to the first maximal row of each column. offsets (S+1) is checked like row_ptr.
enum class SegmentReduce : int { Sum = 0, Mean = 1, Max = 2 };
void segment_reduce_forward(float* out, const int32_t* offsets, int64_t S, const float* x, int64_t L, int64_t F,
                            SegmentReduce kind, const SparseParams* p = nullptr);
/// dx (L,F) (overwritten) from dy (S,F); x is needed for Max (the argmax), else may be null.
void segment_reduce_backward(float* dx, const int32_t* offsets, int64_t S, const float* x, const float* dy, int64_t L,
                             int64_t F, SegmentReduce kind, const SparseParams* p = nullptr);

/// Gather rows: out (L,F) = x[idx[l]] with x (M,F), idx (L) in [0, M).
void gather_rows(float* out, const int32_t* idx, int64_t L, const float* x, int64_t M, int64_t F,
                 const SparseParams* p = nullptr);
/// Scatter-add rows: out (M,F) += src (L,F) at row idx[l]. Deterministic: the rows landing on
/// one target are added in increasing l order by one thread (a counting sort, not atomics).
void scatter_add_rows(float* out, const int32_t* idx, int64_t L, const float* src, int64_t M, int64_t F,
                      const SparseParams* p = nullptr);

/// GCN normalisation (Kipf & Welling eq. 2, PyG's gcn_norm without adding loops): norm[k] =
/// deg(i)^-1/2 w[k] deg(j)^-1/2 for entry k = (i, j), deg(i) = sum of w over row i (w null: 1).
/// A square (add loops first with csr_add_self_loops). A zero degree gives 0, not inf.
void gcn_norm(float* norm, const Csr& A, const float* w);

}  // namespace rtx::kernels
