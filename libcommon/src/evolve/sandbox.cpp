// The sandbox: fork + exec with setrlimit, a wall-clock timeout and (where allowed) a private
// user + network namespace. Output goes to unlinked temporary files, read back after exit.
#include "rtx/evolve/sandbox.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "rtx/core/error.hpp"

namespace rtx::evolve {

namespace {

/// Set IFF_UP on "lo" in the current network namespace (socket + two ioctls: safe between fork
/// and exec). Returns false when it cannot (the trial then finds no loopback and says so).
bool loopback_up() {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::memcpy(ifr.ifr_name, "lo", 3);
  bool ok = ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
  if (ok && !(ifr.ifr_flags & IFF_UP)) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    ok = ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
  }
  ::close(s);
  return ok;
}

int temp_fd() {
  const char* dir = std::getenv("TMPDIR");
  std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/rtx-evolve-XXXXXX";
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw_env(std::string("cannot create a temporary file: ") + std::strerror(errno), tmpl);
  ::unlink(tmpl.c_str());
  return fd;
}

std::string read_all(int fd, size_t keep_tail) {
  std::string s;
  ::lseek(fd, 0, SEEK_SET);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  if (keep_tail && s.size() > keep_tail) s = s.substr(s.size() - keep_tail);
  return s;
}

}  // namespace

std::string SandboxResult::failure() const {
  if (clean()) return "";
  if (timed_out) return "timed out after " + std::to_string(wall_s).substr(0, 5) + " s (killed)";
  std::string tail = err;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  if (tail.size() > 300) tail = "..." + tail.substr(tail.size() - 300);
  if (signal) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")" + (tail.empty() ? "" : ": " + tail);
  return "exit status " + std::to_string(exit_code) + (tail.empty() ? "" : ": " + tail);
}

SandboxResult run_sandboxed(const std::vector<std::string>& argv, const SandboxOptions& o) {
  if (argv.empty()) throw_internal("run_sandboxed: empty argv", "sandbox");
  const int out_fd = temp_fd(), err_fd = temp_fd();
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) throw_env(std::string("pipe: ") + std::strerror(errno), "sandbox");
  // Everything the child touches is prepared before fork (only async-signal-safe calls after).
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  struct rlimit cpu {}, as {};
  cpu.rlim_cur = static_cast<rlim_t>(o.cpu_s);
  cpu.rlim_max = static_cast<rlim_t>(o.cpu_s) + 5;
  as.rlim_cur = as.rlim_max = static_cast<rlim_t>(o.address_space_bytes);

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw_env(std::string("fork failed: ") + std::strerror(errno), "sandbox");
  if (pid == 0) {
    ::setpgid(0, 0);
    // The trial dies with the controller (a killed `rtx-evolve validate` leaves no orphan).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) ::_exit(126);  // the parent died before prctl
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::setrlimit(RLIMIT_CPU, &cpu);
    ::setrlimit(RLIMIT_AS, &as);
    char isolated = '0';
    if (o.isolate_network && ::unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
      isolated = '1';
      if (o.loopback) loopback_up();
    }
    (void)!::write(status_pipe[1], &isolated, 1);
    ::execv(args[0], args.data());
    const char e = 'E';
    (void)!::write(status_pipe[1], &e, 1);
    ::_exit(127);
  }
  ::close(status_pipe[1]);
  SandboxResult r;
  int wst = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &wst, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el > o.timeout_s && !r.timed_out) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(r.timed_out ? 1 : 5));
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char c = 0;
  while (::read(status_pipe[0], &c, 1) == 1) {
    if (c == '1') r.network_isolated = true;
  }
  ::close(status_pipe[0]);
  if (WIFEXITED(wst)) r.exit_code = WEXITSTATUS(wst);
  if (WIFSIGNALED(wst)) r.signal = WTERMSIG(wst);
  r.out = read_all(out_fd, 0);
  r.err = read_all(err_fd, 4096);
  ::close(out_fd);
  ::close(err_fd);
  return r;
}

}  // namespace rtx::evolve
