// Test helpers implementation.
#include "test_util.hpp"

#include "rtx/core/dtype.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#ifdef RTX_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fs = std::filesystem;

namespace rtx::test {

static std::string env_or(const char* k, const std::string& d) {
  const char* v = std::getenv(k);
  return (v && *v) ? v : d;
}

std::string data_dir() { return env_or("RTX_DATA", "../shared/data"); }
std::string source_dir() { return env_or("RTX_SOURCE_DIR", "."); }
std::string tool_path(const std::string& name) { return env_or("RTX_BIN_DIR", "bin") + "/" + name; }

namespace {
struct TempDirs {
  std::vector<std::string> dirs;
  ~TempDirs() {
    std::error_code ec;
    for (auto& d : dirs) {
      fs::permissions(d, fs::perms::owner_all, fs::perm_options::add, ec);
      for (auto& e : fs::recursive_directory_iterator(d, ec)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
      fs::remove_all(d, ec);
    }
  }
};
TempDirs g_temps;
}  // namespace

std::string temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "rtx-test-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  g_temps.dirs.emplace_back(buf.data());
  return buf.data();
}

static std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Proc run(const std::string& cmd, const std::string& env) {
  const std::string d = temp_dir();
  const std::string out = d + "/out", err = d + "/err";
  const std::string full = (env.empty() ? "" : "env " + env + " ") + cmd + " >" + out + " 2>" + err + " </dev/null";
  const int st = std::system(full.c_str());
  Proc p;
  p.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  p.out = slurp(out);
  p.err = slurp(err);
  return p;
}

bool have_gpu() {
#ifdef RTX_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

bool gpu_required() {
  const char* e = std::getenv("RTX_REQUIRE_GPU");
  return e && *e && std::string(e) != "0";
}

std::vector<uint8_t> quantize_q8_0(const std::vector<float>& w, std::vector<double>* deq) {
  std::vector<uint8_t> blocks(w.size() / 32 * 34);
  if (deq) deq->assign(w.size(), 0.0);
  for (size_t b = 0; b < w.size() / 32; ++b) {
    double amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(w[b * 32 + j])));
    const uint16_t h = rtx::f32_to_f16(static_cast<float>(amax / 127));
    const double d = rtx::f16_to_f32(h);
    blocks[b * 34] = static_cast<uint8_t>(h & 0xff);
    blocks[b * 34 + 1] = static_cast<uint8_t>(h >> 8);
    for (int j = 0; j < 32; ++j) {
      const long q = d > 0 ? std::clamp(std::lround(w[b * 32 + j] / d), -127L, 127L) : 0;
      blocks[b * 34 + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
      if (deq) (*deq)[b * 32 + j] = static_cast<double>(q) * d;
    }
  }
  return blocks;
}

}  // namespace rtx::test

namespace rtx::test {

struct BusyHost::State {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
};

BusyHost::BusyHost() : s_(new State) {
  const unsigned n = std::min(64u, std::max(4u, 2 * std::thread::hardware_concurrency()));
  for (unsigned i = 0; i < n; ++i)
    s_->threads.emplace_back([st = s_] {
      volatile unsigned long x = 0;
      while (!st->stop.load(std::memory_order_relaxed)) x = x + 1;
    });
}

void BusyHost::stop() {
  s_->stop = true;
  for (auto& t : s_->threads)
    if (t.joinable()) t.join();
}

BusyHost::~BusyHost() {
  stop();
  delete s_;
}

}  // namespace rtx::test

namespace rtx::test {

namespace {
sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}
[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what + ": " + std::strerror(errno)); }
}  // namespace

LoopbackListener::LoopbackListener(int backlog) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) fail("LoopbackListener: socket");
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, backlog) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    ::close(fd_);
    errno = e;
    fail("LoopbackListener: bind/listen on 127.0.0.1");
  }
  port_ = ntohs(a.sin_port);
}

LoopbackListener::~LoopbackListener() { ::close(fd_); }

RawConn::RawConn(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) fail("RawConn: socket");
  const sockaddr_in a = loopback(port);
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd_);
    errno = e;
    fail("RawConn: connect to 127.0.0.1:" + std::to_string(port));
  }
}

RawConn::~RawConn() { ::close(fd_); }

bool RawConn::send(const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    const ssize_t n = ::send(fd_, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

void RawConn::close_write() { ::shutdown(fd_, SHUT_WR); }

std::string RawConn::read_all(double limit_s) {
  timeval tv{static_cast<time_t>(limit_s), static_cast<suseconds_t>((limit_s - static_cast<time_t>(limit_s)) * 1e6)};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd_, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace rtx::test
