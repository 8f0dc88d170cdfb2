// Fuzz target: the bounded pickle reader (rtx::io::pickle) and its numpy / scipy / defaultdict
// interpretations on arbitrary bytes. Accepted documents must be well-formed pools (every index
// in range); interpretations must hold their size invariants; rejections must be rtx::Error.
#include <string>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/pickle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace pk = rtx::io::pickle;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  pk::Limits lim;
  lim.max_values = 1 << 16;  // keeps each run small; the bound itself is what is exercised
  lim.max_memo = 1 << 16;
  pk::Document d;
  try {
    d = pk::parse(bytes, "fuzz.pkl", lim);
  } catch (const rtx::Error&) {
    return 0;
  }
  const size_t n = d.pool.size();
  RTX_FUZZ_CHECK(n <= lim.max_values, "pool above its limit");
  RTX_FUZZ_CHECK(d.root >= 0 && static_cast<size_t>(d.root) < n, "root out of range");
  for (const pk::Value& v : d.pool) {
    for (int32_t i : v.items) RTX_FUZZ_CHECK(i >= 0 && static_cast<size_t>(i) < n, "item index out of range");
    if (v.kind == pk::Kind::Object) {
      RTX_FUZZ_CHECK(v.cls >= 0 && static_cast<size_t>(v.cls) < n, "cls out of range");
      RTX_FUZZ_CHECK(d.pool[v.cls].kind == pk::Kind::Global, "cls is not a GLOBAL");
      RTX_FUZZ_CHECK(v.args >= 0 && static_cast<size_t>(v.args) < n, "args out of range");
      RTX_FUZZ_CHECK(v.state < 0 || static_cast<size_t>(v.state) < n, "state out of range");
    }
    if (v.kind == pk::Kind::Dict) RTX_FUZZ_CHECK(v.items.size() % 2 == 0, "dict with an odd item count");
  }
  try {
    const pk::NdArray a = pk::as_ndarray(d, d.root, "fuzz.pkl");
    const size_t isz = (a.dtype == "i4" || a.dtype == "f4") ? 4 : 8;
    RTX_FUZZ_CHECK(a.data.size() == static_cast<size_t>(a.numel()) * isz, "ndarray bytes != shape x dtype");
    RTX_FUZZ_CHECK(a.to_f64().size() == static_cast<size_t>(a.numel()), "to_f64 size");
  } catch (const rtx::Error&) {
  }
  try {
    const pk::CsrPickle m = pk::as_csr_matrix(d, d.root, "fuzz.pkl");
    RTX_FUZZ_CHECK(m.indptr.numel() == m.rows + 1, "indptr length");
    RTX_FUZZ_CHECK(m.indices.numel() == m.data.numel(), "indices/data lengths");
  } catch (const rtx::Error&) {
  }
  try {
    const auto g = pk::as_int_list_dict(d, d.root, "fuzz.pkl");
    for (size_t i = 0; i < g.size(); ++i)
      for (size_t j = i + 1; j < g.size() && j < i + 64; ++j) RTX_FUZZ_CHECK(g[i].first != g[j].first, "duplicate key");
  } catch (const rtx::Error&) {
  }
  return 0;
}
