// Communicators for data-parallel training: one interface (rank, size, in-place all-reduce,
// broadcast, all-gather, barrier) over MPI (CPU, host memory), NCCL (CUDA, device memory) and a
// single process. Not a cluster manager: ranks come from the launcher (mpirun, srun).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace rtx::dist {

/// Where the buffers passed to a communicator's collectives must live.
enum class MemorySpace { Host, Device };

/// Bus-bandwidth factor of a collective over n ranks (nccl-tests, doc/PERFORMANCE.md):
/// busbw = algbw x factor, with all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n,
/// broadcast 1. algbw = bytes / time, bytes being the per-rank buffer size (all-gather: the
/// gathered size). n = 1 gives 0 for all-reduce and all-gather (no bytes cross a bus).
/// `op` is "allreduce", "allgather", "reducescatter" or "broadcast"; other ops (barrier) give 0.
double busbw_factor(const std::string& op, int n);

/// One process's handle on a group of ranks. Collectives must be called by every rank of the
/// group in the same order with the same sizes. Every blocking call waits at most timeout_s()
/// seconds: past that it throws Error(Environment) naming the operation, the size and the rank
/// ("another rank died or hangs"), and the communicator is marked broken (later calls throw at
/// once). Each completed collective publishes a `dist.collective` telemetry event
/// {op, backend, bytes, ranks, rank, time_s, algbw (B/s), busbw (B/s)}.
/// Calls from two threads must not overlap in time (MPI_THREAD_SERIALIZED semantics).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "single", "mpi" or "nccl".
  virtual const char* backend() const = 0;
  /// Host for single and MPI, Device for NCCL (pointers to allreduce_sum/broadcast).
  virtual MemorySpace memory() const { return MemorySpace::Host; }

  /// In-place sum over ranks of data[0..n) (float32). Every rank ends with the same values.
  void allreduce_sum(float* data, size_t n);
  /// In-place sum of float64 values (loss scalars, flags).
  void allreduce_sum(double* data, size_t n);
  /// Copy `bytes` bytes of root's `data` to every rank's `data`.
  void broadcast(void* data, size_t bytes, int root);
  /// recv[r * bytes .. (r+1) * bytes) = rank r's send[0..bytes), on every rank. Host memory
  /// always (also on NCCL, which bootstraps through its host communicator).
  void allgather(const void* send, void* recv, size_t bytes);
  /// Wait for every rank.
  void barrier();

  /// Seconds a collective may wait before the job is declared dead (default: $RTX_DIST_TIMEOUT
  /// or 600). Throws Error(Usage) for a value <= 0 or not finite.
  void set_timeout(double seconds);
  double timeout_s() const { return timeout_s_; }
  /// True after a collective timed out or failed: the group cannot be used again.
  bool broken() const { return broken_; }

 protected:
  Communicator();
  /// Implementations: the collective itself, blocking, honouring timeout_s(). dtype_bytes is 4
  /// (float) or 8 (double).
  virtual void do_allreduce_sum(void* data, size_t n, int dtype_bytes) = 0;
  virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
  virtual void do_allgather(const void* send, void* recv, size_t bytes) = 0;
  virtual void do_barrier() = 0;
  /// Throw Error(Environment) for a timed-out `op` (marks broken).
  [[noreturn]] void timed_out(const std::string& op, size_t bytes);
  bool broken_ = false;

 private:
  void check_usable(const char* op) const;
  void publish(const char* op, size_t bytes, double seconds) const;
  double timeout_s_ = 600;
};

/// The communicator of one process alone: rank 0 of 1; collectives are no-ops (a copy for
/// allgather) but still publish their telemetry.
class SingleComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "single"; }

 protected:
  void do_allreduce_sum(void*, size_t, int) override {}
  void do_broadcast(void*, size_t, int) override {}
  void do_allgather(const void* send, void* recv, size_t bytes) override;
  void do_barrier() override {}
};

/// True when this build has MPI (RTX_HAVE_MPI) / NCCL (RTX_HAVE_NCCL).
bool have_mpi() noexcept;
bool have_nccl() noexcept;
/// The MPI launcher this build found (CMake's MPIEXEC_EXECUTABLE, e.g. /usr/bin/mpiexec) when
/// it exists and is executable now, else "" (no MPI, or the launcher was removed).
std::string mpiexec_path();
/// True when the environment says a launcher started this process as one of several ranks:
/// OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, or Slurm's SLURM_NTASKS > 1 with SLURM_PROCID.
bool launched_by_mpi() noexcept;

/// The process-wide communicator over every rank of the job, made on first use: MPI's world
/// (MPI_Init_thread asking for MPI_THREAD_SERIALIZED; MPI_Finalize at exit unless a collective
/// failed) when launched_by_mpi() and have_mpi(), else a SingleComm. Throws Error(Environment)
/// when launched by mpirun but built without MPI (every rank would train alone), or when
/// MPI_Init_thread fails.
Communicator& world();

/// Does `comm` tolerate being driven from a second thread (a communication thread) while the
/// calling thread does no collectives? True for single and NCCL, and for MPI when the library
/// granted MPI_THREAD_SERIALIZED or better.
bool thread_capable(const Communicator& comm);

/// An NCCL communicator over the same ranks as `host` (normally world()): rank 0 makes the
/// unique id (ncclGetUniqueId) and broadcasts it over `host`; each rank uses GPU `device`
/// (-1: the local rank from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI_LOCALRANKID,
/// modulo the device count). Collectives take device pointers, run on the communicator's own
/// stream after a device synchronize, and are polled against the timeout (ncclCommAbort on
/// expiry). `host` must outlive the result. Throws Error(Environment) when built without
/// NCCL or without a GPU.
std::unique_ptr<Communicator> make_nccl(Communicator& host, int device = -1);

/// The local rank on this node as the launcher reports it (OMPI_COMM_WORLD_LOCAL_RANK,
/// SLURM_LOCALID, MPI_LOCALRANKID), or -1 when none is set.
int local_rank_from_env() noexcept;

/// Refuse a job whose ranks disagree on `what` (e.g. "run config"): all-gathers a 64-bit
/// FNV-1a hash of `value` and, if any differs from rank 0's, throws Error(Input) on every rank
/// naming the ranks and both hashes; the message on a differing rank also names the first
/// differing JSON key with both values when `value` is a JSON object (rank 0's text is
/// broadcast for that). Collective: every rank calls it with the same `what`.
void require_same(Communicator& comm, const std::string& what, const std::string& value);

}  // namespace rtx::dist
