// The bounded pickle reader of rtx/io/pickle.hpp: a stack machine over the opcodes the Planetoid
// files use (pickletools' names), and the numpy / scipy interpretations of its values. Opcode
// semantics follow CPython's Lib/pickle.py (_Unpickler.load_*); nothing is imported or called.
#include "rtx/io/pickle.hpp"

#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"

namespace rtx::io::pickle {
namespace {

// The only GLOBALs accepted: what numpy, scipy and defaultdict pickles of these files name.
constexpr const char* kAllowedGlobals[] = {
    "numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype", "scipy.sparse.csr csr_matrix",
    "collections defaultdict", "__builtin__ list"};

class Machine {
 public:
  Machine(std::string_view b, const std::string& name, const Limits& lim) : b_(b), name_(name), lim_(lim) {}

  Document run() {
    if (b_.size() > lim_.max_bytes)
      throw_input(name_ + ": pickle of " + std::to_string(b_.size()) + " bytes exceeds the limit of " +
                      std::to_string(lim_.max_bytes),
                  name_, "this reader is for small data files");
    while (true) {
      if (pos_ >= b_.size()) fail("file ends before STOP");
      op_at_ = pos_;
      op_ = static_cast<uint8_t>(b_[pos_++]);
      switch (op_) {
        case 0x80: {  // PROTO
          const uint8_t v = u8();
          if (v > 2) fail("protocol " + std::to_string(v) + " (only 0-2 are read)");
          break;
        }
        case 'c': {  // GLOBAL "module\nname\n"
          std::string g = line();
          g += ' ';
          g += line();
          bool ok = false;
          for (const char* a : kAllowedGlobals) ok = ok || g == a;
          if (!ok) fail("GLOBAL '" + g + "' is not one of the allowed numpy/scipy/defaultdict names");
          Value v;
          v.kind = Kind::Global;
          v.s = std::move(g);
          push(make(std::move(v)));
          break;
        }
        case 'q': memo_put(u8()); break;                      // BINPUT
        case 'r': memo_put(u32()); break;                     // LONG_BINPUT
        case 'h': push(memo_get(u8())); break;                // BINGET
        case 'j': push(memo_get(u32())); break;               // LONG_BINGET
        case 'N': push(make(Value{})); break;                 // NONE
        case 0x88: push(make_int(Kind::Bool, 1)); break;      // NEWTRUE
        case 0x89: push(make_int(Kind::Bool, 0)); break;      // NEWFALSE
        case 'K': push(make_int(Kind::Int, u8())); break;     // BININT1
        case 'M': push(make_int(Kind::Int, u16())); break;    // BININT2
        case 'J': push(make_int(Kind::Int, static_cast<int32_t>(u32()))); break;  // BININT
        case 'U': push(make_bytes(u8())); break;              // SHORT_BINSTRING
        case 'T': {                                           // BINSTRING
          const int32_t n = static_cast<int32_t>(u32());
          if (n < 0) fail("negative string length " + std::to_string(n));
          push(make_bytes(static_cast<size_t>(n)));
          break;
        }
        case '(':  // MARK
          if (marks_.size() >= lim_.max_values) fail("too many MARKs");
          marks_.push_back(stack_.size());
          break;
        case ')': push(make_seq(Kind::Tuple, {})); break;     // EMPTY_TUPLE
        case 0x85: case 0x86: case 0x87: {                    // TUPLE1..3
          const size_t n = op_ - 0x84u;
          need(n);
          std::vector<int32_t> items(stack_.end() - n, stack_.end());
          stack_.resize(stack_.size() - n);
          push(make_seq(Kind::Tuple, std::move(items)));
          break;
        }
        case 't': push(make_seq(Kind::Tuple, pop_mark())); break;  // TUPLE
        case ']': push(make_seq(Kind::List, {})); break;           // EMPTY_LIST
        case '}': push(make_seq(Kind::Dict, {})); break;           // EMPTY_DICT
        case 'a': {                                                // APPEND
          need(2);
          const int32_t v = pop();
          mut_list(stack_.back()).items.push_back(v);
          break;
        }
        case 'e': {  // APPENDS
          std::vector<int32_t> items = pop_mark();
          need(1);
          auto& l = mut_list(stack_.back()).items;
          l.insert(l.end(), items.begin(), items.end());
          break;
        }
        case 's': {  // SETITEM
          need(3);
          const int32_t v = pop(), k = pop();
          auto& d = mut_dict(stack_.back()).items;
          d.push_back(k);
          d.push_back(v);
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<int32_t> kv = pop_mark();
          if (kv.size() % 2) fail("SETITEMS with an odd number of items");
          need(1);
          auto& d = mut_dict(stack_.back()).items;
          d.insert(d.end(), kv.begin(), kv.end());
          break;
        }
        case 'R':     // REDUCE: callable, args
        case 0x81: {  // NEWOBJ: cls, args
          need(2);
          const int32_t args = pop(), cls = pop();
          if (pool_[cls].kind != Kind::Global) fail("callable is not a GLOBAL");
          if (pool_[args].kind != Kind::Tuple) fail("arguments are not a tuple");
          Value v;
          v.kind = Kind::Object;
          v.cls = cls;
          v.args = args;
          push(make(std::move(v)));
          break;
        }
        case 'b': {  // BUILD
          need(2);
          const int32_t st = pop();
          Value& o = pool_[stack_.back()];
          if (o.kind != Kind::Object) fail("BUILD on a value that is not an object");
          if (o.state >= 0) fail("BUILD twice on one object");
          o.state = st;
          break;
        }
        case '.': {  // STOP
          need(1);
          if (stack_.size() != 1 || !marks_.empty()) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
          if (pos_ != b_.size()) fail(std::to_string(b_.size() - pos_) + " bytes after STOP");
          Document d;
          d.root = stack_.back();
          d.pool = std::move(pool_);
          return d;
        }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op_);
          fail(std::string("opcode ") + hex + " is not supported (not used by the Planetoid files)");
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", op_);
    throw_input(name_ + ": pickle byte " + std::to_string(op_at_) + " (opcode " + hex + "): " + what, name_,
                "the reader accepts the Planetoid pickles (numpy arrays, scipy CSR, defaultdict of lists)");
  }
  void take(size_t n) {
    if (b_.size() - pos_ < n) fail("truncated: needs " + std::to_string(n) + " more bytes");
  }
  uint8_t u8() {
    take(1);
    return static_cast<uint8_t>(b_[pos_++]);
  }
  uint16_t u16() {
    take(2);
    uint16_t v = static_cast<uint8_t>(b_[pos_]) | static_cast<uint16_t>(static_cast<uint8_t>(b_[pos_ + 1])) << 8;
    pos_ += 2;
    return v;
  }
  uint32_t u32() {
    take(4);
    uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = v << 8 | static_cast<uint8_t>(b_[pos_ + k]);
    pos_ += 4;
    return v;
  }
  std::string line() {
    const size_t nl = b_.find('\n', pos_);
    if (nl == std::string_view::npos || nl - pos_ > 256) fail("GLOBAL name without a newline within 256 bytes");
    std::string s(b_.substr(pos_, nl - pos_));
    pos_ = nl + 1;
    return s;
  }
  int32_t make(Value v) {
    if (pool_.size() >= lim_.max_values) fail("more than " + std::to_string(lim_.max_values) + " values");
    pool_.push_back(std::move(v));
    return static_cast<int32_t>(pool_.size() - 1);
  }
  int32_t make_int(Kind k, int64_t i) {
    Value v;
    v.kind = k;
    v.i = i;
    return make(std::move(v));
  }
  int32_t make_bytes(size_t n) {
    take(n);
    Value v;
    v.kind = Kind::Bytes;
    v.s.assign(b_.data() + pos_, n);
    pos_ += n;
    return make(std::move(v));
  }
  int32_t make_seq(Kind k, std::vector<int32_t> items) {
    Value v;
    v.kind = k;
    v.items = std::move(items);
    return make(std::move(v));
  }
  void push(int32_t v) {
    if (stack_.size() >= lim_.max_values) fail("stack deeper than " + std::to_string(lim_.max_values));
    stack_.push_back(v);
  }
  void need(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail("stack underflow");
  }
  int32_t pop() {
    const int32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<int32_t> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<int32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Value& mut_list(int32_t i) {
    if (pool_[i].kind != Kind::List) fail("APPEND(S) on a value that is not a list");
    return pool_[i];
  }
  Value& mut_dict(int32_t i) {
    Value& v = pool_[i];
    const bool defaultdict = v.kind == Kind::Object && pool_[v.cls].s == "collections defaultdict";
    if (v.kind != Kind::Dict && !defaultdict) fail("SETITEM(S) on a value that is not a dict");
    return v;
  }
  void memo_put(uint32_t k) {
    if (stack_.empty()) fail("memo put with an empty stack");
    if (k >= lim_.max_memo) fail("memo index " + std::to_string(k) + " beyond the limit");
    if (memo_.size() >= lim_.max_memo && !memo_.count(k)) fail("too many memo entries");
    memo_[k] = stack_.back();
  }
  int32_t memo_get(uint32_t k) {
    auto it = memo_.find(k);
    if (it == memo_.end()) fail("memo index " + std::to_string(k) + " was never put");
    return it->second;
  }

  std::string_view b_;
  const std::string& name_;
  const Limits& lim_;
  size_t pos_ = 0, op_at_ = 0;
  uint8_t op_ = 0;
  std::vector<Value> pool_;
  std::vector<int32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, int32_t> memo_;
};

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw_input(where + ": " + what, where, "expected the Planetoid layout (numpy arrays, scipy CSR, defaultdict)");
}

const Value& expect(const Document& d, int32_t i, Kind k, const std::string& where, const char* what) {
  const Value& v = d.at(i);
  if (v.kind != k) bad(where, std::string(what) + " has the wrong type");
  return v;
}

int64_t expect_int(const Document& d, int32_t i, const std::string& where, const char* what) {
  const Value& v = d.at(i);
  if (v.kind != Kind::Int && v.kind != Kind::Bool) bad(where, std::string(what) + " is not an int");
  return v.i;
}

size_t item_size(const std::string& dt) {
  if (dt == "i4" || dt == "f4") return 4;
  if (dt == "i8" || dt == "f8") return 8;
  return 0;
}

}  // namespace

const Value& Document::at(int32_t index) const {
  if (index < 0 || static_cast<size_t>(index) >= pool.size())
    throw_input("pickle value index " + std::to_string(index) + " out of range", "pickle", "a reader bug or bad file");
  return pool[static_cast<size_t>(index)];
}

Document parse(std::string_view bytes, const std::string& name, const Limits& limits) {
  return Machine(bytes, name, limits).run();
}

Document parse_file(const std::string& path, const Limits& limits) {
  ReadLimits rl;
  rl.max_bytes = limits.max_bytes;
  rl.regular_only = true;
  const std::string bytes = read_text_file(path, rl);
  return parse(bytes, path, limits);
}

int64_t NdArray::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<double> NdArray::to_f64() const {
  const int64_t n = numel();
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const char* p = data.data() + k * static_cast<int64_t>(item_size(dtype));
    if (dtype == "f4") { float f; std::memcpy(&f, p, 4); out[k] = f; }
    else if (dtype == "f8") { std::memcpy(&out[k], p, 8); }
    else if (dtype == "i4") { int32_t v; std::memcpy(&v, p, 4); out[k] = v; }
    else { int64_t v; std::memcpy(&v, p, 8); out[k] = static_cast<double>(v); }
  }
  return out;
}

std::vector<int64_t> NdArray::to_i64() const {
  if (dtype == "f4" || dtype == "f8") {
    std::vector<int64_t> out;
    for (double v : to_f64()) {
      if (!(v >= -9.2e18 && v <= 9.2e18) || v != static_cast<double>(static_cast<int64_t>(v)))
        throw_input("array of dtype " + dtype + " holds a non-integer value where integers are expected", "dtype");
      out.push_back(static_cast<int64_t>(v));
    }
    return out;
  }
  const int64_t n = numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    if (dtype == "i4") {
      int32_t v;
      std::memcpy(&v, data.data() + 4 * k, 4);
      out[k] = v;
    } else {
      std::memcpy(&out[k], data.data() + 8 * k, 8);
    }
  }
  return out;
}

