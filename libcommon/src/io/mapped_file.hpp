// Private to io: a read-only view of a whole file (mmap, or an owned buffer for in-memory
// parsing) shared by the safetensors and GGUF readers. Not a public API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace rtx::io::detail {

/// Bytes of a file kept alive by shared ownership. Empty files have data() == nullptr, size 0.
class MappedBytes {
 public:
  /// mmap `path` read-only. Error(Input) naming the path for a missing file or a directory,
  /// Error(Environment) for other open/mmap failures (with the errno text).
  static std::shared_ptr<const MappedBytes> map_file(const std::string& path);
  /// Take ownership of `bytes` (for parsing a buffer, e.g. from a fuzzer).
  static std::shared_ptr<const MappedBytes> from_string(std::string bytes);
  ~MappedBytes();
  MappedBytes(const MappedBytes&) = delete;
  MappedBytes& operator=(const MappedBytes&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedBytes() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // non-null when mmapped
  std::string owned_;
};

}  // namespace rtx::io::detail
