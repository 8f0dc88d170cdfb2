// Problems and generic instances. An op defines a Problem factory (seeded inputs, output
// sizes, a float64 reference); each variant supplies only a runner. The generic CPU and
// CUDA instances do allocation, poisoning, timing, checking and checksums for every op.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rtx/kernels/registry.hpp"

namespace rtx::kernels {

/// A float input tensor. `data` is f32 on the host; when the problem dtype is bf16 the
/// values are already rounded to bf16 (so the float64 reference sees what the kernel sees)
/// and instances hand the kernel bf16 (uint16) bits. `always_f32` keeps an input f32 in
/// every dtype (e.g. layernorm weights, AdamW state).
struct InputTensor {
  std::string name;
  std::vector<float> data;
  bool always_f32 = false;
};

/// An output tensor (always f32). `init` empty: poisoned (NaN) before each checked run;
/// non-empty: copied in before each checked run (in-place ops: AdamW params/moments,
/// accumulated gradients).
struct OutputTensor {
  std::string name;
  size_t size = 0;
  std::vector<float> init;
};

/// A concrete problem: shape, dtype, seeded inputs, integer inputs (token ids / targets),
/// outputs, and the float64 reference of every output (same order as `outputs`).
struct Problem {
  Shape shape;
  DType dtype = DType::F32;
  uint64_t seed = 0;
  std::vector<InputTensor> inputs;
  std::vector<int32_t> ids;  ///< integer input (may be empty)
  std::vector<OutputTensor> outputs;
  /// Computes the reference outputs in float64 from `inputs`/`ids`/`outputs[i].init`.
  std::function<std::vector<std::vector<double>>(const Problem&)> reference;
};

/// Float64 reference outputs of a problem (one vector per output, in order).
using Reference = std::vector<std::vector<double>>;
/// The reference of `p`, computed once per distinct problem and shared: CPU and CUDA variants
/// of one op at one shape, dtype and seed reuse it. The key hashes the reference function's
/// type (one per op), shape, dtype, every input byte, the integer inputs and each output's
/// name and initial values. Recently used results are kept up to 2 GiB in all. Thread-safe.
std::shared_ptr<const Reference> reference_of(const Problem& p);

/// Makes the problem of an op for a shape/dtype/seed; throws rtx::Error(Input) on a bad shape.
using ProblemFactory = std::function<Problem(const Shape& s, DType dt, uint64_t seed)>;

/// Kernel invocation with resolved pointers. `in[i]` points to input i in the problem dtype
/// (f32 or bf16 bits) unless that input is always_f32; `ids` may be null; `out[i]` is f32.
/// For CUDA runners all pointers are device pointers and `stream` is the cudaStream_t.
struct RunArgs {
  std::vector<const void*> in;
  const int32_t* ids = nullptr;
  std::vector<float*> out;
  const Shape* shape = nullptr;
  const Params* params = nullptr;
  DType dtype = DType::F32;
  void* stream = nullptr;
};
using Runner = std::function<void(const RunArgs&)>;

/// Generic CPU instance over a problem and a runner (see Instance for the contract).
std::unique_ptr<Instance> make_cpu_instance(Problem p, const Params& params, double tolerance, Runner run);

/// An f32 CPU variant `name` over a problem factory and a runner: make() builds the problem
/// (throwing rtx::Error(Input) on a bad shape or dtype first), then refuses with
/// rtx::Error(Input) the params `validate` rejects, then wraps make_cpu_instance.
Variant cpu_variant(std::string name, ParamSpace space, std::function<std::string(const Shape&, const Params&)> validate,
                    ProblemFactory factory, Runner run, double tol_f32);
#ifdef RTX_HAVE_CUDA
/// Generic CUDA instance: copies inputs to the device once, times with CUDA events,
/// copies outputs back for check()/checksum(). Throws rtx::Error(Environment) without a GPU.
std::unique_ptr<Instance> make_cuda_instance(Problem p, const Params& params, double tolerance, Runner run);
#endif

}  // namespace rtx::kernels
