// The graph / sparse CPU ops of rtx/kernels/sparse.hpp: pattern checks and builders, the OpenMP
// splits (row split, merge-path split) and the ISA dispatch of the row bodies (AVX-512, AVX2+FMA,
// scalar: one always-inline body compiled under three target attributes, picked by cpu_isa_active()).
// Every output element is written by one thread in a fixed order: no atomics, thread-count-free bits.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/sparse.hpp"

namespace rtx::kernels {
namespace {

constexpr int64_t kMaxIndex = 2147483647;

[[noreturn]] void bad(const char* op, const std::string& what, const char* where, const std::string& hint) {
  throw_input(std::string(op) + ": " + what, where, hint);
}

void need_dim(int64_t v, const char* dim, const char* op, int64_t lo = 1) {
  if (v < lo || v > kMaxIndex)
    bad(op, std::string("dimension ") + dim + " = " + std::to_string(v) + " outside [" + std::to_string(lo) + ", 2^31-1]",
        dim, "pass a size that fits int32");
}
void need_ptr(const void* p, const char* name, const char* op) {
  if (!p) bad(op, std::string("pointer '") + name + "' is null", name, "pass an allocated buffer");
}

void check_offsets(const int32_t* off, int64_t n, const char* name, const char* op) {
  need_ptr(off, name, op);
  if (off[0] != 0)
    bad(op, std::string(name) + "[0] = " + std::to_string(off[0]) + " must be 0", name, "offsets start at 0");
  for (int64_t i = 0; i < n; ++i)
    if (off[i + 1] < off[i])
      bad(op,
          std::string(name) + "[" + std::to_string(i + 1) + "] = " + std::to_string(off[i + 1]) + " < " + name + "[" +
              std::to_string(i) + "] = " + std::to_string(off[i]),
          name, "offsets must be non-decreasing");
}

void check_index(const int32_t* idx, int64_t n, int64_t bound, const char* name, const char* op) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= bound)
      bad(op,
          std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(idx[i]) + " outside [0, " +
              std::to_string(bound) + ")",
          name, "indices must address existing rows");
}

int64_t rows_per_task(const SparseParams* p) { return (p && p->rows > 0) ? p->rows : 64; }

/// Runs f(r0, r1) over [0, n) in tasks of `chunk` rows (dynamic schedule: which thread takes a
/// task never changes what it computes).
template <class Fn>
void for_rows(int64_t n, int64_t chunk, Fn&& f) {
  const int64_t tasks = (n + chunk - 1) / chunk;
  if (tasks <= 1) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < tasks; ++t) f(t * chunk, std::min(n, (t + 1) * chunk));
}

// ---- row bodies (always inlined into the ISA wrappers below) ----

// y (F) = sum over entries [k0, k1) of val * X[col]; entries in order.
[[gnu::always_inline]] inline void spmm_range_body(float* __restrict__ y, const int32_t* col, const float* val,
                                                   const int32_t* perm, const float* __restrict__ X, int64_t F,
                                                   int64_t k0, int64_t k1) {
  for (int64_t f = 0; f < F; ++f) y[f] = 0.f;
  for (int64_t k = k0; k < k1; ++k) {
    const float a = val ? val[perm ? perm[k] : k] : 1.f;
    const float* __restrict__ x = X + static_cast<int64_t>(col[k]) * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) y[f] += a * x[f];
  }
}

// Dot product of a (F) and b (F) with 16 interleaved partial sums added 0..15 at the end: the
// order is fixed by F alone (the same on every ISA up to FMA contraction).
[[gnu::always_inline]] inline float dot_body(const float* __restrict__ a, const float* __restrict__ b, int64_t F) {
  float acc[16] = {0};
  int64_t f = 0;
  for (; f + 16 <= F; f += 16)
#pragma omp simd
    for (int j = 0; j < 16; ++j) acc[j] += a[f + j] * b[f + j];
  for (int j = 0; f + j < F; ++j) acc[j] += a[f + j] * b[f + j];
  float s = 0.f;
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

[[gnu::always_inline]] inline void sddmm_rows_body(float* out, const Csr& A, const float* P, const float* Q, int64_t F,
                                                   int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* p = P + r * F;
    for (int64_t k = A.row_ptr[r]; k < A.row_ptr[r + 1]; ++k)
      out[k] = dot_body(p, Q + static_cast<int64_t>(A.col_idx[k]) * F, F);
  }
}

