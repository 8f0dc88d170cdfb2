// CPU sampling profiler for any program (rtx-trace record --cpu-sample): perf_event_open(2)
// software clock events (PERF_COUNT_SW_TASK_CLOCK, user space only) on a child process and its
// threads and children (inherit), enabled at its exec, with frame-pointer call chains taken by
// the kernel (PERF_SAMPLE_CALLCHAIN), read from one mmap ring buffer per CPU while the child
// runs (or DWARF unwinding of a copy of the user stack with libdwfl); addresses resolved to
// demangled function names with elfutils libdwfl from the PERF_RECORD_MMAP2 mappings.
// Spec: perf_event_open(2), include/uapi/linux/perf_event.h.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"

namespace rtx::trace {

/// A symbolized CPU profile: frame names interned once, samples point at them.
struct CpuProfile {
  struct Sample {
    int64_t pid = 0, tid = 0;
    int64_t unix_ns = 0;           ///< sample time (CLOCK_MONOTONIC moved onto the unix clock)
    std::vector<uint32_t> stack;   ///< frame ids into `frames`, outermost (e.g. _start/main) first
  };
  std::vector<std::string> frames; ///< names: "func", "lib.so+0x1a2b" (no symbol), "[unknown]"
  std::vector<Sample> samples;     ///< in ring-buffer order (per CPU in time order)
  std::map<int64_t, std::string> comm;  ///< pid or tid -> command name (PERF_RECORD_COMM)
  unsigned freq_hz = 0;            ///< requested sampling frequency
  uint64_t lost = 0;               ///< samples the kernel dropped (PERF_RECORD_LOST: ring full)
  uint64_t unknown_frames = 0;     ///< frames with no mapping (printed "[unknown]")
};

/// Highest --freq the kernel allows (kernel.perf_event_max_sample_rate, read from `path`;
/// 100000 when unreadable).
unsigned max_sample_rate(const std::string& path = "/proc/sys/kernel/perf_event_max_sample_rate");

/// Check a sampling frequency: 1 .. max_sample_rate(). Errors: rtx::Error(Usage) naming
/// --freq and the allowed range.
void check_sample_freq(unsigned hz);

/// The error for a failed perf_event_open (errno `err`): EACCES/EPERM name the sysctl
/// kernel.perf_event_paranoid, its current value (read from `paranoid_path`) and the value
/// sampling one's own program needs (<= 2, or CAP_PERFMON), or, when it is already <= 2, that
/// something else (seccomp, a security module) refuses; ENOENT/ENOSYS/EOPNOTSUPP/ENODEV say the
/// kernel has no software perf events. Category Environment (exit 3).
Error perf_open_error(int err, const std::string& paranoid_path = "/proc/sys/kernel/perf_event_paranoid");

/// How call stacks are taken: the kernel's frame-pointer walk (cheap; needs code built with
/// -fno-omit-frame-pointer) or DWARF call-frame unwinding (PERF_SAMPLE_REGS_USER + a copy of
/// kDwarfStackBytes of the user stack per sample, unwound with libdwfl from the files'
/// .eh_frame/.debug_frame: works without frame pointers; x86-64 only).
enum class CallGraph { Fp, Dwarf };

/// Bytes of user stack copied per sample with CallGraph::Dwarf (perf record's default).
inline constexpr uint32_t kDwarfStackBytes = 8192;

/// True where CallGraph::Dwarf is implemented (x86-64).
bool dwarf_unwind_supported();

/// Samples one process tree. Construct it for a child that is stopped before its exec (the
/// counters are enabled by the kernel at exec, so the profiler's own fork/exec path is not
/// sampled), call poll() while the child runs and finish() after it exited.
class CpuSampler {
 public:
  /// Open a counter per online CPU for `pid` (sample_freq = hz, inherit, enable_on_exec,
  /// exclude_kernel/hv, CLOCK_MONOTONIC time) and map its ring buffer (`ring_pages` data pages,
  /// a power of two; 128 pages = 512 KiB stays within the default kernel.perf_event_mlock_kb).
  /// Errors: check_sample_freq's; Usage for Dwarf where unsupported; perf_open_error() when the
  /// kernel refuses; rtx::Error(Environment) when mmap fails.
  CpuSampler(pid_t pid, unsigned hz, CallGraph cg = CallGraph::Fp, size_t ring_pages = 64);
  ~CpuSampler();
  CpuSampler(const CpuSampler&) = delete;
  CpuSampler& operator=(const CpuSampler&) = delete;
  /// Wait up to `timeout_ms` for data (a ring a quarter full wakes it early), then read every
  /// ring buffer and turn its samples into symbolized stacks (reads the ELF files the mappings
  /// name; missing files give "file+0xoffset" frames), so raw stack copies are not kept.
  void poll(int timeout_ms);
  /// Stop the counters, read what is left and return the profile.
  CpuProfile finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Folded stacks of a profile ("comm;outer;...;leaf COUNT", one line per distinct stack,
/// sorted, counts in samples; FlameGraph's collapsed format, as stackcollapse-perf.pl writes
/// from `perf script`). The first frame is the process's command name.
std::string fold_profile(const CpuProfile& p);

}  // namespace rtx::trace
