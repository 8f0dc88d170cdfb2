// GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"): config,
// named presets, the flat parameter layout, and the model with forward, backward and AdamW,
// written layer by layer on the op library (llm.c's structure) for the CPU and CUDA backends.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/kernels/matmul.hpp"
#include "rtx/kernels/ops.hpp"

namespace rtx::models {

/// Hyperparameters of the architecture. Learned position embeddings, pre-LN blocks, causal
/// multi-head attention, GELU (tanh), tied input/output embeddings, LayerNorm eps 1e-5,
/// biases everywhere (as GPT-2), no dropout.
struct Gpt2Config {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int block_size = 1024;  ///< max sequence length T (rows of wpe)
  int vocab_size = 50257;

  /// Named presets: "gpt2" (124M: 12/12/768, block 1024, vocab 50257), "gpt2-tiny"
  /// (2 layers, 2 heads, 64 channels, block 64, vocab 50257), "shakespeare-char" (nanoGPT's
  /// config/train_shakespeare_char.py: 6/6/384, block 256, vocab 65) and
  /// "shakespeare-char-cpu" (nanoGPT's README CPU variant: 4/4/128, block 64, vocab 65).
  /// Throws Error(Usage) naming the preset and listing the known ones.
  static Gpt2Config preset(const std::string& name);
  /// The preset names, in the order above.
  static std::vector<std::string> preset_names();
  /// Throws Error(Input) naming the field when a value is <= 0 or n_embd % n_head != 0.
  void validate() const;
  /// {"n_layer":..,"n_head":..,"n_embd":..,"block_size":..,"vocab_size":..}
  nlohmann::json to_json() const;
  /// Reads the five fields (all required, integers); Error(Input) naming a missing/bad field
  /// (`where` prefixes the message, e.g. a file name). Validates.
  static Gpt2Config from_json(const nlohmann::json& j, const std::string& where = {});
  bool operator==(const Gpt2Config& o) const;
};

/// One parameter tensor's place in the flat f32 buffer.
struct ParamTensor {
  std::string name;             ///< e.g. "wte", "h.3.attn.c_attn.weight", "ln_f.bias"
  std::vector<int64_t> shape;   ///< row-major; Linear weights are (out, in) as torch.nn.Linear
  size_t offset = 0;            ///< in floats from the start of the buffer
  size_t numel = 0;
  bool decay = false;           ///< AdamW weight decay applies (2-D tensors: matmul weights and
                                ///< embeddings, as nanoGPT's configure_optimizers)
};

/// The canonical layout, in this order (C = n_embd, V = vocab_size, Tm = block_size):
///   wte (V,C), wpe (Tm,C), then for each layer l:
///   h.l.ln_1.weight (C), h.l.ln_1.bias (C), h.l.attn.c_attn.weight (3C,C), h.l.attn.c_attn.bias (3C),
///   h.l.attn.c_proj.weight (C,C), h.l.attn.c_proj.bias (C), h.l.ln_2.weight (C), h.l.ln_2.bias (C),
///   h.l.mlp.c_fc.weight (4C,C), h.l.mlp.c_fc.bias (4C), h.l.mlp.c_proj.weight (C,4C),
///   h.l.mlp.c_proj.bias (C); then ln_f.weight (C), ln_f.bias (C).
/// (HF's GPT-2 stores Conv1D weights transposed, (in,out); ours are (out,in).) No padding
/// between tensors. The output projection is tied to wte (no separate lm_head).
std::vector<ParamTensor> gpt2_param_layout(const Gpt2Config& cfg);
/// Total number of parameters (sum of numel of the layout).
size_t gpt2_num_params(const Gpt2Config& cfg);

/// Where the model runs.
enum class Backend { Cpu, Cuda };

/// How the model computes on the CPU. Direct: the hand-written backend (gpt2_cpu.cpp, llm.c's
/// layer-by-layer code; the oracle in tests). Graph: the Polygraph IR (gpt2_graph.hpp: the
/// builder's forward, IR autodiff's backward, run by ir::Executor with parameters and gradients
/// bound in place) with the same host AdamW step and clipping. Same losses within fp32 rounding
/// (models_gpt2_graph_test). Graph is CPU only; attention must be Flash.
enum class Engine { Direct, Graph };
/// "direct" | "graph"; Error(Usage) naming the value otherwise.
Engine parse_engine(const std::string& s);
/// "direct" | "graph".
const char* engine_name(Engine e);

/// Kernel parameters the model passes to the op library (from a tuned profile; defaults
/// otherwise). `matmul.impl` Blocked (own GEMM) or Blas (OpenBLAS) on CPU. `attention.algo` is
/// the attention fusion switch (rtx-evolve's fusion domain): Flash (default; fused,
/// FlashAttention, Dao et al. 2022: scores never stored, the backward recomputes them from
/// the saved output and logsumexp) or Naive (unfused: each head's (T,T) scores, softmax, then
/// x V; the backward recomputes the probabilities per head, so nothing beyond qkv is saved).
/// Same losses and gradients within fp32 rounding (1e-5 relative), not bit-identical.
struct Gpt2KernelParams {
  kernels::MatmulParams matmul{};
  kernels::AttentionParams attention{};
  kernels::OpParams elementwise{};
  /// Engine::Graph only: run the IR fusion passes (fuse_matmul_bias, fuse_elementwise;
  /// rtx/ir/fusion.hpp) on the training graph before planning it.
  bool graph_fusion = true;
};

/// Optimizer settings for one step (AdamW, decoupled decay, as kernels::adamw_update);
/// `grad_clip` > 0 scales all gradients by min(1, grad_clip / global_norm) first (torch's
/// clip_grad_norm_ with eps 1e-6); weight decay applies only to tensors with decay = true.
struct AdamWConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  float grad_clip = 1.0f;
};

