// Ctrl-C / SIGTERM for long-running commands (rtx-train run, rtx-tune run, rtx-evolve run): the
// first signal asks the work to stop at its next safe point; a second one ends the process at once.
#pragma once
#include <atomic>
#include <string>

namespace rtx::cli {

/// While one lives, SIGINT and SIGTERM are caught: the first sets the flag read by
/// requested() (the work polls it between units it can abandon: a micro-batch, an evaluation
/// batch, a tuning trial, a sandboxed trial) and writes `message` on stderr; a second one,
/// 50 ms or more after the first, calls _exit(130) from the handler (a repeat within 50 ms is
/// the same request: coreutils `timeout` signals the command and then its process group, so
/// the command receives its signal twice at once), so a person pressing Ctrl-C twice, or a supervisor
/// sending SIGTERM twice, never waits. What the second signal cuts short must therefore be safe
/// to lose: files are written temp + fsync + rename (io::AtomicFileWriter), store writes are
/// transactions. Exit status 130 (128 + SIGINT, as a shell reports an interrupted command) for
/// either signal. The destructor restores the previous handlers; one guard at a time (a second
/// one while another lives throws Error(Internal)). Signal-handler rules: POSIX
/// signal-safety(7) (write(2) and _exit(2) only).
class InterruptGuard {
 public:
  /// `message`: what the first signal prints (e.g. "rtx-train: stopping after the current
  /// micro-batch (Ctrl-C again quits at once)\n"); "" prints nothing (-q). At most 511 bytes.
  explicit InterruptGuard(const std::string& message = "");
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  /// True once SIGINT or SIGTERM arrived while a guard lived (false again when a new guard starts).
  static bool requested();
  /// The flag itself, for APIs that take a `const std::atomic<bool>*` (serve::LoadConfig::interrupt).
  static const std::atomic<bool>* flag();
};

/// Exit status of a command stopped by SIGINT/SIGTERM: 128 + SIGINT.
inline constexpr int kInterruptedExit = 130;

}  // namespace rtx::cli
