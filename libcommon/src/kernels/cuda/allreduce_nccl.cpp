// allreduce "cuda.nccl": sum over R ranks with NCCL, one rank per GPU (ncclCommInitAll over the
// first R devices, rank 0 on the current device). libnccl.so.2 is loaded with dlopen at make()
// time, so the build has no NCCL dependency and machines without NCCL get Error(Environment).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <vector>

#include "cuda_register.hpp"
#include "kernels/problems.hpp"
#include "rtx/core/cuda_check.hpp"
#include "rtx/core/device.hpp"

namespace rtx::kernels::cuda_reg {
namespace {

// The few NCCL ABI pieces used here (nccl.h, NCCL 2.x: ncclFloat32 = 7, ncclSum = 0).
using NcclComm = struct ncclComm*;
using NcclResult = int;
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;

struct Nccl {
  NcclResult (*comm_init_all)(NcclComm*, int, const int*) = nullptr;
  NcclResult (*comm_destroy)(NcclComm) = nullptr;
  NcclResult (*all_reduce)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*group_start)() = nullptr;
  NcclResult (*group_end)() = nullptr;
  const char* (*error_string)(NcclResult) = nullptr;
  std::string error;  // why loading failed ("" when loaded)
};

const Nccl& nccl() {
  static Nccl n;
  static std::once_flag once;
  std::call_once(once, [] {
    // The loader path first, then the CUDA toolkit's own lib64 (where the toolkit ships NCCL).
    void* h = nullptr;
    for (const char* name : {"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2"}) {
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h) break;
    }
    if (!h) {
      const char* e = dlerror();
      n.error = e ? e : "dlopen(libnccl.so.2) failed";
      return;
    }
    auto sym = [&](const char* name) {
      void* s = dlsym(h, name);
      if (!s && n.error.empty()) n.error = std::string("libnccl lacks symbol ") + name;
      return s;
    };
    n.comm_init_all = reinterpret_cast<decltype(n.comm_init_all)>(sym("ncclCommInitAll"));
    n.comm_destroy = reinterpret_cast<decltype(n.comm_destroy)>(sym("ncclCommDestroy"));
    n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(sym("ncclAllReduce"));
    n.group_start = reinterpret_cast<decltype(n.group_start)>(sym("ncclGroupStart"));
    n.group_end = reinterpret_cast<decltype(n.group_end)>(sym("ncclGroupEnd"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(sym("ncclGetErrorString"));
  });
  return n;
}

void nccl_check(NcclResult r, const char* call) {
  if (r == 0) return;
  throw_internal(std::string(call) + " failed: " + (nccl().error_string ? nccl().error_string(r) : "?"),
                 "allreduce cuda.nccl");
}

/// Communicators, per-rank staging buffers and streams for ranks 1..R-1 (rank 0 reduces the
/// instance's buffer in place). Run: copy slices to their GPUs, grouped allreduce, copy back.
struct NcclPlan {
  int R = 0;
  int64_t N = 0;
  std::vector<int> devs;
  std::vector<NcclComm> comms;
  std::vector<float*> stage;          // [r] device buffer on devs[r] (r >= 1)
  std::vector<cudaStream_t> streams;  // [r] stream on devs[r] (r >= 1)
  std::vector<cudaEvent_t> events;    // [r] event on devs[r] (r >= 1)
  cudaEvent_t ev0 = nullptr;

  ~NcclPlan() {
    int cur = 0;
    cudaGetDevice(&cur);
    for (int r = 1; r < R; ++r) {
      cudaSetDevice(devs[r]);
      if (streams[r]) cudaStreamSynchronize(streams[r]);
      if (stage[r]) cudaFree(stage[r]);
      if (events[r]) cudaEventDestroy(events[r]);
      if (streams[r]) cudaStreamDestroy(streams[r]);
    }
    cudaSetDevice(cur);
    if (ev0) cudaEventDestroy(ev0);
    for (NcclComm c : comms)
      if (c) nccl().comm_destroy(c);
  }

  void run(float* bufs, cudaStream_t s0) {
    const size_t bytes = static_cast<size_t>(N) * sizeof(float);
    for (int r = 1; r < R; ++r)
      RTX_CUDA_CHECK(cudaMemcpyPeerAsync(stage[r], devs[r], bufs + static_cast<int64_t>(r) * N, devs[0], bytes, s0));
    RTX_CUDA_CHECK(cudaEventRecord(ev0, s0));
    for (int r = 1; r < R; ++r) RTX_CUDA_CHECK(cudaStreamWaitEvent(streams[r], ev0, 0));
    nccl_check(nccl().group_start(), "ncclGroupStart");
    for (int r = 0; r < R; ++r) {
      float* b = r == 0 ? bufs : stage[r];
      nccl_check(nccl().all_reduce(b, b, static_cast<size_t>(N), kNcclFloat32, kNcclSum, comms[r], r == 0 ? s0 : streams[r]),
                 "ncclAllReduce");
    }
    nccl_check(nccl().group_end(), "ncclGroupEnd");
    int cur = 0;
    RTX_CUDA_CHECK(cudaGetDevice(&cur));
    for (int r = 1; r < R; ++r) {
      RTX_CUDA_CHECK(cudaSetDevice(devs[r]));
      RTX_CUDA_CHECK(cudaEventRecord(events[r], streams[r]));
    }
    RTX_CUDA_CHECK(cudaSetDevice(cur));
    for (int r = 1; r < R; ++r) {
      RTX_CUDA_CHECK(cudaStreamWaitEvent(s0, events[r], 0));
      RTX_CUDA_CHECK(cudaMemcpyPeerAsync(bufs + static_cast<int64_t>(r) * N, devs[0], stage[r], devs[r], bytes, s0));
    }
  }
};

Runner nccl_runner(const Problem& p, const Params&) {
  const Nccl& n = nccl();
  if (!n.error.empty())
    throw_env("NCCL is not available: " + n.error, "allreduce cuda.nccl",
              "install NCCL (libnccl.so.2 on the loader path) or use the cpu.threads variant");
  const int R = dim(p.shape, "R");
  const int64_t N = dim(p.shape, "N");
  int count = 0;
  RTX_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (R > count)
    throw_env("allreduce cuda.nccl maps one rank per GPU: R = " + std::to_string(R) + " ranks but " +
                  std::to_string(count) + " GPU(s) visible",
              "R", "use R <= " + std::to_string(count) + " or the cpu.threads variant");
  const size_t ib = output_index(p, "bufs");
  auto plan = std::make_shared<NcclPlan>();
  plan->R = R;
  plan->N = N;
  int cur = 0;
  RTX_CUDA_CHECK(cudaGetDevice(&cur));
  plan->devs.push_back(cur);
  for (int d = 0; d < count && static_cast<int>(plan->devs.size()) < R; ++d)
    if (d != cur) plan->devs.push_back(d);
  plan->comms.assign(R, nullptr);
  plan->stage.assign(R, nullptr);
  plan->streams.assign(R, nullptr);
  plan->events.assign(R, nullptr);
  RTX_CUDA_CHECK(cudaEventCreateWithFlags(&plan->ev0, cudaEventDisableTiming));
  for (int r = 1; r < R; ++r) {
    RTX_CUDA_CHECK(cudaSetDevice(plan->devs[r]));
    RTX_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&plan->stage[r]), static_cast<size_t>(N) * sizeof(float)));
    RTX_CUDA_CHECK(cudaStreamCreateWithFlags(&plan->streams[r], cudaStreamNonBlocking));
    RTX_CUDA_CHECK(cudaEventCreateWithFlags(&plan->events[r], cudaEventDisableTiming));
  }
  RTX_CUDA_CHECK(cudaSetDevice(cur));
  nccl_check(n.comm_init_all(plan->comms.data(), R, plan->devs.data()), "ncclCommInitAll");
  RTX_CUDA_CHECK(cudaSetDevice(cur));
  return [plan, ib](const RunArgs& a) { plan->run(a.out[ib], static_cast<cudaStream_t>(a.stream)); };
}

/// A point this variant cannot run is skipped, not failed: no NCCL, or fewer GPUs than ranks.
std::string nccl_validate(const Shape& s, const Params&) {
  const Nccl& n = nccl();
  if (!n.error.empty()) return "NCCL is not available (" + n.error + ")";
  auto it = s.find("R");
  const int gpus = cuda_device_count();
  if (it != s.end() && it->second > gpus)
    return "R = " + std::to_string(it->second) + " ranks need one GPU each; " + std::to_string(gpus) + " visible";
  return "";
}

}  // namespace

void register_allreduce(Registry& r) {
  add_variant(r, "allreduce", "cuda.nccl", {DType::F32}, ParamSpace{}, nccl_validate, make_allreduce_problem,
              nccl_runner);
}

}  // namespace rtx::kernels::cuda_reg
