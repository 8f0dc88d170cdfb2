// Tests of the graph / sparse ops (rtx/kernels/sparse.hpp) beyond the generic registry walk:
// every ISA path and both SpMM splits against float64, bitwise determinism across thread counts,
// pattern builders (edges -> CSR, transpose, self loops) on known answers, and bad input naming
// the op and the offending index.
#include <catch2/catch.hpp>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/kernels/sparse.hpp"

using namespace rtx;
using namespace rtx::kernels;

namespace {

struct IsaGuard {
  Isa saved = cpu_isa_active();
  ~IsaGuard() { set_cpu_isa(saved); }
};

/// A skewed pattern: row 0 holds half the entries (a hub spread over many merge tasks), rows
/// 1..N-1 the rest at random, some rows empty. Columns sorted.
CsrMatrix hub_pattern(int64_t N, int64_t M, int64_t E, uint64_t seed) {
  std::vector<int32_t> src(E), dst(E);
  fill_ids(src.data(), E, seed, 1, static_cast<int32_t>(M));
  fill_ids(dst.data(), E, seed, 2, static_cast<int32_t>(N));
  for (int64_t e = 0; e < E; e += 2) dst[e] = 0;
  for (int64_t e = 0; e < E; ++e)
    if (dst[e] % 5 == 3) dst[e] = 0;  // rows 3, 8, 13, ... stay empty
  return csr_from_edges(N, M, src, dst);
}

double max_rel(const std::vector<float>& got, const std::vector<double>& want) {
  double mx = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    mx = std::max(mx, std::fabs(got[i] - want[i]));
    ref = std::max(ref, std::fabs(want[i]));
  }
  return ref > 0 ? mx / ref : mx;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

template <class Fn>
void expect_input_error(Fn&& fn, const std::string& op, const std::string& what) {
  try {
    fn();
    FAIL("no rtx::Error thrown; expected one naming " << op << " and " << what);
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(msg.find(op) != std::string::npos);
    CHECK(msg.find(what) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("sparse: csr_from_edges, transpose and self loops on a known graph", "[cpu]") {
  // Edges src -> dst: 0->1, 2->1, 1->0, 1->2, 2->2 (3 nodes). Rows are destinations.
  const CsrMatrix a = csr_from_edges(3, 3, {0, 2, 1, 1, 2}, {1, 1, 0, 2, 2});
  CHECK(a.row_ptr == std::vector<int32_t>{0, 1, 3, 5});
  CHECK(a.col_idx == std::vector<int32_t>{1, 0, 2, 1, 2});
  CHECK(a.perm == std::vector<int32_t>{2, 0, 1, 3, 4});
  const CsrMatrix t = csr_transpose(a.view());
  CHECK(t.row_ptr == std::vector<int32_t>{0, 1, 3, 5});
  CHECK(t.col_idx == std::vector<int32_t>{1, 0, 2, 1, 2});
  CHECK(t.perm == std::vector<int32_t>{1, 0, 3, 2, 4});
  const CsrMatrix l = csr_add_self_loops(a.view());  // rows 0 and 1 get a loop; row 2 has one
  CHECK(l.row_ptr == std::vector<int32_t>{0, 2, 5, 7});
  CHECK(l.col_idx == std::vector<int32_t>{0, 1, 0, 1, 2, 1, 2});
  CHECK(l.perm == std::vector<int32_t>{-1, 0, 1, -1, 2, 3, 4});
  // GCN norm of the looped graph, unit weights: deg = (2, 3, 2); entry (i,j) -> 1/sqrt(d_i d_j).
  std::vector<float> norm(7);
  gcn_norm(norm.data(), l.view(), nullptr);
  const double d[3] = {2, 3, 2};
  for (int64_t r = 0; r < 3; ++r)
    for (int32_t k = l.row_ptr[r]; k < l.row_ptr[r + 1]; ++k)
      CHECK(norm[k] == Approx(1.0 / std::sqrt(d[r] * d[l.col_idx[k]])).epsilon(1e-6));
}

TEST_CASE("sparse: SpMM fwd/bwd on every ISA and both splits match float64", "[cpu]") {
  IsaGuard guard;
  const int64_t N = 301, M = 257, E = 9001, F = 37;
  const CsrMatrix a = hub_pattern(N, M, E, 7);
  const CsrMatrix t = csr_transpose(a.view());
  std::vector<float> val(E), X(M * F), dY(N * F);
  fill_uniform(val.data(), E, 7, 3);
  fill_uniform(X.data(), X.size(), 7, 4);
  fill_uniform(dY.data(), dY.size(), 7, 5);
  std::vector<double> Y64(N * F, 0.0), dX64(M * F, 0.0), dval64(E, 0.0);
  for (int64_t r = 0; r < N; ++r)
    for (int32_t k = a.row_ptr[r]; k < a.row_ptr[r + 1]; ++k)
      for (int64_t f = 0; f < F; ++f) {
        const int64_t c = a.col_idx[k];
        Y64[r * F + f] += static_cast<double>(val[k]) * X[c * F + f];
        dX64[c * F + f] += static_cast<double>(val[k]) * dY[r * F + f];
        dval64[k] += static_cast<double>(dY[r * F + f]) * X[c * F + f];
      }
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa > cpu_isa_supported()) continue;
    set_cpu_isa(isa);
    for (int split = 0; split < 2; ++split)
      for (int64_t chunk : {1, 100, 4096}) {
        SparseParams sp;
        sp.split = split ? SparseParams::Split::Merge : SparseParams::Split::Rows;
        sp.rows = chunk;
        sp.nnz = chunk;
        INFO("isa " << isa_name(isa) << " split " << split << " chunk " << chunk);
        std::vector<float> Y(N * F, NAN), dX(M * F, NAN), dval(E, NAN);
        spmm_forward(Y.data(), a.view(), val.data(), nullptr, X.data(), F, &sp);
        spmm_backward(dX.data(), dval.data(), a.view(), t.view(), t.perm.data(), val.data(), dY.data(), X.data(), F, &sp);
        CHECK(max_rel(Y, Y64) < 1e-5);
        CHECK(max_rel(dX, dX64) < 1e-5);
        CHECK(max_rel(dval, dval64) < 1e-5);
        CHECK(Y[3 * F] == 0.f);  // an empty row is written, as zeros
      }
  }
}

TEST_CASE("sparse: same bits on 1, 2 and 3 threads (no atomics)", "[cpu]") {
  const int saved = omp_get_max_threads();
  const int64_t N = 500, M = 400, E = 20000, F = 16, L = 3000;
  const CsrMatrix a = hub_pattern(N, M, E, 11);
  std::vector<float> val(E), X(M * F), src(L * F);
  std::vector<int32_t> idx(L);
  fill_uniform(val.data(), E, 11, 3);
  fill_uniform(X.data(), X.size(), 11, 4);
  fill_uniform(src.data(), src.size(), 11, 5);
  fill_ids(idx.data(), L, 11, 6, 37);  // many rows per target
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    SparseParams merge;
    merge.split = SparseParams::Split::Merge;
    merge.nnz = 700;
    SparseParams rows;
    rows.rows = 3;
    std::vector<float> y1(N * F), y2(N * F), sc(M * F, 0.5f), sm(E), sd(N * F);
    spmm_forward(y1.data(), a.view(), val.data(), nullptr, X.data(), F, &merge);
    spmm_forward(y2.data(), a.view(), val.data(), nullptr, X.data(), F, &rows);
    scatter_add_rows(sc.data(), idx.data(), L, src.data(), M, F, &rows);
    edge_softmax_forward(sm.data(), a.view(), val.data(), 1, &rows);
    std::vector<float> all = y1;
    for (const auto* v : {&y2, &sc, &sm}) all.insert(all.end(), v->begin(), v->end());
    runs.push_back(all);
  }
  omp_set_num_threads(saved);
  CHECK(same_bits(runs[0], runs[1]));
  CHECK(same_bits(runs[0], runs[2]));
}

TEST_CASE("sparse: edge softmax is stable for large scores and sums to 1 per row", "[cpu]") {
  const CsrMatrix a = csr_from_edges(3, 4, {0, 1, 2, 3, 0}, {0, 0, 0, 2, 2});  // row 1 empty
  const std::vector<float> s = {1000.f, 999.f, -1000.f, 88.f, 89.f};
  std::vector<float> y(5, NAN);
  edge_softmax_forward(y.data(), a.view(), s.data(), 1);
  const double z = 1 + std::exp(-1.0) + std::exp(-2000.0);
  CHECK(y[0] == Approx(1 / z).epsilon(1e-6));
  CHECK(y[1] == Approx(std::exp(-1.0) / z).epsilon(1e-6));
  CHECK(y[2] == 0.f);
  CHECK(y[3] + y[4] == Approx(1.0).epsilon(1e-6));
  // Backward vs central differences of L = sum_k c_k y_k in float64 on the same softmax.
  const std::vector<float> c = {0.3f, -1.2f, 0.7f, 2.0f, -0.5f};
  std::vector<float> ds(5);
  edge_softmax_backward(ds.data(), a.view(), y.data(), c.data(), 1);
  auto loss = [&](std::vector<double> sc) {
    double L = 0;
    for (auto [b, e] : {std::pair{0, 3}, std::pair{3, 5}}) {
      double m = -INFINITY, z2 = 0;
      for (int k = b; k < e; ++k) m = std::max(m, sc[k]);
      for (int k = b; k < e; ++k) z2 += std::exp(sc[k] - m);
      for (int k = b; k < e; ++k) L += c[k] * std::exp(sc[k] - m) / z2;
    }
    return L;
  };
  for (int k = 0; k < 5; ++k) {
    std::vector<double> p(s.begin(), s.end()), q(s.begin(), s.end());
    p[k] += 1e-4;
    q[k] -= 1e-4;
    CHECK(ds[k] == Approx((loss(p) - loss(q)) / 2e-4).margin(1e-5));
  }
}

TEST_CASE("sparse: segment reductions, empty segments and the max's argmax", "[cpu]") {
  const std::vector<int32_t> off = {0, 2, 2, 5};  // segments of 2, 0, 3 rows
  const std::vector<float> x = {1, 8, 3, 2, /**/ 5, 0, 5, 9, 7, 1};  // L=5, F=2
  std::vector<float> out(6, NAN), dx(10, NAN);
  segment_reduce_forward(out.data(), off.data(), 3, x.data(), 5, 2, SegmentReduce::Sum);
  CHECK(out == std::vector<float>{4, 10, 0, 0, 17, 10});
  segment_reduce_forward(out.data(), off.data(), 3, x.data(), 5, 2, SegmentReduce::Mean);
  CHECK(out[0] == 2.f);
  CHECK(out[4] == Approx(17.0 / 3));
  segment_reduce_forward(out.data(), off.data(), 3, x.data(), 5, 2, SegmentReduce::Max);
  CHECK(out == std::vector<float>{3, 8, 0, 0, 7, 9});
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  segment_reduce_backward(dx.data(), off.data(), 3, x.data(), dy.data(), 5, 2, SegmentReduce::Max);
  // Segment 2, column 0: 5, 5, 7 -> row 4; column 1: 0, 9, 1 -> row 3.
  CHECK(dx == std::vector<float>{0, 2, 1, 0, 0, 0, 0, 6, 5, 0});
}

TEST_CASE("sparse: bad input names the op and the offending index", "[cpu]") {
  const std::vector<int32_t> rp = {0, 2, 1, 3}, ci = {0, 1, 2};
  std::vector<float> y(30), x(30), v(3, 1.f);
  expect_input_error([&] { spmm_forward(y.data(), Csr{3, 3, rp.data(), ci.data()}, v.data(), nullptr, x.data(), 1); },
                     "spmm_forward", "row_ptr[2] = 1 < row_ptr[1] = 2");
  const std::vector<int32_t> rp2 = {0, 1, 2, 3}, ci2 = {0, 7, 1};
  expect_input_error([&] { sddmm(y.data(), Csr{3, 3, rp2.data(), ci2.data()}, x.data(), x.data(), 1); }, "sddmm",
                     "col_idx[1] = 7 outside [0, 3)");
  const std::vector<int32_t> rp3 = {1, 1, 2, 3};
  expect_input_error([&] { edge_softmax_forward(y.data(), Csr{3, 3, rp3.data(), ci.data()}, x.data(), 1); },
                     "edge_softmax_forward", "row_ptr[0] = 1");
  const std::vector<int32_t> unsorted = {0, 2, 2, 3}, cu = {2, 1, 0};
  expect_input_error([&] { csr_check(Csr{3, 3, unsorted.data(), cu.data()}, "my_op", true); }, "my_op",
                     "col_idx[1] = 1 <= col_idx[0] = 2");
  const std::vector<int32_t> idx = {0, 4, -1};
  expect_input_error([&] { gather_rows(y.data(), idx.data(), 3, x.data(), 5, 2); }, "gather_rows",
                     "idx[2] = -1 outside [0, 5)");
  expect_input_error([&] { scatter_add_rows(y.data(), idx.data(), 2, x.data(), 4, 2); }, "scatter_add_rows",
                     "idx[1] = 4 outside [0, 4)");
  const std::vector<int32_t> off = {0, 2, 5};
  expect_input_error(
      [&] { segment_reduce_forward(y.data(), off.data(), 2, x.data(), 4, 1, SegmentReduce::Sum); },
      "segment_reduce_forward", "offsets[S] = 5");
  expect_input_error([&] { csr_from_edges(3, 2, {0, 2}, {1, 1}); }, "csr_from_edges", "src[1] = 2 outside [0, 2)");
  const std::vector<int32_t> zeros = {0, 0, 0};
  expect_input_error([&] { csr_add_self_loops(Csr{3, 2, rp2.data(), zeros.data()}); }, "csr_add_self_loops",
                     "not square");
  const CsrMatrix a = csr_from_edges(3, 3, {0, 1, 2}, {0, 1, 2});
  const std::vector<int32_t> rpt = {0, 1, 3};  // a valid 2 x 3 pattern, the wrong size for A^T
  expect_input_error(
      [&] {
        spmm_backward(y.data(), nullptr, a.view(), Csr{2, 3, rpt.data(), ci.data()}, a.perm.data(), v.data(), x.data(),
                      x.data(), 1);
      },
      "spmm_backward", "not the transpose");
  expect_input_error([&] { spmm_forward(y.data(), a.view(), v.data(), nullptr, x.data(), 0); }, "spmm_forward",
                     "dimension F = 0");
}
