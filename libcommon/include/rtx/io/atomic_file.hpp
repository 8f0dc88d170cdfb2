// Crash-safe file output and plain file input: atomic_write_file (temp + fsync + rename)
// and read_text_file ("-" = stdin). No JSON here; see rtx/io/artifact.hpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rtx::io {

/// Replace `path` with `bytes` atomically: write a temp file in the same directory, fsync it,
/// rename it over `path`, fsync the directory. Readers see the old or the new file, never a
/// mix; after a crash the target is the old or the new content. On any error the target is
/// untouched, the temp file is removed, and rtx::Error(Environment) is thrown naming the path
/// and the errno text (ENOSPC reads "disk full"). A new file gets mode 0666 minus the umask
/// or the old file's mode when replacing one. A symbolic link is followed (its target is
/// replaced, the link kept); a target that exists but is not a regular file (a device such as
/// /dev/null, a FIFO) is written in place, never replaced; a directory is a Usage error.
void atomic_write_file(const std::string& path, std::string_view bytes);

/// Check, before any work, that an output file named on the command line by `flag` (-o, ...)
/// can be written, so a bad destination costs no run: nothing for "" or "-" (stdout) or for an
/// existing non-regular file (/dev/null, a FIFO: written in place). A missing folder, a parent
/// that is a file ("DIR (in PATH) is not a folder") and a path that is a folder are usage errors
/// (exit 2), "FLAG: the folder of PATH does not exist (create it first or give another path)"; a
/// folder that exists but cannot be written in is rtx::Error(Environment) (exit 3), found by
/// making and removing a temp file there (access() lets root pass in /proc or a read-only
/// mount). A symbolic link is checked at its target.
void require_output_dir(const std::string& path, const std::string& flag);

/// Bounds on what read_text_file accepts (the defaults accept anything, as before).
struct ReadLimits {
  /// Most bytes read; a longer input is refused with rtx::Error(Input) "larger than N bytes"
  /// (a regular file by its size, before reading; stdin, a device or a pipe after reading
  /// max_bytes + 1 bytes, so /dev/zero costs at most max_bytes of memory).
  uint64_t max_bytes = UINT64_MAX;
  /// Refuse anything but a regular file (a device, FIFO or socket) with rtx::Error(Input),
  /// without blocking on it; "-" (stdin) is still read.
  bool regular_only = false;
};

/// Whole contents of `path_or_dash` ("-" reads stdin to EOF). Throws rtx::Error(Input) naming
/// the path for a missing file or a directory and for input outside `limits`,
/// rtx::Error(Environment) for other read errors (permission denied, I/O error) with the
/// errno text.
std::string read_text_file(const std::string& path_or_dash, const ReadLimits& limits = {});

/// Write `bytes` to stdout when `path_or_dash` is "-" (flushed; a failed write throws
/// rtx::Error(Environment)), else atomic_write_file(path, bytes).
void write_text_output(const std::string& path_or_dash, std::string_view bytes);

/// Streams a large file into place atomically (the chunked form of atomic_write_file, for
/// checkpoints and model files too big to build in memory). The constructor creates a temp
/// file ".<name>.tmp.XXXXXX" in the target's directory; write() appends; write_at() patches
/// bytes already written (e.g. a checksum in a header); commit() fsyncs, renames the temp file
/// over the target and fsyncs the directory. Destroying the writer without commit() (an
/// exception on the way, a caller that gives up) removes the temp file and leaves the target
/// as it was. Symbolic links, modes and non-regular targets (/dev/null, a FIFO: written in
/// place, no temp file) behave as in atomic_write_file. Errors: rtx::Error(Environment) naming
/// the path and the errno text; a directory as target is Error(Usage). Not thread-safe.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  /// Append `n` bytes.
  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  /// Overwrite `n` bytes at `offset`; offset + n must not exceed bytes_written() (else Usage).
  /// Not available for non-regular targets written in place (Usage).
  void write_at(uint64_t offset, const void* data, size_t n);
  /// Bytes appended so far.
  uint64_t bytes_written() const { return written_; }
  /// Make the file durable and visible under its name. Calling it twice is a Usage error.
  void commit();
  /// The path given to the constructor.
  const std::string& path() const { return path_; }

 private:
  std::string path_, target_, tmp_, dir_;
  int fd_ = -1;
  bool in_place_ = false, committed_ = false;
  uint64_t written_ = 0;
};

}  // namespace rtx::io
