// Problem factories of matmul_forward / matmul_backward: seeded inputs and the float64
// plain-loop reference (the oracle of tests and of the tuner's correctness check).
// Adding an op: step 1 of the recipe at the head of registry.cpp (the problem and its oracle).
#include <algorithm>
#include <cstdint>
#include <string>

#include "problems.hpp"
#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"

namespace rtx::kernels {
namespace {

constexpr int64_t kMaxElems = (int64_t{1} << 31) - 1;  // per tensor; kernels take int dims

/// Dim `d` of `s`: present, >= 1 and int-sized, else rtx::Error(Input) naming it.
int64_t dim(const Shape& s, const char* d, const char* op) {
  auto it = s.find(d);
  if (it == s.end())
    throw_input(std::string(op) + ": shape '" + shape_to_string(s) + "' has no dim " + d, d,
                "give M, N and K, e.g. M=64,N=64,K=64");
  if (it->second <= 0 || it->second > kMaxElems)
    throw_input(std::string(op) + ": dim " + d + " = " + std::to_string(it->second) + " is out of range", d,
                "dims must be in 1..2^31-1");
  return it->second;
}

/// Reject a tensor of a*b elements that exceeds kMaxElems (naming the product).
void check_product(int64_t a, int64_t b, const char* what, const char* op) {
  if (a > kMaxElems / b)
    throw_input(std::string(op) + ": " + what + " = " + std::to_string(a) + "*" + std::to_string(b) +
                    " elements overflows the 2^31-1 element limit",
                what, "use smaller dims");
}

void check_keys(const Shape& s, std::initializer_list<const char*> allowed, const char* op) {
  for (const auto& [k, v] : s) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) throw_input(std::string(op) + ": unknown shape dim '" + k + "'", k, "matmul shapes use M, N, K (and bias)");
  }
}

void check_dtype(DType dt, const char* op) {
  if (dt != DType::F32 && dt != DType::BF16)
    throw_input(std::string(op) + ": dtype " + dtype_name(dt) + " is not supported", "dtype", "use f32 or bf16");
}

/// Seeded uniform [-1,1) data of n elements; rounded to bf16-representable values for bf16.
std::vector<float> seeded(size_t n, uint64_t seed, uint64_t subseq, DType dt) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, seed, subseq);
  if (dt == DType::BF16)
    for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

}  // namespace

Problem make_matmul_forward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "matmul_forward";
  check_keys(s, {"M", "N", "K", "bias"}, op);
  check_dtype(dt, op);
  const int64_t M = dim(s, "M", op), N = dim(s, "N", op), K = dim(s, "K", op);
  check_product(M, K, "M*K", op);
  check_product(N, K, "N*K", op);
  check_product(M, N, "M*N", op);
  bool bias = true;
  if (auto it = s.find("bias"); it != s.end()) {
    if (it->second != 0 && it->second != 1)
      throw_input(std::string(op) + ": bias = " + std::to_string(it->second) + " must be 0 or 1", "bias");
    bias = it->second == 1;
  }
  Problem p;
  p.shape = s;
  p.dtype = dt;
  p.seed = seed;
  p.inputs.push_back({"inp", seeded(M * K, seed, 0, dt), false});       // (M,K)
  p.inputs.push_back({"weight", seeded(N * K, seed, 1, dt), false});    // (N,K)
  if (bias) p.inputs.push_back({"bias", seeded(N, seed, 2, dt), false});  // (N)
  p.outputs.push_back({"out", static_cast<size_t>(M * N), {}});         // (M,N)
  p.reference = [M, N, K](const Problem& q) {
    const float* inp = q.inputs[0].data.data();
    const float* w = q.inputs[1].data.data();
    const float* b = q.inputs.size() > 2 ? q.inputs[2].data.data() : nullptr;
    // out[i][j] = bias[j] + sum_{k=0..K-1} inp[i][k] * w[j][k], each sum in ascending k, in
    // float64. Loop order (row block, k, j) with w transposed keeps that order per element while
    // the j loop runs over contiguous memory (vectorisable); threads take row blocks.
    std::vector<double> wT(static_cast<size_t>(K) * N);
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) wT[k * N + j] = w[j * K + k];
    std::vector<double> out(static_cast<size_t>(M) * N);
    constexpr int64_t IB = 8;
