// atomic_write_file (temp + fsync + rename + directory fsync), its streaming form AtomicFileWriter,
// read_text_file, write_text_output.
#include "rtx/io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "rtx/core/error.hpp"

namespace rtx::io {

namespace {

std::string errno_text(int err) {
  if (err == ENOSPC) return "disk full";
  if (err == EDQUOT) return "disk quota exceeded";
  return std::strerror(err);
}

[[noreturn]] void throw_errno(const std::string& what, const std::string& path, int err) {
  throw Error(ErrorCategory::Environment, what + ": " + errno_text(err), path);
}

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The process umask, read without changing it (/proc/self/status, Linux >= 4.7); 022 if unknown.
mode_t current_umask() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
  return 022;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// The file a chain of symbolic links ends at (at most 40 hops); `path` itself when not a link.
std::string follow_links(const std::string& path_in) {
  std::string path = path_in;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat ls {};
    if (::lstat(path.c_str(), &ls) != 0 || !S_ISLNK(ls.st_mode)) break;
    char buf[4096];
    const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
    if (n <= 0) break;
    const std::string target(buf, static_cast<size_t>(n));
    path = target[0] == '/' ? target : dir_of(path) + "/" + target;
  }
  return path;
}

bool pwrite_all(int fd, const char* p, size_t n, off_t off) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += w;
  }
  return true;
}

}  // namespace

void require_output_dir(const std::string& path_in, const std::string& flag) {
  if (path_in.empty() || path_in == "-") return;
  const std::string path = follow_links(path_in);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      throw Error(ErrorCategory::Usage, path_in + " is a folder, not a file", flag, "give a file path in it");
    if (!S_ISREG(st.st_mode)) return;  // a device or FIFO: written in place
  }
  const std::string dir = path.back() == '/' ? path : dir_of(path);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0)
    throw Error(ErrorCategory::Usage, "the folder of " + path_in + " does not exist", flag,
                "create it first or give another path");
  if (!S_ISDIR(ds.st_mode))
    throw Error(ErrorCategory::Usage, dir + " (in " + path_in + ") is not a folder", flag, "give a path in a folder");
  // The temp file of an atomic write is made in the folder, so the folder must be writable
  // (the file itself being writable is not enough).
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(ErrorCategory::Environment,
                "cannot write in the folder of " + path_in + " (" + dir + "): " + errno_text(errno), flag,
                "give a path in a writable folder");
  // access() says yes to root everywhere, also in /proc, /sys or a read-only mount: make (and
  // remove) a temp file there, as the atomic write will, so the refusal comes before the work.
  std::string probe = (dir.back() == '/' ? dir : dir + "/") + ".rtx-probe.XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw Error(ErrorCategory::Environment,
                "cannot create a file in the folder of " + path_in + " (" + dir + "): " + errno_text(errno), flag,
                "give a path in a writable folder");
  ::close(fd);
  ::unlink(probe.c_str());
}

void atomic_write_file(const std::string& path_in, std::string_view bytes) {
  if (path_in.empty() || path_in.back() == '/')
    throw Error(ErrorCategory::Usage, "not a file path", path_in.empty() ? std::string("<empty path>") : path_in);
  // A symbolic link is followed: the file it names is replaced, the link stays a link.
  const std::string path = follow_links(path_in);
  // Not a regular file (a device such as /dev/null, a FIFO, a socket): write into it in place;
  // renaming over it would replace the device or pipe with a plain file.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw Error(ErrorCategory::Usage, "is a directory, expected a file path", path_in);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw_errno("cannot open", path_in, errno);
    const bool ok = write_all(fd, bytes.data(), bytes.size());
    const int err = errno;
    ::close(fd);
    if (!ok) throw_errno("cannot write", path_in, err);
    return;
  }
  const std::string dir = dir_of(path);
  const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  std::string tmp = (dir == "/" ? std::string("/") : dir + "/") + "." + base + ".tmp.XXXXXX";

  int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw_errno("cannot create a temporary file in " + dir, path, errno);

  int err = 0;
  std::string step;
  struct stat old {};
  const mode_t mode = ::stat(path.c_str(), &old) == 0 ? (old.st_mode & 07777) : (0666 & ~current_umask());
  if (::fchmod(fd, mode) != 0) {
    err = errno, step = "cannot set file mode";
  } else if (!write_all(fd, bytes.data(), bytes.size())) {
    err = errno, step = "cannot write";
  } else if (::fsync(fd) != 0) {
    err = errno, step = "cannot fsync";
  }
  if (::close(fd) != 0 && err == 0) err = errno, step = "cannot close";
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno, step = "cannot rename the temporary file over it";
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw_errno(step, path, err);
  }
  // Make the rename durable. Some file systems do not support fsync on a directory (EINVAL).
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int rc = ::fsync(dfd);
    const int derr = errno;
    ::close(dfd);
    if (rc != 0 && derr != EINVAL && derr != EROFS) throw_errno("cannot fsync directory " + dir, path, derr);
  }
}

