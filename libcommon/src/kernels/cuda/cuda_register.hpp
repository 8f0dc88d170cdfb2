// Internal: helpers the CUDA registration files share (variant construction, tensor lookup by
// name in a Problem, parameter access) and the per-file registration functions.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "rtx/kernels/problem.hpp"
#include "rtx/kernels/registry.hpp"

namespace rtx::kernels::cuda_reg {

/// Builds a variant's runner for one prepared problem (may allocate scratch, plan GEMMs).
using RunnerFactory = std::function<Runner(const Problem& p, const Params& params)>;
using Validate = std::function<std::string(const Shape& s, const Params& p)>;

/// Add CUDA variant `name` to `op` if the op exists in `r` (the CPU files declare ops; an op
/// missing from this build is skipped). make(): require_cuda, dtype check, validate, the
/// problem factory, then make_cuda_instance with the op's tolerance for the dtype.
void add_variant(Registry& r, const std::string& op, const std::string& name, std::vector<DType> dtypes,
                 ParamSpace space, Validate validate, ProblemFactory factory, RunnerFactory runner);

/// Index of the input / output tensor named `name`; throws Error(Internal) naming the op's tensors.
size_t input_index(const Problem& p, const std::string& name);
size_t output_index(const Problem& p, const std::string& name);
/// True when output `name` has an `init` (the op accumulates into it: +=).
bool accumulates(const Problem& p, const std::string& name);
/// Shape dim as int; throws Error(Input) when missing or beyond int range.
int dim(const Shape& s, const char* d);
/// Parameter `name` of `p`, or `def` when absent.
int64_t param(const Params& p, const char* name, int64_t def);

void register_matmul(Registry& r);     // matmul_register_cuda.cpp
void register_ops(Registry& r);        // ops_register_cuda.cpp
void register_attention(Registry& r);  // ops_register_cuda.cpp
void register_allreduce(Registry& r);  // allreduce_nccl.cpp
void register_sparse(Registry& r);     // sparse_register_cuda.cpp

}  // namespace rtx::kernels::cuda_reg
