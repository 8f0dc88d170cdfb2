// GGUF v3 writer and v1/v2/v3 reader (ggml docs/gguf.md). Every count, length and offset read
// from a file is checked against the bytes left before it is used or allocated for.
#include "rtx/io/gguf.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "io/mapped_file.hpp"
#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"

namespace rtx::io {

namespace {

constexpr uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;         // nested arrays deeper than this are refused
constexpr size_t kMaxTensorName = 63;     // GGML_MAX_NAME 64 including the terminating NUL
constexpr size_t kChunk = size_t(4) << 20;

struct TypeRow {
  uint32_t id;
  const char* name;
  uint32_t block, bytes;
};
// (block size, type size) from gguf-py's GGML_QUANT_SIZES (QK_K = 256).
constexpr TypeRow kGgmlTypes[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},     {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 40},
    {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50}, {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},       {25, "I16", 1, 2},
    {26, "I32", 1, 4},       {27, "I64", 1, 8},       {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},  {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
};

// Bytes of a scalar value type, 0 for STRING/ARRAY/unknown.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}
bool known_type(uint32_t t) { return t <= 12; }
bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Little-endian reader over [p, p+size) that never reads past the end.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t size, const std::string& where) : p_(p), size_(size), where_(where) {}
  [[noreturn]] void fail(const std::string& what, const std::string& msg) const {
    throw Error(ErrorCategory::Input, msg + " (at byte " + std::to_string(pos_) + ")",
                where_ + (what.empty() ? "" : ": " + what),
                "the file is truncated, corrupt or not a GGUF file");
  }
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }
  void need(uint64_t n, const std::string& what) const {
    if (n > left()) fail(what, "needs " + std::to_string(n) + " bytes but only " + std::to_string(left()) + " remain: truncated");
  }
  template <class T>
  T rd(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A count or length: u32 in GGUF v1, u64 later.
  uint64_t count(const std::string& what) { return v1 ? rd<uint32_t>(what) : rd<uint64_t>(what); }
  std::string str(const std::string& what) {
    const uint64_t n = count(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  bool v1 = false;

 private:
  const uint8_t* p_;
  size_t size_, pos_ = 0;
  const std::string& where_;
};

GgufValue read_value(Cursor& c, GgufType t, const std::string& key, int depth) {
  GgufValue v;
  v.type = t;
  switch (t) {
    case GgufType::U8: v.u = c.rd<uint8_t>(key); break;
    case GgufType::U16: v.u = c.rd<uint16_t>(key); break;
    case GgufType::U32: v.u = c.rd<uint32_t>(key); break;
    case GgufType::U64: v.u = c.rd<uint64_t>(key); break;
    case GgufType::I8: v.i = c.rd<int8_t>(key); break;
    case GgufType::I16: v.i = c.rd<int16_t>(key); break;
    case GgufType::I32: v.i = c.rd<int32_t>(key); break;
    case GgufType::I64: v.i = c.rd<int64_t>(key); break;
    case GgufType::F32: v.f = c.rd<float>(key); break;
    case GgufType::F64: v.f = c.rd<double>(key); break;
    case GgufType::BOOL: {
      const uint8_t b = c.rd<uint8_t>(key);
      if (b > 1) c.fail(key, "bool value " + std::to_string(b) + " is neither 0 nor 1");
      v.b = b != 0;
      break;
    }
    case GgufType::STRING: v.str = c.str(key); break;
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth) c.fail(key, "arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
      const uint32_t et = c.rd<uint32_t>(key + " (array type)");
      if (!known_type(et)) c.fail(key, "unknown array element type " + std::to_string(et));
      v.elem = static_cast<GgufType>(et);
      const uint64_t n = c.count(key + " (array length)");
      // The smallest encoding of one element bounds how many can fit in the bytes left.
      const uint64_t min_elem = v.elem == GgufType::STRING ? (c.v1 ? 4 : 8)
                                : v.elem == GgufType::ARRAY ? (c.v1 ? 8 : 12)
                                                            : scalar_size(v.elem);
      if (n > c.left() / min_elem)
        c.fail(key, "array length " + std::to_string(n) + " cannot fit in the " + std::to_string(c.left()) + " bytes left");
      v.array.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) v.array.push_back(read_value(c, v.elem, key, depth + 1));
      break;
    }
  }
  return v;
}

