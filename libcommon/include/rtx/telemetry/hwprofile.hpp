// Hardware profile of this host: CPU (model, ISA flags, topology, caches, clocks, memory),
// GPUs (via the CUDA runtime and NVML loaded with dlopen), library versions and the SKU key
// that tuned profiles are keyed by. Probed once per process; nothing here measures speed.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rtx::telemetry {

/// x86-64 ISA extensions relevant to rtx kernels (from CPUID + XGETBV via
/// __builtin_cpu_supports and direct cpuid leaves 7.0 / 7.1 for the newer bits).
struct CpuFlags {
  bool sse4_2 = false, avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
};

/// One CUDA device as seen by the runtime (name, arch, SMs, memory) and by NVML (clocks,
/// ECC, PCIe). NVML fields are -1 (or "") when NVML is not loadable or does not report them.
struct GpuInfo {
  int index = 0;
  std::string name;             ///< e.g. "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;  ///< compute capability, e.g. 9.0
  int sm_count = 0;             ///< streaming multiprocessors
  uint64_t memory_bytes = 0;    ///< total device memory in B
  int clock_sm_mhz = -1, clock_sm_max_mhz = -1;    ///< SM clock now / max, MHz (NVML)
  int clock_mem_mhz = -1, clock_mem_max_mhz = -1;  ///< memory clock now / max, MHz (NVML)
  int ecc_enabled = -1;                            ///< 1 on, 0 off, -1 unknown (NVML)
  long long ecc_corrected = -1, ecc_uncorrected = -1;  ///< volatile ECC error counts (NVML), -1 unknown
  int pcie_gen = -1, pcie_gen_max = -1;            ///< PCIe link generation now / max (NVML)
  int pcie_width = -1, pcie_width_max = -1;        ///< PCIe link width (lanes) now / max (NVML)
  std::string arch() const;                        ///< "sm_90"
};

/// Everything the suite records about the host. Units: bytes, MHz; -1/0/"" = unknown.
struct HardwareProfile {
  // CPU
  std::string cpu_vendor;        ///< "intel", "amd" or the raw cpuid vendor string lower-cased
  std::string cpu_model;         ///< /proc/cpuinfo "model name"
  int cpu_family = 0, cpu_model_id = 0;  ///< cpuid family / model (display values)
  CpuFlags flags;
  int physical_cores = 0;        ///< distinct (physical id, core id) pairs; >= 1
  int logical_cpus = 0;          ///< online logical CPUs; >= 1
  int sockets = 0;               ///< distinct physical ids; >= 1
  uint64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  ///< per-instance cache sizes (sysfs), B
  uint64_t memory_bytes = 0;     ///< MemTotal from /proc/meminfo, B
  double base_mhz = 0, max_mhz = 0;  ///< CPU clocks, MHz
  std::string clock_source;      ///< where base/max came from: "cpufreq", "cpuinfo" (current MHz), "none"
  int omp_max_threads = 0;       ///< omp_get_max_threads() at probe time
  int fma_units = 0;             ///< assumed FMA pipes per core at the widest vector width (see cpu_peak_note)
  int vector_bits = 0;           ///< widest usable FP vector: 512, 256 or 128
  std::string cpu_peak_note;     ///< the microarchitecture assumption behind fma_units
  // GPU and libraries
  bool cuda_built = false;       ///< this rtx build has the CUDA backend
  std::string cuda_unavailable;  ///< why no GPU is listed ("" when one is)
  std::vector<GpuInfo> gpus;
  int driver_version = 0;        ///< cudaDriverGetVersion, e.g. 12080 (0 unknown)
  int runtime_version = 0;       ///< cudaRuntimeGetVersion (0 when not built)
  std::string nvml_driver;       ///< NVML driver string, e.g. "570.86.15" ("" if no NVML)
  std::string cudnn_version, nccl_version, cupti_version;  ///< "" when the library is absent
  // build and OS
  std::string rtx_sha;           ///< rtx::git_sha()
  std::string os, kernel;        ///< uname sysname / release, e.g. "Linux", "6.1.0-18-amd64"
  std::string hostname;
};

/// The process-wide profile: probed on first call (thread-safe), then cached. Never throws
/// for missing information (fields stay unknown); GPU probing never crashes without a driver.
const HardwareProfile& hardware_profile();

/// Probe afresh (not cached); hardware_profile() calls this once.
HardwareProfile probe_hardware_profile();

/// JSON form of a profile (schema-free object, embedded in every artifact as "hardware").
nlohmann::json to_json(const HardwareProfile& p);

/// Short stable hash (16 hex chars, FNV-1a 64) of the identity fields of the cached profile
/// (CPU model/flags/topology, GPU names/arch, driver, rtx sha): same machine + build -> same string.
std::string digest();
/// Same as digest() for a given profile.
std::string digest(const HardwareProfile& p);

