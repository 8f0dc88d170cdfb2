// A minimal, strictly bounded reader of Python pickles (protocols 0-2 binary opcodes) for exactly
// the types of the Planetoid data files: numpy ndarrays (i4/i8/f4/f8, little-endian, C order),
// scipy.sparse csr_matrix, dict / collections.defaultdict(list) of int lists, and plain tuples,
// lists, ints, strings, None and bools. It is not a general unpickler: nothing is ever called
// or imported; GLOBAL names outside a fixed list of six are rejected, and so is every opcode
// these files do not use. Values live in one pool addressed by index (no ownership cycles).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rtx::io::pickle {

enum class Kind : uint8_t { None, Bool, Int, Bytes, Tuple, List, Dict, Global, Object };

/// One value. Int/Bool: `i`. Bytes: `s` (py2 str). Global: `s` = "module name". Tuple/List:
/// `items` (pool indices). Dict: `items` = k0, v0, k1, v1, ... Object (from REDUCE/NEWOBJ):
/// `cls` and `args` (pool indices), `state` (BUILD's argument, -1 before), `items` = entries
/// SETITEMS added (a defaultdict's contents), as for Dict.
struct Value {
  Kind kind = Kind::None;
  int64_t i = 0;
  std::string s;
  std::vector<int32_t> items;
  int32_t cls = -1, args = -1, state = -1;
};

/// A parsed pickle: the value pool and the root (STOP's value).
struct Document {
  std::vector<Value> pool;
  int32_t root = -1;
  const Value& at(int32_t index) const;
};

/// Bounds of a parse (each exceeded bound is an rtx::Error(Input), never an allocation).
struct Limits {
  size_t max_bytes = size_t{256} << 20;  ///< input size
  size_t max_values = size_t{1} << 24;   ///< values created (pool size), stack depth, open MARKs
  size_t max_memo = size_t{1} << 22;     ///< memo slots and highest memo index
};

/// Parses `bytes` (named `name` in errors). Throws rtx::Error(Input) naming the file, the byte
/// offset and the opcode for: a truncated file, an unknown or unsupported opcode, a GLOBAL not
/// in the allowed list, a stack underflow, an operation on the wrong type, a missing memo entry,
/// trailing bytes after STOP, or an exceeded limit.
Document parse(std::string_view bytes, const std::string& name, const Limits& limits = {});
/// Reads and parses a file (rtx::Error(Input) when it cannot be read).
Document parse_file(const std::string& path, const Limits& limits = {});

/// A numpy array: dtype "i4" | "i8" | "f4" | "f8" (little-endian), C-order `shape`, raw `data`.
struct NdArray {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;
  int64_t numel() const;
  /// Elements widened to double / int64 (any of the four dtypes).
  std::vector<double> to_f64() const;
  std::vector<int64_t> to_i64() const;
};
/// Interprets value `index` as numpy.core.multiarray._reconstruct(ndarray, (0,), 'b') with its
/// BUILD state (1, shape, dtype, is_fortran, bytes). Checks that the byte count is the product
/// of the shape and the item size (no overflow). rtx::Error(Input) naming `where` otherwise.
NdArray as_ndarray(const Document& d, int32_t index, const std::string& where);

/// A scipy.sparse.csr_matrix's state: shape and its three arrays (unchecked structure: the
/// caller validates indptr/indices against the shape with kernels::csr_check or its own rules).
struct CsrPickle {
  int64_t rows = 0, cols = 0;
  NdArray indptr, indices, data;
};
/// Interprets value `index` as csr_matrix (NEWOBJ + BUILD with a dict holding _shape, indptr,
/// indices, data; format 'csr'). rtx::Error(Input) naming `where` otherwise.
CsrPickle as_csr_matrix(const Document& d, int32_t index, const std::string& where);

/// Interprets value `index` as a dict or defaultdict(list) from int keys to lists of ints, in
/// the order the pickle lists them (a later duplicate key replaces the earlier list, as in Python).
std::vector<std::pair<int64_t, std::vector<int64_t>>> as_int_list_dict(const Document& d, int32_t index,
                                                                       const std::string& where);

}  // namespace rtx::io::pickle
