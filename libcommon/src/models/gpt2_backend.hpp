// Internal: the interface each GPT-2 backend implements (CPU in gpt2_cpu.cpp, CUDA in
// cuda/gpt2_cuda.cu). rtx::models::Gpt2 validates arguments and forwards to one of these.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "rtx/models/gpt2.hpp"

namespace rtx::models::detail {

/// Same contract as the Gpt2 member of the same name; arguments are already validated by
/// Gpt2 (sizes within max_B/max_T, ids and targets in range, pointers non-null).
/// `decay` holds one flag per layout tensor (weight decay applies), `layout` the tensors.
class Gpt2Backend {
 public:
  virtual ~Gpt2Backend() = default;
  virtual void set_params(const float* host) = 0;
  virtual void get_params(float* host) const = 0;
  virtual void get_grads(float* host) const = 0;
  virtual void get_moments(float* m_host, float* v_host) const = 0;
  virtual void set_moments(const float* m_host, const float* v_host) = 0;
  virtual float forward(const int32_t* ids, const int32_t* targets, int B, int T) = 0;
  virtual void get_logits(float* host) const = 0;
  virtual void zero_grad() = 0;
  virtual void backward(float loss_scale) = 0;
  virtual double grad_norm() const = 0;
  virtual double step(int t, float lr, const AdamWConfig& opt) = 0;
  /// Bytes held now per class (params, grads, optimizer, activations).
  virtual Gpt2Memory memory() const = 0;
  /// Data-parallel hooks (Gpt2::set_grad_ready_hook, Gpt2::grad_data). Defaults: no progress
  /// reports (returns false) and no direct buffer access (nullptr).
  virtual bool set_grad_ready_hook(Gpt2::GradReadyHook) { return false; }
  virtual float* grad_data() { return nullptr; }
};

/// The activation plan of one B x T batch (llm.c's ActivationTensors, leaner): element counts
/// (floats) of each buffer forward and backward use. L = n_layer, C = n_embd, NH = n_head,
/// V = vocab_size, BT = B*T. Per-layer tensors hold all L layers, layer l at l * (per-layer size).
/// `proj` is shared scratch: the attention/MLP projection output before its residual add
/// (forward) and the (BT,C) input gradient of a matmul (backward).
struct Gpt2ActSizes {
  size_t encoded = 0;                 ///< (BT,C) token + position embedding
  size_t ln1 = 0, ln1_stat = 0;       ///< (L,BT,C); mean and rstd (L,BT) each
  size_t qkv = 0;                     ///< (L,BT,3C)
  size_t atty = 0;                    ///< (L,BT,C) attention output (kept for the backward)
  size_t att_lse = 0;                 ///< (L,B,NH,T) logsumexp of each score row
  size_t residual2 = 0;               ///< (L,BT,C)
  size_t ln2 = 0, ln2_stat = 0;       ///< (L,BT,C); mean and rstd (L,BT) each
  size_t fch = 0, fch_gelu = 0;       ///< (L,BT,4C) each
  size_t residual3 = 0;               ///< (L,BT,C)
  size_t lnf = 0, lnf_stat = 0;       ///< (BT,C); mean and rstd (BT) each
  size_t logits = 0;                  ///< (BT,V)
  size_t losses = 0;                  ///< (BT)
  size_t proj = 0;                    ///< (BT,C) scratch
  size_t dresidual = 0;               ///< (BT,C) gradient flowing down the residual stream
  size_t dqkv = 0;                    ///< (BT,3C)
  size_t dfch_gelu = 0, dfch = 0;     ///< (BT,4C) each
  size_t dlogits = 0;                 ///< (BT,V)
  /// Sum of all the fields above (with each *_stat counted twice: mean and rstd).
  size_t total_floats() const;
  /// Token buffers (ids and targets of the batch, int32) in bytes: 2 * BT * 4.
  size_t token_bytes = 0;
};
/// The plan for a B x T batch of `cfg` (no validation).
Gpt2ActSizes gpt2_act_sizes(const Gpt2Config& cfg, int B, int T);

/// Global L2 norm of n host floats: float64 sums per fixed 32768-float chunk, chunks added in
/// order, so the same bits at any thread count (gpt2_cpu.cpp).
double host_grad_norm(const float* g, size_t n);
/// The host optimizer step of Gpt2::step over flat host buffers in `layout` order: the pre-clip
/// norm (host_grad_norm), clipping per opt.grad_clip (torch's clip_grad_norm_, eps 1e-6; the
/// gradients are scaled in place), then kernels::adamw_update per run of tensors sharing the
/// decay flag. A non-finite norm updates nothing. Returns the pre-clip norm. Shared by the
/// direct CPU backend and the graph engine, so both clip and update with the same bits.
double host_adamw_step(float* params, float* grads, float* m, float* v, const std::vector<ParamTensor>& layout, int t, float lr,
                       const AdamWConfig& opt, const kernels::OpParams* op);

/// CPU backend (gpt2_cpu.cpp).
std::unique_ptr<Gpt2Backend> make_gpt2_cpu(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout,
                                           int max_B, int max_T, const Gpt2KernelParams& kp);
/// Graph engine on the CPU (gpt2_graph.cpp): gpt2_graph's forward and autodiff backward run by
/// ir::Executor, parameters and gradients bound in place, the host step above.
std::unique_ptr<Gpt2Backend> make_gpt2_graph(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout,
                                             int max_B, int max_T, const Gpt2KernelParams& kp);
/// CUDA backend (cuda/gpt2_cuda.cu when built with CUDA; otherwise gpt2.cpp's version throws
/// Error(Environment) "built without the CUDA backend"). Throws Error(Environment) without a GPU.
std::unique_ptr<Gpt2Backend> make_gpt2_cuda(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout,
                                            int max_B, int max_T, const Gpt2KernelParams& kp);

}  // namespace rtx::models::detail