/// The compact identity carried by every telemetry event and artifact:
/// {"arch": <sku of best backend>, "driver": <driver string or "">, "rtx_sha": <sha>, "digest": <digest()>}.
nlohmann::json identity_json();

/// CPU SKU key: "cpu:<vendor>-<model slug>:<avx512|avx2|scalar>", e.g. "cpu:amd-epyc-9b14:avx512".
/// Only [a-z0-9-_:.]; the model slug gets "-f<family>m<model>" when the name has no digits.
std::string cpu_sku_key(const HardwareProfile& p);
/// GPU SKU key: "gpu:sm_<cc>:<name slug>", e.g. "gpu:sm_90:h200".
std::string gpu_sku_key(const GpuInfo& g);
/// SKU key for a backend of the cached profile: "cpu" -> cpu_sku_key, "cuda"/"gpu" -> device 0's
/// key. Throws rtx::Error(Usage) for another backend name, (Environment) for cuda without a GPU.
std::string sku_key(const std::string& backend);

/// Theoretical fp32 peak of the CPU in FLOP/s:
/// physical_cores x fma_units x (vector_bits / 32) x 2 (FLOP per FMA) x max_mhz (base_mhz if max unknown) x 1e6.
/// 0 when the clock is unknown.
double cpu_peak_fp32_flops(const HardwareProfile& p);

/// The 1-minute load average (/proc/loadavg), 0 when unreadable.
double load_average_1m();
/// One reading of Linux pressure-stall information for the CPU ("some" line of
/// /proc/pressure/cpu, kernel Documentation/accounting/psi.rst): the share of wall time in
/// which at least one runnable task waited for a CPU. System-wide, not per process.
struct CpuPressure {
  bool valid = false;          ///< false: no PSI (kernel < 4.20, CONFIG_PSI off, psi=0) or unparsable
  double some_avg10 = 0;       ///< % of the last 10 s with a task waiting (kernel's running average)
  double some_avg60 = 0;       ///< % of the last 60 s
  uint64_t some_total_us = 0;  ///< cumulative stall time, us (monotonic; deltas give any window)
};
/// Parse the text of /proc/pressure/cpu ("some avg10=1.50 avg60=0.30 avg300=0.10 total=12345",
/// optionally followed by a "full ..." line). Returns valid=false when the "some" line is
/// missing or malformed; never throws.
CpuPressure parse_cpu_pressure(const std::string& text);
/// Read and parse `path` (default /proc/pressure/cpu); valid=false when it cannot be read.
CpuPressure read_cpu_pressure(const char* path = "/proc/pressure/cpu");

/// The share of a window in which a task waited for a CPU (PSI "some") above which other work
/// competes with a measurement: rtx-bench's per-case rule and busy_host_warning's look both use it.
inline constexpr double kBusyPsiStallShare = 0.10;
/// "" when the host is quiet enough to measure on; else a one-line warning naming the evidence,
/// ending ": other work competes with measurements". Looks at the host for `look_s` seconds
/// (sleeping) and judges the look by the suite's one rule (judge_host_window): busy when other
/// processes took more than kMaxOtherCpuShare of the CPUs' time (/proc/stat). Without /proc/stat
/// busy_host_verdict decides: PSI stall above kBusyPsiStallShare, or without PSI the load
/// average above half the logical CPUs. The 1-minute load average is named but not judged where
/// a reading is, since it trails the load by a minute. rtx-doctor's host.load
/// check, rtx-tune run, rtx-evolve run and rtx-serve bench's start-time check share it.
std::string busy_host_warning(const HardwareProfile& p, double look_s = 0.2);
/// The same judgement on two given PSI readings `look_s` apart (before, after) and a load
/// average: the testable core of busy_host_warning.
std::string busy_host_verdict(const CpuPressure& before, const CpuPressure& after, double look_s, double load1,
                              int logical_cpus);
/// Share (0..1) of `look_s` seconds that some task waited for a CPU, from two PSI readings taken
/// that far apart; nullopt when either is invalid, look_s <= 0 or the counter went backwards.
std::optional<double> psi_stall_share(const CpuPressure& before, const CpuPressure& after, double look_s);

/// What busy_host_warning saw, for a caller that reports the numbers (rtx-doctor's host.load).
struct BusyLook {
  std::optional<double> stall_share;  ///< PSI cpu stall share of the look (0..1); nullopt without PSI
  double look_s = 0;                  ///< seconds actually looked
  double load1 = 0;                   ///< 1-minute load average
  int logical_cpus = 0;
  bool other_valid = false;  ///< /proc/stat was read at both ends: other_share decided (judge_host_window)
  /// Share of the look's CPU time that other processes took (judge_host_window), 0 without /proc/stat.
  double other_share = 0;
  std::string warning;                ///< judge_host_window's (or, without /proc/stat, busy_host_verdict's) text; "" = quiet
};
/// busy_host_warning's look, with its measurements.
BusyLook look_at_host(const HardwareProfile& p, double look_s = 0.2);