void write_le(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <class T>
void put(std::string& out, T v) {
  write_le(out, &v, sizeof v);
}
void put_str(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_value(std::string& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::U8: put<uint8_t>(out, static_cast<uint8_t>(v.u)); break;
    case GgufType::U16: put<uint16_t>(out, static_cast<uint16_t>(v.u)); break;
    case GgufType::U32: put<uint32_t>(out, static_cast<uint32_t>(v.u)); break;
    case GgufType::U64: put<uint64_t>(out, v.u); break;
    case GgufType::I8: put<int8_t>(out, static_cast<int8_t>(v.i)); break;
    case GgufType::I16: put<int16_t>(out, static_cast<int16_t>(v.i)); break;
    case GgufType::I32: put<int32_t>(out, static_cast<int32_t>(v.i)); break;
    case GgufType::I64: put<int64_t>(out, v.i); break;
    case GgufType::F32: put<float>(out, static_cast<float>(v.f)); break;
    case GgufType::F64: put<double>(out, v.f); break;
    case GgufType::BOOL: put<uint8_t>(out, v.b ? 1 : 0); break;
    case GgufType::STRING: put_str(out, v.str); break;
    case GgufType::ARRAY:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem));
      put<uint64_t>(out, v.array.size());
      for (const auto& e : v.array) put_value(out, e);
      break;
  }
}

void check_value(const GgufValue& v, const std::string& key, int depth) {
  if (!known_type(static_cast<uint32_t>(v.type)))
    throw Error(ErrorCategory::Usage, "unknown value type " + std::to_string(static_cast<uint32_t>(v.type)), key);
  if (v.type != GgufType::ARRAY) return;
  if (depth >= kMaxArrayDepth) throw Error(ErrorCategory::Usage, "arrays nested too deep", key);
  for (const auto& e : v.array) {
    if (e.type != v.elem)
      throw Error(ErrorCategory::Usage,
                  std::string("array of ") + gguf_type_name(v.elem) + " holds a " + gguf_type_name(e.type), key);
    check_value(e, key, depth + 1);
  }
}

[[noreturn]] void type_error(const std::string& key, const char* want, GgufType got) {
  throw Error(ErrorCategory::Input, std::string("metadata value is ") + gguf_type_name(got) + ", expected " + want,
              key.empty() ? std::string("<value>") : key);
}

}  // namespace

const char* gguf_type_name(GgufType t) noexcept {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i <= 12 ? names[i] : "unknown";
}

std::pair<uint32_t, uint32_t> ggml_type_block(uint32_t type) noexcept {
  for (const auto& r : kGgmlTypes)
    if (r.id == type) return {r.block, r.bytes};
  return {0, 0};
}

const char* ggml_type_name(uint32_t type) noexcept {
  for (const auto& r : kGgmlTypes)
    if (r.id == type) return r.name;
  return "unknown";
}

// ---- GgufValue ---------------------------------------------------------------------------

#define RTX_GGUF_CTOR(fn, T, TYPE, field) \
  GgufValue GgufValue::fn(T v) {          \
    GgufValue g;                          \
    g.type = GgufType::TYPE;              \
    g.field = v;                          \
    return g;                             \
  }
RTX_GGUF_CTOR(u8, uint8_t, U8, u)
RTX_GGUF_CTOR(u16, uint16_t, U16, u)
RTX_GGUF_CTOR(u32, uint32_t, U32, u)
RTX_GGUF_CTOR(u64, uint64_t, U64, u)
RTX_GGUF_CTOR(i8, int8_t, I8, i)
RTX_GGUF_CTOR(i16, int16_t, I16, i)
RTX_GGUF_CTOR(i32, int32_t, I32, i)
RTX_GGUF_CTOR(i64, int64_t, I64, i)
RTX_GGUF_CTOR(f32, float, F32, f)
RTX_GGUF_CTOR(f64, double, F64, f)
RTX_GGUF_CTOR(boolean, bool, BOOL, b)
#undef RTX_GGUF_CTOR

GgufValue GgufValue::string(std::string v) {
  GgufValue g;
  g.type = GgufType::STRING;
  g.str = std::move(v);
  return g;
}

GgufValue GgufValue::make_array(GgufType elem, std::vector<GgufValue> values) {
  GgufValue g;
  g.type = GgufType::ARRAY;
  g.elem = elem;
  g.array = std::move(values);
  return g;
}

GgufValue GgufValue::string_array(const std::vector<std::string>& v) {
  std::vector<GgufValue> a;
  a.reserve(v.size());
  for (const auto& s : v) a.push_back(string(s));
  return make_array(GgufType::STRING, std::move(a));
}

