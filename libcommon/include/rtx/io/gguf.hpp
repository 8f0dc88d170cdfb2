// GGUF files (ggml docs/gguf.md): metadata values, a v3 writer (streaming, atomic) and a
// bounds-checked reader for v1, v2 and v3 (little-endian). No quantization kernels here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rtx::io {

/// gguf_metadata_value_type (gguf.md), on-disk values.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12
};
/// "u8", "i32", "string", "array", ...
const char* gguf_type_name(GgufType t) noexcept;

/// ggml_type ids (gguf.md), on-disk values. Ids 4, 5, 31-33 and 36-38 are retired.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39
};
/// Block size (elements) and bytes per block of a ggml type (gguf-py GGML_QUANT_SIZES), or
/// {0, 0} for an unknown id.
std::pair<uint32_t, uint32_t> ggml_type_block(uint32_t type) noexcept;
/// "F32", "Q8_0", ... or "unknown".
const char* ggml_type_name(uint32_t type) noexcept;

/// Whether ggml_dequantize reads `type`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
/// Q5_K, Q6_K.
bool ggml_can_dequantize(uint32_t type) noexcept;
/// Decode `n` values of ggml type `type` from `src` (raw blocks as stored in GGUF, little-endian)
/// into `dst` (f32), as ggml's dequantize_row_* do (block layouts of ggml-common.h). Error(Input)
/// for another type or n not a multiple of its block size.
void ggml_dequantize(uint32_t type, const uint8_t* src, float* dst, uint64_t n);

/// Error(Input) naming `where` (file: tensor) and the first element's index when `v` holds a
/// NaN or an infinity: model loaders refuse such weights at load rather than serve NaN logits.
void require_finite(const std::vector<float>& v, const std::string& where);

/// One metadata value: a scalar, a string, or an array of values of one type (arrays may nest).
/// Integers are kept as u64 (unsigned types) or i64 (signed), floats as f64, with `type` the
/// on-disk type.
struct GgufValue {
  GgufType type = GgufType::U32;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string str;
  GgufType elem = GgufType::U8;    ///< element type when type == ARRAY
  std::vector<GgufValue> array;    ///< elements when type == ARRAY

  static GgufValue u8(uint8_t v), i8(int8_t v), u16(uint16_t v), i16(int16_t v), u32(uint32_t v),
      i32(int32_t v), u64(uint64_t v), i64(int64_t v), f32(float v), f64(double v), boolean(bool v),
      string(std::string v);
  /// An array of `elem` values; every element's type must be `elem` (checked by the writer).
  static GgufValue make_array(GgufType elem, std::vector<GgufValue> values);
  static GgufValue string_array(const std::vector<std::string>& v);
  static GgufValue i32_array(const std::vector<int32_t>& v);
  static GgufValue f32_array(const std::vector<float>& v);

  /// Checked accessors: Error(Input) naming `key` when the type does not fit (as_u64 takes any
  /// integer type with a non-negative value; as_f64 any float or integer type).
  uint64_t as_u64(const std::string& key = {}) const;
  int64_t as_i64(const std::string& key = {}) const;
  double as_f64(const std::string& key = {}) const;
  bool as_bool(const std::string& key = {}) const;
  const std::string& as_string(const std::string& key = {}) const;
  /// Strings of an array of strings.
  std::vector<std::string> as_strings(const std::string& key = {}) const;
  bool operator==(const GgufValue& o) const;
  bool operator!=(const GgufValue& o) const { return !(*this == o); }
};

/// A tensor's entry: name, extents in ggml order (ne[0] is the contiguous one: a row-major
/// (rows, cols) matrix is ne = {cols, rows}), ggml type id, offset in the data section.
struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;  ///< relative to the start of the data section
  uint64_t numel = 0;
  uint64_t nbytes = 0;
};

/// A GGUF file opened read-only (mmap), fully validated at open. Copies share the mapping.
class GgufFile {
 public:
  /// Open and validate `path`. Checks: magic "GGUF"; version 1, 2 or 3 (v1: 32-bit counts and
  /// string/array lengths and dims); a byte-swapped version is refused as big-endian; every
  /// count and length against the bytes left (no allocation beyond the file's size); value
  /// types known, bools 0/1, arrays nested at most 4 deep; no duplicate key or tensor name;
  /// general.alignment (if present) a u32 power of two; per tensor: 1..4 dims, a known ggml
  /// type, ne[0] a multiple of the type's block size, no element-count overflow, offset a
  /// multiple of the alignment, data inside the file, no two tensors overlapping.
  /// Violations -> Error(Input) naming the file and the key/tensor/field and byte offset.
  static GgufFile open(const std::string& path);
  /// The same on an in-memory image (fuzzing, tests); `where` names it in errors.
  static GgufFile parse(std::string bytes, const std::string& where);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  /// File offset of the data section.
  uint64_t data_offset() const { return data_offset_; }

  /// Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  /// nullptr when absent.
  const GgufValue* find(const std::string& key) const;
  /// Error(Input) naming the key and file when absent.
  const GgufValue& get(const std::string& key) const;

  /// Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  /// Error(Input) naming the tensor and file when absent.
  const GgufTensorInfo& tensor(const std::string& name) const;
  /// Raw bytes of a tensor (tensor(name).nbytes of them; valid while any copy lives).
  const uint8_t* tensor_data(const std::string& name) const;
  /// Values of a tensor as f32, in ggml order (ne[0] fastest), for every type ggml_dequantize
  /// reads (F32, F16, BF16 and the quantized Q4_0..Q8_0, Q4_K, Q5_K, Q6_K, dequantized). Other
  /// types: Error(Input) naming the type (use tensor_data() for raw blocks).
  std::vector<float> tensor_f32(const std::string& name) const;

 private:
  void init();
  std::shared_ptr<const void> bytes_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0, alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

/// Builds a GGUF v3 file: metadata in insertion order, then tensors in insertion order, each
/// at an offset aligned to `alignment` (default 32; another value is recorded as
/// general.alignment). write() streams the tensor bytes to the file atomically
/// (AtomicFileWriter): memory use does not grow with the tensor data.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);
  /// Add a metadata pair. Error(Usage) for an empty key, a duplicate key, general.alignment
  /// (set it through the constructor), or an array whose elements differ from its elem type.
  void add(const std::string& key, GgufValue value);
  /// Add a tensor with extents `ne` (ggml order, 1..4 dims) whose bytes are at `data`
  /// (nbytes = numel / block * block bytes; valid until write() returns). Error(Usage) for an
  /// empty/duplicate/over-63-byte name, a bad dims count, an unknown type, or ne[0] not a
  /// multiple of the type's block size.
  void add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne, const void* data);
  /// Same, with bytes produced by fill(byte_offset, dst, n) for consecutive chunks.
  void add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne,
                  std::function<void(uint64_t byte_offset, void* dst, size_t n)> fill);
  /// Write the file. Error(Environment) on I/O failure (the target is untouched).
  void write(const std::string& path) const;

 private:
  struct Tensor {
    GgufTensorInfo info;
    const void* data = nullptr;
    std::function<void(uint64_t, void*, size_t)> fill;
  };
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace rtx::io
