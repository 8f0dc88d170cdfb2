// CUDA Philox fill against the CPU stream (rtx::philox_uniform), bitwise; CUDA tensor copies
// and the CUDA caching allocator. Every case skips with a message when no GPU is present.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "rtx/core/allocator.hpp"
#include "rtx/core/cuda_rng.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/core/tensor.hpp"
#include "test_util.hpp"

#ifdef RTX_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "rtx/core/cuda_check.hpp"
#endif

using namespace rtx;

TEST_CASE("cuda_fill_uniform without a GPU or CUDA build throws Environment", "[cuda]") {
  if (rtx::test::have_gpu()) {
    WARN("a GPU is present: the no-GPU error path is not exercised");
    return;
  }
#ifndef RTX_HAVE_CUDA
  float x = 0;
  try {
    cuda_fill_uniform(&x, 1, 1, 0, 0.0f, 1.0f, nullptr);
    FAIL("no error without the CUDA backend");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
  }
#endif
  CHECK_THROWS_AS(cuda_allocator(0), Error);
}

#ifdef RTX_HAVE_CUDA
TEST_CASE("cuda_fill_uniform equals philox_uniform bitwise", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  struct Case {
    size_t n;
    uint64_t seed, subseq;
    float lo, hi;
  };
  const std::vector<Case> cases = {
      {1, 0, 0, 0.0f, 1.0f},          {3, 1, 0, -1.0f, 1.0f},           {4, 42, 7, -1.0f, 1.0f},
      {7, 42, 7, -3.5f, 7.25f},       {127, 0xdeadbeefcafef00dull, (1ull << 40) + 3, -0.02f, 0.02f},
      {1000003, 12345, 1, -1.0f, 1.0f}, {4099, 9, 0, 1e-3f, 3.0f}};
  void* raw = nullptr;
  RTX_CUDA_CHECK(cudaMalloc(&raw, (1000003 + 1) * sizeof(float)));
  float* dev = static_cast<float*>(raw);
  cudaStream_t stream;
  RTX_CUDA_CHECK(cudaStreamCreate(&stream));
  for (const Case& c : cases) {
    for (int shift = 0; shift < 2; ++shift) {  // aligned and misaligned destination
      INFO("n=" << c.n << " seed=" << c.seed << " subseq=" << c.subseq << " shift=" << shift);
      std::vector<float> got(c.n), want(c.n);
      cuda_fill_uniform(dev + shift, c.n, c.seed, c.subseq, c.lo, c.hi, shift ? stream : nullptr);
      RTX_CUDA_CHECK(cudaDeviceSynchronize());
      RTX_CUDA_CHECK(cudaMemcpy(got.data(), dev + shift, c.n * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < c.n; ++i) want[i] = philox_uniform(c.seed, c.subseq, i, c.lo, c.hi);
      size_t mismatches = 0;
      for (size_t i = 0; i < c.n; ++i) mismatches += std::memcmp(&got[i], &want[i], 4) != 0;
      CHECK(mismatches == 0);
      bool in_range = true;
      for (float v : got) in_range = in_range && v >= c.lo && v <= c.hi;
      CHECK(in_range);
    }
  }
  // the fill writes exactly n elements
  const float sentinel = -123.0f;
  RTX_CUDA_CHECK(cudaMemcpy(dev + 5, &sentinel, 4, cudaMemcpyHostToDevice));
  cuda_fill_uniform(dev, 5, 1, 1, 0.0f, 1.0f, nullptr);
  float after = 0;
  RTX_CUDA_CHECK(cudaMemcpy(&after, dev + 5, 4, cudaMemcpyDeviceToHost));
  CHECK(after == sentinel);
  cuda_fill_uniform(dev, 0, 1, 1, 0.0f, 1.0f, nullptr);  // no-op
  CHECK_THROWS_AS(cuda_fill_uniform(nullptr, 3, 1, 1, 0.0f, 1.0f, nullptr), Error);
  RTX_CUDA_CHECK(cudaStreamDestroy(stream));
  RTX_CUDA_CHECK(cudaFree(dev));
}

TEST_CASE("CUDA tensors: copies, strided gather, allocator stats", "[cuda]") {
  RTX_SKIP_WITHOUT_GPU();
  Tensor h = Tensor::empty({2, 3, 4}, DType::F32);
  for (int64_t i = 0; i < 24; ++i) h.data_as<float>()[i] = static_cast<float>(i);
  Tensor d = h.to(Device::cuda(0));
  CHECK(d.device() == Device::cuda(0));
  // transpose on the GPU, gathered by the strided kernel, back to the host
  Tensor dt = d.transpose(0, 2).contiguous();
  CHECK(dt.device().is_cuda());
  Tensor back = dt.to(Device::cpu());
  const std::vector<float> want = {0, 12, 4, 16, 8, 20, 1, 13, 5, 17, 9, 21,
                                   2, 14, 6, 18, 10, 22, 3, 15, 7, 19, 11, 23};
  CHECK(std::vector<float>(back.data_as<float>(), back.data_as<float>() + 24) == want);
  // a non-contiguous CUDA view straight to the host
  Tensor nar = d.narrow(2, 1, 3).narrow(1, 1, 1).to(Device::cpu());
  CHECK(nar.shape() == std::vector<int64_t>{2, 1, 3});
  CHECK(nar.get({1, 0, 2}) == 12 + 4 + 3);
  // odd sizes and every element size round-trip
  for (DType t : {DType::F32, DType::BF16, DType::I8}) {
    for (int64_t n : {1, 7, 127, 100003}) {
      Tensor x = Tensor::empty({n}, t);
      for (int64_t i = 0; i < n; ++i) x.set({i}, static_cast<double>(i % 97));
      Tensor y = x.to(Device::cuda(0)).clone().to(Device::cpu());
      CHECK(std::memcmp(x.data(), y.data(), x.nbytes()) == 0);
    }
  }
  Tensor z = Tensor::zeros({127}, DType::I32, Device::cuda(0)).to(Device::cpu());
  bool zero = true;
  for (int64_t i = 0; i < 127; ++i) zero = zero && z.at<int32_t>({i}) == 0;
  CHECK(zero);
  CHECK_THROWS_AS(d.to(DType::BF16), Error);          // dtype conversion is CPU only
  CHECK_THROWS_AS(d.transpose(0, 1).copy_from(h.transpose(0, 1).contiguous()), Error);  // strided CUDA dst

  // the CUDA caching allocator reuses blocks and reports stats
  CachingAllocator& a = cuda_allocator(0);
  a.empty_cache();
  const auto s0 = a.stats();
  void* p = a.allocate(1000);
  a.deallocate(p);
  void* q = a.allocate(900);
  CHECK(q == p);
  CHECK(a.stats().backing_allocs <= s0.backing_allocs + 1);
  a.deallocate(q);
  CHECK_THROWS_AS(cuda_allocator(1 << 20), Error);
}
#endif
