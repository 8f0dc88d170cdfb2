// The "allreduce_world" bench op: an in-place float32 sum over dist::world()'s ranks (MPI, host
// buffers) or an NCCL communicator over them (device buffers), timed like nccl-tests.
#include "rtx/dist/bench_ops.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/dist/comm.hpp"
#include "rtx/kernels/check.hpp"

#ifdef RTX_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace rtx::dist {
namespace {

using kernels::CheckResult;
using kernels::Instance;
using kernels::Params;
using kernels::Shape;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Buffer access for one memory space: host vector or device allocation.
class Buffer {
 public:
  Buffer(size_t n, MemorySpace where) : n_(n), where_(where) {
    if (where == MemorySpace::Host) {
      host_.assign(n, 0.0f);
      return;
    }
#ifdef RTX_HAVE_NCCL
    if (cudaMalloc(reinterpret_cast<void**>(&dev_), std::max<size_t>(n, 1) * sizeof(float)) != cudaSuccess)
      throw_env("allreduce bench: cudaMalloc of " + std::to_string(n * sizeof(float)) + " B failed", "cuda.nccl");
    cudaMemset(dev_, 0, n * sizeof(float));
#endif
  }
  ~Buffer() {
#ifdef RTX_HAVE_NCCL
    if (dev_) cudaFree(dev_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data() { return where_ == MemorySpace::Host ? host_.data() : dev_; }
  void upload(const std::vector<float>& h) {
    if (where_ == MemorySpace::Host) {
      host_ = h;
      return;
    }
#ifdef RTX_HAVE_NCCL
    cudaMemcpy(dev_, h.data(), n_ * sizeof(float), cudaMemcpyHostToDevice);
#endif
  }
  std::vector<float> download() const {
    if (where_ == MemorySpace::Host) return host_;
    std::vector<float> h(n_);
#ifdef RTX_HAVE_NCCL
    cudaMemcpy(h.data(), dev_, n_ * sizeof(float), cudaMemcpyDeviceToHost);
#endif
    return h;
  }

 private:
  size_t n_;
  MemorySpace where_;
  std::vector<float> host_;
  float* dev_ = nullptr;
};

/// Bytes written twice to evict caches (twice the L3, clamped to [8 MiB, 1 GiB]).
size_t flush_size() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t b = l3 > 0 ? static_cast<size_t>(l3) * 2 : (64u << 20);
  return std::clamp<size_t>(b, 8u << 20, 1u << 30);
}

class AllreduceInstance final : public Instance {
 public:
  AllreduceInstance(Communicator& comm, size_t bytes) : comm_(comm), n_(bytes / sizeof(float)), buf_(n_, comm.memory()) {}

  void run() override { comm_.allreduce_sum(buf_.data(), n_); }

  double timed_run() override {
    comm_.barrier();
    const double t0 = now_s();
    run();
    double mine = now_s() - t0;
    // Every rank records the slowest rank's time (what nccl-tests reports), so the runner's
    // convergence decisions agree across ranks and no rank runs a collective the others skip.
    std::vector<double> all(static_cast<size_t>(comm_.size()));
    comm_.allgather(&mine, all.data(), sizeof mine);
    return *std::max_element(all.begin(), all.end());
  }

  CheckResult check() override {
    const double n = comm_.size();
    std::vector<float> h(n_);
    for (size_t i = 0; i < n_; ++i) h[i] = static_cast<float>((comm_.rank() + 1) * static_cast<int>(i % 17));
    buf_.upload(h);
    run();
    h = buf_.download();
    CheckResult r;
    r.tolerance = 1e-6;  // the op's tol_f32; the inputs are small integers, so the sum is exact in any order
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < n_; ++i) {
      const double ref = n * (n + 1) / 2 * static_cast<double>(i % 17);
      if (!std::isfinite(h[i])) ++r.nonfinite;
      const double e = std::fabs(h[i] - ref);
      if (e > max_err && r.detail.empty())
        r.detail = "element " + std::to_string(i) + ": " + std::to_string(h[i]) + " vs " + std::to_string(ref);
      max_err = std::max(max_err, e);
      max_ref = std::max(max_ref, std::fabs(ref));
    }
    r.max_rel_err = max_ref > 0 ? max_err / max_ref : max_err;
    r.ok = r.max_rel_err <= r.tolerance && r.nonfinite == 0;
    checksum_ = kernels::fnv1a64(h.data(), h.size() * sizeof(float));
    last_ = h;
    buf_.upload(std::vector<float>(n_, 0.0f));  // in-place sums of zeros stay finite
    return r;
  }

