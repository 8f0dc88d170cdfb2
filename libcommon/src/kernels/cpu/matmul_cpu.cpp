// CPU matmul (rtx/kernels/matmul.hpp): the blocked GEMM driver (GotoBLAS/BLIS loop nest,
// packing, OpenMP over the macro loops), the scalar micro-kernel, and the cblas_sgemm path.
// The vector micro-kernels live in matmul_avx512.cpp / matmul_avx2.cpp.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "matmul_configs.hpp"
#include "matmul_kernels.hpp"
#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"
#include "rtx/kernels/matmul.hpp"

namespace rtx::kernels {

using matmul_detail::MicroKernel;

// ---- parameters ------------------------------------------------------------------------

MatmulParams matmul_resolve_params(const MatmulParams& p, Isa isa) {
  const auto d = matmul_detail::matmul_default_config(isa);
  MatmulParams r = p;
  if (r.MC == 0) r.MC = d.MC;
  if (r.NC == 0) r.NC = d.NC;
  if (r.KC == 0) r.KC = d.KC;
  if (r.MR == 0) r.MR = d.MR;
  if (r.NR == 0) r.NR = d.NR;
  return r;
}

std::string matmul_params_invalid(const MatmulParams& in, Isa isa) {
  if (in.impl == MatmulImpl::Blas) return "";
  const MatmulParams p = matmul_resolve_params(in, isa);
  const auto s = [](int v) { return std::to_string(v); };
  if (p.MC < 0 || p.NC < 0 || p.KC < 0 || p.MR < 0 || p.NR < 0) return "tile sizes must be >= 0 (0 = default)";
  constexpr int kMaxBlock = 1 << 14;
  if (p.MC > kMaxBlock || p.NC > kMaxBlock || p.KC > kMaxBlock)
    return "MC, NC, KC must be <= " + s(kMaxBlock) + " (packing buffers would not fit any cache)";
  if (p.MR > matmul_detail::kMatmulMaxMR || p.NR > matmul_detail::kMatmulMaxNR)
    return "MR=" + s(p.MR) + " x NR=" + s(p.NR) + " exceeds the largest micro-tile " +
           s(matmul_detail::kMatmulMaxMR) + " x " + s(matmul_detail::kMatmulMaxNR);
  if (p.MC % p.MR != 0) return "MC=" + s(p.MC) + " is not a multiple of MR=" + s(p.MR);
  if (p.NC % p.NR != 0) return "NC=" + s(p.NC) + " is not a multiple of NR=" + s(p.NR);
  if (isa == Isa::Scalar) return "";
  const int vec = isa == Isa::Avx512 ? 16 : 8;
  const int regs = isa == Isa::Avx512 ? 32 : 16;
  if (p.NR % vec != 0)
    return "NR=" + s(p.NR) + " is not a multiple of the " + isa_name(isa) + " vector width " + s(vec);
  const int nv = p.NR / vec;
  const int need = p.MR * nv + nv + 1;
  if (need > regs)
    return "MR=" + s(p.MR) + " x NR=" + s(p.NR) + " needs " + s(need) + " vector registers (" + s(p.MR * nv) +
           " accumulators + " + s(nv) + " B + 1 broadcast), " + isa_name(isa) + " has " + s(regs);
  const MicroKernel k = isa == Isa::Avx512 ? matmul_detail::avx512_micro_kernel(p.MR, p.NR)
                                           : matmul_detail::avx2_micro_kernel(p.MR, p.NR);
  if (!k)
    return "no " + std::string(isa_name(isa)) + " micro-kernel for MR=" + s(p.MR) + " x NR=" + s(p.NR) +
           " (MR in 1,2,4,6,8,12,14; NR 1..4 vectors)";
  return "";
}

MatmulParams matmul_params_from(const Params& p, MatmulImpl impl) {
  auto get = [&](const char* k) -> int {
    auto it = p.find(k);
    if (it == p.end()) return 0;
    if (it->second < std::numeric_limits<int>::min() || it->second > std::numeric_limits<int>::max())
      throw_input("matmul parameter " + std::string(k) + "=" + std::to_string(it->second) + " is out of range", k,
                  "use a tile size below 2^31");
    return static_cast<int>(it->second);
  };
  MatmulParams r;
  r.MC = get("MC");
  r.NC = get("NC");
  r.KC = get("KC");
  r.MR = get("MR");
  r.NR = get("NR");
  r.impl = impl;
  return r;
}

namespace {

// ---- buffers -----------------------------------------------------------------------------

/// A growable 64-byte-aligned float buffer (one per thread, reused across calls).
class Scratch {
 public:
  ~Scratch() { std::free(p_); }
  float* get(size_t n) {
    if (n > cap_) {
      std::free(p_);
      p_ = nullptr;
      cap_ = 0;
      const size_t bytes = ((n * sizeof(float) + 63) / 64) * 64;
      p_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!p_) throw std::bad_alloc();
      cap_ = n;
    }
    return p_;
  }

