// Own tiled CUDA GEMM in "NT" form, out (M,N) [+]= A (M,K) @ B (N,K)^T [+ bias]: shared-memory
// block tiles, warp tiles, a 1-3 stage cp.async pipeline; f32 on FMA, bf16 on WMMA (fp32 acc).
// Only the tile shapes of kTiledConfigs are instantiated (x2 dtypes); stages and vec are runtime.
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "cuda_common.cuh"
#include "rtx/kernels/cuda_ops.hpp"

namespace rtx::kernels::cuda {
namespace {

using detail::as_stream;
using detail::ceil_div;

// Shared-memory row padding: 16 bytes keeps cp.async destinations 16-byte aligned and
// staggers banks; for bf16 it keeps WMMA's ldm a multiple of 8 elements.
template <typename T>
constexpr int kPad = 16 / static_cast<int>(sizeof(T));

template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src = valid ? BYTES : 0;  // src-size 0: the destination is zero-filled
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(gmem), "n"(BYTES), "r"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Load a ROWS x BK tile of src (rows [r0, r0+ROWS) x cols [k0, k0+BK) of a (nrows, K) row-major
// matrix) into dst[ROWS][BK+pad], zero outside the matrix. vec divides K (chosen by the host).
template <typename T, int ROWS, int BK, int NTHREADS>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int r0, int k0, int nrows, int K, int vec) {
  constexpr int LD = BK + kPad<T>;
  const int chunks_per_row = BK / vec;
  const int nchunks = ROWS * chunks_per_row;
  for (int i = threadIdx.x; i < nchunks; i += NTHREADS) {
    const int r = i / chunks_per_row, kc = (i % chunks_per_row) * vec;
    const int gr = r0 + r, gk = k0 + kc;
    const bool valid = gr < nrows && gk < K;  // vec | K, so a chunk is fully in or fully out
    const T* g = valid ? src + static_cast<int64_t>(gr) * K + gk : src;
    T* d = dst + r * LD + kc;
    const int bytes = vec * static_cast<int>(sizeof(T));
    if (bytes == 16) cp_async<16>(d, g, valid);
    else if (bytes == 8) cp_async<8>(d, g, valid);
    else if (bytes == 4) cp_async<4>(d, g, valid);
    else *d = valid ? *g : T(0.f);  // 2-byte element: no cp.async size, plain copy
  }
}

template <typename T, int BM, int BN, int BK, int WM, int WN>
struct TileTraits {
  static constexpr int kWarps = (BM / WM) * (BN / WN);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kLd = BK + kPad<T>;
  static constexpr int kStageElems = (BM + BN) * kLd;
  static_assert(BM % WM == 0 && BN % WN == 0, "block tile must divide into warp tiles");
  static_assert(kThreads <= 1024, "too many threads");
  static_assert(std::is_same<T, float>::value ? (WM % 4 == 0 && WN % 8 == 0) : (WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0),
                "warp tile must match the lane layout (f32) or WMMA 16x16x16 (bf16)");
};

__device__ __forceinline__ float load_bias(const void* bias, int bias_bf16, int n) {
  if (!bias) return 0.f;
  return bias_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]) : static_cast<const float*>(bias)[n];
}

