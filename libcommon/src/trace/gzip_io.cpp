// ByteReader / ByteWriter: chunked file I/O with transparent gzip (zlib) for trace files.
#include "rtx/trace/gzip_io.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"

namespace rtx::trace {
namespace {
// 64 KiB: large enough that fread/inflate calls are few, small enough to stay in a sanitizer
// allocator's size classes (the fuzz targets open thousands of small files per second).
constexpr size_t kChunk = 64 * 1024;
}

bool has_gz_suffix(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

struct ByteReader::Impl {
  std::FILE* f = nullptr;
  bool own = false;
  std::unique_ptr<char[]> raw{new char[kChunk]};  // not zero-filled: only read after fread
  std::unique_ptr<char[]> out;                     // inflate output, allocated for gzip input
  z_stream zs{};
  bool z_init = false, z_end = false, eof = false;
  ~Impl() {
    if (z_init) inflateEnd(&zs);
    if (own && f) std::fclose(f);
  }
};

ByteReader::ByteReader(const std::string& path) : impl_(std::make_unique<Impl>()), path_(path) {
  if (path == "-") {
    impl_->f = stdin;
  } else {
    impl_->f = std::fopen(path.c_str(), "rb");
    if (!impl_->f)
      throw_input(std::string("cannot open the file: ") + std::strerror(errno), path,
                  "check the path (a trace .json/.json.gz or folded stacks)");
    impl_->own = true;
  }
  // Peek at the first two bytes for the gzip magic (1f 8b).
  size_t n = std::fread(impl_->raw.get(), 1, kChunk, impl_->f);
  if (n >= 2 && static_cast<unsigned char>(impl_->raw[0]) == 0x1f && static_cast<unsigned char>(impl_->raw[1]) == 0x8b) {
    gzip_ = true;
    if (inflateInit2(&impl_->zs, 15 + 32) != Z_OK) throw_internal("zlib inflateInit2 failed", path);
    impl_->z_init = true;
    impl_->zs.next_in = reinterpret_cast<Bytef*>(impl_->raw.get());
    impl_->zs.avail_in = static_cast<uInt>(n);
    impl_->out.reset(new char[kChunk]);
    buf_ = impl_->out.get();
  } else {
    buf_ = impl_->raw.get();
    len_ = n;
  }
  if (n < kChunk) impl_->eof = true;
}

ByteReader::~ByteReader() = default;

bool ByteReader::refill() {
  consumed_ += len_;
  pos_ = 0;
  len_ = 0;
  Impl& im = *impl_;
  if (!gzip_) {
    if (im.eof) return false;
    size_t n = std::fread(im.raw.get(), 1, kChunk, im.f);
    if (n < kChunk) {
      if (std::ferror(im.f)) throw_env(std::string("read error: ") + std::strerror(errno), path_);
      im.eof = true;
    }
    len_ = n;
    return n > 0;
  }
  while (len_ == 0) {
    if (im.z_end) {
      // Concatenated gzip members (gzip a b > c) are one stream, as gunzip reads them.
      if (im.zs.avail_in == 0 && !im.eof) {
        size_t n = std::fread(im.raw.get(), 1, kChunk, im.f);
        if (n < kChunk) im.eof = true;
        im.zs.next_in = reinterpret_cast<Bytef*>(im.raw.get());
        im.zs.avail_in = static_cast<uInt>(n);
      }
      if (im.zs.avail_in == 0) return false;
      inflateReset(&im.zs);
      im.z_end = false;
    }
    if (im.zs.avail_in == 0) {
      if (im.eof)
        throw_input("the gzip stream is truncated (no end-of-stream marker)", path_,
                    "the file was cut short: re-record it or check the copy");
      size_t n = std::fread(im.raw.get(), 1, kChunk, im.f);
      if (n < kChunk) im.eof = true;
      im.zs.next_in = reinterpret_cast<Bytef*>(im.raw.get());
      im.zs.avail_in = static_cast<uInt>(n);
      if (n == 0) continue;
    }
    im.zs.next_out = reinterpret_cast<Bytef*>(im.out.get());
    im.zs.avail_out = static_cast<uInt>(kChunk);
    int rc = inflate(&im.zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      im.z_end = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throw_input(std::string("corrupt gzip data: ") + (im.zs.msg ? im.zs.msg : "inflate failed"), path_,
                  "the file is damaged: re-record it");
    }
    len_ = kChunk - im.zs.avail_out;
    if (len_ == 0 && im.z_end && im.zs.avail_in == 0 && im.eof) return false;
  }
  return true;
}

bool ByteReader::getline(std::string& line) {
  line.clear();
  for (;;) {
    if (pos_ >= len_ && !refill()) return !line.empty();
    const char* start = buf_ + pos_;
    const void* nl = std::memchr(start, '\n', len_ - pos_);
    if (nl) {
      const size_t k = static_cast<size_t>(static_cast<const char*>(nl) - start);
      line.append(start, k);
      pos_ += k + 1;
      return true;
    }
    line.append(start, len_ - pos_);
    pos_ = len_;
  }
}

struct ByteWriter::Impl {
  std::optional<rtx::io::AtomicFileWriter> file;  // empty for stdout
  z_stream zs{};
  bool z_init = false;
  std::vector<char> zout = std::vector<char>(kChunk);
  ~Impl() {
    if (z_init) deflateEnd(&zs);
  }
};

ByteWriter::ByteWriter(const std::string& path, bool gzip) : impl_(std::make_unique<Impl>()), path_(path), gzip_(gzip) {
  if (path != "-") impl_->file.emplace(path);
  if (gzip_) {
    if (deflateInit2(&impl_->zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw_internal("zlib deflateInit2 failed", path);
    impl_->z_init = true;
  }
  buf_.reserve(1 << 20);
}

ByteWriter::~ByteWriter() = default;

void ByteWriter::write(std::string_view bytes) {
  bytes_in_ += bytes.size();
  buf_.append(bytes.data(), bytes.size());
  if (buf_.size() >= (1u << 20)) flush_buffer(false);
}

void ByteWriter::flush_buffer(bool finish) {
  auto emit = [&](const char* p, size_t n) {
    if (n == 0) return;
    if (impl_->file) {
      impl_->file->write(p, n);
    } else if (std::fwrite(p, 1, n, stdout) != n) {
      throw_env(std::string("cannot write to stdout: ") + std::strerror(errno), "-");
    }
  };
  if (!gzip_) {
    emit(buf_.data(), buf_.size());
  } else {
    z_stream& zs = impl_->zs;
    zs.next_in = reinterpret_cast<Bytef*>(buf_.data());
    zs.avail_in = static_cast<uInt>(buf_.size());
    int rc;
    do {
      zs.next_out = reinterpret_cast<Bytef*>(impl_->zout.data());
      zs.avail_out = static_cast<uInt>(kChunk);
      rc = deflate(&zs, finish ? Z_FINISH : Z_NO_FLUSH);
      if (rc == Z_STREAM_ERROR) throw_internal("zlib deflate failed", path_);
      emit(impl_->zout.data(), kChunk - zs.avail_out);
    } while (zs.avail_out == 0 || (finish && rc != Z_STREAM_END));
  }
  buf_.clear();
}

void ByteWriter::commit() {
  if (committed_) return;
  flush_buffer(true);
  if (impl_->file) impl_->file->commit();
  else std::fflush(stdout);
  committed_ = true;
}

}  // namespace rtx::trace