// out (F) = acc (F) + sum over rows [l0, l1) of x (row-major, F); for segment sums and scatter-add.
[[gnu::always_inline]] inline void add_rows_body(float* __restrict__ y, const float* __restrict__ x, const int32_t* rows,
                                                 int64_t l0, int64_t l1, int64_t F) {
  for (int64_t l = l0; l < l1; ++l) {
    const float* __restrict__ s = x + (rows ? static_cast<int64_t>(rows[l]) : l) * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) y[f] += s[f];
  }
}

struct SparseIsa {
  void (*spmm_range)(float*, const int32_t*, const float*, const int32_t*, const float*, int64_t, int64_t, int64_t);
  void (*sddmm_rows)(float*, const Csr&, const float*, const float*, int64_t, int64_t, int64_t);
  void (*add_rows)(float*, const float*, const int32_t*, int64_t, int64_t, int64_t);
};

#define RTX_SPARSE_ISA(NS, TARGET)                                                                                    \
  namespace NS {                                                                                                      \
  TARGET void spmm_range(float* y, const int32_t* c, const float* v, const int32_t* pm, const float* X, int64_t F,     \
                         int64_t k0, int64_t k1) {                                                                    \
    spmm_range_body(y, c, v, pm, X, F, k0, k1);                                                                       \
  }                                                                                                                   \
  TARGET void sddmm_rows(float* o, const Csr& A, const float* P, const float* Q, int64_t F, int64_t r0, int64_t r1) { \
    sddmm_rows_body(o, A, P, Q, F, r0, r1);                                                                           \
  }                                                                                                                   \
  TARGET void add_rows(float* y, const float* x, const int32_t* rows, int64_t l0, int64_t l1, int64_t F) {            \
    add_rows_body(y, x, rows, l0, l1, F);                                                                             \
  }                                                                                                                   \
  constexpr SparseIsa kTable{spmm_range, sddmm_rows, add_rows};                                                       \
  }

// clang 14 rejects prefer-vector-width in a target attribute (the libFuzzer build uses clang).
#if defined(__clang__)
#define RTX_SPARSE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#else
#define RTX_SPARSE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,prefer-vector-width=512")))
#endif
RTX_SPARSE_ISA(isa_avx512, RTX_SPARSE_AVX512)
RTX_SPARSE_ISA(isa_avx2, __attribute__((target("avx2,fma"))))
RTX_SPARSE_ISA(isa_scalar, )
#undef RTX_SPARSE_ISA
#undef RTX_SPARSE_AVX512

const SparseIsa& isa() {
  switch (cpu_isa_active()) {
    case Isa::Avx512: return isa_avx512::kTable;
    case Isa::Avx2: return isa_avx2::kTable;
    case Isa::Scalar: break;
  }
  return isa_scalar::kTable;
}

void check_csr_args(const Csr& A, const char* op) { csr_check(A, op); }

}  // namespace

// ---- patterns ----

void csr_check(const Csr& a, const char* op, bool sorted) {
  need_dim(a.rows, "rows", op, 0);
  need_dim(a.cols, "cols", op, 0);
  check_offsets(a.row_ptr, a.rows, "row_ptr", op);
  const int64_t E = a.row_ptr[a.rows];
  if (E > 0) need_ptr(a.col_idx, "col_idx", op);
  check_index(a.col_idx, E, a.cols, "col_idx", op);
  if (sorted)
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t k = a.row_ptr[r] + 1; k < a.row_ptr[r + 1]; ++k)
        if (a.col_idx[k] <= a.col_idx[k - 1])
          bad(op,
              "col_idx[" + std::to_string(k) + "] = " + std::to_string(a.col_idx[k]) + " <= col_idx[" +
                  std::to_string(k - 1) + "] = " + std::to_string(a.col_idx[k - 1]) + " in row " + std::to_string(r),
              "col_idx", "columns must be strictly increasing within a row");
}