// Compute one BK slice from shared memory into the thread's accumulators (f32, FMA).
template <int BM, int BN, int BK, int WM, int WN>
__device__ __forceinline__ void compute_f32(const float* As, const float* Bs, float (&acc)[WM / 4][WN / 8], int wm0,
                                            int wn0, int lr, int lc) {
  constexpr int LD = BK + kPad<float>;
  constexpr int TM = WM / 4, TN = WN / 8;
#pragma unroll 4
  for (int k = 0; k < BK; ++k) {
    float a[TM], b[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) a[i] = As[(wm0 + i * 4 + lr) * LD + k];
#pragma unroll
    for (int j = 0; j < TN; ++j) b[j] = Bs[(wn0 + j * 8 + lc) * LD + k];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

template <int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__(TileTraits<float, BM, BN, BK, WM, WN>::kThreads)
    tiled_nt_f32(float* __restrict__ out, const float* __restrict__ A, const float* __restrict__ B,
                 const void* __restrict__ bias, int bias_bf16, int M, int N, int K, int accumulate, int stages,
                 int vec) {
  using Tr = TileTraits<float, BM, BN, BK, WM, WN>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* smem = reinterpret_cast<float*>(smem_raw);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
  const int lr = lane >> 3, lc = lane & 7;
  float acc[WM / 4][WN / 8];
#pragma unroll
  for (int i = 0; i < WM / 4; ++i)
#pragma unroll
    for (int j = 0; j < WN / 8; ++j) acc[i][j] = 0.f;

  const int ktiles = static_cast<int>(ceil_div(K, BK));
  auto load = [&](int kt, int slot) {
    float* st = smem + slot * Tr::kStageElems;
    load_tile<float, BM, BK, Tr::kThreads>(st, A, m0, kt * BK, M, K, vec);
    load_tile<float, BN, BK, Tr::kThreads>(st + BM * Tr::kLd, B, n0, kt * BK, N, K, vec);
  };
  for (int s = 0; s < stages - 1; ++s) {
    if (s < ktiles) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    const int nt = kt + stages - 1;
    if (nt < ktiles) load(nt, nt % stages);
    cp_async_commit();
    if (stages == 3) cp_async_wait<2>();
    else if (stages == 2) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();
    const float* st = smem + (kt % stages) * Tr::kStageElems;
    compute_f32<BM, BN, BK, WM, WN>(st, st + BM * Tr::kLd, acc, wm0, wn0, lr, lc);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < WM / 4; ++i) {
    const int m = m0 + wm0 + i * 4 + lr;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < WN / 8; ++j) {
      const int n = n0 + wn0 + j * 8 + lc;
      if (n >= N) continue;
      float* o = out + static_cast<int64_t>(m) * N + n;
      const float v = acc[i][j] + load_bias(bias, bias_bf16, n);
      *o = accumulate ? *o + v : v;
    }
  }
}

template <int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__(TileTraits<__nv_bfloat16, BM, BN, BK, WM, WN>::kThreads)
    tiled_nt_bf16(float* __restrict__ out, const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                  const void* __restrict__ bias, int bias_bf16, int M, int N, int K, int accumulate, int stages,
                  int vec) {
  namespace wmma = nvcuda::wmma;
  using Tr = TileTraits<__nv_bfloat16, BM, BN, BK, WM, WN>;
  constexpr int FM = WM / 16, FN = WN / 16, LD = Tr::kLd;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  const int ktiles = static_cast<int>(ceil_div(K, BK));
  auto load = [&](int kt, int slot) {
    __nv_bfloat16* st = smem + slot * Tr::kStageElems;
    load_tile<__nv_bfloat16, BM, BK, Tr::kThreads>(st, A, m0, kt * BK, M, K, vec);
    load_tile<__nv_bfloat16, BN, BK, Tr::kThreads>(st + BM * LD, B, n0, kt * BK, N, K, vec);
  };
  for (int s = 0; s < stages - 1; ++s) {
    if (s < ktiles) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    const int nt = kt + stages - 1;
    if (nt < ktiles) load(nt, nt % stages);
    cp_async_commit();
    if (stages == 3) cp_async_wait<2>();
    else if (stages == 2) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();
    const __nv_bfloat16* As = smem + (kt % stages) * Tr::kStageElems;
    const __nv_bfloat16* Bs = As + BM * LD;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[FM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[FN];
#pragma unroll
      for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a[i], As + (wm0 + i * 16) * LD + kk, LD);
#pragma unroll
      for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(b[j], Bs + (wn0 + j * 16) * LD + kk, LD);
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  // Epilogue: each warp stages one 16x16 fragment at a time in its own smem slot, then
  // writes the in-range elements (predicated edges) with bias and accumulation.
  float* stage = reinterpret_cast<float*>(smem_raw) + warp * 256;
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int m = m0 + wm0 + i * 16 + e / 16, n = n0 + wn0 + j * 16 + e % 16;
        if (m < M && n < N) {
          float* o = out + static_cast<int64_t>(m) * N + n;
          const float v = stage[e] + load_bias(bias, bias_bf16, n);
          *o = accumulate ? *o + v : v;
        }
      }
      __syncwarp();
    }
}

template <typename T>
size_t smem_for(const TiledConfig& c, int stages) {
  const size_t pipe = static_cast<size_t>(stages) * (c.bm + c.bn) * (c.bk + kPad<T>)*sizeof(T);
  const size_t staging = std::is_same<T, float>::value ? 0 : static_cast<size_t>((c.bm / c.wm) * (c.bn / c.wn)) * 256 * 4;
  return pipe > staging ? pipe : staging;
}

