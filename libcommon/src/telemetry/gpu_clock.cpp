// NVML clock and throttle-reason reads for benchmark samples (dlopen; absent NVML -> invalid).
#include "rtx/telemetry/gpu_clock.hpp"

#include <dlfcn.h>

namespace rtx::telemetry {
namespace {

// NVML ABI (nvml.h): opaque device handle, int return codes (0 = NVML_SUCCESS).
using NvmlDevice = void*;
struct Nvml {
  int (*get_handle)(unsigned, NvmlDevice*) = nullptr;
  int (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  int (*max_clock)(NvmlDevice, int, unsigned*) = nullptr;
  int (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  bool ok = false;
};

const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml x;
    void* h = ::dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) h = ::dlopen("libnvidia-ml.so", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return x;
    auto init = reinterpret_cast<int (*)()>(::dlsym(h, "nvmlInit_v2"));
    x.get_handle = reinterpret_cast<int (*)(unsigned, NvmlDevice*)>(::dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
    x.clock = reinterpret_cast<int (*)(NvmlDevice, int, unsigned*)>(::dlsym(h, "nvmlDeviceGetClockInfo"));
    x.max_clock = reinterpret_cast<int (*)(NvmlDevice, int, unsigned*)>(::dlsym(h, "nvmlDeviceGetMaxClockInfo"));
    x.reasons = reinterpret_cast<int (*)(NvmlDevice, unsigned long long*)>(
        ::dlsym(h, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (!x.reasons)
      x.reasons = reinterpret_cast<int (*)(NvmlDevice, unsigned long long*)>(
          ::dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    x.ok = init && x.get_handle && x.clock && init() == 0;
    return x;
  }();
  return n;
}

constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM
constexpr unsigned long long kSlowdownMask = 0x4ull | 0x8ull | 0x20ull | 0x40ull | 0x80ull;

}  // namespace

GpuClockSample sample_gpu_clock(unsigned index) noexcept {
  GpuClockSample s;
  const Nvml& n = nvml();
  if (!n.ok) return s;
  NvmlDevice d = nullptr;
  unsigned mhz = 0;
  if (n.get_handle(index, &d) != 0 || n.clock(d, kNvmlClockSm, &mhz) != 0) return s;
  s.valid = true;
  s.sm_mhz = mhz;
  unsigned mx = 0;
  if (n.max_clock && n.max_clock(d, kNvmlClockSm, &mx) == 0) s.sm_max_mhz = mx;
  unsigned long long r = 0;
  if (n.reasons && n.reasons(d, &r) == 0) {
    s.reasons = r;
    s.throttled = (r & kSlowdownMask) != 0;
  }
  return s;
}

}  // namespace rtx::telemetry