  uint64_t checksum() override { return checksum_; }
  std::vector<std::vector<float>> output_values() override { return {last_}; }  // the sums check() computed
  size_t footprint_bytes() const override { return n_ * sizeof(float); }
  void flush_cache() override {
    static std::vector<unsigned char> scratch(flush_size());
    volatile unsigned char* s = scratch.data();
    for (size_t i = 0; i < scratch.size(); i += 64) s[i] = static_cast<unsigned char>(s[i] + 1);
  }

 private:
  Communicator& comm_;
  size_t n_;
  Buffer buf_;
  uint64_t checksum_ = 0;
  std::vector<float> last_;
};

std::string bytes_valid(const Shape& s, const Params&) {
  if (s.at("BYTES") % 4 != 0) return "BYTES must be a multiple of 4 (float32 elements)";
  return "";
}

#ifdef RTX_HAVE_NCCL
Communicator& nccl_world() {
  static std::unique_ptr<Communicator> c = make_nccl(world());
  return *c;
}
#endif

}  // namespace

void register_dist_ops(kernels::Registry& r) {
  kernels::OpDef op;
  op.name = "allreduce_world";  // "allreduce" is the in-process threads op of issue 3
  op.doc = "in-place float32 sum of a BYTES-byte buffer over every rank of the job (nccl-tests' all_reduce_perf); "
           "bytes/s is busbw = algbw x 2(n-1)/n";
  op.dims = {"BYTES"};
  op.work = [](const Shape& s, DType) {
    kernels::Work w;
    const int n = world().size();
    const double f = n > 1 ? busbw_factor("allreduce", n) : 1.0;
    w.bytes = static_cast<double>(s.at("BYTES")) * f;
    // Adds per rank: (n-1)/n of the elements each; a single process counts one pass.
    w.flops = static_cast<double>(s.at("BYTES") / 4) * (n > 1 ? (n - 1.0) / n : 1.0);
    return w;
  };
  op.tol_f32 = 1e-6;  // sums of n ranks in a fixed order: exact for n <= 2, rounding beyond
  op.test_shapes = {{{"BYTES", 4}}, {{"BYTES", 28}}, {{"BYTES", 508}}};
  kernels::Variant cpu;
  cpu.name = "cpu.mpi";
  cpu.backend = kernels::Backend::CPU;
  cpu.dtypes = {DType::F32};
  cpu.validate = bytes_valid;
  cpu.make = [](const Shape& s, DType dt, const Params&, uint64_t) -> std::unique_ptr<Instance> {
    if (dt != DType::F32) throw_input("allreduce runs in f32 only", "dtype");
    const std::string why = bytes_valid(s, {});
    if (!why.empty()) throw_input(why, "BYTES");
    return std::make_unique<AllreduceInstance>(world(), static_cast<size_t>(s.at("BYTES")));
  };
  op.variants.push_back(std::move(cpu));
#ifdef RTX_HAVE_NCCL
  kernels::Variant gpu;
  gpu.name = "cuda.nccl";
  gpu.backend = kernels::Backend::CUDA;
  gpu.dtypes = {DType::F32};
  gpu.validate = bytes_valid;
  gpu.make = [](const Shape& s, DType dt, const Params&, uint64_t) -> std::unique_ptr<Instance> {
    if (dt != DType::F32) throw_input("allreduce runs in f32 only", "dtype");
    const std::string why = bytes_valid(s, {});
    if (!why.empty()) throw_input(why, "BYTES");
    return std::make_unique<AllreduceInstance>(nccl_world(), static_cast<size_t>(s.at("BYTES")));
  };
  op.variants.push_back(std::move(gpu));
#endif
  r.add(std::move(op));
}

}  // namespace rtx::dist