// Opt in to more than 48 KiB of dynamic shared memory (up to 227 KiB on sm_90) for `kernel`.
template <typename Kern>
void allow_smem(Kern kernel, size_t smem) {
  detail::allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
}

template <int CI>
void run_config(float* out, const void* A, const void* B, const void* bias, int bias_bf16, int M, int N, int K,
                DType dt, int acc, int stages, int vec, cudaStream_t st) {
  constexpr TiledConfig c = kTiledConfigs[CI];
  const dim3 grid(static_cast<unsigned>(ceil_div(N, c.bn)), static_cast<unsigned>(ceil_div(M, c.bm)));
  const int threads = (c.bm / c.wm) * (c.bn / c.wn) * 32;
  if (dt == DType::BF16) {
    const size_t smem = smem_for<__nv_bfloat16>(c, stages);
    auto k = tiled_nt_bf16<c.bm, c.bn, c.bk, c.wm, c.wn>;
    allow_smem(k, smem);
    RTX_NOTE_LAUNCH_AS(k, "tiled_nt_bf16", grid, threads, smem);
    k<<<grid, threads, smem, st>>>(out, static_cast<const __nv_bfloat16*>(A), static_cast<const __nv_bfloat16*>(B),
                                   bias, bias_bf16, M, N, K, acc, stages, vec);
  } else {
    const size_t smem = smem_for<float>(c, stages);
    auto k = tiled_nt_f32<c.bm, c.bn, c.bk, c.wm, c.wn>;
    allow_smem(k, smem);
    RTX_NOTE_LAUNCH_AS(k, "tiled_nt_f32", grid, threads, smem);
    k<<<grid, threads, smem, st>>>(out, static_cast<const float*>(A), static_cast<const float*>(B), bias, bias_bf16,
                                   M, N, K, acc, stages, vec);
  }
  RTX_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t tiled_smem_bytes(int config, int stages, DType dt) {
  if (config < 0 || config >= kTiledConfigCount) return 0;
  const TiledConfig& c = kTiledConfigs[config];
  return dt == DType::BF16 ? smem_for<__nv_bfloat16>(c, stages) : smem_for<float>(c, stages);
}

void matmul_tiled_nt(float* out, const void* A, const void* B, const void* bias, DType bias_dt, int M, int N, int K,
                     DType dt, bool accumulate, int config, int stages, int vec, void* stream) {
  detail::require_positive(M, "matmul_tiled_nt", "M");
  detail::require_positive(N, "matmul_tiled_nt", "N");
  detail::require_positive(K, "matmul_tiled_nt", "K");
  if (config < 0 || config >= kTiledConfigCount)
    throw_input("matmul_tiled_nt: config " + std::to_string(config) + " not instantiated", "config",
                "use 0.." + std::to_string(kTiledConfigCount - 1));
  if (stages < 1 || stages > 3) throw_input("matmul_tiled_nt: stages must be 1, 2 or 3", "stages");
  if (vec != 1 && vec != 2 && vec != 4) throw_input("matmul_tiled_nt: vec must be 1, 2 or 4", "vec");
  if (dt != DType::F32 && dt != DType::BF16) throw_input("matmul_tiled_nt: dtype must be f32 or bf16", "dtype");
  int v = vec;
  while (v > 1 && K % v != 0) v >>= 1;  // widest load width dividing K keeps chunks aligned
  // cp.async of v elements also needs both base pointers aligned to v elements (slices of a
  // larger buffer may not be).
  const size_t elem = dt == DType::F32 ? 4 : 2;
  while (v > 1 && ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B)) % (v * elem)) != 0) v >>= 1;
  const int bias_bf16 = (bias && bias_dt == DType::BF16) ? 1 : 0;
  const int acc = accumulate ? 1 : 0;
  cudaStream_t st = as_stream(stream);
  switch (config) {
    case 0: run_config<0>(out, A, B, bias, bias_bf16, M, N, K, dt, acc, stages, v, st); break;
    case 1: run_config<1>(out, A, B, bias, bias_bf16, M, N, K, dt, acc, stages, v, st); break;
    case 2: run_config<2>(out, A, B, bias, bias_bf16, M, N, K, dt, acc, stages, v, st); break;
    default: run_config<3>(out, A, B, bias, bias_bf16, M, N, K, dt, acc, stages, v, st); break;
  }
}

}  // namespace rtx::kernels::cuda