CsrMatrix csr_from_edges(int64_t num_dst, int64_t num_src, const std::vector<int32_t>& src,
                         const std::vector<int32_t>& dst) {
  const char* op = "csr_from_edges";
  need_dim(num_dst, "num_dst", op, 0);
  need_dim(num_src, "num_src", op, 0);
  if (src.size() != dst.size())
    bad(op, "src has " + std::to_string(src.size()) + " edges, dst " + std::to_string(dst.size()), "edges",
        "pass one src and one dst per edge");
  if (src.size() > static_cast<size_t>(kMaxIndex)) bad(op, "more than 2^31-1 edges", "edges", "split the graph");
  check_index(src.data(), static_cast<int64_t>(src.size()), num_src, "src", op);
  check_index(dst.data(), static_cast<int64_t>(dst.size()), num_dst, "dst", op);
  CsrMatrix m;
  m.rows = num_dst;
  m.cols = num_src;
  m.row_ptr.assign(num_dst + 1, 0);
  for (int32_t d : dst) ++m.row_ptr[d + 1];
  for (int64_t i = 0; i < num_dst; ++i) m.row_ptr[i + 1] += m.row_ptr[i];
  std::vector<int32_t> next(m.row_ptr.begin(), m.row_ptr.end() - 1);
  m.col_idx.resize(src.size());
  m.perm.resize(src.size());
  for (size_t e = 0; e < src.size(); ++e) {
    const int32_t k = next[dst[e]]++;
    m.col_idx[k] = src[e];
    m.perm[k] = static_cast<int32_t>(e);
  }
  return m;
}

CsrMatrix csr_transpose(const Csr& a) {
  csr_check(a, "csr_transpose");
  const int64_t E = a.nnz();
  CsrMatrix t;
  t.rows = a.cols;
  t.cols = a.rows;
  t.row_ptr.assign(a.cols + 1, 0);
  for (int64_t k = 0; k < E; ++k) ++t.row_ptr[a.col_idx[k] + 1];
  for (int64_t j = 0; j < a.cols; ++j) t.row_ptr[j + 1] += t.row_ptr[j];
  std::vector<int32_t> next(t.row_ptr.begin(), t.row_ptr.end() - 1);
  t.col_idx.resize(E);
  t.perm.resize(E);
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t k = a.row_ptr[r]; k < a.row_ptr[r + 1]; ++k) {
      const int32_t d = next[a.col_idx[k]]++;
      t.col_idx[d] = static_cast<int32_t>(r);
      t.perm[d] = static_cast<int32_t>(k);
    }
  return t;
}

CsrMatrix csr_add_self_loops(const Csr& a) {
  const char* op = "csr_add_self_loops";
  csr_check(a, op);
  if (a.rows != a.cols)
    bad(op, "matrix is " + std::to_string(a.rows) + " x " + std::to_string(a.cols) + ", not square", "rows",
        "self loops need as many rows as columns");
  CsrMatrix m;
  m.rows = m.cols = a.rows;
  m.row_ptr.assign(a.rows + 1, 0);
  m.col_idx.reserve(a.nnz() + a.rows);
  m.perm.reserve(a.nnz() + a.rows);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int32_t b = a.row_ptr[r], e = a.row_ptr[r + 1];
    bool has = false, is_sorted = true;
    for (int32_t k = b; k < e; ++k) {
      has = has || a.col_idx[k] == r;
      if (k > b && a.col_idx[k] < a.col_idx[k - 1]) is_sorted = false;
    }
    bool placed = has;
    for (int32_t k = b; k < e; ++k) {
      if (!placed && is_sorted && a.col_idx[k] > r) {
        m.col_idx.push_back(static_cast<int32_t>(r));
        m.perm.push_back(-1);
        placed = true;
      }
      m.col_idx.push_back(a.col_idx[k]);
      m.perm.push_back(k);
    }
    if (!placed) {
      m.col_idx.push_back(static_cast<int32_t>(r));
      m.perm.push_back(-1);
    }
    if (m.col_idx.size() > static_cast<size_t>(kMaxIndex)) bad(op, "more than 2^31-1 entries", "nnz", "split the graph");
    m.row_ptr[r + 1] = static_cast<int32_t>(m.col_idx.size());
  }
  return m;
}

// ---- SpMM, SDDMM ----

