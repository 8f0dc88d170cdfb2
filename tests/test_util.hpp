// Test helpers: locations of data, sources and built tools; running a tool as a subprocess.
#pragma once
#include <string>

namespace rtx::test {
/// $RTX_DATA (set by ctest), the shared data folder.
std::string data_dir();
/// $RTX_SOURCE_DIR (set by ctest), the repository root.
std::string source_dir();
/// Path of a built tool, e.g. tool_path("rtx-doctor").
std::string tool_path(const std::string& name);
/// A fresh empty temporary directory, removed at process exit.
std::string temp_dir();

/// Result of running a command: exit code, stdout, stderr.
struct Proc {
  int exit_code = -1;
  std::string out, err;
};
/// Run `cmd` through /bin/sh with optional env prefix ("A=1 B=2"); captures stdout and stderr.
Proc run(const std::string& cmd, const std::string& env = {});
/// True when a CUDA device is usable (built with CUDA and cudaGetDeviceCount > 0).
bool have_gpu();
}  // namespace rtx::test
