// rtx::evolve sandbox: run a command in a child process with resource limits (RLIMIT_CPU,
// RLIMIT_AS), a wall-clock timeout (SIGKILL) and, where the kernel allows unprivileged user
// namespaces, no network (unshare(CLONE_NEWUSER | CLONE_NEWNET)), and, where the kernel has
// Landlock (Linux >= 5.13), no writes outside the run's own scratch folder. Not a security
// boundary against a hostile binary: a guard against a bad candidate configuration.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace rtx::evolve {

/// Limits of one sandboxed run.
struct SandboxOptions {
  double timeout_s = 60;                       ///< wall clock; then SIGKILL (a failed gate)
  double cpu_s = 240;                          ///< RLIMIT_CPU (s of CPU time, all threads)
  size_t address_space_bytes = size_t(16) << 30;  ///< RLIMIT_AS
  bool isolate_network = true;                 ///< try unshare(CLONE_NEWUSER | CLONE_NEWNET)
  /// Inside the private network namespace, bring the loopback device up (it starts down), so a
  /// trial can serve and load-test on 127.0.0.1 (the serving canary) with no other network.
  bool loopback = false;
  /// Confine writes with Landlock (landlock(7)): the child may create, modify, truncate, rename
  /// or remove files only under its scratch folder (a fresh `rtx-sandbox-*` directory under
  /// $TMPDIR or /tmp, its working directory and $TMPDIR, removed after the run) and the paths in
  /// `writable`, plus write to /dev/null; reads stay allowed everywhere. A write elsewhere fails
  /// with EACCES inside the child, so a trial that tries it fails (a failed safety gate).
  bool confine_writes = true;
  std::vector<std::string> writable;           ///< extra writable paths (files or folders)
  /// Polled every 5 ms while the child runs (Ctrl-C in rtx-evolve run): true kills the child's
  /// process group with SIGKILL and sets SandboxResult::cancelled. May be null.
  std::function<bool()> cancel;
};

/// What happened to the child.
struct SandboxResult {
  int exit_code = -1;          ///< exit status when it exited, else -1
  int signal = 0;              ///< terminating signal, 0 if it exited
  bool timed_out = false;      ///< killed by the wall-clock timeout
  bool cancelled = false;      ///< killed because SandboxOptions::cancel said so
  bool network_isolated = false;  ///< the unshare succeeded (no network inside)
  bool writes_confined = false;   ///< Landlock confined the child's writes to its scratch folder
  double wall_s = 0;
  std::string out, err;        ///< captured stdout / stderr (stderr: last 4 KiB)
  /// Exited with status 0, no signal, no timeout.
  bool clean() const { return exit_code == 0 && signal == 0 && !timed_out && !cancelled; }
  /// "" when clean, else "cancelled" / "timed out after X s" / "killed by signal N (SIGSEGV)" / "exit status N: <stderr tail>".
  std::string failure() const;
};

/// Whether run_sandboxed applies RLIMIT_AS: false in an AddressSanitizer build (its shadow
/// memory reservation cannot start under an address-space limit).
bool address_space_limited();

/// fork + exec `argv` (argv[0] a path) with the limits; stdout and stderr are captured through
/// temporary files. Throws rtx::Error(Environment) when the process cannot be started (fork
/// fails, no scratch folder); an exec failure is exit status 127 (a failed run, not an error).
/// Where Landlock or user namespaces are missing the run goes on without that guard and the
/// result says so (`writes_confined`, `network_isolated`).
SandboxResult run_sandboxed(const std::vector<std::string>& argv, const SandboxOptions& o);

}  // namespace rtx::evolve
