// CUDA ops of GPT-2 training as plain launch functions (llm.c style): device pointers, shapes,
// and a cudaStream_t passed as void* (nullptr = legacy default stream). Used by the registry's
// CUDA variants and by the GPT-2 CUDA path. Include only under RTX_HAVE_CUDA.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rtx/core/dtype.hpp"

namespace rtx::kernels::cuda {

// Shape letters: M,N,K matmul (out (M,N) = inp (M,K) @ weight (N,K)^T + bias (N)); N rows,
// C channels; B batch, T time, NH heads, HS head size (C = NH*HS), V vocab. Matmul inputs are
// f32 or bf16 (`dt`), accumulation and outputs f32. Every launch is asynchronous on `stream`;
// a failed launch throws rtx::Error (rtx/core/cuda_check.hpp); sizes <= 0 throw Error(Input).
// No function uses floating-point atomics: equal inputs give bitwise-equal outputs.

// ---- matmul: cuBLASLt ----------------------------------------------------------------------

/// A planned cuBLASLt GEMM in llm.c's row-major convention (TF32 off: CUBLAS_COMPUTE_32F):
///   forward:        out (M,N) = inp (M,K) @ weight (N,K)^T [+ bias (N)]   (bias epilogue)
///   backward dinp:  dinp (M,K) [+]= dout (M,N) @ weight (N,K)
///   backward dw:    dweight (N,K) [+]= dout (M,N)^T @ inp (M,K)
/// The heuristic is queried once at construction for up to 8 algorithms; `algo` indexes
/// them (0 = the heuristic's first choice). Throws Error(Input) when `algo` is beyond what the
/// heuristic returned for this problem (the tuner records it as a skipped candidate), and
/// Error(Environment) without a GPU. The bias epilogue is used for an f32 bias when cuBLASLt
/// offers it for the types; otherwise (and for a bf16 bias, which the epilogue does not take
/// with an f32 D) the bias is broadcast into `out` first and the GEMM accumulates (beta 1).
class LtMatmul {
 public:
  enum class Kind { Forward, BackwardInput, BackwardWeight };
  /// `bias_dt`: dtype of the bias vector (Forward with bias only). `accumulate`: beta = 1.
  LtMatmul(Kind kind, int M, int N, int K, DType dt, bool has_bias, DType bias_dt, bool accumulate, int algo);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  /// Run. Forward: a = inp, b = weight, out (M,N). BackwardInput: a = dout, b = weight, out = dinp.
  /// BackwardWeight: a = dout, b = inp, out = dweight. `bias` only for Forward with bias.
  void run(float* out, const void* a, const void* b, const void* bias, void* stream) const;
  /// Number of algorithms the heuristic returned (>= 1).
  int algo_count() const;
  /// True when the bias is fused as a cuBLASLt epilogue.
  bool fused_bias() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- matmul: own tiled kernel ----------------------------------------------------------------

/// One instantiated tile shape of the tiled kernel: block tile BM x BN x BK, warp tile WM x WN.
/// Threads per block = (BM/WM)*(BN/WN)*32. f32: FMA, each thread (WM/4) x (WN/8) outputs;
/// bf16: WMMA 16x16x16 with fp32 accumulate.
struct TiledConfig {
  int bm, bn, bk, wm, wn;
};
/// The instantiated tile shapes (index = the "config" tuning parameter).
constexpr TiledConfig kTiledConfigs[] = {
    {128, 128, 16, 32, 64}, {128, 64, 16, 32, 32}, {64, 64, 32, 32, 32}, {32, 32, 32, 16, 16}};
constexpr int kTiledConfigCount = 4;
/// Dynamic shared memory of a tiled launch in bytes (pipeline stages + epilogue staging).
size_t tiled_smem_bytes(int config, int stages, DType dt);

/// out (M,N) [+]= A (M,K) @ B (N,K)^T [+ bias (N)] with the tiled kernel ("NT" form: both
/// operands K-contiguous). `stages` 1..3: cp.async pipeline depth (1 = load then compute);
/// `vec`: widest global load in elements (1,2,4); the kernel uses the largest width <= vec that
/// divides K (bf16 single elements are loaded without cp.async). Edges in M, N, K are predicated.
/// `bias` (N) in `bias_dt`, or null. Throws Error(Input) on a bad config/stages/vec.
void matmul_tiled_nt(float* out, const void* A, const void* B, const void* bias, DType bias_dt, int M, int N,
                     int K, DType dt, bool accumulate, int config, int stages, int vec, void* stream);

/// Transpose in (R,C) -> out (C,R) for 2-byte (bf16) or 4-byte (f32) elements, per `dt`.
void transpose(void* out, const void* in, int R, int C, DType dt, void* stream);

/// dbias (N) [+]= sum over rows of dout (M,N), rows summed in order (deterministic).
void column_sum(float* dbias, const void* dout, int M, int N, DType dt, bool accumulate, void* stream);

/// out (M,N) = broadcast of bias (N), or out += it with `add` (row bias initialisation for an
/// accumulating GEMM). f32 out; bias f32 or bf16 (bias_dt).
void broadcast_rows(float* out, const void* bias, DType bias_dt, int M, int N, void* stream, bool add = false);

// ---- row / element-wise ops (f32) ------------------------------------------------------------

/// Row softmax, numerically stable. inp (N,C), out (N,C).
void softmax_forward(float* out, const float* inp, int N, int C, void* stream);
/// LayerNorm, eps 1e-5, biased variance. inp (N,C), weight (C), bias (C); out (N,C), mean (N), rstd (N).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, void* stream);
/// LayerNorm backward (llm.c). dout (N,C), inp (N,C), weight (C), mean (N), rstd (N);
/// dinp (N,C), dweight (C), dbias (C) accumulated (+=) when `accumulate`, else overwritten.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, bool accumulate,
                        void* stream);
/// GELU, tanh approximation (Hendrycks & Gimpel 2016). inp (N), out (N).
void gelu_forward(float* out, const float* inp, int64_t N, void* stream);
/// dinp (N) [+]= gelu'(inp) * dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N, bool accumulate, void* stream);
/// out (N) = inp1 (N) + inp2 (N); `out` may be `inp1` or `inp2` (in place).
void residual_forward(float* out, const float* inp1, const float* inp2, int64_t N, void* stream);
/// out (B,T,C) = wte[ids[b,t]] (V,C) + wpe[t] (T,C). ids (B,T) must lie in [0,V) (not checked on device).
void encoder_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int B, int T, int C,
                     void* stream);