 private:
  float* p_ = nullptr;
  size_t cap_ = 0;
};

inline float load_f32(const float* p, int64_t i) { return p[i]; }
inline float load_f32(const uint16_t* p, int64_t i) { return bf16_to_f32(p[i]); }

/// A strided view X(i,k) = p[i*rs + k*cs] of a row-major operand.
template <typename T>
struct View {
  const T* p;
  int64_t rs, cs;
};

/// Pack rows [i0, i0+m) x k-range [k0, k0+kc) of X into R-row panels, panel-major:
/// dst[(panel*kc + k)*R + r] = X(i0 + panel*R + r, k0 + k); rows past m are zero (edge padding).
/// bf16 is converted to f32 here.
template <typename T>
void pack_panels(const View<T>& X, int64_t i0, int m, int64_t k0, int kc, int R, float* dst, Isa isa) {
  for (int p0 = 0; p0 < m; p0 += R) {
    const int rows = std::min(R, m - p0);
    float* d = dst + static_cast<int64_t>(p0) * kc;
    if (X.cs == 1 && isa == Isa::Avx512) {
      matmul_detail::avx512_pack_transpose(X.p + (i0 + p0) * X.rs + k0, X.rs, rows, kc, R, d);
    } else if (X.cs == 1) {
      // Rows contiguous along k: read each row, scatter with stride R.
      for (int r = 0; r < rows; ++r) {
        const T* s = X.p + (i0 + p0 + r) * X.rs + k0;
        for (int k = 0; k < kc; ++k) d[k * R + r] = load_f32(s, k);
      }
      for (int r = rows; r < R; ++r)
        for (int k = 0; k < kc; ++k) d[k * R + r] = 0.f;
    } else {
      // Rows strided: for each k the R values are (usually) contiguous.
      for (int k = 0; k < kc; ++k) {
        const T* s = X.p + (k0 + k) * X.cs + (i0 + p0) * X.rs;
        float* dk = d + k * R;
        if (X.rs == 1) {
          for (int r = 0; r < rows; ++r) dk[r] = load_f32(s, r);
        } else {
          for (int r = 0; r < rows; ++r) dk[r] = load_f32(s, r * X.rs);
        }
        for (int r = rows; r < R; ++r) dk[r] = 0.f;
      }
    }
  }
}

/// Scalar micro-kernel (no vector ISA assumed): same contract as MicroKernel, any MR,NR up to
/// the maxima. a*b then + (no fused multiply-add on baseline x86-64).
void scalar_micro_kernel(int MR, int NR, int kc, const float* a, const float* b, float* c, int64_t ldc,
                         bool accumulate, const float* bias) {
  float acc[matmul_detail::kMatmulMaxMR * matmul_detail::kMatmulMaxNR];
  std::fill(acc, acc + MR * NR, 0.f);
  for (int k = 0; k < kc; ++k) {
    const float* ak = a + k * MR;
    const float* bk = b + k * NR;
    for (int i = 0; i < MR; ++i) {
      const float ai = ak[i];
      float* ci = acc + i * NR;
      for (int j = 0; j < NR; ++j) ci[j] += ai * bk[j];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float& o = c[i * ldc + j];
      const float v = acc[i * NR + j];
      o = accumulate ? o + v : (bias ? bias[j] + v : v);
    }
}

/// C (M,N) (=, or += when accumulate) A (M,K) x B (K,N) [+ bias (N) when !accumulate].
/// A given as View a: A(i,k); B as View bt: B(k,j) = bt(j,k).
struct GemmArgs {
  int64_t M, N, K;
  float* c;
  int64_t ldc;
  bool accumulate;
  const float* bias;
};

/// One thread's share: C[i_begin:i_end, j_begin:j_end] with private packing buffers, the
/// GotoBLAS loop nest jc (NC) -> pc (KC, pack B panel) -> ic (MC, pack A block) -> jr (NR) -> ir (MR).
template <typename T>
void gemm_range(const View<T>& a, const View<T>& bt, const GemmArgs& g, const MatmulParams& prm, MicroKernel uk,
                int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end, Isa isa) {
  const int MR = prm.MR, NR = prm.NR;
  const int64_t M = i_end - i_begin, N = j_end - j_begin, K = g.K;
  if (M <= 0 || N <= 0) return;
  const int kc_max = static_cast<int>(std::min<int64_t>(prm.KC, K));
  const int nc_max = static_cast<int>(std::min<int64_t>(prm.NC, (N + NR - 1) / NR * NR));
  const int mc_max = static_cast<int>(std::min<int64_t>(prm.MC, (M + MR - 1) / MR * MR));
  static thread_local Scratch a_scratch, b_scratch;
  float* abuf = a_scratch.get(static_cast<size_t>(mc_max) * kc_max);
  float* bbuf = b_scratch.get(static_cast<size_t>(kc_max) * nc_max);
  alignas(64) float tile[matmul_detail::kMatmulMaxMR * matmul_detail::kMatmulMaxNR];
  auto run_tile = [&](int kc, const float* ap, const float* bp, float* cp, int64_t ldc, bool acc, const float* bias) {
    if (uk) uk(kc, ap, bp, cp, ldc, acc, bias);
    else scalar_micro_kernel(MR, NR, kc, ap, bp, cp, ldc, acc, bias);
  };

  for (int64_t jc = j_begin; jc < j_end; jc += nc_max) {
    const int nc = static_cast<int>(std::min<int64_t>(nc_max, j_end - jc));
    const int npanels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < K; pc += kc_max) {
      const int kc = static_cast<int>(std::min<int64_t>(kc_max, K - pc));
      pack_panels(bt, jc, nc, pc, kc, NR, bbuf, isa);
      const bool acc = g.accumulate || pc > 0;
      for (int64_t ic = i_begin; ic < i_end; ic += mc_max) {
        const int mc = static_cast<int>(std::min<int64_t>(mc_max, i_end - ic));
        pack_panels(a, ic, mc, pc, kc, MR, abuf, isa);
        for (int q = 0; q < npanels; ++q) {
          const int64_t j0 = jc + static_cast<int64_t>(q) * NR;
          const int ncols = static_cast<int>(std::min<int64_t>(NR, j_end - j0));
          const float* bp = bbuf + static_cast<int64_t>(q) * NR * kc;
          const float* bias = (!acc && g.bias) ? g.bias + j0 : nullptr;
          for (int r = 0; r < mc; r += MR) {
            const int nrows = std::min(MR, mc - r);
            const float* ap = abuf + static_cast<int64_t>(r) * kc;
            float* cp = g.c + (ic + r) * g.ldc + j0;
            if (nrows == MR && ncols == NR) {
              run_tile(kc, ap, bp, cp, g.ldc, acc, bias);
            } else {
              // Edge tile: compute the zero-padded tile, store only the valid part.
              run_tile(kc, ap, bp, tile, NR, false, nullptr);
              for (int i = 0; i < nrows; ++i)
                for (int j = 0; j < ncols; ++j) {
                  float& o = cp[i * g.ldc + j];
                  const float v = tile[i * NR + j];
                  o = acc ? o + v : (bias ? bias[j] + v : v);
                }
            }
          }
        }
      }
    }
  }
}

constexpr double kParallelMinFlops = 1 << 18;  // below this, one thread (fork/join dominates)

/// Threads split C into contiguous ranges of whole micro-tiles along M (or along N when N has
/// more NR-panels, e.g. few rows) and each runs the whole loop nest privately: no barrier
/// inside a call, at the cost of packing the shared operand once per thread (N*K or M*K
/// floats, small next to 2*M*N*K/threads flops). Every C element is reduced by one thread in
/// k order, so the result is independent of the thread count and of MC/NC/MR/NR.
template <typename T>
void gemm_blocked(const View<T>& a, const View<T>& bt, const GemmArgs& g, const MatmulParams& prm, Isa isa) {
  MicroKernel uk = nullptr;
  if (isa == Isa::Avx512) uk = matmul_detail::avx512_micro_kernel(prm.MR, prm.NR);
  else if (isa == Isa::Avx2) uk = matmul_detail::avx2_micro_kernel(prm.MR, prm.NR);
  RTX_CHECK(isa == Isa::Scalar || uk, "validated micro-tile has no kernel");
  const int64_t M = g.M, N = g.N;
  const int64_t m_panels = (M + prm.MR - 1) / prm.MR, n_panels = (N + prm.NR - 1) / prm.NR;
  const bool split_m = m_panels >= n_panels;
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (2.0 * M * N * g.K < kParallelMinFlops) nt = 1;
  nt = static_cast<int>(std::min<int64_t>(nt, split_m ? m_panels : n_panels));
  if (nt <= 1) {
    gemm_range(a, bt, g, prm, uk, 0, M, 0, N, isa);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t panels = split_m ? m_panels : n_panels, R = split_m ? prm.MR : prm.NR;
    const int64_t lo = std::min(panels * t / n * R, split_m ? M : N);
    const int64_t hi = std::min(panels * (t + 1) / n * R, split_m ? M : N);
    if (split_m) gemm_range(a, bt, g, prm, uk, lo, hi, 0, N, isa);
    else gemm_range(a, bt, g, prm, uk, 0, M, lo, hi, isa);
  }
}

/// dbias (N) += column sums of dout (M,N), each column summed over rows in order in float64.
/// Parallel over column chunks (when `parallel` and large), so the order never depends on the
/// thread count: the same bits either way.
template <typename T>
void add_column_sums(float* dbias, const T* dout, int64_t M, int64_t N, bool parallel) {
  constexpr int64_t kChunk = 64;
  const int64_t nchunks = (N + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (parallel && M * N > (1 << 16) && !omp_in_parallel())
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const int64_t j0 = ch * kChunk, j1 = std::min(N, j0 + kChunk);
    double s[kChunk] = {};
    for (int64_t m = 0; m < M; ++m) {
      const T* row = dout + m * N;
      for (int64_t j = j0; j < j1; ++j) s[j - j0] += load_f32(row, j);
    }
    for (int64_t j = j0; j < j1; ++j) dbias[j] = static_cast<float>(dbias[j] + s[j - j0]);
  }
}

void check_dims(const char* fn, int M, int N, int K) {
  const auto bad = [&](const char* d, int v) {
    throw_input(std::string(fn) + ": dimension " + d + " = " + std::to_string(v) + " must be >= 1", d,
                "pass positive M, N, K");
  };
  if (M <= 0) bad("M", M);
  if (N <= 0) bad("N", N);
  if (K <= 0) bad("K", K);
}

MatmulParams resolve_checked(const char* fn, const MatmulParams* p, Isa isa) {
  const MatmulParams in = p ? *p : MatmulParams{};
  if (std::string why = matmul_params_invalid(in, isa); !why.empty())
    throw_input(std::string(fn) + ": invalid matmul params for " + isa_name(isa) + ": " + why, "MatmulParams",
                "use 0 for the ISA default or a combination the variant's validate accepts");
  return matmul_resolve_params(in, isa);
}

/// bf16 bits -> f32 copy (for the BLAS path and bias).
std::vector<float> to_f32(const uint16_t* x, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(x[i]);
  return out;
}

/// Run BLAS on as many threads as rtx's own kernels (the OpenMP thread count in force:
/// --threads, a promoted config, OMP_NUM_THREADS), not OpenBLAS's separate default. Without it
/// `--threads 1` still ran OpenBLAS's pthread pool on every CPU, and the same 127x96x80 GEMM
/// took 43 or 70 us depending on the process (bimodal between processes; unimodal at 64 us with
/// one BLAS thread). Inside a parallel region BLAS runs on one thread. The pool is resized only
/// when the wanted count changes.
/// When the last cblas call was made (steady clock, ns), for blas_pool_parked_in_s().
std::atomic<int64_t> g_last_blas_ns{0};

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sync_blas_threads() {
  g_last_blas_ns.store(steady_ns(), std::memory_order_relaxed);
#ifdef OPENBLAS_VERSION
  static std::atomic<int> current{0};
  const int want = omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads());
  if (current.exchange(want) != want) openblas_set_num_threads(want);
#endif
}

