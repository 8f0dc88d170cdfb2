// Problem factories of the graph / sparse ops (sparse.hpp): seeded patterns (uniform, power-law,
// one hub row, R-MAT), seeded values, and the float64 plain-loop reference of every output.
// Integer inputs travel in Problem::ids: CSR ops [row_ptr (N+1), col_idx (E)] (spmm_backward also
// [AT row_ptr (M+1), AT col_idx (E), AT perm (E)]); segment ops offsets (S+1); gather/scatter idx (L).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "problems.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/sparse.hpp"

namespace rtx::kernels {
namespace {

using Vec = std::vector<double>;

int64_t sdim(const Shape& s, const char* name, const char* op) {
  auto it = s.find(name);
  if (it == s.end() || it->second <= 0 || it->second > 2147483647)
    throw_input(std::string(op) + ": shape '" + shape_to_string(s) + "' needs dimension " + name + " in [1, 2^31-1]",
                name, std::string("add ") + name + "=<positive integer>");
  return it->second;
}

int64_t skew_of(const Shape& s, const char* op) {
  auto it = s.find("SKEW");
  const int64_t k = it == s.end() ? 0 : it->second;
  if (k < 0 || k > 3)
    throw_input(std::string(op) + ": SKEW = " + std::to_string(k) + " is not 0..3", "SKEW",
                "0 uniform, 1 power-law, 2 one hub row, 3 R-MAT");
  return k;
}

void need_f32(DType dt, const char* op) {
  if (dt != DType::F32)
    throw_input(std::string(op) + ": dtype " + dtype_name(dt) + " is not supported", "dtype", "this op runs f32 only");
}

std::vector<float> uniform(size_t n, uint64_t seed, uint64_t subseq, float lo, float hi) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, seed, subseq, lo, hi);
  return v;
}

/// E row indices in [0, N) with distribution `skew`: 0 uniform; 1 power-law (row = N u^4: a
/// few rows hold most entries, many high rows stay empty); 2 every other entry in row N/2 (one
/// hub of E/2 entries), the rest uniform; 3 R-MAT's rows (a=0.57, b=0.19, c=0.19, d=0.05).
/// Columns for skew 3 come with them (`cols`); else uniform in [0, M).
void draw_pairs(int64_t N, int64_t M, int64_t E, int64_t skew, uint64_t seed, std::vector<int32_t>& rows,
                std::vector<int32_t>& cols) {
  rows.resize(E);
  cols.resize(E);
  fill_ids(cols.data(), E, seed, 201, static_cast<int32_t>(M));
  if (skew == 0 || skew == 2) {
    fill_ids(rows.data(), E, seed, 200, static_cast<int32_t>(N));
    if (skew == 2)
      for (int64_t e = 0; e < E; e += 2) rows[e] = static_cast<int32_t>(N / 2);
  } else if (skew == 1) {
    std::vector<float> u = uniform(E, seed, 200, 0.f, 1.f);
    for (int64_t e = 0; e < E; ++e)
      rows[e] = static_cast<int32_t>(std::min<double>(N - 1, std::floor(N * std::pow(static_cast<double>(u[e]), 4))));
  } else {
    int scale = 0;
    while ((int64_t{1} << scale) < std::max(N, M)) ++scale;
    constexpr int64_t kBlock = 1 << 14;
    std::vector<float> u;
    for (int64_t b0 = 0; b0 < E; b0 += kBlock) {
      const int64_t nb = std::min(kBlock, E - b0);
      u.resize(static_cast<size_t>(nb) * std::max(scale, 1));
      fill_uniform(u.data(), u.size(), seed, 1000 + static_cast<uint64_t>(b0 / kBlock), 0.f, 1.f);
      for (int64_t e = 0; e < nb; ++e) {
        int64_t r = 0, c = 0;
        for (int l = 0; l < scale; ++l) {
          const float x = u[e * scale + l];
          const int rb = x >= 0.76f, cb = (x >= 0.57f && x < 0.76f) || x >= 0.95f;
          r = 2 * r + rb;
          c = 2 * c + cb;
        }
        rows[b0 + e] = static_cast<int32_t>(r % N);
        cols[b0 + e] = static_cast<int32_t>(c % M);
      }
    }
  }
}

struct Pattern {
  std::vector<int32_t> row_ptr, col_idx;
};

