// Per-sample GPU clock and throttle state through NVML (loaded with dlopen), so benchmark
// samples taken while the GPU was throttled can be flagged (as nvbench records clocks).
#pragma once
#include <cstdint>

namespace rtx::telemetry {

/// One reading of a GPU's SM clock and clock-event ("throttle") reasons.
struct GpuClockSample {
  bool valid = false;            ///< false when NVML is absent or the query failed
  uint32_t sm_mhz = 0;           ///< current SM clock, MHz (nvmlDeviceGetClockInfo, NVML_CLOCK_SM)
  uint32_t sm_max_mhz = 0;       ///< max SM clock, MHz (nvmlDeviceGetMaxClockInfo)
  uint64_t reasons = 0;          ///< nvmlDeviceGetCurrentClocksThrottleReasons bit mask
  /// True when a reason that slows a busy GPU is active: software power cap (0x4), hardware
  /// slowdown (0x8), software/hardware thermal slowdown (0x20/0x40), power brake (0x80).
  /// Idle (0x1) and application-clock settings (0x2) do not count.
  bool throttled = false;
};

/// Read NVML device `index` (NVML order; with one GPU it is CUDA device 0). Thread-safe,
/// never throws; ~10-50 us per call on a local GPU.
GpuClockSample sample_gpu_clock(unsigned index = 0) noexcept;

}  // namespace rtx::telemetry
