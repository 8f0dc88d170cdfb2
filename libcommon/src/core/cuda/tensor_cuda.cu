// GPU strided gather for Tensor::contiguous()/copy_from on a CUDA device: one thread per
// output element, row-major over the shape, reading src at its strided offset.
#include <cuda_runtime_api.h>

#include "rtx/core/cuda_check.hpp"
#include "rtx/core/tensor.hpp"

namespace rtx::detail {
namespace {

struct StridedLayout {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
};

// dst (n,) contiguous; src strided per `lay` (element units). T is a same-size carrier type.
template <class T>
__global__ void strided_gather_kernel(T* dst, const T* src, StridedLayout lay, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i, off = 0;
    for (int d = lay.ndim - 1; d >= 0; --d) {
      const int64_t q = rem / lay.shape[d];
      off += (rem - q * lay.shape[d]) * lay.strides[d];
      rem = q;
    }
    dst[i] = src[off];
  }
}

template <class T>
void launch(void* dst, const void* src, const StridedLayout& lay, int64_t n) {
  const int threads = 256;
  const int64_t want = (n + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(want < 65536 ? want : 65536);
  strided_gather_kernel<T><<<grid, threads>>>(static_cast<T*>(dst), static_cast<const T*>(src), lay, n);
  RTX_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cuda_strided_copy(void* dst, const void* src, int ndim, const int64_t* shape, const int64_t* src_strides,
                       int64_t n, size_t itemsize, int device) {
  if (n <= 0) return;
  if (ndim < 0 || ndim > kMaxDims) throw_internal("bad ndim " + std::to_string(ndim), "cuda_strided_copy");
  StridedLayout lay{};
  lay.ndim = ndim;
  for (int d = 0; d < ndim; ++d) {
    lay.shape[d] = shape[d];
    lay.strides[d] = src_strides[d];
  }
  RTX_CUDA_CHECK(cudaSetDevice(device));
  switch (itemsize) {
    case 1: launch<uint8_t>(dst, src, lay, n); break;
    case 2: launch<uint16_t>(dst, src, lay, n); break;
    case 4: launch<uint32_t>(dst, src, lay, n); break;
    default: throw_internal("unexpected element size " + std::to_string(itemsize), "cuda_strided_copy");
  }
  RTX_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace rtx::detail