/// Bytes of each memory class the model holds, for reporting.
struct Gpt2Memory {
  size_t params = 0, grads = 0, optimizer = 0, activations = 0;
  size_t total() const { return params + grads + optimizer + activations; }
};

/// A GPT-2 model: parameters, gradients, AdamW moments and activations for batches up to
/// (max_B, max_T), all f32. On the CUDA backend every buffer lives on the device; the host
/// accessors copy.
///
/// Training step (llm.c's order):   zero_grad(); for k in 0..K-1: forward(ids,targets,B,T);
/// backward(1/K); then step(step_number, adamw, lr). Deterministic on CPU for a fixed thread
/// count and kernel params (bitwise-identical losses run after run).
class Gpt2 {
 public:
  /// Allocates everything for batches up to max_B x max_T (max_T <= block_size). Parameters
  /// start at zero: call init_weights() or set_params(). Throws Error(Input) on a bad config
  /// or sizes, Error(Environment) for Backend::Cuda without a GPU or CUDA build, Error(Usage)
  /// for Engine::Graph with Backend::Cuda or non-Flash attention.
  Gpt2(const Gpt2Config& cfg, int max_B, int max_T, Backend backend = Backend::Cpu,
       const Gpt2KernelParams& kp = {}, Engine engine = Engine::Direct);
  ~Gpt2();
  Gpt2(const Gpt2&) = delete;
  Gpt2& operator=(const Gpt2&) = delete;

  const Gpt2Config& config() const;
  Backend backend() const;
  Engine engine() const;
  const std::vector<ParamTensor>& layout() const;
  size_t num_params() const;
  Gpt2Memory memory() const;
  /// Activation bytes needed for a B x T batch (what forward+backward touch).
  static size_t activation_bytes(const Gpt2Config& cfg, int B, int T);

  /// GPT-2 init (nanoGPT's _init_weights): Linear and embedding weights ~ N(0, 0.02), each
  /// block's c_proj weights ~ N(0, 0.02/sqrt(2 n_layer)), biases 0, LayerNorm weight 1 bias 0.
  /// Normals from rtx::Philox(seed, subseq = tensor index in the layout). Zeroes m, v and the
  /// gradients.
  void init_weights(uint64_t seed);
  /// Copy all parameters in (host pointer, num_params() floats, layout order). Host-pointer
  /// accessors throw Error(Input) for a null pointer.
  void set_params(const float* host);
  /// Copy all parameters out (host pointer, num_params() floats).
  void get_params(float* host) const;
  /// Gradients out (host, num_params() floats) / AdamW moments in and out (host).
  void get_grads(float* host) const;
  void get_moments(float* m_host, float* v_host) const;
  void set_moments(const float* m_host, const float* v_host);

  /// Forward over ids (B,T) int32 in [0,V) (host pointers). With targets (B,T) in [0,V):
  /// returns the mean cross-entropy loss; with targets == nullptr returns NaN and only the
  /// logits are computed. Throws Error(Input) on B > max_B, T > max_T, or an id out of range.
  float forward(const int32_t* ids, const int32_t* targets, int B, int T);
  /// Logits (B,T,V) of the last forward, copied to host (B*T*V floats). Error(Usage) before any
  /// forward.
  void get_logits(float* host) const;
  /// Set all gradients to zero.
  void zero_grad();
  /// Backward of the last forward (which must have had targets), ACCUMULATING into the
  /// gradients with d(loss)/d(loss) = loss_scale (use 1/K for K accumulation steps).
  /// Error(Usage) when the last forward had no targets (or none ran); may be called again on
  /// the same forward (it adds the same gradient again).
  void backward(float loss_scale = 1.0f);
  /// Global L2 norm of all gradients (float64 accumulation).
  double grad_norm() const;
  /// One AdamW update with bias correction for 1-based step `t`, learning rate `lr` (the
  /// schedule is the caller's), clipping per `opt.grad_clip` (the stored gradients are scaled,
  /// as torch's clip_grad_norm_ does). Returns the pre-clip grad norm. Error(Input) for t < 1, a
  /// negative or non-finite lr, betas outside [0,1), eps <= 0, negative weight_decay/grad_clip.
  /// A non-finite gradient norm skips the update (parameters and moments untouched) and is
  /// returned, so the caller can stop or lower the learning rate.
  double step(int t, float lr, const AdamWConfig& opt);

  /// Data-parallel training (rtx/dist): called during backward() each time the gradients
  /// [offset, offset + count) of the flat buffer (floats, layout order) are final for that
  /// backward: ln_f, then layers L-1 down to 0, then wte and wpe (together, wte's last
  /// contribution being the embedding backward). Each float is reported once per backward.
  using GradReadyHook = std::function<void(size_t offset, size_t count)>;
  /// Install (or, with an empty function, remove) the hook. Returns false when the backend does
  /// not report progress (CUDA: all gradients are final when backward() returns).
  bool set_grad_ready_hook(GradReadyHook hook);
  /// The gradient buffer itself (memory().grads bytes), for in-place all-reduce: host memory in
  /// layout order (num_params() floats) on CPU; device memory on CUDA, the tensors in layout
  /// order each on a 256-byte boundary, zero in between. Valid for the model's lifetime.
  float* grad_data();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rtx::models
