// load_planetoid: the Planetoid pickles -> GraphDataset, following torch_geometric's
// read_planetoid_data / edge_index_from_dict (torch_geometric/io/planetoid.py) step by step.
#include "rtx/geom/planetoid.hpp"

#include <algorithm>
#include <sstream>

#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/io/pickle.hpp"

namespace rtx::geom {
namespace {

namespace pk = rtx::io::pickle;

/// Dense rows of a pickled csr_matrix (values widened from its dtype), validated against its shape.
std::vector<float> dense_rows(const std::string& path, int64_t& rows, int64_t& cols) {
  const pk::Document d = pk::parse_file(path);
  const pk::CsrPickle m = pk::as_csr_matrix(d, d.root, path);
  const std::vector<int64_t> ptr = m.indptr.to_i64(), idx = m.indices.to_i64();
  const std::vector<double> val = m.data.to_f64();
  rows = m.rows;
  cols = m.cols;
  if (rows * cols > (int64_t{1} << 31)) throw_input(path + ": matrix " + std::to_string(rows) + " x " + std::to_string(cols) + " too large to densify", path);
  if (ptr.front() != 0 || ptr.back() != static_cast<int64_t>(idx.size()))
    throw_input(path + ": indptr does not run from 0 to nnz = " + std::to_string(idx.size()), path + " indptr");
  std::vector<float> x(static_cast<size_t>(rows * cols), 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    if (ptr[r + 1] < ptr[r]) throw_input(path + ": indptr[" + std::to_string(r + 1) + "] decreases", path + " indptr");
    for (int64_t k = ptr[r]; k < ptr[r + 1]; ++k) {
      if (idx[k] < 0 || idx[k] >= cols)
        throw_input(path + ": indices[" + std::to_string(k) + "] = " + std::to_string(idx[k]) + " outside [0, " +
                        std::to_string(cols) + ")",
                    path + " indices");
      x[r * cols + idx[k]] += static_cast<float>(val[k]);
    }
  }
  return x;
}

/// Labels: argmax of each row of a pickled (rows, C) one-hot ndarray (an all-zero row gives 0,
/// as torch's argmax of zeros).
std::vector<int32_t> labels(const std::string& path, int64_t& classes) {
  const pk::Document d = pk::parse_file(path);
  const pk::NdArray a = pk::as_ndarray(d, d.root, path);
  if (a.shape.size() != 2) throw_input(path + ": labels are not a 2-D array", path);
  classes = a.shape[1];
  const std::vector<double> v = a.to_f64();
  std::vector<int32_t> y(static_cast<size_t>(a.shape[0]));
  for (int64_t r = 0; r < a.shape[0]; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (v[r * classes + c] > v[r * classes + best]) best = c;
    y[r] = static_cast<int32_t>(best);
  }
  return y;
}

}  // namespace

GraphDataset load_planetoid(const std::string& dir, const std::string& name) {
  const std::string pre = dir + "/ind." + name + ".";
  GraphDataset g;
  g.name = name;
  int64_t rx, fx, rtx_, ftx, rall, fall;
  const std::vector<float> tx = dense_rows(pre + "tx", rtx_, ftx);
  const std::vector<float> allx = dense_rows(pre + "allx", rall, fall);
  int64_t cx, ctx, call;
  int64_t fdummy;
  (void)dense_rows(pre + "x", rx, fdummy);  // read for its row count (the train nodes)
  const std::vector<int32_t> y_train = labels(pre + "y", cx), ty = labels(pre + "ty", ctx), ally = labels(pre + "ally", call);
  if (ftx != fall || fdummy != fall)
    throw_input(pre + "*: feature counts differ (x " + std::to_string(fdummy) + ", tx " + std::to_string(ftx) + ", allx " + std::to_string(fall) + ")", pre + "tx");
  if (ctx != call || cx != call) throw_input(pre + "*: class counts differ between y, ty and ally", pre + "ty");
  if (static_cast<int64_t>(ty.size()) != rtx_ || static_cast<int64_t>(ally.size()) != rall)
    throw_input(pre + "*: label rows differ from feature rows (ty/tx or ally/allx)", pre + "ty");
  // test.index: one node id per line.
  std::vector<int64_t> test_index;
  {
    io::ReadLimits lim;
    lim.max_bytes = 64u << 20;
    lim.regular_only = true;
    std::istringstream in(io::read_text_file(pre + "test.index", lim));
    std::string line;
    int64_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(line, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != line.size() || v < 0)
        throw_input(pre + "test.index:" + std::to_string(lineno) + ": '" + line + "' is not a node id", pre + "test.index");
      test_index.push_back(v);
    }
  }
  const int64_t N = rall + rtx_, F = fall;
  if (static_cast<int64_t>(test_index.size()) != rtx_)
    throw_input(pre + "test.index has " + std::to_string(test_index.size()) + " ids but tx has " + std::to_string(rtx_) + " rows", pre + "test.index");
  std::vector<int64_t> sorted = test_index;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] >= N || (i > 0 && sorted[i] == sorted[i - 1]))
      throw_input(pre + "test.index: id " + std::to_string(sorted[i]) + " is repeated or outside [0, " + std::to_string(N) + ")", pre + "test.index");
  g.num_nodes = N;
  g.num_features = F;
  g.num_classes = call;
  // x = cat(allx, tx); x[test_index] = x[sorted_test_index] (same for y).
  std::vector<float> x0(allx);
  x0.insert(x0.end(), tx.begin(), tx.end());
  std::vector<int32_t> y0(ally);
  y0.insert(y0.end(), ty.begin(), ty.end());
  g.x = x0;
  g.y = y0;
  for (size_t i = 0; i < test_index.size(); ++i) {
    std::copy(x0.begin() + sorted[i] * F, x0.begin() + (sorted[i] + 1) * F, g.x.begin() + test_index[i] * F);
    g.y[test_index[i]] = y0[sorted[i]];
  }
  // NormalizeFeatures: x - min(x) (0 for these 0/1 features), each row / max(row sum, 1).
  float mn = *std::min_element(g.x.begin(), g.x.end());
  for (int64_t r = 0; r < N; ++r) {
    double s = 0;
    for (int64_t f = 0; f < F; ++f) s += g.x[r * F + f] - mn;
    const double div = std::max(s, 1.0);
    for (int64_t f = 0; f < F; ++f) g.x[r * F + f] = static_cast<float>((g.x[r * F + f] - mn) / div);
  }
  // Edges: PyG (2.8) builds edge_index with source = neighbour, target = key, sorted by target
  // then source; the CSR by destination is then the adjacency list itself: row = key.
  {
    const pk::Document d = pk::parse_file(pre + "graph");
    const auto adj = pk::as_int_list_dict(d, d.root, pre + "graph");
    std::vector<std::pair<int32_t, int32_t>> e;  // (dst, src)
    for (const auto& [key, nbrs] : adj) {
      if (key < 0 || key >= N) throw_input(pre + "graph: key " + std::to_string(key) + " outside [0, " + std::to_string(N) + ")", pre + "graph");
      for (int64_t v : nbrs) {
        if (v < 0 || v >= N) throw_input(pre + "graph: neighbour " + std::to_string(v) + " of " + std::to_string(key) + " outside [0, " + std::to_string(N) + ")", pre + "graph");
        if (v != key) e.emplace_back(static_cast<int32_t>(key), static_cast<int32_t>(v));
      }
    }
    std::sort(e.begin(), e.end());
    e.erase(std::unique(e.begin(), e.end()), e.end());
    std::vector<int32_t> src(e.size()), dst(e.size());
    for (size_t i = 0; i < e.size(); ++i) {
      dst[i] = e[i].first;
      src[i] = e[i].second;
    }
    g.adj = kernels::csr_from_edges(N, N, src, dst);
  }
  const int64_t ntrain = static_cast<int64_t>(y_train.size());
  if (ntrain + 500 > N) throw_input(pre + "y: " + std::to_string(ntrain) + " train labels leave no room for 500 validation nodes", pre + "y");
  for (int64_t i = 0; i < ntrain; ++i) g.train.push_back(static_cast<int32_t>(i));
  for (int64_t i = ntrain; i < ntrain + 500; ++i) g.val.push_back(static_cast<int32_t>(i));
  for (int64_t t : test_index) g.test.push_back(static_cast<int32_t>(t));
  return g;
}

}  // namespace rtx::geom
