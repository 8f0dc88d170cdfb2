// Crash-safe file output and plain file input: atomic_write_file (temp + fsync + rename)
// and read_text_file ("-" = stdin). No JSON here; see rtx/io/artifact.hpp.
#pragma once
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

/// Whole contents of `path_or_dash` ("-" reads stdin to EOF). Throws rtx::Error(Input) naming
/// the path for a missing file or a directory, rtx::Error(Environment) for other read errors
/// (permission denied, I/O error) with the errno text.
std::string read_text_file(const std::string& path_or_dash);

/// Write `bytes` to stdout when `path_or_dash` is "-" (flushed; a failed write throws
/// rtx::Error(Environment)), else atomic_write_file(path, bytes).
void write_text_output(const std::string& path_or_dash, std::string_view bytes);

}  // namespace rtx::io