void blas_forward(float* out, const float* inp, const float* weight, const float* bias, int M, int N, int K) {
  sync_blas_threads();
  if (bias)
    for (int64_t i = 0; i < M; ++i) std::memcpy(out + i * N, bias, sizeof(float) * N);
  // out (M,N) = inp (M,K) . weight^T (K,N) [+ out]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, inp, K, weight, K, bias ? 1.f : 0.f, out, N);
}

void blas_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, int M, int N,
                   int K) {
  sync_blas_threads();
  // dinp (M,K) = dout (M,N) . weight (N,K)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.f, dout, N, weight, K, 0.f, dinp, K);
  // dweight (N,K) += dout^T (N,M) . inp (M,K)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.f, dout, N, inp, K, 1.f, dweight, K);
}

/// The kernel.launch variant of a matmul call: the registry's variant and, for the blocked
/// kernel, the ISA that ran it.
const char* run_variant(MatmulImpl impl, Isa isa) {
  if (impl == MatmulImpl::Blas) return "cpu.blas";
  switch (isa) {
    case Isa::Avx512: return "cpu.blocked.avx512";
    case Isa::Avx2: return "cpu.blocked.avx2";
    case Isa::Scalar: break;
  }
  return "cpu.blocked.scalar";
}

template <typename T>
void forward_impl(float* out, const T* inp, const T* weight, const T* bias, int M, int N, int K,
                  const MatmulParams* p) {
  check_dims("matmul_forward", M, N, K);
  if (!out || !inp || !weight) throw_input("matmul_forward: null out/inp/weight pointer", "matmul_forward");
  const Isa isa = cpu_isa_active();
  const MatmulParams prm = resolve_checked("matmul_forward", p, isa);
  core::KernelRun run("matmul_forward", run_variant(prm.impl, isa), {{"M", M}, {"N", N}, {"K", K}},
                      std::is_same_v<T, float> ? "f32" : "bf16");
  std::vector<float> bias32;
  const float* bias_f = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    bias_f = bias;
  } else if (bias) {
    bias32 = to_f32(bias, N);
    bias_f = bias32.data();
  }
  if (prm.impl == MatmulImpl::Blas) {
    if constexpr (std::is_same_v<T, float>) {
      blas_forward(out, inp, weight, bias_f, M, N, K);
    } else {
      const auto i32 = to_f32(inp, static_cast<size_t>(M) * K), w32 = to_f32(weight, static_cast<size_t>(N) * K);
      blas_forward(out, i32.data(), w32.data(), bias_f, M, N, K);
    }
    return;
  }
  // A(i,k) = inp[i*K + k]; B(k,j) = weight[j*K + k], i.e. bt(j,k) = weight[j*K + k].
  gemm_blocked(View<T>{inp, K, 1}, View<T>{weight, K, 1}, GemmArgs{M, N, K, out, N, false, bias_f}, prm, isa);
}

