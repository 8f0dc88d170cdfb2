// In-process sum allreduce over R "ranks" run as R threads (the CPU stand-in for an MPI/NCCL
// collective): chunk c is reduced by rank c % R in rank order and written back to every rank.
#include <algorithm>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::kernels {

void allreduce_sum(float* const* bufs, int64_t R, int64_t N, const AllreduceParams* params) {
  if (R < 1 || R > 256)
    throw_input("allreduce_sum: R = " + std::to_string(R) + " ranks outside [1,256]", "R", "use 1 to 256 ranks");
  if (N <= 0) throw_input("allreduce_sum: N = " + std::to_string(N) + " must be positive", "N", "pass a positive size");
  if (!bufs) throw_input("allreduce_sum: null buffer list", "bufs", "pass R buffer pointers");
  core::KernelRun run("allreduce_sum", "cpu", {{"R", R}, {"N", N}});
  for (int64_t r = 0; r < R; ++r)
    if (!bufs[r]) throw_input("allreduce_sum: buffer of rank " + std::to_string(r) + " is null", "bufs", "pass R buffers");
  const int64_t chunk = (params && params->chunk > 0) ? params->chunk : AllreduceParams{}.chunk;
  const int64_t nchunks = (N + chunk - 1) / chunk;
  // Each chunk is touched by exactly one rank thread (read all R buffers, write all R buffers), so the
  // threads need no barrier, and the sum order (rank 0, 1, ..., R-1) does not depend on the chunking.
  auto rank_main = [&](int64_t rank) {
    // Float64 accumulator, rounded once: the sum is the correctly rounded float of a (near-)exact sum.
    std::vector<double> acc(static_cast<size_t>(std::min(chunk, N)));
    std::vector<float> res(acc.size());
    for (int64_t c = rank; c < nchunks; c += R) {
      const int64_t b = c * chunk, n = std::min(N, b + chunk) - b;
      double* __restrict a = acc.data();
      float* __restrict out = res.data();
      const float* src0 = bufs[0] + b;
      for (int64_t i = 0; i < n; ++i) a[i] = src0[i];
      for (int64_t r = 1; r < R; ++r) {
        const float* src = bufs[r] + b;
        for (int64_t i = 0; i < n; ++i) a[i] += src[i];
      }
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(a[i]);
      for (int64_t r = 0; r < R; ++r) std::copy(out, out + n, bufs[r] + b);
    }
  };
  if (R == 1) return;  // a single rank already holds the sum
  std::vector<std::thread> ranks;
  ranks.reserve(static_cast<size_t>(R - 1));
  try {
    for (int64_t r = 1; r < R; ++r) ranks.emplace_back(rank_main, r);
  } catch (const std::system_error& e) {
    for (auto& t : ranks) t.join();  // the started ranks finish their chunks; the rest are not done
    throw_env(std::string("allreduce_sum: cannot start rank threads: ") + e.what(), "R",
              "use fewer ranks or raise the thread limit");
  }
  rank_main(0);
  for (auto& t : ranks) t.join();
}

}  // namespace rtx::kernels
