// The sandbox: fork + exec with setrlimit, a wall-clock timeout, (where allowed) a private
// user + network namespace and Landlock write confinement to a scratch folder. Output goes to
// unlinked temporary files, read back after exit.
#include "rtx/evolve/sandbox.hpp"

#include <fcntl.h>
#include <linux/landlock.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "rtx/core/error.hpp"

namespace rtx::evolve {

namespace {

// AddressSanitizer reserves terabytes of shadow address space at start, so an ASan-built trial
// cannot start under RLIMIT_AS; in that build (make test-asan) the limit is not applied.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

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

/// Landlock write confinement, prepared before fork (paths, access masks) and applied in the
/// child with async-signal-safe calls only (open, syscall, prctl). Rights per landlock(7); the
/// ABI version decides which optional rights exist (REFER since 2, TRUNCATE since 3).
struct Landlock {
  uint64_t handled = 0;      // rights on the writable trees; 0: unavailable (kernel or headers)
  uint64_t file_rights = 0;  // rights on the writable single files
  std::vector<std::string> dirs;   // writable trees
  std::vector<std::string> files;  // writable single files (/dev/null)

  static uint64_t dir_write_rights(long abi) {
    uint64_t r = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
                 LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                 LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
                 LANDLOCK_ACCESS_FS_MAKE_SYM;
#ifdef LANDLOCK_ACCESS_FS_REFER
    if (abi >= 2) r |= LANDLOCK_ACCESS_FS_REFER;
#endif
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
    if (abi >= 3) r |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
    return r;
  }
  static uint64_t file_write_rights(long abi) {
    uint64_t r = LANDLOCK_ACCESS_FS_WRITE_FILE;
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
    if (abi >= 3) r |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
    return r;
  }

  static Landlock prepare(const std::string& scratch, const std::vector<std::string>& extra) {
    Landlock l;
#ifdef SYS_landlock_create_ruleset
    const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) return l;
    l.handled = dir_write_rights(abi);
    l.dirs.push_back(scratch);
    l.files.push_back("/dev/null");
    for (const auto& p : extra) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0) continue;
      (S_ISDIR(st.st_mode) ? l.dirs : l.files).push_back(p);
    }
    l.file_rights = file_write_rights(abi);
#else
    (void)scratch;
    (void)extra;
#endif
    return l;
  }

  /// In the child: build the ruleset and restrict the calling process. True when enforced.
  bool apply() const {
#ifdef SYS_landlock_create_ruleset
    if (!handled) return false;
    struct landlock_ruleset_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.handled_access_fs = handled;
    const int rs = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
    if (rs < 0) return false;
    bool ok = true;
    auto add = [&](const std::string& path, uint64_t rights) {
      const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
      if (fd < 0) return;
      struct landlock_path_beneath_attr pb;
      std::memset(&pb, 0, sizeof pb);
      pb.allowed_access = rights;
      pb.parent_fd = fd;
      if (::syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) != 0) ok = false;
      ::close(fd);
    };
    for (const auto& d : dirs) add(d, handled);
    for (const auto& f : files) add(f, file_rights);
    ok = ok && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::syscall(SYS_landlock_restrict_self, rs, 0) == 0;
    ::close(rs);
    return ok;
#else
    return false;
#endif
  }
};

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
  if (cancelled) return "cancelled after " + std::to_string(wall_s).substr(0, 5) + " s (killed: the run was interrupted)";
  if (timed_out) return "timed out after " + std::to_string(wall_s).substr(0, 5) + " s (killed)";
  std::string tail = err;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  if (tail.size() > 300) tail = "..." + tail.substr(tail.size() - 300);
  if (signal) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")" + (tail.empty() ? "" : ": " + tail);
  return "exit status " + std::to_string(exit_code) + (tail.empty() ? "" : ": " + tail);
}

bool address_space_limited() { return !kAddressSanitizer; }

SandboxResult run_sandboxed(const std::vector<std::string>& argv, const SandboxOptions& o) {
  if (argv.empty()) throw_internal("run_sandboxed: empty argv", "sandbox");
  const int out_fd = temp_fd(), err_fd = temp_fd();
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) throw_env(std::string("pipe: ") + std::strerror(errno), "sandbox");
  // Everything the child touches is prepared before fork (only async-signal-safe calls after).
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The scratch folder: the child's working directory, its TMPDIR and, under Landlock, the only
  // place it may write (plus o.writable).
  const char* tmpdir = std::getenv("TMPDIR");
  std::string scratch = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/rtx-sandbox-XXXXXX";
  if (!::mkdtemp(scratch.data())) {
    ::close(status_pipe[0]);
    ::close(status_pipe[1]);
    throw_env(std::string("cannot create the sandbox's scratch folder: ") + std::strerror(errno), scratch);
  }
  struct ScratchGuard {
    std::string path;
    ~ScratchGuard() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } scratch_guard{scratch};
  const Landlock landlock = o.confine_writes ? Landlock::prepare(scratch, o.writable) : Landlock{};
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0) env_strings.emplace_back(*e);
  env_strings.push_back("TMPDIR=" + scratch);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
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
    if (!kAddressSanitizer) ::setrlimit(RLIMIT_AS, &as);
    char isolated = '0';
    if (o.isolate_network && ::unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
      isolated = '1';
      if (o.loopback) loopback_up();
    }
    (void)!::write(status_pipe[1], &isolated, 1);
    if (::chdir(scratch.c_str()) != 0) ::_exit(126);
    if (landlock.apply()) (void)!::write(status_pipe[1], "F", 1);
    ::execve(args[0], args.data(), envp.data());
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
    if (el > o.timeout_s && !r.timed_out && !r.cancelled) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    if (!r.timed_out && !r.cancelled && o.cancel && o.cancel()) {
      r.cancelled = true;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(r.timed_out || r.cancelled ? 1 : 5));
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char c = 0;
  while (::read(status_pipe[0], &c, 1) == 1) {
    if (c == '1') r.network_isolated = true;
    if (c == 'F') r.writes_confined = true;
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