template <typename T>
void backward_impl(float* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const T* weight, int M,
                   int N, int K, const MatmulParams* p) {
  check_dims("matmul_backward", M, N, K);
  if (!dinp || !dweight || !dout || !inp || !weight)
    throw_input("matmul_backward: null dinp/dweight/dout/inp/weight pointer", "matmul_backward");
  const Isa isa = cpu_isa_active();
  const MatmulParams prm = resolve_checked("matmul_backward", p, isa);
  core::KernelRun run("matmul_backward", run_variant(prm.impl, isa), {{"M", M}, {"N", N}, {"K", K}},
                      std::is_same_v<T, float> ? "f32" : "bf16");
  if (prm.impl == MatmulImpl::Blas) {
    if constexpr (std::is_same_v<T, float>) {
      blas_backward(dinp, dweight, dout, inp, weight, M, N, K);
    } else {
      const auto d32 = to_f32(dout, static_cast<size_t>(M) * N), i32 = to_f32(inp, static_cast<size_t>(M) * K),
                 w32 = to_f32(weight, static_cast<size_t>(N) * K);
      blas_backward(dinp, dweight, d32.data(), i32.data(), w32.data(), M, N, K);
    }
  } else {
    // dinp (M,K) = dout (M,N) x weight (N,K): A(i,n) = dout[i*N + n]; bt(j,n) = weight[n*K + j].
    gemm_blocked(View<T>{dout, N, 1}, View<T>{weight, 1, K}, GemmArgs{M, K, N, dinp, K, false, nullptr}, prm, isa);
    // dweight (N,K) += dout^T (N,M) x inp (M,K): A(n,m) = dout[m*N + n]; bt(j,m) = inp[m*K + j].
    gemm_blocked(View<T>{dout, 1, N}, View<T>{inp, 1, K}, GemmArgs{N, K, M, dweight, K, true, nullptr}, prm, isa);
  }
  // Not an OpenMP region next to BLAS calls: OpenBLAS's pthread workers spin (sched_yield) for
  // ~0.1 s after a call and libgomp's after a region, so alternating the two put 3 busy threads
  // on 2 CPUs (measured: 66% / 59% / 78% CPU, ~800 involuntary switches/s per thread; some
  // samples 15x slower; rtx-bench flagged every such case and its whole run as a busy host).
  // Serial, the column sums cost ~5% of the two GEMMs at M=256 and less at larger shapes.
  if (dbias) add_column_sums(dbias, dout, M, N, prm.impl != MatmulImpl::Blas);
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int M, int N, int K,
                    const MatmulParams* p) {
  forward_impl(out, inp, weight, bias, M, N, K, p);
}

