// CUDA variants "cuda.v1" of the graph / sparse ops (kernels in sparse_cuda.cu). The problems'
// ids arrive on the device with the layout of problems_sparse.cpp; scatter-add's stable sort of
// idx is made on the host once per instance (the sorted-segment path: no float atomics).
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "cuda_register.hpp"
#include "kernels/problems.hpp"
#include "rtx/core/cuda_check.hpp"
#include "rtx/kernels/sparse_cuda.hpp"

namespace rtx::kernels::cuda_reg {
namespace {

template <typename T>
std::shared_ptr<T> device_copy(const std::vector<T>& host, size_t n) {
  void* p = nullptr;
  RTX_CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
  if (!host.empty()) RTX_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return std::shared_ptr<T>(static_cast<T*>(p), [](T* q) { cudaFree(q); });
}

const float* F(const RunArgs& a, size_t i) { return static_cast<const float*>(a.in[i]); }

template <typename Fn>
RunnerFactory rf(Fn fn) {
  return [fn](const Problem& p, const Params& params) -> Runner { return fn(p, params); };
}

template <SegmentReduce K, bool B>
void add_segment(Registry& r, const char* op) {
  add_variant(r, op, "cuda.v1", {DType::F32}, ParamSpace{}, nullptr, make_segment_problem<K, B>,
              rf([](const Problem& p, const Params&) -> Runner {
                const int S = dim(p.shape, "S"), Fd = dim(p.shape, "F");
                return [=](const RunArgs& a) {
                  if constexpr (B)
                    cuda::segment_reduce_backward(a.out[0], a.ids, F(a, 0), F(a, 1), S, Fd, static_cast<int>(K), a.stream);
                  else
                    cuda::segment_reduce_forward(a.out[0], a.ids, F(a, 0), S, Fd, static_cast<int>(K), a.stream);
                };
              }));
}

}  // namespace

void register_sparse(Registry& r) {
  const std::vector<DType> f32 = {DType::F32};
  const ParamSpace none{};
  add_variant(r, "spmm_forward", "cuda.v1", f32, none, nullptr, make_spmm_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), Fd = dim(p.shape, "F");
                return [=](const RunArgs& a) {
                  cuda::spmm_forward(a.out[0], a.ids, a.ids + N + 1, F(a, 0), nullptr, F(a, 1), N, Fd, a.stream);
                };
              }));
  add_variant(r, "spmm_backward", "cuda.v1", f32, none, nullptr, make_spmm_backward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), M = dim(p.shape, "M"), E = dim(p.shape, "E"), Fd = dim(p.shape, "F");
                return [=](const RunArgs& a) {
                  const int32_t* t = a.ids + N + 1 + E;
                  cuda::spmm_forward(a.out[0], t, t + M + 1, F(a, 0), t + M + 1 + E, F(a, 1), M, Fd, a.stream);
                  cuda::sddmm(a.out[1], a.ids, a.ids + N + 1, F(a, 1), F(a, 2), N, Fd, a.stream);
                };
              }));
  add_variant(r, "sddmm", "cuda.v1", f32, none, nullptr, make_sddmm_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), Fd = dim(p.shape, "F");
                return [=](const RunArgs& a) {
                  cuda::sddmm(a.out[0], a.ids, a.ids + N + 1, F(a, 0), F(a, 1), N, Fd, a.stream);
                };
              }));
  add_variant(r, "edge_softmax_forward", "cuda.v1", f32, none, nullptr, make_edge_softmax_forward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), H = dim(p.shape, "H");
                return [=](const RunArgs& a) { cuda::edge_softmax_forward(a.out[0], a.ids, F(a, 0), N, H, a.stream); };
              }));
  add_variant(r, "edge_softmax_backward", "cuda.v1", f32, none, nullptr, make_edge_softmax_backward_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N"), H = dim(p.shape, "H");
                return [=](const RunArgs& a) {
                  cuda::edge_softmax_backward(a.out[0], a.ids, F(a, 0), F(a, 1), N, H, a.stream);
                };
              }));
  add_variant(r, "gcn_norm", "cuda.v1", f32, none, nullptr, make_gcn_norm_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int N = dim(p.shape, "N");
                auto dinv = device_copy(std::vector<float>{}, static_cast<size_t>(N));
                return [=](const RunArgs& a) {
                  cuda::gcn_norm(a.out[0], dinv.get(), a.ids, a.ids + N + 1, F(a, 0), N, a.stream);
                };
              }));
  add_segment<SegmentReduce::Sum, false>(r, "segment_sum_forward");
  add_segment<SegmentReduce::Sum, true>(r, "segment_sum_backward");
  add_segment<SegmentReduce::Mean, false>(r, "segment_mean_forward");
  add_segment<SegmentReduce::Mean, true>(r, "segment_mean_backward");
  add_segment<SegmentReduce::Max, false>(r, "segment_max_forward");
  add_segment<SegmentReduce::Max, true>(r, "segment_max_backward");
  add_variant(r, "gather_rows", "cuda.v1", f32, none, nullptr, make_gather_rows_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int L = dim(p.shape, "L"), Fd = dim(p.shape, "F");
                return [=](const RunArgs& a) { cuda::gather_rows(a.out[0], a.ids, F(a, 0), L, Fd, a.stream); };
              }));
  add_variant(r, "scatter_add_rows", "cuda.v1", f32, none, nullptr, make_scatter_add_rows_problem,
              rf([](const Problem& p, const Params&) -> Runner {
                const int L = dim(p.shape, "L"), M = dim(p.shape, "M"), Fd = dim(p.shape, "F");
                // Stable counting sort of idx (host, once): target m's sources in increasing l.
                std::vector<int32_t> start(M + 1, 0), order(L);
                for (int l = 0; l < L; ++l) ++start[p.ids[l] + 1];
                for (int m = 0; m < M; ++m) start[m + 1] += start[m];
                std::vector<int32_t> next(start.begin(), start.end() - 1);
                for (int l = 0; l < L; ++l) order[next[p.ids[l]]++] = l;
                auto d_start = device_copy(start, start.size()), d_order = device_copy(order, order.size());
                return [=](const RunArgs& a) {
                  cuda::scatter_add_rows_sorted(a.out[0], d_start.get(), d_order.get(), F(a, 0), M, Fd, a.stream);
                };
              }));
}

}  // namespace rtx::kernels::cuda_reg
