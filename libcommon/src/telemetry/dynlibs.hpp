// Internal: NVIDIA libraries loaded at run time with dlopen (NVML, cuDNN, NCCL, CUPTI), so
// rtx never links them and runs where they are absent. Not a public header.
#pragma once
#include <string>

#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::telemetry::detail {

/// cuDNN version "9.10.2" from cudnnGetVersion(), or "" when libcudnn.so(.9/.8) does not load.
std::string cudnn_version();
/// NCCL version "2.27.3" from ncclGetVersion(), or "" when libnccl.so.2 does not load.
std::string nccl_version();
/// CUPTI API version number from cuptiGetVersion() as a string, or "" when libcupti does not load.
std::string cupti_version();
/// Why a library did not load (dlerror text), for the doctor; "" when it loaded.
std::string load_error(const std::string& lib);

/// Result of asking CUPTI whether this process may read GPU performance counters.
struct CuptiAccess {
  bool loadable = false;     ///< libcupti loaded and exports the profiler entry points
  bool attempted = false;    ///< cuptiProfilerInitialize was called (needs a GPU)
  int result = -1;           ///< its CUptiResult (0 success, 35 CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
  bool admin_only = false;   ///< /proc/driver/nvidia/params says RmProfilingAdminOnly: 1
  bool is_root = false;      ///< geteuid() == 0
  std::string detail;        ///< human sentence
};
/// Probe CUPTI counter access; call cuptiProfilerInitialize only when `have_gpu`. Never throws.
CuptiAccess cupti_counter_access(bool have_gpu);

/// Fill NVML-only fields (clocks, ECC, PCIe) of `g` for the device with PCI bus id `pci_bus_id`
/// and return true; false (fields untouched) when NVML is not loadable or the device is unknown.
bool nvml_fill(GpuInfo& g, const std::string& pci_bus_id);
/// NVML system driver version string ("570.86.15"), "" without NVML.
std::string nvml_driver_version();

/// Fill GPU fields of `p` (gpus, driver/runtime versions, cuda_unavailable) through the CUDA
/// runtime: gpu_probe.cu when built with CUDA, gpu_probe_nocuda.cpp otherwise. Never throws.
void probe_gpus(HardwareProfile& p);

}  // namespace rtx::telemetry::detail