GgufValue GgufValue::i32_array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> a;
  a.reserve(v.size());
  for (int32_t x : v) a.push_back(i32(x));
  return make_array(GgufType::I32, std::move(a));
}

GgufValue GgufValue::f32_array(const std::vector<float>& v) {
  std::vector<GgufValue> a;
  a.reserve(v.size());
  for (float x : v) a.push_back(f32(x));
  return make_array(GgufType::F32, std::move(a));
}

uint64_t GgufValue::as_u64(const std::string& key) const {
  if (is_unsigned(type)) return u;
  if (is_signed(type) && i >= 0) return static_cast<uint64_t>(i);
  type_error(key, "a non-negative integer", type);
}

int64_t GgufValue::as_i64(const std::string& key) const {
  if (is_signed(type)) return i;
  if (is_unsigned(type) && u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(u);
  type_error(key, "an integer", type);
}

double GgufValue::as_f64(const std::string& key) const {
  if (type == GgufType::F32 || type == GgufType::F64) return f;
  if (is_unsigned(type)) return static_cast<double>(u);
  if (is_signed(type)) return static_cast<double>(i);
  type_error(key, "a number", type);
}

bool GgufValue::as_bool(const std::string& key) const {
  if (type != GgufType::BOOL) type_error(key, "bool", type);
  return b;
}

const std::string& GgufValue::as_string(const std::string& key) const {
  if (type != GgufType::STRING) type_error(key, "string", type);
  return str;
}

std::vector<std::string> GgufValue::as_strings(const std::string& key) const {
  if (type != GgufType::ARRAY || elem != GgufType::STRING) type_error(key, "array of strings", type);
  std::vector<std::string> out;
  out.reserve(array.size());
  for (const auto& e : array) out.push_back(e.str);
  return out;
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  switch (type) {
    case GgufType::F32: case GgufType::F64: return f == o.f || (f != f && o.f != o.f);
    case GgufType::BOOL: return b == o.b;
    case GgufType::STRING: return str == o.str;
    case GgufType::ARRAY: return elem == o.elem && array == o.array;
    default: return is_unsigned(type) ? u == o.u : i == o.i;
  }
}

// ---- reader --------------------------------------------------------------------------------

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  auto m = detail::MappedBytes::map_file(path);
  f.base_ = m->data();
  f.size_ = m->size();
  f.bytes_ = m;
  f.path_ = path;
  f.init();
  return f;
}

GgufFile GgufFile::parse(std::string bytes, const std::string& where) {
  GgufFile f;
  auto m = detail::MappedBytes::from_string(std::move(bytes));
  f.base_ = m->data();
  f.size_ = m->size();
  f.bytes_ = m;
  f.path_ = where;
  f.init();
  return f;
}