void spmm_forward(float* Y, const Csr& A, const float* val, const int32_t* perm, const float* X, int64_t F,
                  const SparseParams* p) {
  const char* op = "spmm_forward";
  const bool merge = p && p->split == SparseParams::Split::Merge;
  core::KernelRun run(op, merge ? "merge" : "rows", {{"N", A.rows}, {"M", A.cols}, {"F", F}});
  need_dim(F, "F", op);
  check_csr_args(A, op);
  need_ptr(Y, "Y", op);
  if (A.cols > 0) need_ptr(X, "X", op);
  const int64_t E = A.nnz();
  if (perm) check_index(perm, E, kMaxIndex, "perm", op);
  const SparseIsa& k = isa();
  const int32_t* rp = A.row_ptr;
  if (!merge) {
    for_rows(A.rows, rows_per_task(p), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) k.spmm_range(Y + r * F, A.col_idx, val, perm, X, F, rp[r], rp[r + 1]);
    });
    return;
  }
  // Merge path: zero empty rows, then task t owns entries [t*chunk, (t+1)*chunk). A row wholly
  // inside a task is written directly; a row cut by a task edge leaves one partial per task in
  // `carry`, added in task order afterwards (the bits depend on `nnz`, never on the threads).
  const int64_t chunk = p->nnz > 0 ? p->nnz : 8192, tasks = (E + chunk - 1) / chunk;
  for_rows(A.rows, 4096, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      if (rp[r] == rp[r + 1]) std::fill(Y + r * F, Y + (r + 1) * F, 0.f);
  });
  std::vector<float> carry(static_cast<size_t>(tasks) * 2 * F);
  std::vector<int64_t> carry_row(static_cast<size_t>(tasks) * 2, -1);
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t s = t * chunk, e = std::min(E, s + chunk);
    // The row holding entry s: the last r with rp[r] <= s (rows with entries only).
    int64_t r = std::upper_bound(rp, rp + A.rows + 1, static_cast<int32_t>(s)) - rp - 1;
    int slot = 0;
    for (; r < A.rows && rp[r] < e; ++r) {
      if (rp[r] == rp[r + 1]) continue;
      const int64_t k0 = std::max<int64_t>(rp[r], s), k1 = std::min<int64_t>(rp[r + 1], e);
      if (rp[r] >= s && rp[r + 1] <= e) {
        k.spmm_range(Y + r * F, A.col_idx, val, perm, X, F, k0, k1);
      } else {
        const size_t c = static_cast<size_t>(t) * 2 + slot++;
        carry_row[c] = r;
        k.spmm_range(carry.data() + c * F, A.col_idx, val, perm, X, F, k0, k1);
      }
    }
  }
  int64_t prev = -1;
  for (size_t c = 0; c < carry_row.size(); ++c) {
    const int64_t r = carry_row[c];
    if (r < 0) continue;
    float* y = Y + r * F;
    const float* src = carry.data() + c * F;
    if (r != prev)
      std::copy(src, src + F, y);
    else
      for (int64_t f = 0; f < F; ++f) y[f] += src[f];
    prev = r;
  }
}

void sddmm(float* out, const Csr& A, const float* P, const float* Q, int64_t F, const SparseParams* p) {
  const char* op = "sddmm";
  core::KernelRun run(op, "rows", {{"N", A.rows}, {"M", A.cols}, {"F", F}});
  need_dim(F, "F", op);
  check_csr_args(A, op);
  if (A.nnz() == 0) return;
  need_ptr(out, "out", op);
  need_ptr(P, "P", op);
  need_ptr(Q, "Q", op);
  const SparseIsa& k = isa();
  for_rows(A.rows, rows_per_task(p), [&](int64_t r0, int64_t r1) { k.sddmm_rows(out, A, P, Q, F, r0, r1); });
}

void spmm_backward(float* dX, float* dval, const Csr& A, const Csr& AT, const int32_t* at_perm, const float* val,
                   const float* dY, const float* X, int64_t F, const SparseParams* p) {
  const char* op = "spmm_backward";
  check_csr_args(A, op);
  check_csr_args(AT, op);
  if (AT.rows != A.cols || AT.cols != A.rows || AT.nnz() != A.nnz())
    bad(op, "AT (" + std::to_string(AT.rows) + " x " + std::to_string(AT.cols) + ", " + std::to_string(AT.nnz()) +
                " entries) is not the transpose of A (" + std::to_string(A.rows) + " x " + std::to_string(A.cols) +
                ", " + std::to_string(A.nnz()) + ")",
        "AT", "build it with csr_transpose(A)");
  need_ptr(at_perm, "at_perm", op);
  check_index(at_perm, AT.nnz(), A.nnz(), "at_perm", op);
  if (dX) spmm_forward(dX, AT, val, at_perm, dY, F, p);
  if (dval) {
    SparseParams rows_only = p ? *p : SparseParams{};
    rows_only.split = SparseParams::Split::Rows;
    sddmm(dval, A, dY, X, F, &rows_only);
  }
}

// ---- edge softmax ----

