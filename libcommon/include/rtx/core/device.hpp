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
/// Throws rtx::Error(Environment) with a fix hint when no CUDA device is usable.
/// `what` names the caller for the message (e.g. "--backend cuda").
void require_cuda(const std::string& what);

}  // namespace rtx