/// A seeded N x M pattern of E entries, columns sorted within each row (duplicates allowed).
Pattern make_pattern(int64_t N, int64_t M, int64_t E, int64_t skew, uint64_t seed) {
  std::vector<int32_t> rows, cols;
  draw_pairs(N, M, E, skew, seed, rows, cols);
  Pattern p;
  p.row_ptr.assign(N + 1, 0);
  for (int32_t r : rows) ++p.row_ptr[r + 1];
  for (int64_t i = 0; i < N; ++i) p.row_ptr[i + 1] += p.row_ptr[i];
  std::vector<int32_t> next(p.row_ptr.begin(), p.row_ptr.end() - 1);
  p.col_idx.resize(E);
  for (int64_t e = 0; e < E; ++e) p.col_idx[next[rows[e]]++] = cols[e];
  for (int64_t i = 0; i < N; ++i) std::sort(p.col_idx.begin() + p.row_ptr[i], p.col_idx.begin() + p.row_ptr[i + 1]);
  return p;
}

using problem_util::base;
using problem_util::in;

struct CsrDims {
  int64_t N, M, E, F;
};

CsrDims csr_dims(const Shape& s, const char* op, const char* fdim) {
  return {sdim(s, "N", op), sdim(s, "M", op), sdim(s, "E", op), sdim(s, fdim, op)};
}

/// Problem with a seeded pattern in ids: [row_ptr (N+1), col_idx (E)].
Problem csr_problem(const Shape& s, DType dt, uint64_t seed, const CsrDims& d, const char* op) {
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  Pattern pat = make_pattern(d.N, d.M, d.E, skew_of(s, op), seed);
  p.ids = std::move(pat.row_ptr);
  p.ids.insert(p.ids.end(), pat.col_idx.begin(), pat.col_idx.end());
  return p;
}

/// Y (N,F) = A X in float64 from the pattern in ids[0 .. N+1+E).
Vec ref_spmm(const std::vector<int32_t>& ids, int64_t N, int64_t M, const std::vector<float>& val,
             const std::vector<float>& X, int64_t F) {
  (void)M;
  const int32_t* rp = ids.data();
  const int32_t* ci = rp + N + 1;
  Vec Y(N * F, 0.0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = rp[r]; k < rp[r + 1]; ++k)
      for (int64_t f = 0; f < F; ++f) Y[r * F + f] += static_cast<double>(val[k]) * X[ci[k] * F + f];
  return Y;
}

Vec ref_sddmm(const std::vector<int32_t>& ids, int64_t N, const std::vector<float>& P, const std::vector<float>& Q,
              int64_t F) {
  const int32_t* rp = ids.data();
  const int32_t* ci = rp + N + 1;
  Vec out(rp[N]);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = rp[r]; k < rp[r + 1]; ++k) {
      double s = 0;
      for (int64_t f = 0; f < F; ++f) s += static_cast<double>(P[r * F + f]) * Q[ci[k] * F + f];
      out[k] = s;
    }
  return out;
}

Vec ref_edge_softmax(const std::vector<int32_t>& ids, int64_t N, const std::vector<float>& sc, int64_t H) {
  const int32_t* rp = ids.data();
  Vec out(sc.size());
  for (int64_t r = 0; r < N; ++r)
    for (int64_t h = 0; h < H; ++h) {
      double m = -INFINITY, sum = 0;
      for (int64_t k = rp[r]; k < rp[r + 1]; ++k) m = std::max(m, static_cast<double>(sc[k * H + h]));
      for (int64_t k = rp[r]; k < rp[r + 1]; ++k) sum += std::exp(sc[k * H + h] - m);
      for (int64_t k = rp[r]; k < rp[r + 1]; ++k) out[k * H + h] = std::exp(sc[k * H + h] - m) / sum;
    }
  return out;
}

}  // namespace

Problem make_spmm_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "spmm_forward";
  const CsrDims d = csr_dims(s, op, "F");
  Problem p = csr_problem(s, dt, seed, d, op);
  p.inputs.push_back({"val", uniform(d.E, seed, 0, -1.f, 1.f)});
  p.inputs.push_back({"X", uniform(d.M * d.F, seed, 1, -1.f, 1.f)});
  p.outputs.push_back({"Y", static_cast<size_t>(d.N * d.F), {}});
  p.reference = [d](const Problem& p) { return std::vector<Vec>{ref_spmm(p.ids, d.N, d.M, in(p, 0), in(p, 1), d.F)}; };
  return p;
}

