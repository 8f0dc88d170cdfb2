// Test helpers: locations of data, sources and built tools; running a tool as a subprocess.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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
/// ggml's reference Q8_0 quantizer (quantize_row_q8_0_ref) in float64: per block of 32 values,
/// d = max|w| / 127 stored as f16, q = round(w / d) clamped to [-127, 127]. `w.size()` must be a
/// multiple of 32. Returns the blocks (34 bytes each) and, in `deq` when given, q * d.
std::vector<uint8_t> quantize_q8_0(const std::vector<float>& w, std::vector<double>* deq = nullptr);
/// True when a CUDA device is usable (built with CUDA and cudaGetDeviceCount > 0).
bool have_gpu();
/// True when RTX_REQUIRE_GPU is set to a value other than "" and "0".
bool gpu_required();

/// Busy threads for a host-contention test: while alive, max(4, 2 x hardware threads) (at most
/// 64) threads spin, so any measurement on this host competes for the CPUs. Joined on
/// destruction (or stop()).
/// A TCP socket bound to a free port on 127.0.0.1 and listening (backlog `backlog`), never
/// accepting: connections complete in the kernel's backlog and are never answered (a server
/// that hangs), and the port is held (another bind to it fails with EADDRINUSE). Throws
/// std::runtime_error when the socket cannot be made. Closed on destruction.
class LoopbackListener {
 public:
  explicit LoopbackListener(int backlog = 64);
  ~LoopbackListener();
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
};

/// A raw client connection to 127.0.0.1:`port`, for bytes no well-behaved HTTP client sends.
/// Throws std::runtime_error when it cannot connect. Closed on destruction.
class RawConn {
 public:
  explicit RawConn(int port);
  ~RawConn();
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  /// Send `s` whole; false once the peer has closed the connection.
  bool send(const std::string& s);
  /// Close the sending half (shutdown SHUT_WR): the peer reads end of stream, can still answer.
  void close_write();
  /// Everything received until the peer closes (or `limit_s` passes without a byte).
  std::string read_all(double limit_s);

 private:
  int fd_ = -1;
};

class BusyHost {
 public:
  BusyHost();
  ~BusyHost();
  BusyHost(const BusyHost&) = delete;
  BusyHost& operator=(const BusyHost&) = delete;
  void stop();

 private:
  struct State;
  State* s_;
};
}  // namespace rtx::test

/// In a Catch2 test case: without a usable GPU, say why (WARN "SKIPPED: ...", which ctest's
/// SKIP_REGULAR_EXPRESSION of the cuda-labelled tests reports as skipped) and leave the case.
/// With RTX_REQUIRE_GPU=1 in the environment (scripts/gpu-check sets it on the GPU machine),
/// the case FAILs instead: a broken driver or runtime must not pass as a skip.
/// Catch2 v2 has no SKIP(). Needs catch.hpp and rtx/core/device.hpp included before use.
#define RTX_SKIP_WITHOUT_GPU()                                                                       \
  do {                                                                                               \
    if (!rtx::test::have_gpu()) {                                                                    \
      if (rtx::test::gpu_required())                                                                 \
        FAIL("RTX_REQUIRE_GPU is set but no CUDA device is usable (" << rtx::cuda_unavailable_reason() \
                                                                      << ")");                       \
      WARN("SKIPPED: no usable CUDA device (" << rtx::cuda_unavailable_reason() << ")");            \
      return;                                                                                        \
    }                                                                                                \
  } while (0)
