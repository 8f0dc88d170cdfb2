// Bench ops of the dist module: "allreduce_world" (in-place float32 sum over the ranks of
// dist::world()), timed like nccl-tests so `mpirun -n N rtx-bench run benchpacks/dist.json`
// reports algorithm and bus bandwidth per message size.
#pragma once
#include "rtx/kernels/registry.hpp"

namespace rtx::dist {

/// Register op "allreduce_world": dims {BYTES} (message size in bytes, a multiple of 4), variants
/// "cpu.mpi" (host buffers, dist::world()) and, with NCCL, "cuda.nccl" (device buffers). One
/// timed run is a barrier then the all-reduce; the sample is the slowest rank's time (a
/// max-all-reduce of it), so every rank records the same samples and the bench runner's stop
/// rules stay in lock-step across ranks. Work::bytes = BYTES x 2(n-1)/n (1 alone), so the
/// bench's bytes/s is nccl-tests' busbw; algbw = busbw x n / (2(n-1)). Each run also publishes
/// a dist.collective event with both. check(): every rank fills x[i] = (rank+1) * (i % 17), the
/// sum must be n(n+1)/2 * (i % 17) exactly; the buffer is zeroed afterwards so repeated in-place
/// sums stay finite.
void register_dist_ops(kernels::Registry& r);

}  // namespace rtx::dist
