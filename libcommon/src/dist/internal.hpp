// Internal to the dist module: the MPI world communicator's factory and the thread-level query
// (mpi_comm.cpp), and the NCCL factory (cuda/nccl_comm.cu). Not a public header.
#pragma once
#include <memory>

#include "rtx/dist/comm.hpp"

namespace rtx::dist::detail {

/// MPI_COMM_WORLD behind the Communicator interface (MPI_Init_thread on first call). Only
/// defined when RTX_HAVE_MPI; throws Error(Environment) if MPI_Init_thread fails.
std::unique_ptr<Communicator> make_mpi_world();
/// True when `c` is an MPI communicator whose library granted MPI_THREAD_SERIALIZED or more.
bool mpi_thread_serialized(const Communicator& c);
/// NCCL communicator (cuda/nccl_comm.cu, only with RTX_HAVE_NCCL).
std::unique_ptr<Communicator> make_nccl_comm(Communicator& host, int device);

}  // namespace rtx::dist::detail
