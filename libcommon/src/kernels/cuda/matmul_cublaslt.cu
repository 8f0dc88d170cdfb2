// cuBLASLt GEMM plans for matmul forward/backward (row-major llm.c convention mapped onto
// column-major cuBLASLt), plus the small matmul helpers: transpose, column sum, bias broadcast.
#include <cublasLt.h>

#include <mutex>

#include "cuda_common.cuh"
#include "rtx/core/device.hpp"
#include "rtx/kernels/cuda_ops.hpp"

namespace rtx::kernels::cuda {
namespace {

using detail::as_stream;
using detail::ceil_div;

constexpr size_t kLtWorkspace = size_t{32} << 20;  // cuBLAS's recommendation for Hopper
constexpr int kMaxAlgos = 8;

void lt_check(cublasStatus_t s, const char* call, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw_internal(std::string(call) + " failed: " + cublasLtGetStatusString(s),
                 std::string("matmul_cublaslt.cu:") + std::to_string(line));
}
#define RTX_LT_CHECK(call) lt_check((call), #call, __LINE__)

cublasLtHandle_t lt_handle() {
  static std::once_flag once;
  static cublasLtHandle_t h = nullptr;
  static cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  std::call_once(once, [] { st = cublasLtCreate(&h); });
  RTX_LT_CHECK(st);
  return h;
}

cudaDataType_t cuda_type(DType dt) { return dt == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

template <typename T>
__global__ void transpose_kernel(T* __restrict__ out, const T* __restrict__ in, int R, int C) {
  __shared__ T tile[32][33];
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int r = r0 + i, c = c0 + threadIdx.x;
    if (r < R && c < C) tile[i][threadIdx.x] = in[static_cast<int64_t>(r) * C + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int c = c0 + i, r = r0 + threadIdx.x;
    if (r < R && c < C) out[static_cast<int64_t>(c) * R + r] = tile[threadIdx.x][i];
  }
}

template <typename T>
__global__ void column_sum_kernel(float* __restrict__ dbias, const T* __restrict__ dout, int M, int N, int acc) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  float s = 0.f;
  for (int m = 0; m < M; ++m) s += detail::to_f32(dout[static_cast<int64_t>(m) * N + n]);
  dbias[n] = acc ? dbias[n] + s : s;
}

template <typename T>
__global__ void broadcast_rows_kernel(float* __restrict__ out, const T* __restrict__ bias, int M, int N, bool add) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(M) * N) return;
  out[i] = (add ? out[i] : 0.f) + detail::to_f32(bias[i % N]);
}

}  // namespace

// ---- helpers ---------------------------------------------------------------------------------

void transpose(void* out, const void* in, int R, int C, DType dt, void* stream) {
  detail::require_positive(R, "transpose", "R");
  detail::require_positive(C, "transpose", "C");
  const dim3 grid(static_cast<unsigned>(ceil_div(C, 32)), static_cast<unsigned>(ceil_div(R, 32))), block(32, 8);
  if (dt == DType::BF16) {
    RTX_NOTE_LAUNCH(transpose_kernel<__nv_bfloat16>, grid, block, 0);
    transpose_kernel<<<grid, block, 0, as_stream(stream)>>>(static_cast<__nv_bfloat16*>(out),
                                                            static_cast<const __nv_bfloat16*>(in), R, C);
  } else {
    RTX_NOTE_LAUNCH(transpose_kernel<float>, grid, block, 0);
    transpose_kernel<<<grid, block, 0, as_stream(stream)>>>(static_cast<float*>(out), static_cast<const float*>(in),
                                                            R, C);
  }
  RTX_CUDA_CHECK_LAUNCH();
}

