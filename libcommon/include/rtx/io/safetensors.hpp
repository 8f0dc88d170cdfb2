// safetensors files (huggingface/safetensors README): a streaming atomic writer and a validating
// mmap reader. Layout: u64 LE header length N, N bytes of JSON header, then the data section.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace rtx::io {

/// Element types named by the safetensors spec ("BOOL", "U8", ..., "F64"), with their sizes.
enum class StDType : uint8_t { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

/// Bytes per element (BOOL/U8/I8/F8_* 1, I16/U16/F16/BF16 2, I32/U32/F32 4, I64/U64/F64 8).
size_t st_dtype_size(StDType t) noexcept;
/// The spec's name, e.g. "BF16".
const char* st_dtype_name(StDType t) noexcept;
/// Parse a spec name (exact, upper case). Throws Error(Input) naming `where` and the value.
StDType parse_st_dtype(const std::string& name, const std::string& where = {});

/// Metadata key holding the lower-case hex SHA-256 of the data section (written by
/// write_safetensors, checked by SafetensorsFile::open when present).
inline constexpr const char* kSafetensorsSha256Key = "rtx.sha256";

/// One tensor to write. Bytes come either from `data` (row-major, numel * st_dtype_size bytes,
/// valid until write_safetensors returns) or, when `fill` is set, from fill(byte_offset, dst, n)
/// called for consecutive chunks (e.g. copying a device buffer piece by piece).
struct SafetensorsSource {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;  ///< row-major; {} is a scalar (1 element); a 0 extent is allowed
  const void* data = nullptr;
  std::function<void(uint64_t byte_offset, void* dst, size_t n)> fill;
};

/// Write `tensors` (in this order, no padding between them) and `metadata` to `path` atomically
/// (rtx::io::AtomicFileWriter), streaming the data in chunks: memory use does not grow with the
/// file. Adds metadata[kSafetensorsSha256Key] = SHA-256 of the data section (computed while
/// streaming, patched into the header). The header is padded with spaces to a multiple of 8.
/// Throws Error(Usage) for an empty or duplicate name, "__metadata__" as a tensor name, a
/// negative extent, a null source, or a metadata key equal to kSafetensorsSha256Key;
/// Error(Environment) for I/O failures (the target is then untouched).
void write_safetensors(const std::string& path, const std::vector<SafetensorsSource>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// A tensor's entry in a file's header.
struct SafetensorsTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  ///< data_offsets, relative to the data section
  uint64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

/// A safetensors file opened read-only (mmap). Immutable after open; copies share the mapping.
class SafetensorsFile {
 public:
  /// Open and validate `path`: header length vs file size (and <= 100 MB), header JSON (an
  /// object; no duplicate names), each entry's dtype name, shape (non-negative integers) and
  /// data_offsets (two integers, begin <= end, shape x dtype size == end - begin), offsets in
  /// bounds, sorted by offset without gaps or overlaps and covering the whole data section,
  /// __metadata__ a string->string map, and the SHA-256 when kSafetensorsSha256Key is present
  /// (`verify_checksum` = false skips that pass over the data). Any violation -> Error(Input)
  /// naming the file and the tensor or field; missing file -> Error(Input).
  static SafetensorsFile open(const std::string& path, bool verify_checksum = true);
  /// The same checks on an in-memory file image; `where` names it in errors.
  static SafetensorsFile parse(std::string bytes, const std::string& where, bool verify_checksum = true);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Tensors in data order (ascending offsets).
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const;
  /// Error(Input) naming the tensor and the file when absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  /// Raw little-endian bytes of a tensor (info(name).nbytes() of them; valid while any copy
  /// of this object lives).
  const uint8_t* data(const std::string& name) const;
  /// Values of an F32, F16 or BF16 tensor as f32 into `dst` (`n` must equal numel, else
  /// Error(Input) naming the tensor); other dtypes -> Error(Input).
  void read_f32(const std::string& name, float* dst, size_t n) const;
  std::vector<float> read_f32(const std::string& name) const;
  /// Size of the data section in bytes.
  uint64_t data_size() const { return data_size_; }

 private:
  void init(bool verify_checksum);
  std::shared_ptr<const void> bytes_;  // detail::MappedBytes
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint64_t data_start_ = 0, data_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

}  // namespace rtx::io
