// The CUDA driver probe every build can make: libcuda.so.1 loaded with dlopen, the driver API
// calls (cuInit, cuDeviceGetCount, cuGetErrorName) as declared in the toolkit's cuda.h.
#include <dlfcn.h>

#include <string>

#include "rtx/core/device.hpp"

namespace rtx {

int cuda_driver_device_count(std::string& why) {
  using CUresult = int;  // CUDA driver API (cuda.h): CUDA_SUCCESS = 0
  // Handles stay open for the process: unloading the driver is unsafe once cuInit ran.
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    why = "no NVIDIA driver (libcuda.so.1 cannot be loaded)";
    return 0;
  }
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(::dlsym(h, "cuInit"));
  auto count = reinterpret_cast<CUresult (*)(int*)>(::dlsym(h, "cuDeviceGetCount"));
  auto err_name = reinterpret_cast<CUresult (*)(CUresult, const char**)>(::dlsym(h, "cuGetErrorName"));
  if (!init || !count) {
    why = "the NVIDIA driver's libcuda.so.1 lacks cuInit/cuDeviceGetCount";
    return 0;
  }
  int n = 0;
  const char* call = "cuInit";
  CUresult r = init(0);
  if (r == 0) {
    call = "cuDeviceGetCount";
    r = count(&n);
  }
  if (r != 0) {
    const char* name = nullptr;
    if (err_name) err_name(r, &name);
    why = std::string(call) + " failed: " + (name ? name : "CUresult " + std::to_string(r));
    return 0;
  }
  if (n == 0) why = "the driver reports 0 devices";
  return n;
}

}  // namespace rtx
