// The generic CUDA instance: uploads a Problem's inputs once (bf16 converted on the host),
// poisons or initialises outputs before each checked run, times with CUDA events on its own
// non-blocking stream, copies outputs back to check against the float64 reference.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "rtx/core/cuda_check.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/problem.hpp"

namespace rtx::kernels {
namespace {

/// A device buffer of at least 2x the L2 cache of the current device, allocated once per
/// device for the process (cold-cache flushes write it; it is never freed).
struct FlushBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
};

FlushBuffer flush_buffer() {
  static std::mutex mu;
  static std::map<int, FlushBuffer> bufs;
  int dev = 0;
  RTX_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = bufs.find(dev);
  if (it != bufs.end()) return it->second;
  int l2 = 0;
  RTX_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  FlushBuffer b;
  b.bytes = std::max<size_t>(2 * static_cast<size_t>(l2), size_t{8} << 20);
  RTX_CUDA_CHECK(cudaMalloc(&b.ptr, b.bytes));
  bufs[dev] = b;
  return b;
}

class CudaInstance final : public Instance {
 public:
  CudaInstance(Problem p, const Params& params, double tol, Runner run)
      : p_(std::move(p)), params_(params), tol_(tol), run_(std::move(run)) {
    require_cuda("CUDA kernel instance");
    try {
      RTX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      RTX_CUDA_CHECK(cudaEventCreate(&ev0_));
      RTX_CUDA_CHECK(cudaEventCreate(&ev1_));
      for (const auto& t : p_.inputs) {
        const bool bf = p_.dtype == DType::BF16 && !t.always_f32;
        const size_t bytes = t.data.size() * (bf ? 2 : 4);
        void* d = alloc(bytes);
        if (bf) {
          std::vector<uint16_t> h(t.data.size());
          for (size_t i = 0; i < t.data.size(); ++i) h[i] = f32_to_bf16(t.data[i]);
          RTX_CUDA_CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
        } else if (bytes) {
          RTX_CUDA_CHECK(cudaMemcpy(d, t.data.data(), bytes, cudaMemcpyHostToDevice));
        }
        args_.in.push_back(d);
      }
      if (!p_.ids.empty()) {
        void* d = alloc(p_.ids.size() * 4);
        RTX_CUDA_CHECK(cudaMemcpy(d, p_.ids.data(), p_.ids.size() * 4, cudaMemcpyHostToDevice));
        args_.ids = static_cast<const int32_t*>(d);
      }
      size_t max_out = 0;
      for (const auto& o : p_.outputs) {
        args_.out.push_back(static_cast<float*>(alloc(o.size * 4)));
        max_out = std::max(max_out, o.size);
      }
      poison_.resize(max_out);
      poison(poison_.data(), max_out);
      args_.shape = &p_.shape;
      args_.params = &params_;
      args_.dtype = p_.dtype;
      args_.stream = stream_;
      reset_outputs();
      RTX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaInstance() override { release(); }

  void run() override { run_(args_); }

  void sync() override { RTX_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  double timed_run() override {
    RTX_CUDA_CHECK(cudaEventRecord(ev0_, stream_));
    run_(args_);
    RTX_CUDA_CHECK(cudaEventRecord(ev1_, stream_));
    RTX_CUDA_CHECK(cudaEventSynchronize(ev1_));
    float ms = 0.f;
    RTX_CUDA_CHECK(cudaEventElapsedTime(&ms, ev0_, ev1_));
    return static_cast<double>(ms) * 1e-3;
  }

  void flush_cache() override {
    const FlushBuffer b = flush_buffer();
    flips_ ^= 1;  // alternate the byte so no layer can elide a repeated identical memset
    RTX_CUDA_CHECK(cudaMemsetAsync(b.ptr, flips_, b.bytes, stream_));
  }

  CheckResult check() override {
    reset_outputs();
    run_(args_);
    download();
    if (!ref_) ref_ = reference_of(p_);
    if (ref_->size() != p_.outputs.size()) throw_internal("reference returned wrong number of outputs");
    CheckResult r;
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      if ((*ref_)[i].size() != p_.outputs[i].size) throw_internal("reference size mismatch for " + p_.outputs[i].name);
      compare(host_[i].data(), (*ref_)[i].data(), p_.outputs[i].size, p_.outputs[i].name.c_str(), r);
    }
    finish_check(r, tol_);
    return r;
  }

  uint64_t checksum() override {
    download();
    uint64_t h = kFnv1a64Basis;
    for (size_t i = 0; i < p_.outputs.size(); ++i) h = fnv1a64(host_[i].data(), p_.outputs[i].size * 4, h);
    return h;
  }

  std::vector<std::vector<float>> output_values() override {
    download();
    std::vector<std::vector<float>> v;
    for (size_t i = 0; i < p_.outputs.size(); ++i) v.emplace_back(host_[i].data(), host_[i].data() + p_.outputs[i].size);
    return v;
  }

  size_t footprint_bytes() const override { return device_bytes_; }

 private:
  void* alloc(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* d = nullptr;
    RTX_CUDA_CHECK(cudaMalloc(&d, bytes));
    allocs_.push_back(d);
    device_bytes_ += bytes;
    return d;
  }

  // Poison (exact NaN pattern of check.hpp) or copy `init` into every output, on the stream.
  void reset_outputs() {
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      const auto& o = p_.outputs[i];
      if (o.size == 0) continue;
      const float* src = o.init.empty() ? poison_.data() : o.init.data();
      RTX_CUDA_CHECK(cudaMemcpyAsync(args_.out[i], src, o.size * 4, cudaMemcpyHostToDevice, stream_));
    }
  }

  void download() {
    host_.resize(p_.outputs.size());
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      host_[i].resize(p_.outputs[i].size);
      if (p_.outputs[i].size)
        RTX_CUDA_CHECK(cudaMemcpyAsync(host_[i].data(), args_.out[i], p_.outputs[i].size * 4, cudaMemcpyDeviceToHost,
                                       stream_));
    }
    RTX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void release() noexcept {
    if (stream_) cudaStreamSynchronize(stream_);
    for (void* d : allocs_) cudaFree(d);
    allocs_.clear();
    if (ev0_) cudaEventDestroy(ev0_);
    if (ev1_) cudaEventDestroy(ev1_);
    if (stream_) cudaStreamDestroy(stream_);
    ev0_ = ev1_ = nullptr;
    stream_ = nullptr;
  }

  Problem p_;
  Params params_;
  double tol_;
  Runner run_;
  RunArgs args_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev0_ = nullptr, ev1_ = nullptr;
  std::vector<void*> allocs_;
  size_t device_bytes_ = 0;
  std::vector<float> poison_;
  std::vector<std::vector<float>> host_;
  std::shared_ptr<const Reference> ref_;
  int flips_ = 0;
};

}  // namespace

std::unique_ptr<Instance> make_cuda_instance(Problem p, const Params& params, double tolerance, Runner run) {
  return std::make_unique<CudaInstance>(std::move(p), params, tolerance, std::move(run));
}

}  // namespace rtx::kernels
