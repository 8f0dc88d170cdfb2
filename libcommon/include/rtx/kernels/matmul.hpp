// CPU matmul, forward and backward (llm.c convention), on raw row-major pointers.
// Two implementations: our own blocked GEMM (GotoBLAS/BLIS structure, AVX-512/AVX2/scalar
// micro-kernels chosen at run time) and OpenBLAS's cblas_sgemm. Not a general BLAS.
//
// Shape letters (fixed for this file): M rows (B*T), K input channels (C), N output channels (OC).
//   forward:  out (M,N) = inp (M,K) @ weight (N,K)^T + bias (N)
//   backward: dinp (M,K) = dout (M,N) @ weight (N,K)
//             dweight (N,K) += dout^T (N,M) @ inp (M,K)
//             dbias (N) += sum over rows of dout
// Inputs are f32, or bf16 bits (uint16_t) converted to f32 while packing; accumulation and
// outputs are always f32. Same inputs, params and thread count: bitwise-identical output
// (each output element is reduced by one thread in a fixed order; in fact the blocked result
// depends only on KC, not on the thread count or the other tile sizes).
#pragma once
#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include <cstdlib>
#include <memory>

#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/registry.hpp"

namespace rtx::kernels {

/// Which implementation a matmul call uses.
enum class MatmulImpl : int { Blocked = 0, Blas = 1 };

/// Tunable parameters of the blocked kernel (ignored by the BLAS path except `impl`).
/// A value of 0 means "the default of the active ISA" (table in cpu/matmul_configs.hpp).
///   MC x KC: block of the M-side operand packed per thread (targets L2),
///   KC x NC: panel of the N-side operand packed once and shared (targets L3),
///   MR x NR: register micro-tile (NR a multiple of the vector width: 16 AVX-512, 8 AVX2).
/// Constraints (see matmul_params_invalid): MC % MR == 0, NC % NR == 0, MR x NR compiled
/// for the ISA and fitting its registers (MR*NR/vec + NR/vec + 1 <= 32 AVX-512, 16 AVX2).
struct MatmulParams {
  int MC = 0, NC = 0, KC = 0;
  int MR = 0, NR = 0;
  MatmulImpl impl = MatmulImpl::Blocked;
};

/// `p` with every 0 field replaced by the default of `isa`.
MatmulParams matmul_resolve_params(const MatmulParams& p, Isa isa);
/// Why `p` (after resolving defaults) cannot run on `isa`; "" when it can.
std::string matmul_params_invalid(const MatmulParams& p, Isa isa);
/// Registry parameters {MC,NC,KC,MR,NR} (missing keys: 0 = default) -> MatmulParams.
/// Throws rtx::Error(Input) for a value outside int range.
MatmulParams matmul_params_from(const Params& p, MatmulImpl impl);

/// Forward, f32. out (M,N), inp (M,K), weight (N,K), bias (N) or nullptr.
/// `p` nullptr: blocked kernel with the active ISA's defaults.
/// Throws rtx::Error(Input) on M,N,K <= 0 or invalid params (the message gives the reason).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int M, int N, int K,
                    const MatmulParams* p = nullptr);
/// Forward, bf16 inputs (raw bf16 bits), f32 output; same shapes and errors as the f32 overload.
void matmul_forward(float* out, const uint16_t* inp, const uint16_t* weight, const uint16_t* bias, int M, int N, int K,
                    const MatmulParams* p = nullptr);

/// General transposes, f32: out (M,N) = op(a) (M,K) . op(b) (K,N) [+ bias (N)], where a is
/// stored (M,K) row-major, or (K,M) with `ta`; b is stored (K,N), or (N,K) with `tb`. With
/// `accumulate` the product is added to out (bias must then be nullptr). No transposed copy is
/// made: the blocked GEMM packs from the strided operands (the panels matmul_backward uses), so
/// (ta=false, tb=true) gives matmul_forward's bits, (false,false) matmul_backward's dinp and
/// (true,false, accumulate) its dweight. BLAS: one cblas_sgemm with the transpose flags.
/// Throws rtx::Error(Input) on M,N,K <= 0, a null pointer, bias with accumulate, or invalid params.
void matmul_forward_t(float* out, const float* a, bool ta, const float* b, bool tb, const float* bias, int M, int N, int K,
                      bool accumulate, const MatmulParams* p = nullptr);

/// Backward, f32. dinp (M,K) is overwritten; dweight (N,K) and dbias (N) are accumulated
/// into (+=), as in llm.c. dbias may be nullptr (layer without bias). dout (M,N), inp (M,K),
/// weight (N,K). Throws rtx::Error(Input) on M,N,K <= 0 or invalid params.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int M, int N, int K, const MatmulParams* p = nullptr);
/// Backward, bf16 inputs (dout, inp, weight as bf16 bits), f32 gradients; as the f32 overload.
void matmul_backward(float* dinp, float* dweight, float* dbias, const uint16_t* dout, const uint16_t* inp,
                     const uint16_t* weight, int M, int N, int K, const MatmulParams* p = nullptr);

