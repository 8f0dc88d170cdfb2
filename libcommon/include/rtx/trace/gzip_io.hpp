// Byte streams for trace files: a reader that inflates gzip transparently (plain files pass
// through) and a writer that deflates on request, both streaming in fixed-size chunks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace rtx::trace {

/// True when `path` ends in ".gz" (the writer's rule for compressing).
bool has_gz_suffix(const std::string& path);

/// Reads a file ("-" = stdin) chunk by chunk, inflating gzip input (detected by its magic
/// bytes, not the name). Memory: one 256 KiB buffer. Errors: rtx::Error(Input) naming the
/// path when it is missing or the gzip stream is corrupt or truncated.
class ByteReader {
 public:
  explicit ByteReader(const std::string& path);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;
  /// Next byte as 0..255, or -1 at the end of the (inflated) stream.
  int get() {
    if (pos_ < len_) return static_cast<unsigned char>(buf_[pos_++]);
    return refill() ? static_cast<unsigned char>(buf_[pos_++]) : -1;
  }
  /// Reads one line (without the '\n') into `line`; false at end of stream.
  bool getline(std::string& line);
  /// Bytes delivered so far (after inflation).
  uint64_t offset() const { return consumed_ + pos_; }
  const std::string& path() const { return path_; }
  bool gzip() const { return gzip_; }

 private:
  bool refill();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  char* buf_ = nullptr;
  size_t pos_ = 0, len_ = 0;
  uint64_t consumed_ = 0;
  bool gzip_ = false;
};

/// Writes a file atomically (rtx::io::AtomicFileWriter; "-" = stdout), gzip-compressed when
/// `gzip` is true (zlib deflate, gzip wrapper, level 6), buffered in 1 MiB chunks. Nothing
/// appears under `path` until commit(); destroying without commit() leaves the target as it
/// was. Errors: rtx::Error(Environment) naming the path (disk full, permission denied).
class ByteWriter {
 public:
  ByteWriter(const std::string& path, bool gzip);
  ~ByteWriter();
  ByteWriter(const ByteWriter&) = delete;
  ByteWriter& operator=(const ByteWriter&) = delete;
  void write(std::string_view bytes);
  /// Flush, finish the gzip stream, make the file visible. Calling it twice is a no-op.
  void commit();
  /// Uncompressed bytes written so far.
  uint64_t bytes_in() const { return bytes_in_; }

 private:
  void flush_buffer(bool finish);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_, buf_;
  bool gzip_;
  bool committed_ = false;
  uint64_t bytes_in_ = 0;
};

}  // namespace rtx::trace