void matmul_forward(float* out, const uint16_t* inp, const uint16_t* weight, const uint16_t* bias, int M, int N, int K,
                    const MatmulParams* p) {
  forward_impl(out, inp, weight, bias, M, N, K, p);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int M, int N, int K, const MatmulParams* p) {
  backward_impl(dinp, dweight, dbias, dout, inp, weight, M, N, K, p);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const uint16_t* dout, const uint16_t* inp,
                     const uint16_t* weight, int M, int N, int K, const MatmulParams* p) {
  backward_impl(dinp, dweight, dbias, dout, inp, weight, M, N, K, p);
}

void matmul_forward_t(float* out, const float* a, bool ta, const float* b, bool tb, const float* bias, int M, int N, int K,
                      bool accumulate, const MatmulParams* p) {
  check_dims("matmul_forward_t", M, N, K);
  if (!out || !a || !b) throw_input("matmul_forward_t: null out/a/b pointer", "matmul_forward_t");
  if (accumulate && bias) throw_input("matmul_forward_t: bias with accumulate", "matmul_forward_t");
  const Isa isa = cpu_isa_active();
  const MatmulParams prm = resolve_checked("matmul_forward_t", p, isa);
  core::KernelRun run("matmul_forward", run_variant(prm.impl, isa), {{"M", M}, {"N", N}, {"K", K}, {"ta", ta}, {"tb", tb}}, "f32");
  if (prm.impl == MatmulImpl::Blas) {
    sync_blas_threads();
    if (bias)
      for (int64_t i = 0; i < M; ++i) std::memcpy(out + i * N, bias, sizeof(float) * N);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.f, a, ta ? M : K, b,
                tb ? K : N, (bias || accumulate) ? 1.f : 0.f, out, N);
    return;
  }
  // A(i,k) = a[i*K + k] or (ta) a[k*M + i]; bt(j,k) = B(k,j) = b[k*N + j] or (tb) b[j*K + k].
  const View<float> av = ta ? View<float>{a, 1, M} : View<float>{a, K, 1};
  const View<float> bv = tb ? View<float>{b, K, 1} : View<float>{b, 1, N};
  gemm_blocked(av, bv, GemmArgs{M, N, K, out, N, accumulate, bias}, prm, isa);
}