void column_sum(float* dbias, const void* dout, int M, int N, DType dt, bool accumulate, void* stream) {
  detail::require_positive(M, "column_sum", "M");
  detail::require_positive(N, "column_sum", "N");
  const unsigned grid = static_cast<unsigned>(ceil_div(N, 128));
  if (dt == DType::BF16) {
    RTX_NOTE_LAUNCH(column_sum_kernel<__nv_bfloat16>, grid, 128, 0);
    column_sum_kernel<<<grid, 128, 0, as_stream(stream)>>>(dbias, static_cast<const __nv_bfloat16*>(dout), M, N,
                                                           accumulate ? 1 : 0);
  } else {
    RTX_NOTE_LAUNCH(column_sum_kernel<float>, grid, 128, 0);
    column_sum_kernel<<<grid, 128, 0, as_stream(stream)>>>(dbias, static_cast<const float*>(dout), M, N,
                                                           accumulate ? 1 : 0);
  }
  RTX_CUDA_CHECK_LAUNCH();
}

void broadcast_rows(float* out, const void* bias, DType bias_dt, int M, int N, void* stream, bool add) {
  detail::require_positive(M, "broadcast_rows", "M");
  detail::require_positive(N, "broadcast_rows", "N");
  const unsigned grid = static_cast<unsigned>(ceil_div(static_cast<int64_t>(M) * N, 256));
  if (bias_dt == DType::BF16) {
    RTX_NOTE_LAUNCH(broadcast_rows_kernel<__nv_bfloat16>, grid, 256, 0);
    broadcast_rows_kernel<<<grid, 256, 0, as_stream(stream)>>>(out, static_cast<const __nv_bfloat16*>(bias), M, N, add);
  } else {
    RTX_NOTE_LAUNCH(broadcast_rows_kernel<float>, grid, 256, 0);
    broadcast_rows_kernel<<<grid, 256, 0, as_stream(stream)>>>(out, static_cast<const float*>(bias), M, N, add);
  }
  RTX_CUDA_CHECK_LAUNCH();
}

// ---- cuBLASLt plan ---------------------------------------------------------------------------

struct LtMatmul::Impl {
  Kind kind{};
  int M = 0, N = 0, K = 0;
  DType bias_dt = DType::F32;
  bool has_bias = false, fused = false, accumulate = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  int algo_count = 0;
  void* workspace = nullptr;

  ~Impl() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (workspace) cudaFree(workspace);
  }

  // Column-major problem D (m x n) = op(A) (m x k) op(B) (k x n): see the header's mapping.
  void build(DType dt, bool with_epilogue) {
    if (desc) cublasLtMatmulDescDestroy(desc);
    desc = nullptr;
    RTX_LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    int m = 0, n = 0;  // D is m x n (the inner dim only shapes A and B)
    int64_t a_rows = 0, a_cols = 0, a_ld = 0, b_rows = 0, b_cols = 0, b_ld = 0;
    if (kind == Kind::Forward) {  // out^T (N,M) = weight (K,N)^T @ inp^T (K,M)
      ta = CUBLAS_OP_T;
      m = N, n = M;
      a_rows = K, a_cols = N, a_ld = K;
      b_rows = K, b_cols = M, b_ld = K;
    } else if (kind == Kind::BackwardInput) {  // dinp^T (K,M) = weight^T (K,N) @ dout^T (N,M)
      m = K, n = M;
      a_rows = K, a_cols = N, a_ld = K;
      b_rows = N, b_cols = M, b_ld = N;
    } else {  // dweight^T (K,N) = inp^T (K,M) @ (dout^T (N,M))^T
      tb = CUBLAS_OP_T;
      m = K, n = N;
      a_rows = K, a_cols = M, a_ld = K;
      b_rows = N, b_cols = M, b_ld = N;
    }
    RTX_LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    RTX_LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (with_epilogue) {
      const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bt = cuda_type(bias_dt);
      RTX_LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
      RTX_LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (!la) {
      RTX_LT_CHECK(cublasLtMatrixLayoutCreate(&la, cuda_type(dt), a_rows, a_cols, a_ld));
      RTX_LT_CHECK(cublasLtMatrixLayoutCreate(&lb, cuda_type(dt), b_rows, b_cols, b_ld));
      RTX_LT_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
    }
  }

  // Ask the heuristic; returns the number of algorithms and stores the `index`-th.
  int query(int index) {
    cublasLtMatmulPreference_t pref = nullptr;
    RTX_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kLtWorkspace;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulHeuristicResult_t res[kMaxAlgos];
    int returned = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(lt_handle(), desc, la, lb, ld, ld, pref, kMaxAlgos, res, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) return 0;
    int ok = 0;
    for (int i = 0; i < returned; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      if (ok == index) algo = res[i].algo;
      ++ok;
    }
    return ok;
  }
};