void edge_softmax_forward(float* out, const Csr& A, const float* scores, int64_t H, const SparseParams* p) {
  const char* op = "edge_softmax_forward";
  core::KernelRun run(op, "rows", {{"N", A.rows}, {"H", H}});
  need_dim(H, "H", op);
  check_csr_args(A, op);
  if (A.nnz() == 0) return;
  need_ptr(out, "out", op);
  need_ptr(scores, "scores", op);
  for_rows(A.rows, rows_per_task(p), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = A.row_ptr[r], e = A.row_ptr[r + 1];
      for (int64_t h = 0; h < H; ++h) {
        float m = -INFINITY;
        for (int64_t k = b; k < e; ++k) m = std::max(m, scores[k * H + h]);
        double sum = 0;  // double: a hub row of 10^5 entries keeps float's relative precision
        for (int64_t k = b; k < e; ++k) {
          const float x = std::exp(scores[k * H + h] - m);
          out[k * H + h] = x;
          sum += x;
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t k = b; k < e; ++k) out[k * H + h] *= inv;
      }
    }
  });
}

void edge_softmax_backward(float* dscores, const Csr& A, const float* y, const float* dy, int64_t H,
                           const SparseParams* p) {
  const char* op = "edge_softmax_backward";
  core::KernelRun run(op, "rows", {{"N", A.rows}, {"H", H}});
  need_dim(H, "H", op);
  check_csr_args(A, op);
  if (A.nnz() == 0) return;
  need_ptr(dscores, "dscores", op);
  need_ptr(y, "y", op);
  need_ptr(dy, "dy", op);
  for_rows(A.rows, rows_per_task(p), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = A.row_ptr[r], e = A.row_ptr[r + 1];
      for (int64_t h = 0; h < H; ++h) {
        double dot = 0;
        for (int64_t k = b; k < e; ++k) dot += static_cast<double>(y[k * H + h]) * dy[k * H + h];
        const float d = static_cast<float>(dot);
        for (int64_t k = b; k < e; ++k) dscores[k * H + h] = y[k * H + h] * (dy[k * H + h] - d);
      }
    }
  });
}

// ---- segment reductions ----

void segment_reduce_forward(float* out, const int32_t* offsets, int64_t S, const float* x, int64_t L, int64_t F,
                            SegmentReduce kind, const SparseParams* p) {
  const char* op = "segment_reduce_forward";
  core::KernelRun run(op, "rows", {{"S", S}, {"L", L}, {"F", F}});
  need_dim(S, "S", op);
  need_dim(L, "L", op, 0);
  need_dim(F, "F", op);
  need_ptr(out, "out", op);
  check_offsets(offsets, S, "offsets", op);
  if (offsets[S] != L)
    bad(op, "offsets[S] = " + std::to_string(offsets[S]) + " but x has L = " + std::to_string(L) + " rows", "offsets",
        "the last offset is the number of rows");
  if (L > 0) need_ptr(x, "x", op);
  const SparseIsa& k = isa();
  for_rows(S, rows_per_task(p), [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      float* y = out + s * F;
      const int64_t b = offsets[s], e = offsets[s + 1];
      std::fill(y, y + F, 0.f);
      if (b == e) continue;
      if (kind == SegmentReduce::Max) {
        std::copy(x + b * F, x + (b + 1) * F, y);
        for (int64_t l = b + 1; l < e; ++l)
          for (int64_t f = 0; f < F; ++f) y[f] = std::max(y[f], x[l * F + f]);
      } else {
        k.add_rows(y, x, nullptr, b, e, F);
        if (kind == SegmentReduce::Mean) {
          const float inv = 1.f / static_cast<float>(e - b);
          for (int64_t f = 0; f < F; ++f) y[f] *= inv;
        }
      }
    }
  });
}