Problem make_spmm_backward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "spmm_backward";
  const CsrDims d = csr_dims(s, op, "F");
  Problem p = csr_problem(s, dt, seed, d, op);
  const CsrMatrix at = csr_transpose(Csr{d.N, d.M, p.ids.data(), p.ids.data() + d.N + 1});
  p.ids.insert(p.ids.end(), at.row_ptr.begin(), at.row_ptr.end());
  p.ids.insert(p.ids.end(), at.col_idx.begin(), at.col_idx.end());
  p.ids.insert(p.ids.end(), at.perm.begin(), at.perm.end());
  p.inputs.push_back({"val", uniform(d.E, seed, 0, -1.f, 1.f)});
  p.inputs.push_back({"dY", uniform(d.N * d.F, seed, 1, -1.f, 1.f)});
  p.inputs.push_back({"X", uniform(d.M * d.F, seed, 2, -1.f, 1.f)});
  p.outputs.push_back({"dX", static_cast<size_t>(d.M * d.F), {}});
  p.outputs.push_back({"dval", static_cast<size_t>(d.E), {}});
  // Reference from A alone (not from the transpose the kernel gets): dX[c] += val[k] dY[r].
  p.reference = [d](const Problem& p) {
    const int32_t* rp = p.ids.data();
    const int32_t* ci = rp + d.N + 1;
    const auto &val = in(p, 0), &dY = in(p, 1), &X = in(p, 2);
    Vec dX(d.M * d.F, 0.0);
    for (int64_t r = 0; r < d.N; ++r)
      for (int64_t k = rp[r]; k < rp[r + 1]; ++k)
        for (int64_t f = 0; f < d.F; ++f) dX[ci[k] * d.F + f] += static_cast<double>(val[k]) * dY[r * d.F + f];
    return std::vector<Vec>{dX, ref_sddmm(p.ids, d.N, dY, X, d.F)};
  };
  return p;
}

Problem make_sddmm_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "sddmm";
  const CsrDims d = csr_dims(s, op, "F");
  Problem p = csr_problem(s, dt, seed, d, op);
  p.inputs.push_back({"P", uniform(d.N * d.F, seed, 0, -1.f, 1.f)});
  p.inputs.push_back({"Q", uniform(d.M * d.F, seed, 1, -1.f, 1.f)});
  p.outputs.push_back({"out", static_cast<size_t>(d.E), {}});
  p.reference = [d](const Problem& p) { return std::vector<Vec>{ref_sddmm(p.ids, d.N, in(p, 0), in(p, 1), d.F)}; };
  return p;
}

Problem make_edge_softmax_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "edge_softmax_forward";
  const CsrDims d = csr_dims(s, op, "H");
  Problem p = csr_problem(s, dt, seed, d, op);
  p.inputs.push_back({"scores", uniform(d.E * d.F, seed, 0, -5.f, 5.f)});
  p.outputs.push_back({"out", static_cast<size_t>(d.E * d.F), {}});
  p.reference = [d](const Problem& p) { return std::vector<Vec>{ref_edge_softmax(p.ids, d.N, in(p, 0), d.F)}; };
  return p;
}

Problem make_edge_softmax_backward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "edge_softmax_backward";
  const CsrDims d = csr_dims(s, op, "H");
  Problem p = csr_problem(s, dt, seed, d, op);
  const Vec y64 = ref_edge_softmax(p.ids, d.N, uniform(d.E * d.F, seed, 0, -5.f, 5.f), d.F);
  p.inputs.push_back({"y", std::vector<float>(y64.begin(), y64.end())});  // the forward's output, rounded
  p.inputs.push_back({"dy", uniform(d.E * d.F, seed, 1, -1.f, 1.f)});
  p.outputs.push_back({"dscores", static_cast<size_t>(d.E * d.F), {}});
  p.reference = [d](const Problem& p) {
    const int32_t* rp = p.ids.data();
    const auto &y = in(p, 0), &dy = in(p, 1);
    const int64_t H = d.F;
    Vec ds(y.size());
    for (int64_t r = 0; r < d.N; ++r)
      for (int64_t h = 0; h < H; ++h) {
        double dot = 0;
        for (int64_t k = rp[r]; k < rp[r + 1]; ++k) dot += static_cast<double>(y[k * H + h]) * dy[k * H + h];
        for (int64_t k = rp[r]; k < rp[r + 1]; ++k) ds[k * H + h] = y[k * H + h] * (dy[k * H + h] - dot);
      }
    return std::vector<Vec>{ds};
  };
  return p;
}

Problem make_gcn_norm_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "gcn_norm";
  const int64_t N = sdim(s, "N", op), E = sdim(s, "E", op);
  Problem p = csr_problem(s, dt, seed, CsrDims{N, N, E, 1}, op);
  p.inputs.push_back({"w", uniform(E, seed, 0, 0.5f, 1.5f)});
  p.outputs.push_back({"norm", static_cast<size_t>(E), {}});
  p.reference = [N](const Problem& p) {
    const int32_t* rp = p.ids.data();
    const int32_t* ci = rp + N + 1;
    const auto& w = in(p, 0);
    Vec deg(N, 0.0), out(rp[N]);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t k = rp[r]; k < rp[r + 1]; ++k) deg[r] += w[k];
    auto dinv = [&](int64_t i) { return deg[i] > 0 ? 1.0 / std::sqrt(deg[i]) : 0.0; };
    for (int64_t r = 0; r < N; ++r)
      for (int64_t k = rp[r]; k < rp[r + 1]; ++k) out[k] = dinv(r) * w[k] * dinv(ci[k]);
    return std::vector<Vec>{out};
  };
  return p;
}