/// A weight (N,K) f32 packed once, for inference: the blocked GEMM's B panels (KC x NR, for
/// every KC block and NR panel) are built at construction, so forward calls pack only the
/// activations, and small M (decode, M = 1..16) runs a direct loop over the panels. Output is
/// bitwise identical to matmul_forward() with the same params (same KC, same micro-kernel
/// reduction order), for every M: a row's result never depends on the other rows.
class PackedMatmulWeight {
 public:
  PackedMatmulWeight() = default;
  /// Packs `weight` (N,K) row-major (torch.nn.Linear layout). `p` nullptr: active ISA
  /// defaults. Error(Input) on N,K <= 0, null weight, invalid params or the BLAS impl.
  PackedMatmulWeight(const float* weight, int N, int K, const MatmulParams* p = nullptr);
  /// A weight kept in ggml's Q8_0 format: `blocks` holds N rows of K/32 blocks of 34 bytes (f16
  /// scale d, 32 int8 q; value q*d), as in a GGUF tensor of ne {K, N}.
  ///  W8A32 (int8_activations false, or a CPU without AVX2): int8 rows plus f32 scales (about
  ///   1.06 bytes per weight instead of 4); matmul_forward_packed converts 32 weights at a time
  ///   to f32 (q*d, exact) and accumulates in f32.
  ///  W8A8 (int8_activations true), as llama.cpp's Q8_0 x Q8_0: inputs quantized to int8 per 32
  ///   values as for the K-quants, exact integer dots, one scale d * sx per 32. Weight rows are
  ///   regrouped 16 at a time with AVX-512 VNNI (the quants + 128 as bytes for vpdpbusd, minus
  ///   128 x the inputs' sums), else 8 at a time (AVX2, or AVX-512 without VNNI; signed
  ///   pmaddubsw products); 1.125 bytes per weight either way (f32 scales), the last group
  ///   padded with zero rows; both give the same bits. Relative error of order 1e-3 from the 8-bit inputs; batch
  ///   invariant.
  /// Error(Input) on N <= 0, K not a positive multiple of 32, or null blocks.
  static PackedMatmulWeight q8_0(const uint8_t* blocks, int N, int K, bool int8_activations = false);
  /// A weight kept in one of ggml's K-quant formats (ggml_type 12 Q4_K, 13 Q5_K, 14 Q6_K;
  /// super-blocks of 256 values, ggml-common.h), rows of K/256 super-blocks as in a GGUF tensor
  /// of ne {K, N}. Every weight the kernels use is exactly ggml's dequantized value.
  /// The file's super-blocks are kept nearly as they are: f16 super-scales widened to f32,
  /// Q4_K/Q5_K's packed 6-bit scales unpacked to bytes (0.59, 0.72 and 0.83 bytes per weight for
  /// Q4_K, Q5_K, Q6_K against the file's 0.56, 0.69, 0.82); the kernels unpack the quants in
  /// registers.
  ///  int8_activations false: each weight is widened to f32 (q*s + o with s = d*sc, o = -dmin*m;
  ///   Q6_K (q-32)*s; each exact in f32) and accumulated with the f32 inputs, as for Q8_0.
  ///  true (as llama.cpp): matmul_forward_packed quantizes each input row to int8 per 32 values
  ///   (scale sx = max|x|/127) and takes exact integer dot products (vpdpbusd with AVX-512 VNNI,
  ///   else pmaddubsw/pmaddwd): per sub-block s * sx * sum(q*xq) + o * sx * sum(xq). The
  ///   super-blocks are regrouped 16 weight rows at a time with AVX-512 VNNI and 8 on AVX2 (the
  ///   same bits on both; AVX-512 without VNNI keeps a row at a time). Relative error of order
  ///   1e-3 from the 8-bit inputs; about 3x less arithmetic per weight; rows still independent
  ///   (batch invariant).
  /// Error(Input) on another type, N <= 0, K not a positive multiple of 256, or null blocks.
  static PackedMatmulWeight kquant(uint32_t ggml_type, const uint8_t* blocks, int N, int K, bool int8_activations = false);
  /// Whether q8_0() or kquant() takes ggml type `ggml_type` (8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K).
  static bool can_hold(uint32_t ggml_type) { return ggml_type == 8 || (ggml_type >= 12 && ggml_type <= 14); }
  /// Whether this weight is quantized (q8_0() or kquant()) rather than packed f32 panels.
  bool is_q8_0() const { return q8_ != nullptr && q8_->ggml_type == 8; }
  bool is_quantized() const { return q8_ != nullptr; }
  /// Whether matmul_forward_packed quantizes the inputs to 8 bits for this weight (K-quants
  /// with int8_activations; Q8_0's W8A8 layout).
  bool int8_activations() const { return q8_ != nullptr && q8_->a8; }
  /// "Q8_0", "Q4_K", "Q5_K", "Q6_K", or "f32".
  const char* format() const { return q8_ ? q8_->type : "f32"; }
  int N() const { return N_; }
  int K() const { return K_; }
  /// Bytes held (the packed panels, the Q8_0 quants and scales, or the K-quant super-blocks).
  size_t bytes() const {
    return q8_ ? q8_->q.size() + q8_->d.size() * sizeof(float) + q8_->sb.size() : size_ * sizeof(float);
  }
  bool empty() const { return N_ == 0; }
  /// Resolved parameters the weight was packed with.
  const MatmulParams& params() const { return prm_; }
  /// Packed panels: for KC block b (k0 = b*KC, kc rows), NR panel q: kc*NR floats at
  /// panel_offset(b, q) = (q*K + k0)*NR (panel-major: panel q's K rows are contiguous),
  /// element (k, j) at k*NR + j (columns past N zero).
  const float* panels() const { return packed_.get(); }
  size_t panel_offset(int kblock, int panel) const;

