// CUDA error checking for .cu files and CUDA-aware .cpp files: every call's return code
// becomes an rtx::Error naming the call, file and line. Include only under RTX_HAVE_CUDA.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "rtx/core/error.hpp"

namespace rtx {
/// Throw rtx::Error (Environment for driver/device absence, Internal otherwise) if `e` is an error.
void cuda_check(cudaError_t e, const char* call, const char* file, int line);
}  // namespace rtx

/// Check a CUDA runtime call: RTX_CUDA_CHECK(cudaMalloc(&p, n));
#define RTX_CUDA_CHECK(call) ::rtx::cuda_check((call), #call, __FILE__, __LINE__)
/// Check the last kernel launch (cudaGetLastError).
#define RTX_CUDA_CHECK_LAUNCH() ::rtx::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
