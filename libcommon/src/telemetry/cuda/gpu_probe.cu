// GPU part of the hardware profile through the CUDA runtime (name, arch, SMs, memory, versions)
// plus NVML (clocks, ECC, PCIe). Without a driver or device it records why and returns.
#include <cuda_runtime_api.h>

#include "telemetry/dynlibs.hpp"

namespace rtx::telemetry::detail {

void probe_gpus(HardwareProfile& p) {
  p.cuda_built = true;
  cudaRuntimeGetVersion(&p.runtime_version);
  if (cudaDriverGetVersion(&p.driver_version) != cudaSuccess) p.driver_version = 0;
  p.nvml_driver = nvml_driver_version();
  if (p.driver_version == 0) {
    // cudaGetDeviceCount would say cudaErrorInsufficientDriver ("driver version is insufficient"),
    // which reads as an old driver; cudaDriverGetVersion's 0 means there is none.
    p.cuda_unavailable = "no NVIDIA driver installed (libcuda.so.1 not found)";
    return;
  }
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    p.cuda_unavailable = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return;
  }
  if (n == 0) {
    p.cuda_unavailable = "no CUDA device found";
    return;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    GpuInfo g;
    g.index = i;
    g.name = prop.name;
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    g.sm_count = prop.multiProcessorCount;
    g.memory_bytes = prop.totalGlobalMem;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess) nvml_fill(g, bus);
    p.gpus.push_back(g);
  }
}

}  // namespace rtx::telemetry::detail
