// MappedBytes (mmap or owned buffer) for the safetensors and GGUF readers.
#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rtx/core/error.hpp"

namespace rtx::io::detail {

std::shared_ptr<const MappedBytes> MappedBytes::map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) throw Error(ErrorCategory::Input, "no such file", path, "check the path");
    throw Error(ErrorCategory::Environment, std::string("cannot open: ") + std::strerror(err), path);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(ErrorCategory::Environment, std::string("cannot stat: ") + std::strerror(err), path);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCategory::Input, "is a directory, expected a file", path);
  }
  std::shared_ptr<MappedBytes> m(new MappedBytes());
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(ErrorCategory::Environment, std::string("cannot mmap: ") + std::strerror(err), path);
    }
    m->map_ = p;
    m->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

std::shared_ptr<const MappedBytes> MappedBytes::from_string(std::string bytes) {
  std::shared_ptr<MappedBytes> m(new MappedBytes());
  m->owned_ = std::move(bytes);
  m->size_ = m->owned_.size();
  m->data_ = m->size_ ? reinterpret_cast<const uint8_t*>(m->owned_.data()) : nullptr;
  return m;
}

MappedBytes::~MappedBytes() {
  if (map_) ::munmap(map_, size_);
}

}  // namespace rtx::io::detail