LtMatmul::LtMatmul(Kind kind, int M, int N, int K, DType dt, bool has_bias, DType bias_dt, bool accumulate, int algo)
    : impl_(std::make_unique<Impl>()) {
  require_cuda("cuda.cublaslt matmul");
  detail::require_positive(M, "LtMatmul", "M");
  detail::require_positive(N, "LtMatmul", "N");
  detail::require_positive(K, "LtMatmul", "K");
  if (dt != DType::F32 && dt != DType::BF16) throw_input("LtMatmul: dtype must be f32 or bf16", "dtype");
  if (algo < 0 || algo >= kMaxAlgos)
    throw_input("LtMatmul: algo index " + std::to_string(algo) + " out of range", "algo",
                "use 0.." + std::to_string(kMaxAlgos - 1));
  Impl& I = *impl_;
  I.kind = kind;
  I.M = M, I.N = N, I.K = K;
  I.has_bias = kind == Kind::Forward && has_bias;
  I.bias_dt = bias_dt;
  I.accumulate = accumulate;
  int count = 0;
  // The bias epilogue reads a bias of D's type (f32 here): cublasLt.h documents other bias
  // types only for IMMA and fp8 kernels, so a bf16 bias is broadcast by broadcast_rows instead.
  if (I.has_bias && bias_dt == DType::F32) {
    I.build(dt, true);
    count = I.query(algo);
    I.fused = count > 0;
  }
  if (!I.fused) {
    I.build(dt, false);
    count = I.query(algo);
  }
  if (count == 0)
    throw_env("cuBLASLt found no algorithm for " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                  std::to_string(K) + " " + dtype_name(dt),
              "cuda.cublaslt", "use the cuda.tiled variant");
  if (algo >= count)
    throw_input("cuBLASLt heuristic returned " + std::to_string(count) + " algorithm(s) for this problem; algo=" +
                    std::to_string(algo) + " is unavailable",
                "algo", "skip this candidate or use algo < " + std::to_string(count));
  I.algo_count = count;
  RTX_CUDA_CHECK(cudaMalloc(&I.workspace, kLtWorkspace));
}

LtMatmul::~LtMatmul() = default;

int LtMatmul::algo_count() const { return impl_->algo_count; }
bool LtMatmul::fused_bias() const { return impl_->fused; }

void LtMatmul::run(float* out, const void* a, const void* b, const void* bias, void* stream) const {
  Impl& I = *impl_;
  const float alpha = 1.f;
  float beta = I.accumulate ? 1.f : 0.f;
  if (I.has_bias) {
    if (!bias) throw_input("LtMatmul::run: this plan has a bias but bias is null", "bias");
    if (I.fused) {
      RTX_LT_CHECK(cublasLtMatmulDescSetAttribute(I.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    } else {
      // out = bias (or out + bias when accumulating), then out += A B.
      broadcast_rows(out, bias, I.bias_dt, I.M, I.N, stream, I.accumulate);
      beta = 1.f;
    }
  }
  // cuBLAS A is the second operand (weight / weight / inp), B the first (inp / dout / dout).
  RTX_LT_CHECK(cublasLtMatmul(lt_handle(), I.desc, &alpha, b, I.la, a, I.lb, &beta, out, I.ld, out, I.ld, &I.algo,
                              I.workspace, kLtWorkspace, as_stream(stream)));
}

}  // namespace rtx::kernels::cuda