// ---- packed weights (inference) --------------------------------------------------------------

namespace {

/// The vector micro-kernel for MR x NR on `isa`, or nullptr (scalar path).
MicroKernel micro_kernel_for(Isa isa, int MR, int NR) {
  if (isa == Isa::Avx512) return matmul_detail::avx512_micro_kernel(MR, NR);
  if (isa == Isa::Avx2) return matmul_detail::avx2_micro_kernel(MR, NR);
  return nullptr;
}

/// Row-group heights for a packed forward: full MR groups, then the smallest compiled height
/// that covers the remaining rows (1, 2, 4, or MR). Every height gives the same per-element
/// reduction order (one FMA chain over k per KC block), so the grouping never changes results.
int group_rows(int left, int MR, Isa isa, int NR) {
  if (left >= MR) return MR;
  for (int r : {1, 2, 4, 6, 8, 12})
    if (r >= left && r < MR && (isa == Isa::Scalar || micro_kernel_for(isa, r, NR))) return r;
  return MR;
}

}  // namespace

PackedMatmulWeight::PackedMatmulWeight(const float* weight, int N, int K, const MatmulParams* p) {
  check_dims("PackedMatmulWeight", 1, N, K);
  if (!weight) throw_input("PackedMatmulWeight: null weight pointer", "weight");
  isa_ = cpu_isa_active();
  prm_ = resolve_checked("PackedMatmulWeight", p, isa_);
  if (prm_.impl == MatmulImpl::Blas)
    throw_input("PackedMatmulWeight: the BLAS implementation has no packed form", "MatmulParams.impl",
                "use the blocked implementation");
  N_ = N;
  K_ = K;
  const int NR = prm_.NR;
  const int64_t npanels = (N + NR - 1) / NR;
  size_ = static_cast<size_t>(npanels) * NR * K;
  const size_t bytes = ((size_ * sizeof(float) + 63) / 64) * 64;
  packed_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!packed_) throw std::bad_alloc();
  const View<float> bt{weight, K, 1};
  const int KC = static_cast<int>(std::min<int64_t>(prm_.KC, K));
  const int64_t nkb = (K + KC - 1) / KC;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && size_ > (1u << 16))
  for (int64_t b = 0; b < nkb; ++b) {
    const int64_t k0 = b * KC;
    const int kc = static_cast<int>(std::min<int64_t>(KC, K - k0));
    for (int64_t q = 0; q < npanels; ++q) {
      const int cols = static_cast<int>(std::min<int64_t>(NR, N - q * NR));
      pack_panels(bt, q * NR, cols, k0, kc, NR, packed_.get() + panel_offset(static_cast<int>(b), static_cast<int>(q)),
                  isa_);
    }
  }
}