// ---- the host-contention rule (one home) -----------------------------------------------------
// Whether OTHER processes competed with ours in a window, by the CPU time they took there:
// the busy ticks of the CPUs this process may run on (/proc/stat, proc(5): user + nice +
// system + irq + softirq + steal; steal is the VM's neighbours) minus this process's own CPU
// time (getrusage RUSAGE_SELF). PSI cpu stall and involuntary context switches count waits
// behind our own threads as well (an idle 2-CPU host read 18% stall and 194 switches/s under
// rtx-tune --serve's own scheduler and OpenMP workers), so they decide only where /proc/stat
// cannot be read. rtx-bench's per-case judge (measure::judge_contention), rtx-tune's
// trials (tune::HostJudgedObjective, through it), rtx-serve bench's run (serve::judge_run_contention)
// and busy_host_warning's look all call judge_host_window.

/// Busy time of a set of CPUs, from one read of /proc/stat.
struct CpuBusy {
  bool valid = false;  ///< every CPU asked for had a "cpuN" line with at least 8 numbers
  double busy_s = 0;   ///< sum of user+nice+system+irq+softirq+steal over those CPUs, s
  int cpus = 0;        ///< CPUs summed
  double tick_s = 0;   ///< 1 / USER_HZ (sysconf(_SC_CLK_TCK)): the counters' resolution, s
};
/// Parse the text of /proc/stat for the CPUs in `cpus` (their "cpuN" lines), counters in ticks
/// of `tick_s` seconds. valid=false when `cpus` is empty, a line is missing or malformed, or
/// tick_s <= 0; never throws.
CpuBusy parse_cpu_busy(const std::string& proc_stat, const std::vector<int>& cpus, double tick_s);
/// Read /proc/stat for the CPUs this thread may run on (sched_getaffinity); valid=false when
/// unreadable. ~30 us on 2 CPUs. Where this thread is pinned to fewer CPUs than the process's
/// other threads use (OMP_PROC_BIND), this process's CPU time exceeds those CPUs' share and
/// other processes' time reads low: the rule then misses neighbours, it never invents them.
CpuBusy read_cpu_busy();

/// Share of the window's CPU time (window x CPUs) that other processes took above which the
/// host is busy. 10%: a neighbour that took it from our threads shifts a median twice past
/// rtx-bench compare's 5% threshold; idle hosts read 0-3% (docs/tools/rtx-bench.md, "Host
/// contention"); one CPU-bound neighbour on 2 CPUs takes 33-50% even against our 2-3 threads.
inline constexpr double kMaxOtherCpuShare = 0.10;
/// Shortest window judged, s: one 4 ms time slice in a shorter window already reads as 8%.
inline constexpr double kMinJudgedWindowS = 0.05;

/// What was counted in one window (or a sum of windows) for judge_host_window.
struct CpuWindow {
  double wall_s = 0;             ///< wall time, s
  int cpus = 0;                  ///< CPUs the process may run on (0: unknown)
  bool other_valid = false;      ///< /proc/stat was read at every window's ends
  double other_cpu_s = 0;        ///< busy time of those CPUs minus this process's CPU time, s (may be < 0 by tick rounding)
  double tick_slack_s = 0;       ///< rounding allowance: 2 ticks per CPU per window, s
  bool psi_valid = false;        ///< PSI cpu was read at every window's ends
  double psi_stall_s = 0;        ///< PSI cpu "some" stall in the windows, s
};
/// The verdict on a window.
struct HostVerdict {
  bool judged = false;      ///< wall_s >= kMinJudgedWindowS and a signal was readable
  bool busy = false;        ///< judged, and other processes took more than the threshold
  double other_share = 0;   ///< max(0, other_cpu_s - tick_slack_s) / (wall_s x cpus), 0 when not readable
  double psi_share = 0;     ///< psi_stall_s / wall_s, in [0, 1]
  std::string basis;        ///< "other_cpu" (the rule), "psi" (fallback without /proc/stat), "" not judged
  std::string reason;       ///< "" unless busy: "other processes took 0.93 CPU-s of 2 CPUs x 1.00 s (47%, > 10%)"
};
/// The ONE busy-host rule: with /proc/stat, busy when other processes took more than
/// kMaxOtherCpuShare of the window's CPU time after the tick allowance; without it (other_valid
/// false), busy when PSI cpu "some" stall exceeds kBusyPsiStallShare of the window (which also
/// counts waits behind our own threads: the caller says so). Windows shorter than
/// kMinJudgedWindowS are not judged. Never throws.
HostVerdict judge_host_window(const CpuWindow& w);



}  // namespace rtx::telemetry
