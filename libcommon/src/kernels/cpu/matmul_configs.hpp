// Internal: per-ISA default parameters of the blocked CPU matmul (constexpr table), and the
// micro-tiles compiled for each ISA. Overridden by a tuned profile, then by explicit params.
#pragma once
#include "rtx/kernels/cpu_features.hpp"

namespace rtx::kernels::matmul_detail {

/// One row of the default table: cache blocking (MC, NC, KC) and register tile (MR x NR).
struct MatmulConfig {
  Isa isa;
  int MC, NC, KC, MR, NR;
};

/// Defaults tuned on the development machine (Xeon, Sapphire Rapids class, 2 cores,
/// 2 MiB L2/core, 48 KiB L1d) with tests/kernels/matmul_bench (see docs in that file).
inline constexpr MatmulConfig kMatmulDefaults[] = {
    {Isa::Scalar, 96, 768, 256, 4, 8},
    {Isa::Avx2, 192, 3072, 256, 6, 16},
    {Isa::Avx512, 336, 1536, 384, 14, 32},
};

/// Register-tile heights compiled for the vector ISAs (widths: multiples of the vector
/// width, up to 4 vectors, subject to the register budget). Scalar takes any MR,NR <= these.
inline constexpr int kMatmulMR[] = {4, 6, 8, 12, 14};
inline constexpr int kMatmulMaxMR = 14;
inline constexpr int kMatmulMaxNR = 64;

constexpr MatmulConfig matmul_default_config(Isa isa) {
  for (const auto& c : kMatmulDefaults)
    if (c.isa == isa) return c;
  return kMatmulDefaults[0];
}

}  // namespace rtx::kernels::matmul_detail