size_t PackedMatmulWeight::panel_offset(int kblock, int panel) const {
  // Panel-major: all K rows of NR-panel q are one contiguous stream (KC blocks in order), so a
  // decode step (M = 1) reads each panel front to back.
  const int64_t KC = std::min<int64_t>(prm_.KC, K_);
  const int64_t k0 = kblock * KC;
  return static_cast<size_t>((static_cast<int64_t>(panel) * K_ + k0) * prm_.NR);
}

void matmul_forward_q8(float* out, const float* inp, const int8_t* q, const float* d, bool a8, int xw, const float* bias, int M, int N,
                       int K, Isa isa);  // matmul_q8.cpp
void matmul_forward_kc(float* out, const float* inp, const uint8_t* sb, uint32_t type, bool a8, int xw, const float* bias, int M,
                       int N, int K, Isa isa);  // matmul_q8.cpp

void matmul_forward_packed(float* out, const float* inp, const PackedMatmulWeight& w, const float* bias, int M) {
  if (w.empty()) throw_input("matmul_forward_packed: the weight is empty (default-constructed)", "weight");
  check_dims("matmul_forward_packed", M, w.N_, w.K_);
  if (!out || !inp) throw_input("matmul_forward_packed: null out/inp pointer", "matmul_forward_packed");
  // Packed weights (serving): f32 panels, q8_0 rows or k-quant super-blocks.
  core::KernelRun record("matmul_forward_packed", !w.q8_ ? "cpu.packed" : w.q8_->sb.empty() ? "cpu.q8_0" : "cpu.kquant",
                      {{"M", M}, {"N", w.N_}, {"K", w.K_}}, !w.q8_ ? "f32" : w.q8_->sb.empty() ? "q8_0" : "kquant");
  if (w.q8_ && !w.q8_->sb.empty()) {
    matmul_forward_kc(out, inp, w.q8_->sb.data(), w.q8_->ggml_type, w.q8_->a8, w.q8_->xw, bias, M, w.N_, w.K_, w.isa_);
    return;
  }
  if (w.q8_) {
    matmul_forward_q8(out, inp, w.q8_->q.data(), w.q8_->d.data(), w.q8_->a8, w.q8_->xw, bias, M, w.N_, w.K_, w.isa_);
    return;
  }
  const Isa isa = w.isa_;
  const MatmulParams& prm = w.prm_;
  const int N = w.N_, K = w.K_, NR = prm.NR, MR = prm.MR;
  const int KC = std::min(prm.KC, K);
  const int nkb = (K + KC - 1) / KC;
  const int npanels = (N + NR - 1) / NR;
  // Row groups (start, height) and the packed A: per group, per KC block, kc x height floats.
  struct Group {
    int r0, rows, R;
    size_t off;
  };
  std::vector<Group> groups;  // local: OpenMP workers below read the caller's list
  groups.reserve(static_cast<size_t>(M / MR + 2));
  size_t apack_size = 0;
  for (int r0 = 0; r0 < M;) {
    const int R = group_rows(M - r0, MR, isa, NR);
    const int rows = std::min(R, M - r0);
    groups.push_back({r0, rows, R, apack_size});
    apack_size += static_cast<size_t>(R) * K;
    r0 += rows;
  }
  static thread_local Scratch a_scratch;
  float* apack = a_scratch.get(apack_size);
  const View<float> av{inp, K, 1};
  for (const Group& g : groups)
    for (int b = 0; b < nkb; ++b) {
      const int k0 = b * KC, kc = std::min(KC, K - k0);
      pack_panels(av, g.r0, g.rows, k0, kc, g.R, apack + g.off + static_cast<size_t>(k0) * g.R, isa);
    }
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (2.0 * M * N * K < kParallelMinFlops) nt = 1;
  nt = std::min(nt, npanels);
  const float* panels = w.packed_.get();
  auto run = [&](int q0, int q1) {
    alignas(64) float tile[matmul_detail::kMatmulMaxMR * matmul_detail::kMatmulMaxNR];
    for (const Group& g : groups) {
      const MicroKernel uk = micro_kernel_for(isa, g.R, NR);
      for (int q = q0; q < q1; ++q) {
        const int j0 = q * NR, ncols = std::min(NR, N - j0);
        float* cp = out + static_cast<int64_t>(g.r0) * N + j0;
        for (int b = 0; b < nkb; ++b) {
          const int k0 = b * KC, kc = std::min(KC, K - k0);
          const bool acc = b > 0;
          const float* bb = (!acc && bias) ? bias + j0 : nullptr;
          const float* ap = apack + g.off + static_cast<size_t>(k0) * g.R;
          const float* bp = panels + w.panel_offset(b, q);
          if (g.rows == g.R && ncols == NR) {
            if (uk) uk(kc, ap, bp, cp, N, acc, bb);
            else scalar_micro_kernel(g.R, NR, kc, ap, bp, cp, N, acc, bb);
          } else {
            if (uk) uk(kc, ap, bp, tile, NR, false, nullptr);
            else scalar_micro_kernel(g.R, NR, kc, ap, bp, tile, NR, false, nullptr);
            for (int i = 0; i < g.rows; ++i)
              for (int j = 0; j < ncols; ++j) {
                float& o = cp[static_cast<int64_t>(i) * N + j];
                const float v = tile[i * NR + j];
                o = acc ? o + v : (bb ? bb[j] + v : v);
              }
          }
        }
      }
    }
  };
  if (nt <= 1) {
    run(0, npanels);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    run(npanels * t / n, npanels * (t + 1) / n);
  }
}

