// rtx-trace record: run a program as a child with tracing switched on (the telemetry bus's
// RTX_EVENTS for rtx tools; CUPTI injection via CUDA_INJECTION64_PATH and NVTX via
// NVTX_INJECTION64_PATH for CUDA programs) and convert what it wrote to a Chrome trace.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rtx/trace/cpu_sampler.hpp"

namespace rtx::trace {

/// Capture window and cap, applied when converting (times in seconds from the record start).
struct CaptureOptions {
  double delay_s = 0;          ///< keep events that start at least this late
  double duration_s = 0;       ///< > 0: keep events starting within this long after the delay
  std::string range;           ///< non-empty: keep only what starts inside the first span/NVTX range of this name
  uint64_t max_events = 2000000;  ///< cap on written events (metadata and flows excluded); 0 = none
};

/// What a conversion wrote and left out.
struct ConvertResult {
  uint64_t written = 0;         ///< events written (X, i, C; not metadata or flows)
  uint64_t spans = 0;           ///< engine spans (telemetry bus) written
  uint64_t gpu = 0;             ///< GPU activity (kernels, memcpy, memset) written
  uint64_t api = 0;             ///< CUDA API calls written
  uint64_t ranges = 0;          ///< NVTX ranges/marks written
  uint64_t flows = 0;           ///< launch -> GPU flow arrows
  uint64_t outside_window = 0;  ///< events left out by --delay/--duration/--nvtx-range
  uint64_t over_cap = 0;        ///< events left out by the cap
  uint64_t cupti_dropped = 0;   ///< records CUPTI reported dropped (buffers full)
  uint64_t bad_lines = 0;       ///< unreadable lines in the recorded files (a killed child's last line)
  uint64_t cpu_samples = 0;     ///< CPU samples inside the window (--cpu-sample)
  uint64_t cpu_slices = 0;      ///< stack-chart slices written for them ("cpu_sample" X events)
  bool range_found = true;      ///< false when CaptureOptions::range never occurred
  std::vector<std::string> notes;  ///< messages from the injection library (CUPTI busy, ...)
};

/// Convert recorded files into a Chrome trace at `output` (.gz = compressed):
///  `events_jsonl`: telemetry bus JSON Lines (topic "span" -> X events on the thread's track;
///  "kernel.launch" -> X events of category cpu_op (CUDA: cuda_launch) with args variant, dtype, dims;
///  other topics -> instant events); `cupti_dir`: the injection library's cupti.<pid>.jsonl
///  files (kernels/memcpy/memset on "GPU d stream s" tracks with args grid, block, registers,
///  shared memory, stream; runtime/driver calls on their thread; flow arrows launch -> GPU;
///  NVTX ranges; a memcpy-bytes counter). Either may be "" or missing. Times: unix ns
///  aligned per process (bus: unix_ns - time_ns; CUPTI: its clock line), written in us
///  relative to `t0_unix_ns` (+ delay). `child_pid`/`child_name` name the main process.
/// `cpu` (may be null): CPU samples, written as a stack chart per sampled thread on its own
/// track ("CPU samples: ..."; tid kCpuSampleTidBase + tid): consecutive samples sharing a frame
/// prefix become one X slice per frame (cat "cpu_sample", args.samples), a sample lasting until
/// the next one of its thread when that comes within 1.5/freq_hz (timer jitter, a thread
/// waiting for a CPU), else 1/freq_hz; so viewers draw the timeline and fold_trace (rtx-flame)
/// folds it into the CPU flame graph with weights in ns (about samples x period).
/// Errors: rtx::Error(Environment) when the output cannot be written.
ConvertResult convert_recording(const std::string& events_jsonl, const std::string& cupti_dir,
                                const std::string& output, uint64_t t0_unix_ns, const CaptureOptions& cap,
                                int64_t child_pid = 0, const std::string& child_name = {},
                                const CpuProfile* cpu = nullptr);

/// Track id base of the CPU-sample tracks: the sampled thread's id is added (< 2^22 on Linux).
inline constexpr int64_t kCpuSampleTidBase = 900000000;

struct RecordOptions {
  std::vector<std::string> command;  ///< program and arguments (PATH searched)
  std::string output;                ///< trace path (.gz = compressed; "-" = stdout)
  CaptureOptions capture;
  std::string inject_lib;            ///< CUPTI injection library ("" or missing: no CUDA capture)
  std::string nvtx_lib;              ///< libcupti.so for NVTX_INJECTION64_PATH ("" = none)
  unsigned cpu_sample_hz = 0;        ///< > 0: sample the program's CPU stacks at this rate (CpuSampler)
  CallGraph call_graph = CallGraph::Fp;  ///< how the sampler takes call stacks
  std::string folded;                ///< with cpu_sample_hz: also write folded stacks here ("" = none)
};

struct RecordResult {
  int exit_code = 0;     ///< the child's exit status; 128 + signal when it was killed
  bool cuda_capture = false;  ///< injection library was passed to the child
  std::string child_events;   ///< the child's own --events FILE (child_events_flag), "" if none
  ConvertResult convert;
  uint64_t cpu_samples = 0;   ///< CPU samples taken (all, before the capture window)
  uint64_t cpu_lost = 0;      ///< samples the kernel dropped (ring buffer full)
  double cpu_unknown_share = 0;  ///< share of frames with no mapping ("[unknown]")
};

/// The FILE of an explicit `--events FILE` / `--events=FILE` in `command` (its arguments up
/// to a "--"), "" when there is none. An rtx tool's --events wins over the RTX_EVENTS that
/// record sets, so its engine spans go to FILE and not into the trace.
std::string child_events_flag(const std::vector<std::string>& command);

/// Run the command with tracing on and write the trace. The child inherits stdin/stdout/
/// stderr untouched; SIGINT/SIGTERM/SIGHUP received meanwhile are forwarded to it (and
/// ignored after it exited, until the trace is written). Sets in the
/// child: RTX_EVENTS (a temp file; an explicit --events flag of the child wins),
/// RTX_TRACE_CUPTI_DIR, RTX_TRACE_MAX_EVENTS and, with inject_lib, CUDA_INJECTION64_PATH
/// (and NVTX_INJECTION64_PATH unless already set). The trace is written even when the child
/// fails. The output is checked before the command starts (io::require_output_dir): a missing
/// folder is Usage, an unwritable one Environment, and the command does not run.
/// Errors: rtx::Error(Usage) for an empty command or one that cannot be executed
/// (not found, not executable), Environment for temp-dir/fork failures.
/// With cpu_sample_hz > 0: the child waits (after fork, before exec) until a CpuSampler is
/// attached to it; the samples go into the trace (convert_recording's `cpu`) and, with
/// `folded`, to folded stacks (fold_profile) written atomically. Errors then also: Usage for
/// a bad frequency or a folded path in a missing folder (before the program runs);
/// Environment when perf_event_open is refused (perf_open_error; the program does not run).
RecordResult record(const RecordOptions& opt);

}  // namespace rtx::trace