namespace {

std::string size_text(uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

[[noreturn]] void throw_too_large(const std::string& path, uint64_t max_bytes) {
  throw Error(ErrorCategory::Input, "larger than " + size_text(max_bytes) + ", refusing to read it", path,
              "pass a smaller file");
}

}  // namespace

std::string read_text_file(const std::string& path_or_dash, const ReadLimits& limits) {
  std::string out;
  char buf[1 << 16];
  if (path_or_dash == "-") {
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
      out.append(buf, n);
      if (out.size() > limits.max_bytes) throw_too_large("<stdin>", limits.max_bytes);
    }
    if (std::ferror(stdin)) throw_errno("cannot read", "<stdin>", errno);
    return out;
  }
  const std::string& path = path_or_dash;
  if (path.empty()) throw Error(ErrorCategory::Input, "empty file path", "<empty path>", "pass a file path");
  // O_NONBLOCK: opening a FIFO without a writer must not hang when only regular files are wanted
  // (it does not change reads of a regular file).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (limits.regular_only ? O_NONBLOCK : 0));
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      throw Error(ErrorCategory::Input, "no such file", path, "check the path");
    if (err == EISDIR) throw Error(ErrorCategory::Input, "is a directory, expected a file", path);
    throw_errno("cannot open", path, err);
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      throw Error(ErrorCategory::Input, "is a directory, expected a file", path);
    }
    if (limits.regular_only && !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(ErrorCategory::Input, "not a regular file (a device, pipe or socket), refusing to read it", path,
                  "pass a regular file");
    }
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > limits.max_bytes) {
      ::close(fd);
      throw_too_large(path, limits.max_bytes);
    }
  }
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw_errno("cannot read", path, err);
    }
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limits.max_bytes) {  // a file that grew, or a device
      ::close(fd);
      throw_too_large(path, limits.max_bytes);
    }
  }
  ::close(fd);
  return out;
}

void write_text_output(const std::string& path_or_dash, std::string_view bytes) {
  if (path_or_dash != "-") return atomic_write_file(path_or_dash, bytes);
  std::cout.flush();  // keep ordering with anything already written through iostreams
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  if (n != bytes.size() || std::fflush(stdout) != 0) throw_errno("cannot write", "<stdout>", errno);
}

// ---- AtomicFileWriter ----------------------------------------------------------------------

AtomicFileWriter::AtomicFileWriter(const std::string& path_in) : path_(path_in) {
  if (path_in.empty() || path_in.back() == '/')
    throw Error(ErrorCategory::Usage, "not a file path", path_in.empty() ? std::string("<empty path>") : path_in);
  target_ = follow_links(path_in);
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw Error(ErrorCategory::Usage, "is a directory, expected a file path", path_in);
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw_errno("cannot open", path_in, errno);
    in_place_ = true;
    return;
  }
  dir_ = dir_of(target_);
  const auto slash = target_.rfind('/');
  const std::string base = target_.substr(slash == std::string::npos ? 0 : slash + 1);
  tmp_ = (dir_ == "/" ? std::string("/") : dir_ + "/") + "." + base + ".tmp.XXXXXX";
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) throw_errno("cannot create a temporary file in " + dir_, path_in, errno);
  struct stat old {};
  const mode_t mode = ::stat(target_.c_str(), &old) == 0 ? (old.st_mode & 07777) : (0666 & ~current_umask());
  if (::fchmod(fd_, mode) != 0) {
    const int err = errno;
    ::close(fd_);
    ::unlink(tmp_.c_str());
    fd_ = -1;
    throw_errno("cannot set file mode", path_in, err);
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !in_place_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  if (committed_ || fd_ < 0) throw Error(ErrorCategory::Usage, "write after commit", path_);
  if (!write_all(fd_, static_cast<const char*>(data), n)) throw_errno("cannot write", path_, errno);
  written_ += n;
}

void AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t n) {
  if (committed_ || fd_ < 0) throw Error(ErrorCategory::Usage, "write_at after commit", path_);
  if (in_place_) throw Error(ErrorCategory::Usage, "cannot patch bytes of a non-regular file written in place", path_);
  if (offset > written_ || n > written_ - offset)
    throw Error(ErrorCategory::Usage,
                "write_at range [" + std::to_string(offset) + ", +" + std::to_string(n) + ") is past the " +
                    std::to_string(written_) + " bytes written",
                path_);
  if (!pwrite_all(fd_, static_cast<const char*>(data), n, static_cast<off_t>(offset)))
    throw_errno("cannot write", path_, errno);
}

void AtomicFileWriter::commit() {
  if (committed_ || fd_ < 0) throw Error(ErrorCategory::Usage, "commit called twice", path_);
  int err = 0;
  std::string step;
  if (!in_place_ && ::fsync(fd_) != 0) err = errno, step = "cannot fsync";
  if (::close(fd_) != 0 && err == 0) err = errno, step = "cannot close";
  fd_ = -1;
  if (in_place_) {
    committed_ = true;
    if (err != 0) throw_errno(step, path_, err);
    return;
  }
  if (err == 0 && ::rename(tmp_.c_str(), target_.c_str()) != 0) err = errno, step = "cannot rename the temporary file over it";
  if (err != 0) {
    ::unlink(tmp_.c_str());
    committed_ = true;  // nothing left to clean up
    throw_errno(step, path_, err);
  }
  committed_ = true;
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int rc = ::fsync(dfd);
    const int derr = errno;
    ::close(dfd);
    if (rc != 0 && derr != EINVAL && derr != EROFS) throw_errno("cannot fsync directory " + dir_, path_, derr);
  }
}

}  // namespace rtx::io