 private:
  int N_ = 0, K_ = 0;
  MatmulParams prm_{};
  Isa isa_ = Isa::Scalar;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> packed_;  // 64-byte aligned
  size_t size_ = 0;
  struct Q8 {
    std::vector<int8_t> q;   // Q8_0: N*K quants, row-major; a8: xw-column groups (q8_0())
    std::vector<float> d;    // Q8_0: N*(K/32) scales; a8: xw per group and block
    const char* type = "";   // "Q8_0", "Q4_K", ...
    bool a8 = false;         // 8-bit activations (integer dot products); K-quants, or Q8_0 W8A8
    // K-quants: the file's super-blocks, repacked (q and d then empty).
    // Per 256 values: Q4_K f32 d, f32 dmin, u8 sc[8], u8 m[8], qs[128] (152 B); Q5_K the same
    // plus qh[32] before qs (184 B); Q6_K f32 d, i8 sc[16], ql[128], qh[64] (212 B).
    std::vector<uint8_t> sb;
    uint32_t ggml_type = 0;
    // Q8_0 and K-quants with 8-bit activations: xw 8 (AVX2, or AVX-512 without VNNI for Q8_0)
    // or 16 (AVX-512 VNNI) weight rows (output columns) at a time, the "x8"/"x16" layouts of
    // matmul_q8.cpp; 0: a row at a time.
    int xw = 0;
  };
  std::shared_ptr<const Q8> q8_;  // set for Q8_0 weights (packed_ then empty)
  friend void matmul_forward_packed(float*, const float*, const PackedMatmulWeight&, const float*, int);
};

/// How a model's matrices are held, for logs and /v1/models: "f32" when none is quantized,
/// else each quantized format with its count over all, then the inputs' precision, e.g.
/// "q4_k 40/49, q6_k 9/49, 8-bit activations" ("f32 activations", or "8-bit activations 9/13"
/// when only some quantized matrices take 8-bit inputs).
std::string weight_formats_summary(const std::vector<const PackedMatmulWeight*>& ws);

/// out (M,N) = inp (M,K) @ W^T + bias (N) with a packed W; bias may be nullptr. Bitwise equal
/// to matmul_forward(out, inp, W, bias, M, N, K, &W.params()). For a quantized weight (Q8_0, K-quants): every output
/// is sum over blocks of (x . (q*d)) in f32 lanes (AVX-512 / AVX2 / scalar), a row's result
/// independent of the other rows (batch invariant). Error(Input) on M <= 0 or an empty weight.
void matmul_forward_packed(float* out, const float* inp, const PackedMatmulWeight& w, const float* bias, int M);

/// Seconds until OpenBLAS's own pthread workers stop spinning (0 when they are parked, or the
/// BLAS has no pool of its own: sequential or OpenMP builds). After loading and after every
/// cblas call its idle workers spin for 2^THREAD_TIMEOUT TSC cycles (default 2^28, about
/// 0.13 s at 2 GHz; blas_server.c) and take CPU from rtx's OpenMP threads meanwhile: on 2
/// cores that made an idle host read "busy" and the first OpenMP case time at 8 ms for 6 us.
/// rtx-bench waits this long before preparing each case. Never throws.
double blas_pool_parked_in_s();

}  // namespace rtx::kernels