void segment_reduce_backward(float* dx, const int32_t* offsets, int64_t S, const float* x, const float* dy, int64_t L,
                             int64_t F, SegmentReduce kind, const SparseParams* p) {
  const char* op = "segment_reduce_backward";
  core::KernelRun run(op, "rows", {{"S", S}, {"L", L}, {"F", F}});
  need_dim(S, "S", op);
  need_dim(L, "L", op, 0);
  need_dim(F, "F", op);
  check_offsets(offsets, S, "offsets", op);
  if (offsets[S] != L)
    bad(op, "offsets[S] = " + std::to_string(offsets[S]) + " but dx has L = " + std::to_string(L) + " rows", "offsets",
        "the last offset is the number of rows");
  if (L == 0) return;
  need_ptr(dx, "dx", op);
  need_ptr(dy, "dy", op);
  if (kind == SegmentReduce::Max) need_ptr(x, "x", op);
  for_rows(S, rows_per_task(p), [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t b = offsets[s], e = offsets[s + 1];
      const float* g = dy + s * F;
      if (kind == SegmentReduce::Max) {
        for (int64_t l = b; l < e; ++l) std::fill(dx + l * F, dx + (l + 1) * F, 0.f);
        for (int64_t f = 0; f < F && b < e; ++f) {
          int64_t arg = b;
          for (int64_t l = b + 1; l < e; ++l)
            if (x[l * F + f] > x[arg * F + f]) arg = l;
          dx[arg * F + f] = g[f];
        }
      } else {
        const float sc = kind == SegmentReduce::Mean ? 1.f / static_cast<float>(std::max<int64_t>(1, e - b)) : 1.f;
        for (int64_t l = b; l < e; ++l)
          for (int64_t f = 0; f < F; ++f) dx[l * F + f] = g[f] * sc;
      }
    }
  });
}

// ---- gather, scatter-add ----

void gather_rows(float* out, const int32_t* idx, int64_t L, const float* x, int64_t M, int64_t F,
                 const SparseParams* p) {
  const char* op = "gather_rows";
  core::KernelRun run(op, "rows", {{"L", L}, {"M", M}, {"F", F}});
  need_dim(L, "L", op, 0);
  need_dim(M, "M", op);
  need_dim(F, "F", op);
  if (L == 0) return;
  need_ptr(out, "out", op);
  need_ptr(idx, "idx", op);
  need_ptr(x, "x", op);
  check_index(idx, L, M, "idx", op);
  for_rows(L, rows_per_task(p) * 16, [&](int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1; ++l) std::copy(x + idx[l] * F, x + (idx[l] + 1) * F, out + l * F);
  });
}

void scatter_add_rows(float* out, const int32_t* idx, int64_t L, const float* src, int64_t M, int64_t F,
                      const SparseParams* p) {
  const char* op = "scatter_add_rows";
  core::KernelRun run(op, "rows", {{"L", L}, {"M", M}, {"F", F}});
  need_dim(L, "L", op, 0);
  need_dim(M, "M", op);
  need_dim(F, "F", op);
  if (L == 0) return;
  need_ptr(out, "out", op);
  need_ptr(idx, "idx", op);
  need_ptr(src, "src", op);
  check_index(idx, L, M, "idx", op);
  // Stable counting sort of l by idx[l]: target m's sources in increasing l, summed by one thread.
  std::vector<int32_t> start(M + 1, 0), order(L);
  for (int64_t l = 0; l < L; ++l) ++start[idx[l] + 1];
  for (int64_t m = 0; m < M; ++m) start[m + 1] += start[m];
  std::vector<int32_t> next(start.begin(), start.end() - 1);
  for (int64_t l = 0; l < L; ++l) order[next[idx[l]]++] = static_cast<int32_t>(l);
  const SparseIsa& k = isa();
  for_rows(M, rows_per_task(p), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) k.add_rows(out + m * F, src, order.data(), start[m], start[m + 1], F);
  });
}

// ---- GCN normalisation ----

void gcn_norm(float* norm, const Csr& A, const float* w) {
  const char* op = "gcn_norm";
  check_csr_args(A, op);
  if (A.rows != A.cols)
    bad(op, "matrix is " + std::to_string(A.rows) + " x " + std::to_string(A.cols) + ", not square", "rows",
        "GCN normalisation needs a square adjacency");
  const int64_t E = A.nnz();
  if (E == 0) return;
  need_ptr(norm, "norm", op);
  std::vector<float> dinv(A.rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < A.rows; ++r) {
    double d = 0;
    for (int64_t k = A.row_ptr[r]; k < A.row_ptr[r + 1]; ++k) d += w ? w[k] : 1.0;
    dinv[r] = d > 0 ? static_cast<float>(1.0 / std::sqrt(d)) : 0.f;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < A.rows; ++r)
    for (int64_t k = A.row_ptr[r]; k < A.row_ptr[r + 1]; ++k)
      norm[k] = dinv[r] * (w ? w[k] : 1.f) * dinv[A.col_idx[k]];
}

}  // namespace rtx::kernels
