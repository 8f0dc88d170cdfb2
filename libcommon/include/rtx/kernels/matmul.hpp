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
#include <string>

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

/// Backward, f32. dinp (M,K) is overwritten; dweight (N,K) and dbias (N) are accumulated
/// into (+=), as in llm.c. dbias may be nullptr (layer without bias). dout (M,N), inp (M,K),
/// weight (N,K). Throws rtx::Error(Input) on M,N,K <= 0 or invalid params.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int M, int N, int K, const MatmulParams* p = nullptr);
/// Backward, bf16 inputs (dout, inp, weight as bf16 bits), f32 gradients; as the f32 overload.
void matmul_backward(float* dinp, float* dweight, float* dbias, const uint16_t* dout, const uint16_t* inp,
                     const uint16_t* weight, int M, int N, int K, const MatmulParams* p = nullptr);

}  // namespace rtx::kernels
