// Device discovery usable from any translation unit, CUDA built or not.
#pragma once
#include <string>

namespace rtx {

/// Number of usable CUDA devices: 0 when the CUDA backend is not built, no driver is
/// loaded, or no GPU is present. Never throws.
int cuda_device_count() noexcept;
/// Why cuda_device_count() is 0 ("" when a device exists): "CUDA backend not built",
/// or the runtime's error string (e.g. "no CUDA-capable device is detected").
std::string cuda_unavailable_reason();
/// Whether a CUDA program started from here would see a CUDA device, asked of the driver
/// itself, so that a build without the CUDA backend can ask too (rtx-trace record, before it
/// injects CUPTI into a child): loads libcuda.so.1 with dlopen and calls cuInit(0) and
/// cuDeviceGetCount, the calls a child's CUDA runtime makes (CUDA_VISIBLE_DEVICES applies as
/// in the child). Returns the device count; when 0, `why` says why ("no NVIDIA driver
/// (libcuda.so.1 cannot be loaded)", "cuInit failed: CUDA_ERROR_NO_DEVICE", ...).
int cuda_driver_device_count(std::string& why);
/// Throws rtx::Error(Environment) with a fix hint when no CUDA device is usable.
/// `what` names the caller for the message (e.g. "--backend cuda").
void require_cuda(const std::string& what);

}  // namespace rtx