void GgufFile::init() {
  Cursor c(base_, size_, path_);
  if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0) {
    if (size_ >= 4 && std::memcmp(base_, "FUGG", 4) == 0) c.fail("magic", "byte-swapped magic: big-endian GGUF is not supported");
    c.fail("magic", "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  }
  c.rd<uint32_t>("magic");
  version_ = c.rd<uint32_t>("version");
  if (version_ < 1 || version_ > 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped >= 1 && swapped <= 3) c.fail("version", "big-endian GGUF (version is byte-swapped) is not supported");
    c.fail("version", "unsupported GGUF version " + std::to_string(version_) + " (this reader knows 1, 2 and 3)");
  }
  c.v1 = version_ == 1;
  const uint64_t n_tensors = c.count("tensor_count");
  const uint64_t n_kv = c.count("metadata_kv_count");
  // Smallest encodings: a KV is key length + value type + 1 byte; a tensor info is name
  // length + n_dims + type + offset.
  const uint64_t min_kv = (c.v1 ? 4 : 8) + 4 + 1, min_ti = (c.v1 ? 4 : 8) + 4 + 4 + 8;
  if (n_kv > c.left() / min_kv)
    c.fail("metadata_kv_count", "count " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(c.left()) + " bytes left");
  if (n_tensors > c.left() / min_ti)
    c.fail("tensor_count", "count " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(c.left()) + " bytes left");

  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.str("metadata key #" + std::to_string(k));
    const uint32_t t = c.rd<uint32_t>(key + " (value type)");
    if (!known_type(t)) c.fail(key, "unknown value type " + std::to_string(t));
    GgufValue v = read_value(c, static_cast<GgufType>(t), key, 0);
    if (!kv_index_.emplace(key, kv_.size()).second) c.fail(key, "duplicate metadata key");
    kv_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::U32) c.fail("general.alignment", std::string("is ") + gguf_type_name(a->type) + ", expected u32");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      c.fail("general.alignment", "alignment " + std::to_string(a->u) + " is not a power of two");
    alignment_ = static_cast<uint32_t>(a->u);
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo ti;
    ti.name = c.str("tensor info #" + std::to_string(k) + " name");
    const std::string what = "tensor \"" + ti.name + "\"";
    const uint32_t nd = c.rd<uint32_t>(what + " n_dims");
    if (nd == 0 || nd > kMaxDims) c.fail(what, "n_dims " + std::to_string(nd) + " is not in 1.." + std::to_string(kMaxDims));
    ti.numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t e = c.v1 ? c.rd<uint32_t>(what + " ne") : c.rd<uint64_t>(what + " ne");
      if (e > static_cast<uint64_t>(INT64_MAX) || (e != 0 && ti.numel > static_cast<uint64_t>(INT64_MAX) / e))
        c.fail(what, "element count overflows");
      ti.ne.push_back(e);
      ti.numel *= e;
    }
    ti.type = c.rd<uint32_t>(what + " type");
    const auto [block, bytes] = ggml_type_block(ti.type);
    if (block == 0) c.fail(what, "unknown ggml type " + std::to_string(ti.type));
    const uint64_t ne0 = ti.ne.empty() ? 1 : ti.ne[0];
    if (ne0 % block != 0)
      c.fail(what, "ne[0] = " + std::to_string(ne0) + " is not a multiple of the " + ggml_type_name(ti.type) +
                       " block size " + std::to_string(block));
    // In 128 bits: numel may be up to 2^63 and an 8-byte type would wrap 64 bits (found by
    // fuzzing: a wrapped size passed the bounds check below).
    const unsigned __int128 nb = static_cast<unsigned __int128>(ti.numel / block) * bytes;
    if (nb > (static_cast<unsigned __int128>(1) << 62))
      c.fail(what, "data size of " + std::to_string(ti.numel) + " " + ggml_type_name(ti.type) + " values overflows");
    ti.nbytes = static_cast<uint64_t>(nb);
    ti.offset = c.rd<uint64_t>(what + " offset");
    if (ti.offset % alignment_ != 0)
      c.fail(what, "offset " + std::to_string(ti.offset) + " is not a multiple of the alignment " + std::to_string(alignment_));
    if (!tensor_index_.emplace(ti.name, tensors_.size()).second) c.fail(what, "duplicate tensor name");
    tensors_.push_back(std::move(ti));
  }
  data_offset_ = align_up(c.pos(), alignment_);
  if (data_offset_ > size_) {
    // The alignment padding before the data section is missing: fine for a file without
    // tensors (the data section is empty; it starts at the end), truncated otherwise.
    if (!tensors_.empty())
      c.fail("data section", "starts at " + std::to_string(data_offset_) + ", past the end of the " +
                                 std::to_string(size_) + "-byte file: truncated");
    data_offset_ = size_;
  }
  const uint64_t data_size = size_ - data_offset_;
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      throw Error(ErrorCategory::Input,
                  "data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) + ") runs past the " +
                      std::to_string(data_size) + "-byte data section: truncated",
                  path_ + ": tensor \"" + t.name + "\"", "the file is truncated or corrupt");
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < order.size(); ++k)
    if (order[k]->offset < order[k - 1]->offset + order[k - 1]->nbytes)
      throw Error(ErrorCategory::Input, "data overlaps tensor \"" + order[k - 1]->name + "\"",
                  path_ + ": tensor \"" + order[k]->name + "\"", "the file is corrupt");
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) throw Error(ErrorCategory::Input, "metadata key \"" + key + "\" is missing", path_);
  return *v;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) throw Error(ErrorCategory::Input, "no tensor \"" + name + "\" in the file", path_);
  return *t;
}

const uint8_t* GgufFile::tensor_data(const std::string& name) const {
  return base_ + data_offset_ + tensor(name).offset;
}

std::vector<float> GgufFile::tensor_f32(const std::string& name) const {
  const GgufTensorInfo& t = tensor(name);
  if (!ggml_can_dequantize(t.type))
    throw Error(ErrorCategory::Input, std::string("ggml type ") + ggml_type_name(t.type) + " cannot be read as f32",
                path_ + ": tensor \"" + name + "\"",
                "readable types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (requantize to one of them)");
  std::vector<float> out(static_cast<size_t>(t.numel));
  ggml_dequantize(t.type, base_ + data_offset_ + t.offset, out.data(), t.numel);
  return out;
}