NdArray as_ndarray(const Document& d, int32_t index, const std::string& where) {
  const Value& o = expect(d, index, Kind::Object, where, "ndarray");
  if (d.at(o.cls).s != "numpy.core.multiarray _reconstruct") bad(where, "not numpy's _reconstruct");
  const Value& a = d.at(o.args);
  if (a.items.size() != 3 || d.at(a.items[0]).s != "numpy ndarray") bad(where, "_reconstruct is not of numpy.ndarray");
  if (o.state < 0) bad(where, "ndarray without state");
  const Value& st = expect(d, o.state, Kind::Tuple, where, "ndarray state");
  if (st.items.size() != 5) bad(where, "ndarray state has " + std::to_string(st.items.size()) + " fields, not 5");
  NdArray arr;
  const Value& shape = expect(d, st.items[1], Kind::Tuple, where, "ndarray shape");
  uint64_t numel = 1;
  for (int32_t s : shape.items) {
    const int64_t n = expect_int(d, s, where, "shape entry");
    if (n < 0 || n > (int64_t{1} << 40)) bad(where, "shape entry " + std::to_string(n) + " out of range");
    arr.shape.push_back(n);
    if (n != 0 && numel > (uint64_t{1} << 40) / static_cast<uint64_t>(n)) bad(where, "array too large");
    numel *= static_cast<uint64_t>(n);
  }
  if (shape.items.size() > 8) bad(where, "more than 8 dims");
  const Value& dt = expect(d, st.items[2], Kind::Object, where, "dtype");
  if (d.at(dt.cls).s != "numpy dtype") bad(where, "dtype is not numpy.dtype");
  const Value& dargs = d.at(dt.args);
  if (dargs.items.empty()) bad(where, "dtype without a name");
  arr.dtype = expect(d, dargs.items[0], Kind::Bytes, where, "dtype name").s;
  const size_t isz = item_size(arr.dtype);
  if (isz == 0) bad(where, "dtype '" + arr.dtype + "' is not i4, i8, f4 or f8");
  if (dt.state >= 0) {  // (3, byteorder, ...): only little-endian or not-applicable
    const Value& ds = expect(d, dt.state, Kind::Tuple, where, "dtype state");
    if (ds.items.size() < 2) bad(where, "dtype state too short");
    const std::string& bo = expect(d, ds.items[1], Kind::Bytes, where, "byte order").s;
    if (bo != "<" && bo != "|" && bo != "=") bad(where, "byte order '" + bo + "' (only little-endian is read)");
  }
  if (expect_int(d, st.items[3], where, "is_fortran") != 0 && shape.items.size() > 1)
    bad(where, "Fortran-order array (only C order is read)");
  arr.data = expect(d, st.items[4], Kind::Bytes, where, "array data").s;
  if (arr.data.size() != numel * isz)
    bad(where, "array data holds " + std::to_string(arr.data.size()) + " bytes, shape x dtype needs " +
                   std::to_string(numel * isz));
  return arr;
}