namespace {
/// When this library was loaded: OpenBLAS starts its pthread workers at load time too, and they
/// spin before their first park as after every call.
const int64_t g_loaded_ns = steady_ns();
}  // namespace

double blas_pool_parked_in_s() {
#ifdef OPENBLAS_VERSION
  if (openblas_get_parallel() != 1) return 0;  // 0 sequential, 2 OpenMP: no pool of its own
  // OpenBLAS's blas_server.c: an idle worker spins (sched_yield between rdtsc reads) until
  // 2^THREAD_TIMEOUT TSC cycles have passed since its last job, then sleeps on a condition.
  // THREAD_TIMEOUT is 28 unless OPENBLAS_THREAD_TIMEOUT / GOTO_THREAD_TIMEOUT says otherwise
  // (clamped to 4..30 as OpenBLAS does). The TSC is taken to tick at >= 2 GHz (a lower rate
  // would only make the wait shorter than the spin, never longer than needed by much).
  int timeout = 28;
  for (const char* name : {"OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT"})
    if (const char* e = std::getenv(name); e && *e) {
      timeout = std::clamp(std::atoi(e), 4, 30);
      break;
    }
  const double spin_s = std::ldexp(1.0, timeout) / 2e9;
  const int64_t last = std::max(g_loaded_ns, g_last_blas_ns.load(std::memory_order_relaxed));
  return std::max(0.0, spin_s - 1e-9 * static_cast<double>(steady_ns() - last));
#else
  return 0;
#endif
}

}  // namespace rtx::kernels
