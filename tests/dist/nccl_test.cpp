// NCCL communicator on one GPU (a group of one rank, bootstrapped over a SingleComm): device
// all-reduce, broadcast, telemetry. Skips without a GPU or without NCCL in the build.
#include <catch2/catch.hpp>

#include <cstdio>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/telemetry/bus.hpp"
#include "test_util.hpp"

#ifdef RTX_HAVE_NCCL
#include <cuda_runtime.h>
#endif

using namespace rtx;
using namespace rtx::dist;

TEST_CASE("NCCL communicator: one-rank all-reduce and broadcast on device memory", "[cuda]") {
#ifndef RTX_HAVE_NCCL
  std::printf("SKIPPED: built without the CUDA backend (or without NCCL)\n");
  return;
#else
  if (!rtx::test::have_gpu()) {
    std::printf("SKIPPED: no usable CUDA device\n");
    return;
  }
  SingleComm host;
  std::unique_ptr<Communicator> c = make_nccl(host, 0);
  CHECK(c->memory() == MemorySpace::Device);
  CHECK(std::string(c->backend()) == "nccl");
  for (size_t n : {size_t{1}, size_t{7}, size_t{127}, size_t{1} << 20}) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>(i % 13) - 6.5f;
    float* d = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    c->allreduce_sum(d, n);  // one rank: the sum is the input
    c->broadcast(d, n * sizeof(float), 0);
    std::vector<float> back(n);
    REQUIRE(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(back == h);
    cudaFree(d);
  }
  CHECK_THROWS_AS(c->broadcast(nullptr, 4, 0), Error);
#endif
}
