// InterruptGuard: SIGINT/SIGTERM -> a flag polled by the work; the second signal -> _exit(130).
#include "rtx/cli/interrupt.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "rtx/core/error.hpp"

namespace rtx::cli {

namespace {

constexpr int64_t kRepeatWindowNs = 50'000'000;  // 50 ms: far below two Ctrl-C presses
std::atomic<bool> g_requested{false};
std::atomic<bool> g_active{false};
char g_message[512];
size_t g_message_len = 0;
struct sigaction g_old_int, g_old_term;
std::atomic<int64_t> g_first_ns{0};  // CLOCK_MONOTONIC of the first signal; 0: none yet

int64_t now_ns() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

extern "C" void on_interrupt(int) {
  // Only async-signal-safe calls here (signal-safety(7)): lock-free atomics, clock_gettime,
  // write, _exit.
  const int64_t t = now_ns();
  int64_t first = 0;
  if (!g_first_ns.compare_exchange_strong(first, t)) {
    // coreutils timeout sends its signal to the command and then to its process group, so the
    // command gets it twice within microseconds: a repeat that close is the same request.
    if (t - first < kRepeatWindowNs) return;
    static const char kAgain[] =
        "\ninterrupted again: exiting now (exit 130); files are written atomically, so the last complete "
        "checkpoint or store state is what is left (an unfinished one stays a .tmp file)\n";
    const ssize_t n = ::write(STDERR_FILENO, kAgain, sizeof kAgain - 1);
    (void)n;
    ::_exit(kInterruptedExit);
  }
  g_requested.store(true);
  if (g_message_len) {
    const ssize_t n = ::write(STDERR_FILENO, g_message, g_message_len);
    (void)n;
  }
}

}  // namespace

InterruptGuard::InterruptGuard(const std::string& message) {
  if (g_active.exchange(true)) throw Error(ErrorCategory::Internal, "a second InterruptGuard while one is active", "rtx::cli");
  g_message_len = std::min(message.size(), sizeof g_message - 1);
  std::memcpy(g_message, message.data(), g_message_len);
  g_requested.store(false);
  g_first_ns.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  // Blocked in the handling thread while it runs; another thread may take a second signal at
  // the same time, which the compare-exchange on g_first_ns orders.
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_active.store(false);
}

bool InterruptGuard::requested() { return g_requested.load(std::memory_order_relaxed); }

const std::atomic<bool>* InterruptGuard::flag() { return &g_requested; }

}  // namespace rtx::cli
