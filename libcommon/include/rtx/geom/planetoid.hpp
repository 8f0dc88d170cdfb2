// Planetoid citation datasets (Cora first) read straight from the original pickles
// (kimiyoung/planetoid's ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}) with the bounded
// pickle reader of io/pickle.hpp: no Python in the data path. The result is PyG's Planetoid
// "public" split with NormalizeFeatures applied. Not a general dataset zoo.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rtx/kernels/sparse.hpp"

namespace rtx::geom {

/// A node-classification graph. Shape letters: N nodes, F features, C classes, E edges.
struct GraphDataset {
  std::string name;
  int64_t num_nodes = 0;     ///< N
  int64_t num_features = 0;  ///< F
  int64_t num_classes = 0;   ///< C
  /// Directed edges as CSR by destination (row = target, col = source), columns sorted, no
  /// duplicates and no self loops (PyG's edge_index after remove_self_loops + coalesce).
  kernels::CsrMatrix adj;
  std::vector<float> x;      ///< (N,F) row-major, each row divided by its sum (clamped to >= 1)
  std::vector<int32_t> y;    ///< (N) class of each node, argmax of the one-hot labels
  std::vector<int32_t> train, val, test;  ///< node ids: 0..139, 140..639, test.index (as listed)
  int64_t num_edges() const { return static_cast<int64_t>(adj.col_idx.size()); }
};

/// Loads `dir`/ind.`name`.* as PyG's Planetoid(root, name) with NormalizeFeatures: x = allx
/// stacked on tx, y = argmax of ally stacked on ty, the rows of tx/ty moved to the nodes
/// test.index names; edges from graph (each listed neighbour -> key), self loops dropped,
/// duplicates merged; train = the first |y| nodes, val = the next 500, test = test.index.
/// Only Cora's layout is supported (citeseer's isolated test nodes are not padded): throws
/// rtx::Error(Input) naming the file and the field for a missing file, a malformed pickle,
/// inconsistent sizes or an index out of range.
GraphDataset load_planetoid(const std::string& dir, const std::string& name = "cora");

}  // namespace rtx::geom
