// CPU ops of GPT-2 training other than matmul, as llm.c-style free functions (one per layer and
// direction), float32 row-major, OpenMP inside. The registry variants and the GPT-2 model call these.
#pragma once
#include <cstdint>

namespace rtx::kernels {

// Shape letters: N rows, C channels, B batch, T time, NH heads, HS head size (C = NH*HS in
// attention), V vocab, R ranks. Every function throws rtx::Error(Input) naming the bad dim
// when a size is <= 0 (or a pointer it needs is null). Same inputs, threads and params give
// bitwise-identical output (fixed reduction order per ISA level; the level is cpu_isa_active()).

/// Tunables of the row/element-wise ops. `chunk` = rows (row ops) or elements (element-wise
/// ops) per OpenMP work item; 0 picks the default.
struct OpParams {
  int64_t chunk = 0;
};

/// Numerically stable softmax of each row: out[n,c] = exp(inp[n,c]-max_n) / sum_c exp(...).
// inp (N,C), out (N,C)
void softmax_forward(float* out, const float* inp, int64_t N, int64_t C, const OpParams* p = nullptr);

/// LayerNorm (Ba, Kiros, Hinton 2016), eps 1e-5, biased variance:
/// out = (inp - mean) * rstd * weight + bias, rstd = 1/sqrt(var + 1e-5).
// inp (N,C), weight (C), bias (C), out (N,C), mean (N), rstd (N)
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, const OpParams* p = nullptr);

/// LayerNorm backward (llm.c): dinp += rstd*(dnorm - mean(dnorm) - norm*mean(dnorm*norm)),
/// dnorm = weight*dout, norm = (inp-mean)*rstd; dweight += sum_n norm*dout; dbias += sum_n dout.
// dout (N,C), inp (N,C), weight (C), mean (N), rstd (N); dinp (N,C) +=, dweight (C) +=, dbias (C) +=
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        const OpParams* p = nullptr);

/// GELU, tanh approximation (Hendrycks & Gimpel 2016):
/// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as x * sigmoid(2u).
// inp (N), out (N)
void gelu_forward(float* out, const float* inp, int64_t N, const OpParams* p = nullptr);
/// d gelu / dx of the tanh form, times dout, accumulated: dinp += gelu'(inp) * dout.
// inp (N), dout (N), dinp (N) +=
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N, const OpParams* p = nullptr);

/// out = inp1 + inp2.
// inp1 (N), inp2 (N), out (N)
void residual_forward(float* out, const float* inp1, const float* inp2, int64_t N, const OpParams* p = nullptr);

/// Token + position embedding: out[b,t,:] = wte[ids[b,t],:] + wpe[t,:]. ids in [0,V) else Error(Input).
// ids (B,T) int32, wte (V,C), wpe (T,C) (at least T rows), out (B,T,C)
void encoder_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t B, int64_t T,
                     int64_t C, int64_t V);
/// Embedding backward: dwte[ids[b,t],:] += dout[b,t,:], dwpe[t,:] += sum_b dout[b,t,:]
/// (each sum taken in float64 in (b,t) order and added once: independent of the thread count).
// dout (B,T,C), ids (B,T); dwte (V,C) +=, dwpe (T,C) +=
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t B, int64_t T,
                      int64_t C, int64_t V);

/// Cross-entropy from logits: losses[n] = logsumexp(logits[n,:]) - logits[n,targets[n]].
// logits (N,V), targets (N) int32 in [0,V), losses (N)
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V);
/// Fused softmax + cross-entropy backward with dloss = 1/N per row (mean loss):
/// dlogits[n,v] = (softmax(logits[n,:])[v] - [v == targets[n]]) / N  (overwrites dlogits).
// logits (N,V), targets (N), dlogits (N,V)
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N, int64_t V);

/// AdamW hyperparameters (Loshchilov & Hutter 2019); t is the 1-based step for bias correction.
struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.1f;
  int t = 1;
};
/// One AdamW step in place: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; mh = m/(1-b1^t);
/// vh = v/(1-b2^t); param -= lr (mh / (sqrt(vh) + eps) + wd param)  (decoupled decay, llm.c form).
// grad (N); param (N), m (N), v (N) updated in place
void adamw_update(float* param, float* m, float* v, const float* grad, int64_t N, const AdamWParams& hp,
                  const OpParams* p = nullptr);

/// Attention algorithm and its tiles. Flash: Br queries x Bc keys per tile, 1 <= Br,Bc <= 512.
struct AttentionParams {
  enum class Algo { Flash, Naive } algo = Algo::Flash;
  int Br = 64;
  int Bc = 64;
};
/// Causal multi-head self-attention (GPT-2, llm.c layout), scale 1/sqrt(HS):
/// out[b,t,h,:] = sum_{s<=t} softmax_s(q.k_s * scale) v_s. Naive materialises each head's (T,T)
/// scores; Flash (Dao et al. 2022) tiles Br x Bc with a running max and sum and never does.
/// `lse` (optional, may be null) receives logsumexp of each scaled score row, for the backward.
/// Throws Error(Input) on bad dims or tiles (Br/Bc outside [1,512]).
// qkv (B,T,3C) laid out [q | k | v], each (NH,HS); out (B,T,C); lse (B,NH,T)
void attention_forward(float* out, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t HS,
                       const AttentionParams* p = nullptr, float* lse = nullptr);
/// Backward of attention_forward, accumulated: dqkv += d(loss)/d(qkv). `out` and `lse` from the
/// forward may be given (both non-null) to skip recomputing them; otherwise they are recomputed
/// per head (FlashAttention's recomputation). dS = P (dP - rowsum(dO o O)).
// dout (B,T,C), qkv (B,T,3C), out (B,T,C) or null, lse (B,NH,T) or null; dqkv (B,T,3C) +=
void attention_backward(float* dqkv, const float* dout, const float* qkv, int64_t B, int64_t T, int64_t NH,
                        int64_t HS, const AttentionParams* p = nullptr, const float* out = nullptr,
                        const float* lse = nullptr);

/// Tunables of allreduce: elements per work item (each item is summed by one rank thread).
struct AllreduceParams {
  int64_t chunk = 4096;
};
/// In-process sum allreduce over R ranks run as R threads: afterwards every bufs[r][i] equals
/// sum_{r'=0..R-1} bufs[r'][i], summed in rank order 0..R-1 (bitwise identical on every rank and for
/// every chunk size). Buffers must not overlap. R in [1,256].
// bufs: R pointers to (N) floats, updated in place
void allreduce_sum(float* const* bufs, int64_t R, int64_t N, const AllreduceParams* p = nullptr);

/// Dot product of two float vectors of length n with 8 partial sums added in a fixed order
/// (vectorisable without reassociation flags, the same bits on every run and ISA): the scalar
/// helper of the decoders (models/infer, serve/llama).
inline float dot_fixed8(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace rtx::kernels
