// Cora through load_planetoid vs the facts of the issue (2708 nodes, 10556 directed edges, 1433
// features, 7 classes, 140/500/1000 split) and a golden written by torch_geometric's Planetoid
// with NormalizeFeatures (tests/geom/make_cora_golden.py): labels, split, edge and feature hashes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/geom/planetoid.hpp"
#include "rtx/io/artifact.hpp"
#include "rtx/io/atomic_file.hpp"
#include "test_util.hpp"

using namespace rtx;

namespace {
const geom::GraphDataset& cora() {
  static const geom::GraphDataset g = geom::load_planetoid(rtx::test::data_dir() + "/cora", "cora");
  return g;
}
nlohmann::json golden() {
  const std::string path = rtx::test::source_dir() + "/tests/geom/data/cora_golden.json";
  return io::parse_json(io::read_text_file(path), path);
}
}  // namespace

TEST_CASE("planetoid: Cora's sizes and split", "[cpu]") {
  const auto& g = cora();
  CHECK(g.num_nodes == 2708);
  CHECK(g.num_edges() == 10556);
  CHECK(g.num_features == 1433);
  CHECK(g.num_classes == 7);
  CHECK(g.train.size() == 140);
  CHECK(g.val.size() == 500);
  CHECK(g.test.size() == 1000);
  CHECK(g.x.size() == 2708u * 1433u);
  kernels::csr_check(g.adj.view(), "cora", true);  // sorted, in range
  for (int64_t r = 0; r < g.num_nodes; ++r)
    for (int32_t k = g.adj.row_ptr[r]; k < g.adj.row_ptr[r + 1]; ++k) CHECK_FALSE(g.adj.col_idx[k] == r);
}

TEST_CASE("planetoid: Cora matches torch_geometric's Planetoid + NormalizeFeatures", "[cpu]") {
  const auto& g = cora();
  const nlohmann::json gold = golden();
  CHECK(g.num_nodes == gold["num_nodes"].get<int64_t>());
  CHECK(g.num_edges() == gold["num_edges"].get<int64_t>());
  CHECK(g.y == gold["y"].get<std::vector<int32_t>>());
  CHECK(g.train == gold["train"].get<std::vector<int32_t>>());
  CHECK(g.val == gold["val"].get<std::vector<int32_t>>());
  std::vector<int32_t> test = g.test;
  std::sort(test.begin(), test.end());
  CHECK(test == gold["test_sorted"].get<std::vector<int32_t>>());
  // PyG's edge_index (source, target) pairs, sorted by target then source: the CSR's order.
  std::vector<int32_t> flat;
  for (int64_t r = 0; r < g.num_nodes; ++r)
    for (int32_t k = g.adj.row_ptr[r]; k < g.adj.row_ptr[r + 1]; ++k) {
      flat.push_back(g.adj.col_idx[k]);
      flat.push_back(static_cast<int32_t>(r));
    }
  const auto first = gold["first_edges"].get<std::vector<std::vector<int32_t>>>();
  for (size_t i = 0; i < first.size(); ++i) CHECK(std::vector<int32_t>{flat[2 * i], flat[2 * i + 1]} == first[i]);
  CHECK(sha256_hex(flat.data(), flat.size() * 4) == gold["edges_sha256"].get<std::string>());
  // Features: bitwise the same float32 matrix (1/k in each of a row's k nonzeros).
  CHECK(sha256_hex(g.x.data(), g.x.size() * 4) == gold["x_sha256"].get<std::string>());
  const auto nnz = gold["x_row_nnz"].get<std::vector<int64_t>>();
  for (int64_t r = 0; r < g.num_nodes; r += 97) {
    int64_t n = 0;
    for (int64_t f = 0; f < g.num_features; ++f) n += g.x[r * g.num_features + f] != 0.f;
    CHECK(n == nnz[r]);
  }
  CHECK(g.x[gold["x_row0_cols"][0].get<int64_t>()] == gold["x_row0_value"].get<float>());
}

TEST_CASE("planetoid: a missing or corrupt file is an input error naming it", "[cpu]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "rtx_planetoid_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* f : {"x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"})
    std::filesystem::copy_file(rtx::test::data_dir() + "/cora/ind.cora." + f, dir / (std::string("ind.cora.") + f));
  {  // truncate the graph pickle
    std::string g = io::read_text_file((dir / "ind.cora.graph").string());
    std::ofstream(dir / "ind.cora.graph", std::ios::binary | std::ios::trunc) << g.substr(0, g.size() / 2);
  }
  try {
    geom::load_planetoid(dir.string(), "cora");
    FAIL("a truncated graph pickle was accepted");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(std::string(e.what()).find("ind.cora.graph") != std::string::npos);
  }
  std::filesystem::remove(dir / "ind.cora.graph");
  CHECK_THROWS_AS(geom::load_planetoid(dir.string(), "cora"), Error);
  std::filesystem::remove_all(dir);
}
