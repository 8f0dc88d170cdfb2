// Telemetry of CUDA launches (topics kernel.launch and occ_profile), for every .cu file that
// launches kernels. Near-free when nothing listens: one relaxed atomic load per launch.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <tuple>

#include "rtx/core/events.hpp"

namespace rtx::kernels::cuda::detail {

/// Call just before `kernel<<<grid, block, smem, stream>>>`. When events are on, emits
/// "kernel.launch" {name, variant "cuda", grid [x,y,z], block [x,y,z], smem_bytes, begin_ns =
/// end_ns = the launch time (steady_now_ns; the GPU time is CUPTI's)} and, the first time this
/// (kernel, device, threads per block, dynamic shared memory) is launched in the process,
/// "occ_profile" {name, device, threads_per_block, smem_bytes, active_blocks_per_sm,
/// active_warps_per_sm, max_warps_per_sm, occupancy (active warps / max warps, 0..1)}, from
/// cudaOccupancyMaxActiveBlocksPerMultiprocessor (CUDA C++ Programming Guide, "Occupancy
/// Calculator"). Never throws; a failing occupancy query is left out.
inline void note_launch(const void* kernel, const char* name, dim3 grid, dim3 block, size_t smem) noexcept {
  if (!core::events_enabled()) return;
  try {
    const uint64_t t = core::steady_now_ns();
    core::emit_event("kernel.launch", {{"name", name},
                                       {"variant", "cuda"},
                                       {"grid", {grid.x, grid.y, grid.z}},
                                       {"block", {block.x, block.y, block.z}},
                                       {"smem_bytes", smem},
                                       {"begin_ns", t},
                                       {"end_ns", t},
                                       {"dur_ns", 0}});
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return;
    const int threads = static_cast<int>(block.x * block.y * block.z);
    static std::mutex mu;
    static std::set<std::tuple<const void*, int, int, size_t>> seen;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!seen.insert({kernel, dev, threads, smem}).second) return;
    }
    int blocks = 0, max_threads = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem) != cudaSuccess ||
        cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev) != cudaSuccess ||
        max_threads <= 0) {
      (void)cudaGetLastError();  // clear a sticky query error so the launch's own check is not blamed
      return;
    }
    const int warps_per_block = (threads + 31) / 32, max_warps = max_threads / 32;
    core::emit_event("occ_profile", {{"name", name},
                                     {"device", dev},
                                     {"threads_per_block", threads},
                                     {"smem_bytes", smem},
                                     {"active_blocks_per_sm", blocks},
                                     {"active_warps_per_sm", blocks * warps_per_block},
                                     {"max_warps_per_sm", max_warps},
                                     {"occupancy", static_cast<double>(blocks * warps_per_block) / max_warps}});
  } catch (...) {
    // Telemetry never breaks a launch.
  }
}

}  // namespace rtx::kernels::cuda::detail

/// note_launch for `kernel` (a __global__ function or a pointer to one), named as written.
#define RTX_NOTE_LAUNCH(kernel, grid, block, smem)                                                       \
  ::rtx::kernels::cuda::detail::note_launch(reinterpret_cast<const void*>(kernel), #kernel, dim3(grid), \
                                            dim3(block), static_cast<size_t>(smem))
/// note_launch with an explicit name (for a kernel held in a variable).
#define RTX_NOTE_LAUNCH_AS(kernel, name, grid, block, smem)                                            \
  ::rtx::kernels::cuda::detail::note_launch(reinterpret_cast<const void*>(kernel), name, dim3(grid), \
                                            dim3(block), static_cast<size_t>(smem))
