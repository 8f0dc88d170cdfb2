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
};

/// CPU backend (gpt2_cpu.cpp).
std::unique_ptr<Gpt2Backend> make_gpt2_cpu(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout,
                                           int max_B, int max_T, const Gpt2KernelParams& kp);
/// CUDA backend (cuda/gpt2_cuda.cu when built with CUDA; otherwise gpt2.cpp's version throws
/// Error(Environment) "built without the CUDA backend"). Throws Error(Environment) without a GPU.
std::unique_ptr<Gpt2Backend> make_gpt2_cuda(const Gpt2Config& cfg, const std::vector<ParamTensor>& layout,
                                            int max_B, int max_T, const Gpt2KernelParams& kp);

}  // namespace rtx::models::detail