// ---- writer --------------------------------------------------------------------------------

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment % 8 != 0)
    throw Error(ErrorCategory::Usage, "GGUF alignment " + std::to_string(alignment) + " is not a power of two >= 8",
                "GgufWriter");
  if (alignment != 32) kv_.emplace_back("general.alignment", GgufValue::u32(alignment));
}

void GgufWriter::add(const std::string& key, GgufValue value) {
  if (key.empty() || key.size() > 65535) throw Error(ErrorCategory::Usage, "metadata key must have 1..65535 bytes", "GgufWriter");
  if (key == "general.alignment")
    throw Error(ErrorCategory::Usage, "set general.alignment through the GgufWriter constructor", key);
  for (const auto& kv : kv_)
    if (kv.first == key) throw Error(ErrorCategory::Usage, "duplicate metadata key", key);
  check_value(value, key, 0);
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne, const void* data) {
  add_tensor(name, type, std::move(ne), std::function<void(uint64_t, void*, size_t)>{});
  tensors_.back().data = data;
  if (!data && tensors_.back().info.nbytes > 0) {
    tensors_.pop_back();
    throw Error(ErrorCategory::Usage, "null data pointer", "tensor \"" + name + "\"");
  }
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne,
                            std::function<void(uint64_t, void*, size_t)> fill) {
  const std::string where = "tensor \"" + name + "\"";
  if (name.empty() || name.size() > kMaxTensorName)
    throw Error(ErrorCategory::Usage, "tensor name must have 1.." + std::to_string(kMaxTensorName) + " bytes", where);
  for (const auto& t : tensors_)
    if (t.info.name == name) throw Error(ErrorCategory::Usage, "duplicate tensor name", where);
  if (ne.empty() || ne.size() > kMaxDims) throw Error(ErrorCategory::Usage, "tensor needs 1..4 dims", where);
  const auto [block, bytes] = ggml_type_block(static_cast<uint32_t>(type));
  if (block == 0) throw Error(ErrorCategory::Usage, "unknown ggml type", where);
  if (ne[0] % block != 0) throw Error(ErrorCategory::Usage, "ne[0] is not a multiple of the type's block size", where);
  Tensor t;
  t.info.name = name;
  t.info.type = static_cast<uint32_t>(type);
  t.info.numel = 1;
  for (uint64_t e : ne) {
    if (e != 0 && t.info.numel > static_cast<uint64_t>(INT64_MAX) / e) throw Error(ErrorCategory::Usage, "element count overflows", where);
    t.info.numel *= e;
  }
  t.info.ne = std::move(ne);
  t.info.nbytes = t.info.numel / block * bytes;
  t.info.offset = data_size_;
  t.fill = std::move(fill);
  data_size_ = align_up(data_size_ + t.info.nbytes, alignment_);
  tensors_.push_back(std::move(t));
}

void GgufWriter::write(const std::string& path) const {
  std::string head;
  head += "GGUF";
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_.size());
  for (const auto& [k, v] : kv_) {
    put_str(head, k);
    put<uint32_t>(head, static_cast<uint32_t>(v.type));
    put_value(head, v);
  }
  for (const auto& t : tensors_) {
    put_str(head, t.info.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.info.ne.size()));
    for (uint64_t e : t.info.ne) put<uint64_t>(head, e);
    put<uint32_t>(head, t.info.type);
    put<uint64_t>(head, t.info.offset);
  }
  head.append(align_up(head.size(), alignment_) - head.size(), '\0');

  AtomicFileWriter out(path);
  out.write(head);
  std::vector<uint8_t> buf;
  const std::string zeros(alignment_, '\0');
  for (const auto& t : tensors_) {
    for (uint64_t off = 0; off < t.info.nbytes; off += kChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, t.info.nbytes - off));
      if (t.fill) {
        buf.resize(kChunk);
        t.fill(off, buf.data(), n);
        out.write(buf.data(), n);
      } else {
        out.write(static_cast<const uint8_t*>(t.data) + off, n);
      }
    }
    out.write(zeros.data(), static_cast<size_t>(align_up(t.info.nbytes, alignment_) - t.info.nbytes));
  }
  out.commit();
}

}  // namespace rtx::io
