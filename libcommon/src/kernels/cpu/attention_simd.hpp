// Internal: the per-ISA flash attention kernels (forward query block, backward head) of
// attention_simd.inc, compiled three times (attention_{avx512,avx2,scalar}.cpp); OpenMP stays in attention_cpu.cpp.
#pragma once
#include <cstdint>
#include <vector>

namespace rtx::kernels::attn {

/// Head geometry (llm.c layout): qkv rows hold [q | k | v], each NH*HS wide; C = NH*HS, C3 = 3C.
struct Dims {
  int64_t B, T, NH, HS, C, C3;
};

/// Scratch of one flash forward query block. Key rows are padded to the ISA's row block R, query
/// columns and head columns to its vector width W (`prepare` sizes them; see attention_cpu.cpp).
struct FwdScratch {
  std::vector<float> s;      // (Bc_R, Br_W) scores, then probabilities, of one key block, transposed
  std::vector<float> o;      // (Br_R, HS_W) unnormalised output accumulator
  std::vector<float> m, l;   // (Br_W) running max and sum of each query
  std::vector<float> alpha;  // (Br_W) rescale factor of the current key block
  std::vector<float> qt;     // (HS, Br_W) the query block transposed (zero-padded columns)
  void prepare(const Dims& d, int64_t Br, int64_t Bc, int W, int R);
};

/// Scratch of one flash backward head (Tp = round_up(T, W) + W columns; the last W stay zero).
struct BwdScratch {
  FwdScratch fwd;                 // for recomputing out/lse when the caller has none
  std::vector<float> o, lrec;     // (T, HS), (T) recomputed output and lse
  std::vector<float> qt, dot;     // (HS, Tp) Q^T and dO^T of the head
  std::vector<float> lp, dp;      // (Tp) lse and D_i = dO_i . O_i
  std::vector<float> dq;          // (T, HS_W) dQ accumulator (unscaled)
  std::vector<float> st, dpt;     // (Bc_R, Br_W) P^T and dS^T of one tile (keys x queries)
  std::vector<float> dk, dv;      // (Bc_R, HS_W) dK, dV accumulators of one key block (unscaled dK)
  void prepare(const Dims& d, int64_t Br, int64_t Bc, int W, int R);
};

/// The kernels of one ISA level. lanes = W floats per vector, rows = R rows per register block.
struct Kernels {
  int lanes;
  int rows;
  /// Flash forward of queries [i0,i1) of head (b,h): out rows at out + i*ostride, lse[i] (lse may be null).
  // qkv (B,T,3C); out (T rows of HS, stride ostride) for this head; lse (T) for this head
  void (*fwd_block)(float* out, int64_t ostride, float* lse, const float* qkv, const Dims& d, int64_t b, int64_t h,
                    int64_t i0, int64_t i1, int64_t Bc, FwdScratch& s);
  /// Flash backward of head (b,h), accumulated into dqkv; recomputes out/lse when either is null.
  // dout (B,T,C), qkv (B,T,3C), out (B,T,C) or null, lse (B,NH,T) or null; dqkv (B,T,3C) +=
  void (*bwd_head)(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const Dims& d, int64_t b, int64_t h, int64_t Br, int64_t Bc, BwdScratch& s);
};

extern const Kernels kAttnScalar;
extern const Kernels kAttnAvx2;
extern const Kernels kAttnAvx512;

}  // namespace rtx::kernels::attn
