// The NCCL communicator: one GPU per rank, the unique id broadcast over a host communicator
// (MPI), collectives on the communicator's own stream, polled against the timeout with
// ncclCommGetAsyncError and aborted with ncclCommAbort on expiry (no hang on a dead rank).
#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <chrono>
#include <string>

#include "dist/internal.hpp"
#include "rtx/core/error.hpp"

namespace rtx::dist::detail {
namespace {

class NcclComm final : public Communicator {
 public:
  NcclComm(Communicator& host, int device) : host_(host) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1)
      throw_env("NCCL communicator: no CUDA device on rank " + std::to_string(host.rank()), "dist.nccl",
                "run the CUDA backend on GPU nodes, or --backend cpu");
    if (device < 0) {
      const int local = local_rank_from_env();
      device = (local < 0 ? 0 : local) % count;
    }
    device_ = device;
    cuda(cudaSetDevice(device_), "cudaSetDevice");
    cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId id;
    if (host.rank() == 0) nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", 0);
    host.broadcast(&id, sizeof id, 0);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // non-blocking init and collectives: we poll, so a dead peer cannot hang us
    nccl(ncclCommInitRankConfig(&comm_, host.size(), id, host.rank(), &cfg), "ncclCommInitRankConfig", 0);
    poll("ncclCommInitRank", 0, false);
  }
  ~NcclComm() override {
    if (comm_) {
      if (!broken_ && finalized_in_time())
        ncclCommDestroy(comm_);  // frees local resources only: no wait once finalized
      else
        ncclCommAbort(comm_);
    }
    if (stream_) cudaStreamDestroy(stream_);
  }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const char* backend() const override { return "nccl"; }
  MemorySpace memory() const override { return MemorySpace::Device; }

 protected:
  void do_allreduce_sum(void* data, size_t n, int dtype_bytes) override {
    begin();
    nccl(ncclAllReduce(data, data, n, dtype_bytes == 8 ? ncclDouble : ncclFloat, ncclSum, comm_, stream_),
         "ncclAllReduce", n * static_cast<size_t>(dtype_bytes));
    poll("allreduce", n * static_cast<size_t>(dtype_bytes), true);
  }
  void do_broadcast(void* data, size_t bytes, int root) override {
    begin();
    nccl(ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_), "ncclBroadcast", bytes);
    poll("broadcast", bytes, true);
  }
  void do_allgather(const void* send, void* recv, size_t bytes) override { host_.allgather(send, recv, bytes); }
  void do_barrier() override { host_.barrier(); }

 private:
  /// The caller's buffers were written on other streams: wait for the device first.
  void begin() {
    cuda(cudaSetDevice(device_), "cudaSetDevice");
    cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void cuda(cudaError_t e, const char* call) {
    if (e == cudaSuccess) return;
    broken_ = true;
    throw_env(std::string("NCCL communicator: ") + call + " failed: " + cudaGetErrorString(e), "dist.nccl");
  }
  void nccl(ncclResult_t r, const char* call, size_t bytes) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    broken_ = true;
    if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
    throw_env(std::string("NCCL: ") + call + " of " + std::to_string(bytes) + " B failed on rank " +
                  std::to_string(rank()) + ": " + ncclGetErrorString(r),
              "dist.nccl", "another rank may have died; check its output (NCCL_DEBUG=WARN for details)");
  }
  /// ncclCommFinalize, then its state polled until the communicator is globally quiescent,
  /// within the collectives' timeout. False on an error or at the deadline (a peer that died or
  /// never finalizes would otherwise hang this rank's exit inside ncclCommDestroy, which
  /// finalizes implicitly); the caller then aborts. Never throws (it runs in the destructor).
  bool finalized_in_time() noexcept {
    using clk = std::chrono::steady_clock;
    const ncclResult_t r = ncclCommFinalize(comm_);
    if (r != ncclSuccess && r != ncclInProgress) return false;
    const auto deadline =
        clk::now() + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(timeout_s()));
    for (long spins = 0;; ++spins) {
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) return false;
      if (st == ncclSuccess) return true;
      if (st != ncclInProgress) return false;
      if (spins > 1000) sched_yield();
      if ((spins & 255) == 0 && clk::now() > deadline) return false;
    }
  }
  /// Wait until the communicator's async state is ready and (with_stream) the stream drained.
  void poll(const char* op, size_t bytes, bool with_stream) {
    using clk = std::chrono::steady_clock;
    const auto deadline =
        clk::now() + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(timeout_s()));
    for (long spins = 0;; ++spins) {
      ncclResult_t st = ncclSuccess;
      nccl(ncclCommGetAsyncError(comm_, &st), "ncclCommGetAsyncError", bytes);
      if (st != ncclSuccess && st != ncclInProgress) nccl(st, op, bytes);
      if (st == ncclSuccess) {
        if (!with_stream) return;
        const cudaError_t q = cudaStreamQuery(stream_);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) cuda(q, "cudaStreamQuery");
      }
      if (spins > 1000) sched_yield();
      if ((spins & 255) == 0 && clk::now() > deadline) {
        if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
        timed_out(op, bytes);
      }
    }
  }

  Communicator& host_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_comm(Communicator& host, int device) {
  return std::make_unique<NcclComm>(host, device);
}

}  // namespace rtx::dist::detail