// A template: each (kind, direction) gets its own reference lambda type, which reference_of's
// cache key includes (sum and mean at one shape have equal inputs).
template <SegmentReduce kind, bool backward>
Problem make_segment_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = backward ? "segment_backward" : "segment_forward";
  const int64_t S = sdim(s, "S", op), L = sdim(s, "L", op), F = sdim(s, "F", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  p.ids = make_pattern(S, 1, L, skew_of(s, op), seed).row_ptr;  // offsets (S+1): segment lengths
  p.inputs.push_back({"x", uniform(L * F, seed, 0, -1.f, 1.f)});
  if (backward) {
    p.inputs.push_back({"dy", uniform(S * F, seed, 1, -1.f, 1.f)});
    p.outputs.push_back({"dx", static_cast<size_t>(L * F), {}});
  } else {
    p.outputs.push_back({"out", static_cast<size_t>(S * F), {}});
  }
  p.reference = [S, L, F](const Problem& p) {
    const int32_t* off = p.ids.data();
    const auto& x = in(p, 0);
    Vec out(backward ? L * F : S * F, 0.0);
    for (int64_t sg = 0; sg < S; ++sg) {
      const int64_t b = off[sg], e = off[sg + 1];
      for (int64_t f = 0; f < F; ++f) {
        if (b == e) continue;
        if (!backward) {
          double acc = kind == SegmentReduce::Max ? -INFINITY : 0.0;
          for (int64_t l = b; l < e; ++l)
            acc = kind == SegmentReduce::Max ? std::max(acc, static_cast<double>(x[l * F + f])) : acc + x[l * F + f];
          out[sg * F + f] = kind == SegmentReduce::Mean ? acc / static_cast<double>(e - b) : acc;
        } else {
          const double g = in(p, 1)[sg * F + f];
          if (kind == SegmentReduce::Max) {
            int64_t arg = b;
            for (int64_t l = b + 1; l < e; ++l)
              if (x[l * F + f] > x[arg * F + f]) arg = l;
            out[arg * F + f] = g;
          } else {
            for (int64_t l = b; l < e; ++l) out[l * F + f] = kind == SegmentReduce::Mean ? g / (e - b) : g;
          }
        }
      }
    }
    return std::vector<Vec>{out};
  };
  return p;
}

template Problem make_segment_problem<SegmentReduce::Sum, false>(const Shape&, DType, uint64_t);
template Problem make_segment_problem<SegmentReduce::Sum, true>(const Shape&, DType, uint64_t);
template Problem make_segment_problem<SegmentReduce::Mean, false>(const Shape&, DType, uint64_t);
template Problem make_segment_problem<SegmentReduce::Mean, true>(const Shape&, DType, uint64_t);
template Problem make_segment_problem<SegmentReduce::Max, false>(const Shape&, DType, uint64_t);
template Problem make_segment_problem<SegmentReduce::Max, true>(const Shape&, DType, uint64_t);

Problem make_gather_rows_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "gather_rows";
  const int64_t L = sdim(s, "L", op), M = sdim(s, "M", op), F = sdim(s, "F", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  std::vector<int32_t> cols;
  draw_pairs(M, 1, L, skew_of(s, op), seed, p.ids, cols);  // idx (L) in [0, M), skewed like rows
  p.inputs.push_back({"x", uniform(M * F, seed, 0, -1.f, 1.f)});
  p.outputs.push_back({"out", static_cast<size_t>(L * F), {}});
  p.reference = [L, F](const Problem& p) {
    Vec out(L * F);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t f = 0; f < F; ++f) out[l * F + f] = in(p, 0)[p.ids[l] * F + f];
    return std::vector<Vec>{out};
  };
  return p;
}

Problem make_scatter_add_rows_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "scatter_add_rows";
  const int64_t L = sdim(s, "L", op), M = sdim(s, "M", op), F = sdim(s, "F", op);
  need_f32(dt, op);
  Problem p = base(s, dt, seed);
  std::vector<int32_t> cols;
  draw_pairs(M, 1, L, skew_of(s, op), seed, p.ids, cols);
  p.inputs.push_back({"src", uniform(L * F, seed, 0, -1.f, 1.f)});
  p.outputs.push_back({"out", static_cast<size_t>(M * F), uniform(M * F, seed, 1, -1.f, 1.f)});
  p.reference = [L, F](const Problem& p) {
    Vec out(p.outputs[0].init.begin(), p.outputs[0].init.end());
    for (int64_t l = 0; l < L; ++l)
      for (int64_t f = 0; f < F; ++f) out[p.ids[l] * F + f] += in(p, 0)[l * F + f];
    return std::vector<Vec>{out};
  };
  return p;
}

}  // namespace rtx::kernels