CsrPickle as_csr_matrix(const Document& d, int32_t index, const std::string& where) {
  const Value& o = expect(d, index, Kind::Object, where, "csr_matrix");
  if (d.at(o.cls).s != "scipy.sparse.csr csr_matrix") bad(where, "not a scipy.sparse csr_matrix");
  if (o.state < 0) bad(where, "csr_matrix without state");
  const Value& st = expect(d, o.state, Kind::Dict, where, "csr_matrix state");
  CsrPickle m;
  bool have[4] = {false, false, false, false};
  for (size_t k = 0; k + 1 < st.items.size(); k += 2) {
    const Value& key = d.at(st.items[k]);
    if (key.kind != Kind::Bytes) continue;
    const int32_t v = st.items[k + 1];
    if (key.s == "_shape") {
      const Value& sh = expect(d, v, Kind::Tuple, where, "_shape");
      if (sh.items.size() != 2) bad(where, "_shape is not 2-D");
      m.rows = expect_int(d, sh.items[0], where, "rows");
      m.cols = expect_int(d, sh.items[1], where, "cols");
      if (m.rows < 0 || m.cols < 0 || m.rows > INT32_MAX || m.cols > INT32_MAX) bad(where, "_shape out of range");
      have[0] = true;
    } else if (key.s == "indptr") {
      m.indptr = as_ndarray(d, v, where + " indptr");
      have[1] = true;
    } else if (key.s == "indices") {
      m.indices = as_ndarray(d, v, where + " indices");
      have[2] = true;
    } else if (key.s == "data") {
      m.data = as_ndarray(d, v, where + " data");
      have[3] = true;
    } else if (key.s == "format") {
      if (expect(d, v, Kind::Bytes, where, "format").s != "csr") bad(where, "format is not 'csr'");
    }
  }
  if (!(have[0] && have[1] && have[2] && have[3])) bad(where, "csr_matrix lacks _shape, indptr, indices or data");
  for (const NdArray* a : {&m.indptr, &m.indices, &m.data})
    if (a->shape.size() != 1) bad(where, "CSR arrays must be 1-D");
  if (m.indptr.numel() != m.rows + 1) bad(where, "indptr has " + std::to_string(m.indptr.numel()) + " entries, rows+1 = " + std::to_string(m.rows + 1));
  if (m.indices.numel() != m.data.numel()) bad(where, "indices and data differ in length");
  return m;
}

std::vector<std::pair<int64_t, std::vector<int64_t>>> as_int_list_dict(const Document& d, int32_t index,
                                                                       const std::string& where) {
  const Value& o = d.at(index);
  if (o.kind == Kind::Object) {
    if (d.at(o.cls).s != "collections defaultdict") bad(where, "object is not a defaultdict");
  } else if (o.kind != Kind::Dict) {
    bad(where, "not a dict");
  }
  std::vector<std::pair<int64_t, std::vector<int64_t>>> out;
  std::unordered_map<int64_t, size_t> seen;
  for (size_t k = 0; k + 1 < o.items.size(); k += 2) {
    const int64_t key = expect_int(d, o.items[k], where, "key");
    const Value& l = expect(d, o.items[k + 1], Kind::List, where, "value");
    std::vector<int64_t> vals;
    vals.reserve(l.items.size());
    for (int32_t x : l.items) vals.push_back(expect_int(d, x, where, "list item"));
    auto it = seen.find(key);
    if (it != seen.end()) {
      out[it->second].second = std::move(vals);
    } else {
      seen[key] = out.size();
      out.emplace_back(key, std::move(vals));
    }
  }
  return out;
}

}  // namespace rtx::io::pickle