/// dwte (V,C) [+]= scatter of dout (B,T,C) by ids; dwpe (T,C) [+]= sum_b dout. Deterministic: one
/// thread owns a channel of dwte and walks positions in (b,t) order.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int B, int T, int C, int V,
                      bool accumulate, void* stream);
/// losses (N) = logsumexp(logits (N,V)) - logits[n, targets[n]].
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, void* stream);
/// dlogits (N,V) [+]= (softmax(logits) - onehot(targets)) / N.
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                           bool accumulate, void* stream);
/// One AdamW step in place (Loshchilov & Hutter 2019, llm.c form): grad (N); param, m, v (N).
void adamw_update(float* param, float* m, float* v, const float* grad, int64_t N, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t, void* stream);

// ---- attention (f32, causal, llm.c layout) ----------------------------------------------------

/// Flash attention forward (Dao et al. 2022): one warp per query row, Br rows per block, keys
/// in tiles of Bc held in shared memory, running max and sum; never materialises (T,T).
/// qkv (B,T,3C) = [q | k | v], out (B,T,C), lse (B,NH,T) = logsumexp of each row's scaled
/// scores (may be null). Br in {1..32}, Bc in {1..256}, HS <= 128, shared memory <= 227 KiB.
void attention_forward_flash(float* out, float* lse, const float* qkv, int B, int T, int NH, int HS, int Br, int Bc,
                             void* stream);
/// Scratch floats attention_forward_naive and attention_backward need: B*NH*T*T (naive) or
/// 2*B*NH*T*T (backward).
size_t attention_naive_scratch(int B, int T, int NH);
size_t attention_backward_scratch(int B, int T, int NH);
/// Naive attention forward: probabilities (B,NH,T,T) in `scratch`, then att @ v; lse as flash.
void attention_forward_naive(float* out, float* lse, float* scratch, const float* qkv, int B, int T, int NH, int HS,
                             void* stream);
/// Attention backward by recomputation: dqkv (B,T,3C) [+]= d/dqkv for dout (B,T,C). Uses
/// attention_backward_scratch floats; every output element is one thread's ordered sum.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, int B, int T, int NH,
                        int HS, bool accumulate, void* stream);

}  // namespace rtx::kernels::cuda
