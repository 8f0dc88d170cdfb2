// Shared helpers of the fuzz targets (tests/fuzz/fuzz_*.cpp): invariant checks that crash on
// failure (so libFuzzer and the corpus replay both report them), and an in-memory file.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

/// Every target defines this (libFuzzer's entry point); it returns 0 and never throws anything
/// but rtx::Error out of a reader (which it catches): any other exception terminates.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace rtx::fuzz {

/// Abort with `what` when an invariant of a successful parse does not hold.
#define RTX_FUZZ_CHECK(cond, what)                                                               \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s (%s)\n", __FILE__, __LINE__,     \
                   #cond, std::string(what).c_str());                                            \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

/// The environment variable `name`, or `fallback` when unset/empty.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

/// An anonymous in-memory file (memfd) holding `bytes`, reachable by path
/// ("/proc/self/fd/N") for readers that only take a path. Closed on destruction.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = memfd_create("rtx-fuzz", MFD_CLOEXEC);
    RTX_FUZZ_CHECK(fd_ >= 0, "memfd_create failed");
    size_t off = 0;
    while (off < size) {
      const ssize_t w = ::write(fd_, data + off, size - off);
      RTX_FUZZ_CHECK(w > 0, "write to memfd failed");
      off += static_cast<size_t>(w);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace rtx::fuzz