#pragma omp parallel for schedule(dynamic)
    for (int64_t i0 = 0; i0 < M; i0 += IB) {
      const int64_t i1 = std::min(M, i0 + IB);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < N; ++j) out[i * N + j] = b ? b[j] : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double* wk = &wT[k * N];
        for (int64_t i = i0; i < i1; ++i) {
          const double a = inp[i * K + k];
          double* o = &out[i * N];
          for (int64_t j = 0; j < N; ++j) o[j] += a * wk[j];
        }
      }
    }
    return std::vector<std::vector<double>>{std::move(out)};
  };
  return p;
}

Problem make_matmul_backward_problem(const Shape& s, DType dt, uint64_t seed) {
  const char* op = "matmul_backward";
  check_keys(s, {"M", "N", "K"}, op);
  check_dtype(dt, op);
  const int64_t M = dim(s, "M", op), N = dim(s, "N", op), K = dim(s, "K", op);
  check_product(M, K, "M*K", op);
  check_product(N, K, "N*K", op);
  check_product(M, N, "M*N", op);
  Problem p;
  p.shape = s;
  p.dtype = dt;
  p.seed = seed;
  p.inputs.push_back({"dout", seeded(M * N, seed, 0, dt), false});    // (M,N)
  p.inputs.push_back({"inp", seeded(M * K, seed, 1, dt), false});     // (M,K)
  p.inputs.push_back({"weight", seeded(N * K, seed, 2, dt), false});  // (N,K)
  p.outputs.push_back({"dinp", static_cast<size_t>(M * K), {}});                               // (M,K) =
  p.outputs.push_back({"dweight", static_cast<size_t>(N * K), seeded(N * K, seed, 3, DType::F32)});  // (N,K) +=
  p.outputs.push_back({"dbias", static_cast<size_t>(N), seeded(N, seed, 4, DType::F32)});            // (N) +=
  p.reference = [M, N, K](const Problem& q) {
    const float* dout = q.inputs[0].data.data();
    const float* inp = q.inputs[1].data.data();
    const float* w = q.inputs[2].data.data();
    // In float64, each sum in a fixed ascending order (over n for dinp, over i for dweight and
    // dbias, starting from the accumulated init); loops ordered so the innermost runs over
    // contiguous memory, threads take independent row blocks: threads change only speed.
    std::vector<double> dinp(static_cast<size_t>(M) * K, 0.0), dweight(static_cast<size_t>(N) * K), dbias(N);
    constexpr int64_t IB = 8;
#pragma omp parallel for schedule(dynamic)
    for (int64_t i0 = 0; i0 < M; i0 += IB) {  // dinp[i][k] = sum_n dout[i][n] * w[n][k]
      const int64_t i1 = std::min(M, i0 + IB);
      for (int64_t n = 0; n < N; ++n) {
        const float* wn = &w[n * K];
        for (int64_t i = i0; i < i1; ++i) {
          const double d = dout[i * N + n];
          double* o = &dinp[i * K];
          for (int64_t k = 0; k < K; ++k) o[k] += d * wn[k];
        }
      }
    }
#pragma omp parallel for schedule(dynamic)
    for (int64_t n0 = 0; n0 < N; n0 += IB) {  // dweight[n][k] = init + sum_i dout[i][n] * inp[i][k]
      const int64_t n1 = std::min(N, n0 + IB);
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t k = 0; k < K; ++k) dweight[n * K + k] = q.outputs[1].init[n * K + k];
      for (int64_t i = 0; i < M; ++i) {
        const float* xi = &inp[i * K];
        for (int64_t n = n0; n < n1; ++n) {
          const double d = dout[i * N + n];
          double* o = &dweight[n * K];
          for (int64_t k = 0; k < K; ++k) o[k] += d * xi[k];
        }
      }
    }
    for (int64_t n = 0; n < N; ++n) dbias[n] = q.outputs[2].init[n];  // dbias[n] = init + sum_i dout[i][n]
    for (int64_t i = 0; i < M; ++i)
      for (int64_t n = 0; n < N; ++n) dbias[n] += dout[i * N + n];
    return std::vector<std::vector<double>>{std::move(dinp), std::move(dweight), std::move(dbias)};
  };
  return p;
}

}  // namespace rtx::kernels
