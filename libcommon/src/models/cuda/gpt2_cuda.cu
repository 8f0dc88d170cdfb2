// GPT-2 CUDA backend (llm.c's train_gpt2.cu structure): parameters, gradients, AdamW moments and
// activations for (max_B, max_T) on one device, one stream, built on the CUDA ops of
// rtx/kernels/cuda_ops.hpp. Not a kernel library: the only kernels here are a scale and a
// deterministic float64 sum of squares for the gradient norm.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/launch_note.cuh"
#include "models/gpt2_backend.hpp"
#include "rtx/core/allocator.hpp"
#include "rtx/core/cuda_check.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/cuda_ops.hpp"

namespace rtx::models::detail {
namespace {

namespace ck = rtx::kernels::cuda;
using Lt = ck::LtMatmul;

// Shape letters for this file: B batch, T time, C channels (n_embd), NH heads, HS head size,
// V vocab, L layers, BT = B*T rows. Every activation is row-major f32.

constexpr int kNormBlocks = 512;   // fixed grid of the sum-of-squares reduction (deterministic)
constexpr int kNormThreads = 256;  // threads per block of the reduction (power of two)
constexpr size_t kAlign = 256;     // byte alignment of every sub-buffer carved from one allocation
constexpr int kFlashMaxBr = 32, kFlashMaxBc = 256, kFlashMaxHS = 128;  // attention_forward_flash limits
constexpr size_t kFlashMaxSmem = 227 * 1024;                            // sm_90 dynamic shared memory

// ---- kernels ---------------------------------------------------------------------------------

// x (n) *= s
__global__ void scale_kernel(float* __restrict__ x, int64_t n, float s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) x[i] *= s;
}

// Fixed-order tree sum of the blockDim.x (power of two) doubles in sh; result in sh[0].
__device__ void block_tree_sum(double* sh) {
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (static_cast<int>(threadIdx.x) < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
}

// partial (gridDim.x) = per-block sum over a fixed grid-stride partition of x (n) of x^2, in float64.
__global__ void sumsq_partial_kernel(double* __restrict__ partial, const float* __restrict__ x, int64_t n) {
  __shared__ double sh[kNormThreads];
  double s = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = x[i];
    s += v * v;
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  block_tree_sum(sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

// out[0] = sum of partial (n), one block, fixed order.
__global__ void sum_partials_kernel(double* __restrict__ out, const double* __restrict__ partial, int n) {
  __shared__ double sh[kNormThreads];
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  block_tree_sum(sh);
  if (threadIdx.x == 0) out[0] = sh[0];
}

void scale(float* x, int64_t n, float s, cudaStream_t st) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  RTX_NOTE_LAUNCH(scale_kernel, static_cast<unsigned>(blocks), 256, 0);
  scale_kernel<<<static_cast<unsigned>(blocks), 256, 0, st>>>(x, n, s);
  RTX_CUDA_CHECK_LAUNCH();
}

// ---- device memory -----------------------------------------------------------------------------

/// One block from the device's caching allocator, returned on destruction.
class DeviceBlock {
 public:
  DeviceBlock() = default;
  DeviceBlock(int device, size_t bytes) : device_(device), bytes_(bytes) {
    ptr_ = cuda_allocator(device).allocate(bytes);
  }
  ~DeviceBlock() {
    if (!ptr_) return;
    try {
      cuda_allocator(device_).deallocate(ptr_);
    } catch (...) {  // destructor: the allocator only throws for a foreign pointer
    }
  }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  DeviceBlock(DeviceBlock&& o) noexcept : device_(o.device_), bytes_(o.bytes_), ptr_(o.ptr_) { o.ptr_ = nullptr; }
  DeviceBlock& operator=(DeviceBlock&& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(bytes_, o.bytes_);
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  char* bytes_ptr() const { return static_cast<char*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  int device_ = 0;
  size_t bytes_ = 0;
  void* ptr_ = nullptr;
};

/// Two-pass carving of one allocation: pass 1 (base == nullptr) only sums the aligned sizes,
/// pass 2 hands out pointers. Every piece starts on a kAlign boundary.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(size_t count) {
    const size_t at = used_;
    used_ += (count * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    return base_ ? reinterpret_cast<T*>(base_ + at) : nullptr;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// ---- model pieces ------------------------------------------------------------------------------

/// Offsets (in floats) of one block's tensors in the flat parameter/gradient buffers.
struct LayerOffsets {
  size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

/// Forward activations of one block kept for the backward (BT rows each).
struct LayerActs {
  float* ln1;       // (BT,C)
  float* ln1_mean;  // (BT)
  float* ln1_rstd;  // (BT)
  float* qkv;       // (BT,3C)
  float* atty;      // (BT,C) attention output, input of c_proj
  float* res2;      // (BT,C) residual after attention
  float* ln2;       // (BT,C)
  float* ln2_mean;  // (BT)
  float* ln2_rstd;  // (BT)
  float* fch;       // (BT,4C) c_fc output
  float* fch_gelu;  // (BT,4C)
  float* res3;      // (BT,C) residual after the MLP (the block's output)
};

/// All activation and scratch buffers, carved from one allocation for (max_B, max_T).
struct Acts {
  int32_t* ids;      // (BT)
  int32_t* targets;  // (BT)
  float* encoded;    // (BT,C)
  std::vector<LayerActs> layers;
  float* lnf;        // (BT,C)
  float* lnf_mean;   // (BT)
  float* lnf_rstd;   // (BT)
  float* logits;     // (BT,V)
  float* losses;     // (BT)
  // forward/backward scratch, reused across layers
  float* btc;        // (BT,C): c_proj outputs in the forward; dlnf, dln2, datty, dln1 in the backward
  float* dlogits;    // (BT,V)
  float* dresidual;  // (BT,C): gradient of the residual stream
  float* dfch_gelu;  // (BT,4C)
  float* dfch;       // (BT,4C)
  float* dqkv;       // (BT,3C)
  float* att;        // attention_backward_scratch(B,T,NH) floats (also the naive forward's scratch)
  double* norm_partial;  // (kNormBlocks)
  double* norm_out;      // (1)
};

/// Carve `a` for the sizes; with base == nullptr only measures. Returns the bytes used.
size_t carve_acts(Acts& a, char* base, const Gpt2Config& cfg, int B, int T) {
  Carver cv(base);
  const size_t BT = static_cast<size_t>(B) * T, C = cfg.n_embd, V = cfg.vocab_size;
  a.ids = cv.take<int32_t>(BT);
  a.targets = cv.take<int32_t>(BT);
  a.encoded = cv.take<float>(BT * C);
  a.layers.resize(cfg.n_layer);
  for (auto& l : a.layers) {
    l.ln1 = cv.take<float>(BT * C);
    l.ln1_mean = cv.take<float>(BT);
    l.ln1_rstd = cv.take<float>(BT);
    l.qkv = cv.take<float>(BT * 3 * C);
    l.atty = cv.take<float>(BT * C);
    l.res2 = cv.take<float>(BT * C);
    l.ln2 = cv.take<float>(BT * C);
    l.ln2_mean = cv.take<float>(BT);
    l.ln2_rstd = cv.take<float>(BT);
    l.fch = cv.take<float>(BT * 4 * C);
    l.fch_gelu = cv.take<float>(BT * 4 * C);
    l.res3 = cv.take<float>(BT * C);
  }
  a.lnf = cv.take<float>(BT * C);
  a.lnf_mean = cv.take<float>(BT);
  a.lnf_rstd = cv.take<float>(BT);
  a.logits = cv.take<float>(BT * V);
  a.losses = cv.take<float>(BT);
  a.btc = cv.take<float>(BT * C);
  a.dlogits = cv.take<float>(BT * V);
  a.dresidual = cv.take<float>(BT * C);
  a.dfch_gelu = cv.take<float>(BT * 4 * C);
  a.dfch = cv.take<float>(BT * 4 * C);
  a.dqkv = cv.take<float>(BT * 3 * C);
  a.att = cv.take<float>(ck::attention_backward_scratch(B, T, cfg.n_head));
  a.norm_partial = cv.take<double>(kNormBlocks);
  a.norm_out = cv.take<double>(1);
  return cv.used();
}

/// The cuBLASLt plans of one row count M = B*T (a plan is fixed to its shape).
/// f: forward (bias epilogue), bi: backward dinp (overwrite), bw: backward dweight (+=).
struct Plans {
  std::unique_ptr<Lt> qkv_f, qkv_bi, qkv_bw;           // N = 3C, K = C
  std::unique_ptr<Lt> attproj_f, attproj_bi, attproj_bw;  // N = C,  K = C
  std::unique_ptr<Lt> fc_f, fc_bi, fc_bw;              // N = 4C, K = C
  std::unique_ptr<Lt> fcproj_f, fcproj_bi, fcproj_bw;  // N = C,  K = 4C
  std::unique_ptr<Lt> logits_f, logits_bi, logits_bw;  // N = V,  K = C (tied wte, no bias)
};

std::unique_ptr<Lt> plan(Lt::Kind kind, int M, int N, int K, bool bias, bool accumulate) {
  return std::make_unique<Lt>(kind, M, N, K, DType::F32, bias, DType::F32, accumulate, 0);
}

Plans make_plans(int M, int C, int V) {
  Plans p;
  const auto F = Lt::Kind::Forward, BI = Lt::Kind::BackwardInput, BW = Lt::Kind::BackwardWeight;
  auto trio = [&](std::unique_ptr<Lt>& f, std::unique_ptr<Lt>& bi, std::unique_ptr<Lt>& bw, int N, int K,
                  bool bias) {
    f = plan(F, M, N, K, bias, false);
    bi = plan(BI, M, N, K, false, false);
    bw = plan(BW, M, N, K, false, true);  // parameter gradients accumulate (zero_grad clears them)
  };
  trio(p.qkv_f, p.qkv_bi, p.qkv_bw, 3 * C, C, true);
  trio(p.attproj_f, p.attproj_bi, p.attproj_bw, C, C, true);
  trio(p.fc_f, p.fc_bi, p.fc_bw, 4 * C, C, true);
  trio(p.fcproj_f, p.fcproj_bi, p.fcproj_bw, C, 4 * C, true);
  trio(p.logits_f, p.logits_bi, p.logits_bw, V, C, false);
  return p;
}

/// Index of the layout tensor named `name`, checking its element count.
size_t index_of(const std::vector<ParamTensor>& layout, const std::string& name, size_t numel) {
  for (size_t i = 0; i < layout.size(); ++i)
    if (layout[i].name == name) {
      if (layout[i].numel != numel)
        throw_input("GPT-2 CUDA backend: tensor " + name + " has " + std::to_string(layout[i].numel) +
                        " elements, expected " + std::to_string(numel),
                    name, "pass gpt2_param_layout(cfg) for the same config");
      return i;
    }
  throw_input("GPT-2 CUDA backend: layout has no tensor " + name, name,
              "pass gpt2_param_layout(cfg) for the same config");
}

/// A range of the device buffers (floats) copied to/from the host layout in one piece.
struct CopyRun {
  size_t host_off, dev_off, n;
};
/// A range of consecutive device tensors with the same weight-decay flag: one AdamW launch.
struct DecayRun {
  size_t dev_off, n;
  bool decay;
};

class Gpt2Cuda final : public Gpt2Backend {
 public:
  Gpt2Cuda(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout, int max_B, int max_T,
           const Gpt2KernelParams& kp);
  ~Gpt2Cuda() override;

  void set_params(const float* host) override { to_device(params_, host); }
  void get_params(float* host) const override { to_host(host, params_); }
  void get_grads(float* host) const override { to_host(host, grads_); }
  float* grad_data() override { return grads_; }  // device memory, for NCCL all-reduce (rtx/dist)
  void get_moments(float* m_host, float* v_host) const override {
    to_host(m_host, m_);
    to_host(v_host, v_);
  }
  void set_moments(const float* m_host, const float* v_host) override {
    to_device(m_, m_host);
    to_device(v_, v_host);
  }
  float forward(const int32_t* ids, const int32_t* targets, int B, int T) override;
  void get_logits(float* host) const override;
  void zero_grad() override;
  void backward(float loss_scale) override;
  double grad_norm() const override;
  double step(int t, float lr, const AdamWConfig& opt) override;
  Gpt2Memory memory() const override;

 private:
  void use_device() const { RTX_CUDA_CHECK(cudaSetDevice(device_)); }
  void sync() const { RTX_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void* vs() const { return static_cast<void*>(stream_); }
  void to_device(float* dst, const float* host);
  void to_host(float* host, const float* src) const;
  Plans& plans_for(int M);
  const float* P(size_t off) const { return params_ + off; }
  float* G(size_t off) const { return grads_ + off; }
  size_t dev_offset(const std::string& name, size_t numel) const { return dev_off_[index_of(layout_, name, numel)]; }

  Gpt2Config cfg_;
  std::vector<ParamTensor> layout_;
  int max_B_, max_T_;
  int C_, NH_, HS_, V_, L_;
  // Parameter-shaped buffers (params, grads, m, v) on the device: each tensor starts on a
  // kAlign boundary (cuBLASLt's heuristic assumes 256-byte aligned operands); the padding
  // between tensors is zero and stays zero (its gradient is zero, so AdamW leaves it at zero).
  size_t npd_ = 0;  // floats per device buffer, with padding
  std::vector<size_t> dev_off_;  // per layout tensor
  std::vector<CopyRun> copy_runs_;
  std::vector<DecayRun> decay_runs_;
  // attention: flash with (Br, Bc) fitted to the CUDA kernel, or naive
  bool flash_ = true;
  int Br_ = 32, Bc_ = 64;

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  DeviceBlock state_block_;  // params, grads, m, v (4 x npd_ floats)
  DeviceBlock act_block_;
  float *params_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  Acts acts_{};
  size_t wte_, wpe_, lnfw_, lnfb_;
  std::vector<LayerOffsets> lo_;
  std::map<int, Plans> plans_;
  std::vector<float> host_losses_;

  // the last forward
  int last_B_ = 0, last_T_ = 0;
  bool last_targets_ = false;
};

Gpt2Cuda::Gpt2Cuda(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout, int max_B, int max_T,
                   const Gpt2KernelParams& kp)
    : cfg_(cfg), layout_(layout), max_B_(max_B), max_T_(max_T) {
  cfg_.validate();
  if (max_B < 1 || max_T < 1 || max_T > cfg.block_size)
    throw_input("GPT-2 CUDA backend: max_B = " + std::to_string(max_B) + ", max_T = " + std::to_string(max_T) +
                    " (need max_B >= 1 and 1 <= max_T <= block_size = " + std::to_string(cfg.block_size) + ")",
                "max_B/max_T", "choose a batch size >= 1 and a sequence length within the block size");
  C_ = cfg.n_embd, NH_ = cfg.n_head, HS_ = C_ / NH_, V_ = cfg.vocab_size, L_ = cfg.n_layer;
  const int64_t BT = static_cast<int64_t>(max_B) * max_T;
  const int64_t widest = std::max<int64_t>(V_, 4 * static_cast<int64_t>(C_));
  if (BT * widest > INT_MAX)
    throw_input("GPT-2 CUDA backend: max_B*max_T*max(V,4C) = " + std::to_string(BT * widest) +
                    " exceeds the ops' 32-bit row/column counts",
                "max_B/max_T", "use a smaller batch");
  require_cuda("GPT-2 --backend cuda");

  // Device layout: every tensor on a kAlign boundary, in layout order.
  const size_t align_floats = kAlign / sizeof(float);
  for (const auto& t : layout_) {
    dev_off_.push_back(npd_);
    npd_ += (t.numel + align_floats - 1) / align_floats * align_floats;
  }
  for (size_t i = 0; i < layout_.size(); ++i) {
    const ParamTensor& t = layout_[i];
    if (t.numel == 0) continue;
    CopyRun* last = copy_runs_.empty() ? nullptr : &copy_runs_.back();
    if (last && last->host_off + last->n == t.offset && last->dev_off + last->n == dev_off_[i])
      last->n += t.numel;
    else
      copy_runs_.push_back(CopyRun{t.offset, dev_off_[i], t.numel});
    DecayRun* run = decay_runs_.empty() ? nullptr : &decay_runs_.back();
    if (run && run->decay == t.decay)
      run->n = dev_off_[i] + t.numel - run->dev_off;  // spans the zero padding in between
    else
      decay_runs_.push_back(DecayRun{dev_off_[i], t.numel, t.decay});
  }
  const size_t C = C_;
  wte_ = dev_offset("wte", static_cast<size_t>(V_) * C);
  wpe_ = dev_offset("wpe", static_cast<size_t>(cfg.block_size) * C);
  lo_.resize(L_);
  for (int l = 0; l < L_; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerOffsets& o = lo_[l];
    o.ln1w = dev_offset(h + "ln_1.weight", C);
    o.ln1b = dev_offset(h + "ln_1.bias", C);
    o.qkvw = dev_offset(h + "attn.c_attn.weight", 3 * C * C);
    o.qkvb = dev_offset(h + "attn.c_attn.bias", 3 * C);
    o.attprojw = dev_offset(h + "attn.c_proj.weight", C * C);
    o.attprojb = dev_offset(h + "attn.c_proj.bias", C);
    o.ln2w = dev_offset(h + "ln_2.weight", C);
    o.ln2b = dev_offset(h + "ln_2.bias", C);
    o.fcw = dev_offset(h + "mlp.c_fc.weight", 4 * C * C);
    o.fcb = dev_offset(h + "mlp.c_fc.bias", 4 * C);
    o.fcprojw = dev_offset(h + "mlp.c_proj.weight", 4 * C * C);
    o.fcprojb = dev_offset(h + "mlp.c_proj.bias", C);
  }
  lnfw_ = dev_offset("ln_f.weight", C);
  lnfb_ = dev_offset("ln_f.bias", C);

  // Attention: the CUDA flash kernel takes Br <= 32, Bc <= 256, HS <= 128 and a tile that fits in
  // shared memory; larger (CPU-tuned) tiles are clamped, HS > 128 uses the naive kernel.
  flash_ = kp.attention.algo == kernels::AttentionParams::Algo::Flash && HS_ <= kFlashMaxHS;
  Br_ = std::clamp(kp.attention.Br, 1, kFlashMaxBr);
  Bc_ = std::clamp(kp.attention.Bc, 1, kFlashMaxBc);
  auto smem = [&](int bc) {
    return (static_cast<size_t>(Br_) * HS_ + 2 * static_cast<size_t>(bc) * (HS_ + 1) + static_cast<size_t>(Br_) * bc) *
           sizeof(float);
  };
  while (Bc_ > 1 && smem(Bc_) > kFlashMaxSmem) Bc_ /= 2;

  RTX_CUDA_CHECK(cudaGetDevice(&device_));
  RTX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    state_block_ = DeviceBlock(device_, 4 * npd_ * sizeof(float));
    params_ = reinterpret_cast<float*>(state_block_.bytes_ptr());
    grads_ = params_ + npd_;
    m_ = grads_ + npd_;
    v_ = m_ + npd_;
    RTX_CUDA_CHECK(cudaMemsetAsync(params_, 0, 4 * npd_ * sizeof(float), stream_));
    Acts measure{};
    const size_t act_bytes = carve_acts(measure, nullptr, cfg_, max_B, max_T);
    act_block_ = DeviceBlock(device_, act_bytes);
    carve_acts(acts_, act_block_.bytes_ptr(), cfg_, max_B, max_T);
    host_losses_.resize(static_cast<size_t>(BT));
    sync();
  } catch (...) {
    cudaStreamDestroy(stream_);
    throw;
  }
}

Gpt2Cuda::~Gpt2Cuda() {
  if (!stream_) return;
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);  // no throwing in a destructor; buffers are freed after the stream drains
  plans_.clear();
  cudaStreamDestroy(stream_);
}

void Gpt2Cuda::to_device(float* dst, const float* host) {
  use_device();
  for (const CopyRun& r : copy_runs_)
    RTX_CUDA_CHECK(cudaMemcpyAsync(dst + r.dev_off, host + r.host_off, r.n * sizeof(float), cudaMemcpyHostToDevice,
                                   stream_));
  sync();
}

void Gpt2Cuda::to_host(float* host, const float* src) const {
  use_device();
  for (const CopyRun& r : copy_runs_)
    RTX_CUDA_CHECK(cudaMemcpyAsync(host + r.host_off, src + r.dev_off, r.n * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream_));
  sync();
}

Plans& Gpt2Cuda::plans_for(int M) {
  auto it = plans_.find(M);
  if (it == plans_.end()) it = plans_.emplace(M, make_plans(M, C_, V_)).first;
  return it->second;
}

float Gpt2Cuda::forward(const int32_t* ids, const int32_t* targets, int B, int T) {
  if (B < 1 || B > max_B_ || T < 1 || T > max_T_)
    throw_input("GPT-2 CUDA forward: B = " + std::to_string(B) + ", T = " + std::to_string(T) +
                    " outside [1," + std::to_string(max_B_) + "] x [1," + std::to_string(max_T_) + "]",
                "B/T", "use a batch within the model's max_B x max_T");
  use_device();
  const int BT = B * T, C = C_;
  const int64_t btc = static_cast<int64_t>(BT) * C;
  cudaStream_t st = stream_;
  last_targets_ = false;  // a failure below leaves no usable forward for backward()
  last_B_ = last_T_ = 0;
  RTX_CUDA_CHECK(cudaMemcpyAsync(acts_.ids, ids, static_cast<size_t>(BT) * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  if (targets)
    RTX_CUDA_CHECK(
        cudaMemcpyAsync(acts_.targets, targets, static_cast<size_t>(BT) * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  Plans& pl = plans_for(BT);

  ck::encoder_forward(acts_.encoded, acts_.ids, P(wte_), P(wpe_), B, T, C, vs());
  const float* res = acts_.encoded;
  for (int l = 0; l < L_; ++l) {
    const LayerOffsets& o = lo_[l];
    LayerActs& a = acts_.layers[l];
    ck::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res, P(o.ln1w), P(o.ln1b), BT, C, vs());
    pl.qkv_f->run(a.qkv, a.ln1, P(o.qkvw), P(o.qkvb), vs());
    // The CUDA attention backward recomputes the probabilities from qkv, so no lse is kept.
    if (flash_)
      ck::attention_forward_flash(a.atty, nullptr, a.qkv, B, T, NH_, HS_, Br_, Bc_, vs());
    else
      ck::attention_forward_naive(a.atty, nullptr, acts_.att, a.qkv, B, T, NH_, HS_, vs());
    pl.attproj_f->run(acts_.btc, a.atty, P(o.attprojw), P(o.attprojb), vs());
    ck::residual_forward(a.res2, res, acts_.btc, btc, vs());
    ck::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(o.ln2w), P(o.ln2b), BT, C, vs());
    pl.fc_f->run(a.fch, a.ln2, P(o.fcw), P(o.fcb), vs());
    ck::gelu_forward(a.fch_gelu, a.fch, 4 * btc, vs());
    pl.fcproj_f->run(acts_.btc, a.fch_gelu, P(o.fcprojw), P(o.fcprojb), vs());
    ck::residual_forward(a.res3, a.res2, acts_.btc, btc, vs());
    res = a.res3;
  }
  ck::layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, res, P(lnfw_), P(lnfb_), BT, C, vs());
  pl.logits_f->run(acts_.logits, acts_.lnf, P(wte_), nullptr, vs());

  float loss = std::numeric_limits<float>::quiet_NaN();
  if (targets) {
    ck::crossentropy_forward(acts_.losses, acts_.logits, acts_.targets, BT, V_, vs());
    RTX_CUDA_CHECK(cudaMemcpyAsync(host_losses_.data(), acts_.losses, static_cast<size_t>(BT) * sizeof(float),
                                   cudaMemcpyDeviceToHost, st));
    sync();
    double sum = 0.0;  // fixed order on the host
    for (int i = 0; i < BT; ++i) sum += host_losses_[i];
    loss = static_cast<float>(sum / BT);
  } else {
    sync();
  }
  last_B_ = B, last_T_ = T;
  last_targets_ = targets != nullptr;
  return loss;
}

void Gpt2Cuda::get_logits(float* host) const {
  if (last_B_ == 0)
    throw_usage("GPT-2 CUDA get_logits: no forward has run", "get_logits", "call forward() first");
  use_device();
  const size_t n = static_cast<size_t>(last_B_) * last_T_ * V_;
  RTX_CUDA_CHECK(cudaMemcpyAsync(host, acts_.logits, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  sync();
}

void Gpt2Cuda::zero_grad() {
  use_device();
  RTX_CUDA_CHECK(cudaMemsetAsync(grads_, 0, npd_ * sizeof(float), stream_));
  sync();
}

void Gpt2Cuda::backward(float loss_scale) {
  if (!last_targets_)
    throw_usage("GPT-2 CUDA backward: the last forward had no targets (or none has run)", "backward",
                "call forward(ids, targets, B, T) first");
  use_device();
  const int B = last_B_, T = last_T_, BT = B * T, C = C_;
  cudaStream_t st = stream_;
  Plans& pl = plans_for(BT);
  Acts& a = acts_;

  // loss -> logits: dlogits = loss_scale * (softmax - onehot) / BT
  ck::crossentropy_backward(a.dlogits, a.logits, a.targets, BT, V_, false, vs());
  if (loss_scale != 1.0f) scale(a.dlogits, static_cast<int64_t>(BT) * V_, loss_scale, st);
  // logits = lnf @ wte^T (tied): dwte += dlogits^T @ lnf, dlnf = dlogits @ wte
  pl.logits_bw->run(G(wte_), a.dlogits, a.lnf, nullptr, vs());
  pl.logits_bi->run(a.btc, a.dlogits, P(wte_), nullptr, vs());
  // ln_f: dresidual = d(last block output); layernorm_backward accumulates into all three outputs
  RTX_CUDA_CHECK(cudaMemsetAsync(a.dresidual, 0, static_cast<size_t>(BT) * C * sizeof(float), st));
  const float* last = L_ > 0 ? a.layers[L_ - 1].res3 : a.encoded;
  ck::layernorm_backward(a.dresidual, G(lnfw_), G(lnfb_), a.btc, last, P(lnfw_), a.lnf_mean, a.lnf_rstd, BT, C, true,
                         vs());
  for (int l = L_ - 1; l >= 0; --l) {
    const LayerOffsets& o = lo_[l];
    LayerActs& la = a.layers[l];
    const float* res_in = l == 0 ? a.encoded : a.layers[l - 1].res3;
    // res3 = res2 + fch_gelu @ fcprojw^T + fcprojb
    pl.fcproj_bi->run(a.dfch_gelu, a.dresidual, P(o.fcprojw), nullptr, vs());
    pl.fcproj_bw->run(G(o.fcprojw), a.dresidual, la.fch_gelu, nullptr, vs());
    ck::column_sum(G(o.fcprojb), a.dresidual, BT, C, DType::F32, true, vs());
    ck::gelu_backward(a.dfch, la.fch, a.dfch_gelu, static_cast<int64_t>(BT) * 4 * C, false, vs());
    // fch = ln2 @ fcw^T + fcb
    pl.fc_bi->run(a.btc, a.dfch, P(o.fcw), nullptr, vs());
    pl.fc_bw->run(G(o.fcw), a.dfch, la.ln2, nullptr, vs());
    ck::column_sum(G(o.fcb), a.dfch, BT, 4 * C, DType::F32, true, vs());
    // ln2 = LN(res2): dresidual becomes d(res2)
    ck::layernorm_backward(a.dresidual, G(o.ln2w), G(o.ln2b), a.btc, la.res2, P(o.ln2w), la.ln2_mean, la.ln2_rstd, BT,
                           C, true, vs());
    // res2 = res_in + atty @ attprojw^T + attprojb
    pl.attproj_bi->run(a.btc, a.dresidual, P(o.attprojw), nullptr, vs());
    pl.attproj_bw->run(G(o.attprojw), a.dresidual, la.atty, nullptr, vs());
    ck::column_sum(G(o.attprojb), a.dresidual, BT, C, DType::F32, true, vs());
    // atty = attention(qkv)
    ck::attention_backward(a.dqkv, a.att, a.btc, la.qkv, B, T, NH_, HS_, false, vs());
    // qkv = ln1 @ qkvw^T + qkvb
    pl.qkv_bi->run(a.btc, a.dqkv, P(o.qkvw), nullptr, vs());
    pl.qkv_bw->run(G(o.qkvw), a.dqkv, la.ln1, nullptr, vs());
    ck::column_sum(G(o.qkvb), a.dqkv, BT, 3 * C, DType::F32, true, vs());
    // ln1 = LN(res_in): dresidual becomes d(res_in)
    ck::layernorm_backward(a.dresidual, G(o.ln1w), G(o.ln1b), a.btc, res_in, P(o.ln1w), la.ln1_mean, la.ln1_rstd, BT,
                           C, true, vs());
  }
  // encoded = wte[ids] + wpe[t]
  ck::encoder_backward(G(wte_), G(wpe_), a.dresidual, a.ids, B, T, C, V_, true, vs());
  sync();
}

double Gpt2Cuda::grad_norm() const {
  use_device();
  RTX_NOTE_LAUNCH(sumsq_partial_kernel, kNormBlocks, kNormThreads, 0);
  sumsq_partial_kernel<<<kNormBlocks, kNormThreads, 0, stream_>>>(acts_.norm_partial, grads_,
                                                                  static_cast<int64_t>(npd_));
  RTX_CUDA_CHECK_LAUNCH();
  RTX_NOTE_LAUNCH(sum_partials_kernel, 1, kNormThreads, 0);
  sum_partials_kernel<<<1, kNormThreads, 0, stream_>>>(acts_.norm_out, acts_.norm_partial, kNormBlocks);
  RTX_CUDA_CHECK_LAUNCH();
  double sumsq = 0.0;
  RTX_CUDA_CHECK(cudaMemcpyAsync(&sumsq, acts_.norm_out, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  sync();
  return std::sqrt(sumsq);
}

double Gpt2Cuda::step(int t, float lr, const AdamWConfig& opt) {
  if (t < 1) throw_input("GPT-2 CUDA step: t = " + std::to_string(t) + " must be >= 1", "t", "steps are 1-based");
  const double norm = grad_norm();
  if (!std::isfinite(norm))  // as the CPU backend: refuse, leaving the parameters as they were
    throw_input("GPT-2 CUDA step " + std::to_string(t) + ": the gradient norm is not finite (" +
                    std::to_string(norm) + ")",
                "gradients", "lower the learning rate or check the data; the parameters were not updated");
  // torch.nn.utils.clip_grad_norm_: grads *= clip / (norm + 1e-6) when that is < 1 (in place, as torch)
  if (opt.grad_clip > 0.0f) {
    const double coef = static_cast<double>(opt.grad_clip) / (norm + 1e-6);
    if (coef < 1.0) scale(grads_, static_cast<int64_t>(npd_), static_cast<float>(coef), stream_);
  }
  // AdamW once per run of consecutive tensors with the same decay flag (the update is element-wise,
  // so one launch per run equals one per tensor; the zero padding inside a run stays zero).
  for (const DecayRun& r : decay_runs_)
    ck::adamw_update(params_ + r.dev_off, m_ + r.dev_off, v_ + r.dev_off, grads_ + r.dev_off,
                     static_cast<int64_t>(r.n), lr, opt.beta1, opt.beta2, opt.eps, r.decay ? opt.weight_decay : 0.0f,
                     t, vs());
  sync();
  return norm;
}

Gpt2Memory Gpt2Cuda::memory() const {
  Gpt2Memory m;
  m.params = m.grads = npd_ * sizeof(float);
  m.optimizer = 2 * npd_ * sizeof(float);
  m.activations = act_block_.size();
  return m;
}

}  // namespace

std::unique_ptr<Gpt2Backend> make_gpt2_cuda(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout,
                                            int max_B, int max_T, const Gpt2KernelParams& kp) {
  return std::make_unique<Gpt2Cuda>(cfg, layout, max_B, max_T, kp);
}

}  // namespace rtx::models::detail
