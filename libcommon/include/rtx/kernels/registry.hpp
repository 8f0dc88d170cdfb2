// The op registry: every op, its variants per backend, their tunable parameter spaces,
// work counts (FLOP, bytes) and a way to prepare a checked, timeable instance.
// rtx-bench, rtx-tune and the generic registry test walk this; nothing else lists ops.
// Registration is explicit (register_cpu_kernels / register_cuda_kernels), no statics.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rtx/core/dtype.hpp"

namespace rtx::kernels {

/// Where a variant runs.
enum class Backend : uint8_t { CPU, CUDA };
/// "cpu" or "cuda".
const char* backend_name(Backend b) noexcept;
/// Parse "cpu" | "cuda"; throws rtx::Error(Usage) naming the value.
Backend parse_backend(const std::string& s);

/// Named problem dimensions, e.g. {M,N,K} for matmul or {B,T,C} / {B,T,NH,HS} for others.
using Shape = std::map<std::string, int64_t>;
/// One parameter assignment: name -> value (tile sizes, block sizes, vector width, ...).
using Params = std::map<std::string, int64_t>;

/// "M=1024,N=768,K=768" (keys in map order).
std::string shape_to_string(const Shape& s);
/// Inverse of shape_to_string; also accepts "1024x768x768" when `dims` is given in order.
/// Throws rtx::Error(Input) naming the bad token.
Shape parse_shape(const std::string& s, const std::vector<std::string>& dims = {});
/// "MC=64,NC=256" (keys in map order); "" for no params.
std::string params_to_string(const Params& p);

/// One tunable parameter: its allowed values and the default used when no profile applies.
struct Param {
  std::string name;
  std::vector<int64_t> values;
  int64_t default_value = 0;
  std::string doc;
};

/// Grid enumeration, one home for ParamSpace and tune::Space: the points of the cartesian
/// product of `params`' values in mixed-radix order, the last param fastest (the order of
/// Python's itertools.product over the params in order). An empty `params` is one point.
/// Number of grid points: the product of the value counts (0 when a param has no values).
size_t grid_size(const std::vector<Param>& params);
/// Per-param value indices of grid point `index` (digit k indexes params[k].values).
/// rtx::Error(Internal) when index >= grid_size(params).
std::vector<size_t> grid_digits(const std::vector<Param>& params, size_t index);
/// Grid index of per-param value indices (inverse of grid_digits). rtx::Error(Internal) for a
/// wrong digit count or a digit out of its param's range.
size_t grid_index(const std::vector<Param>& params, const std::vector<size_t>& digits);
/// The assignment at grid point `index` (grid_digits' rules).
Params grid_point(const std::vector<Param>& params, size_t index);

/// A declared parameter space: the cartesian product of its params' values, minus the
/// combinations the variant's `validate` rejects.
struct ParamSpace {
  std::vector<Param> params;
  /// The default assignment (each param's default_value).
  Params defaults() const;
  /// Number of points in the full grid (1 for an empty space).
  size_t grid_size() const;
  /// Point `index` of the grid (grid_point: mixed-radix, last param fastest); index < grid_size(),
  /// else rtx::Error(Internal).
  Params at(size_t index) const;
};

/// Work of one execution: floating-point operations and the fewest bytes that must move
/// through memory (each input read once, each output written once). Basis for GFLOP/s,
/// GB/s and roofline fractions.
struct Work {
  double flops = 0;
  double bytes = 0;
};

/// Outcome of comparing a variant's output with the float64 reference.
struct CheckResult {
  double max_rel_err = 0;   ///< max over outputs of max|out-ref| / max|ref| (see check.hpp)
  double tolerance = 0;     ///< the op's bound for this dtype
  size_t unwritten = 0;     ///< output elements still holding the poison value
  size_t nonfinite = 0;     ///< NaN/inf outputs where the reference is finite
  bool ok = false;          ///< max_rel_err <= tolerance && unwritten == 0 && nonfinite == 0
  std::string detail;       ///< first offending tensor / index, for messages
};

/// One prepared execution of a variant at one shape: inputs filled from Philox(seed),
/// outputs poisoned (NaN), parameters fixed. Reusable: run() may be called many times.
class Instance {
 public:
  virtual ~Instance() = default;
  /// Execute once. CPU: synchronous. CUDA: enqueued on the instance's stream.
  virtual void run() = 0;
  /// Wait for work enqueued by run() (no-op on CPU).
  virtual void sync() {}
  /// Compare the most recent output with the float64 reference. Call after run()+sync().
  virtual CheckResult check() = 0;
  /// FNV-1a 64-bit hash of the output bytes (after run()+sync()): equal seeds, equal hashes.
  virtual uint64_t checksum() = 0;
  /// The output values after run()+sync(), copied to the host: one fp32 vector per output,
  /// in declaration order. rtx-evolve's determinism gate compares them with the baseline
  /// configuration's. Empty when an instance cannot expose them.
  virtual std::vector<std::vector<float>> output_values() { return {}; }
  /// Bytes of memory held by inputs, outputs and workspace.
  virtual size_t footprint_bytes() const = 0;
  /// Run once and return its duration in seconds: CPU, a monotonic clock around run();
  /// CUDA, events recorded on the instance's stream around run() (then synchronized).
  virtual double timed_run() = 0;
  /// Evict this instance's data from caches (as nvbench's cold mode): CPU writes a buffer
  /// twice the last-level cache, CUDA memsets an L2-sized device buffer. No allocation per call.
  virtual void flush_cache() = 0;
};

/// One implementation of an op on one backend, with its own tunable space.
struct Variant {
  std::string name;               ///< e.g. "cpu.blocked", "cpu.blas", "cuda.cublaslt", "cuda.tiled"
  Backend backend = Backend::CPU;
  std::vector<DType> dtypes;      ///< input dtypes supported
  ParamSpace space;
  /// Why `p` cannot run at `s` ("" when it can): a skipped candidate is recorded, never run.
  std::function<std::string(const Shape& s, const Params& p)> validate;
  /// Allocate and fill inputs (seeded), poison outputs. Throws rtx::Error(Input) on a bad
  /// shape, rtx::Error(Environment) when the backend is unavailable (e.g. no GPU).
  std::function<std::unique_ptr<Instance>(const Shape& s, DType dt, const Params& p, uint64_t seed)> make;
  /// Runs on OpenBLAS's own thread pool, whose idle workers spin (blas_pool_parked_in_s()):
  /// rtx-bench runs such cases first so the pool parks once, not after each of them.
  bool uses_blas_pool = false;
};

/// An op: its shape dims, work model, error bounds and variants.
struct OpDef {
  std::string name;               ///< e.g. "matmul_forward", "layernorm_backward"
  std::string doc;                ///< one line: what it computes, with shape letters
  std::vector<std::string> dims;  ///< required shape dims in canonical order
  std::vector<std::string> optional_dims;  ///< keys a shape may also carry (e.g. matmul's "bias")
  std::function<Work(const Shape& s, DType dt)> work;
  double tol_f32 = 1e-5;          ///< max relative error vs float64 reference, fp32 inputs
  double tol_bf16 = 1e-2;         ///< same, bf16 inputs
  std::vector<Variant> variants;
  /// Small odd shapes (1, 7, 127, non-multiples of every tile) the generic registry test
  /// runs every variant on; `bench_shapes` are the realistic ones (GPT-2 124M etc.).
  std::vector<Shape> test_shapes;
  /// The op's bound for a dtype (tol_bf16 for bf16/f16, else tol_f32).
  double tolerance(DType dt) const;
};

/// Why `s` is not a valid shape for `op` ("" when it is): a required dim missing, a key the
/// op does not know, a dim < 1 (optional dims may be 0) or > 2^31-1, or a working set
/// (OpDef::work bytes, computed in double so products cannot overflow) above
/// `max_bytes` (0: no memory limit). Callers turn the reason into a skip or an Input error.
std::string shape_problem(const OpDef& op, const Shape& s, DType dt, double max_bytes = 0);
/// Physical memory of this host in bytes (sysconf), the usual `max_bytes` for CPU cases.
double host_memory_bytes() noexcept;

/// The set of ops of this build.
class Registry {
 public:
  /// Add an op; throws rtx::Error(Internal) if the name exists.
  void add(OpDef op);
  /// Add a variant to an existing op (how CUDA variants join ops the CPU file declared).
  void add_variant(const std::string& op, Variant v);
  /// The op named `name`; throws rtx::Error(Input) listing the known ops.
  const OpDef& op(const std::string& name) const;
  /// Find without throwing; nullptr when absent.
  const OpDef* find(const std::string& name) const;
  /// A variant of an op; throws rtx::Error(Input) listing the op's variants.
  const Variant& variant(const std::string& op, const std::string& variant) const;
  const std::vector<OpDef>& ops() const { return ops_; }

 private:
  std::vector<OpDef> ops_;
};

/// Tuned-parameter lookup (a tuning profile: tune::ProfileLookup::param_lookup()): the tuned
/// parameters for (op, variant, shape, dtype) if the profile has them, else nullopt. Passed
/// explicitly to what runs kernels (tuned parameters flow one way: profile -> caller -> kernel);
/// there is no process-wide hook.
using ParamLookup = std::function<std::optional<Params>(const std::string& op, const std::string& variant,
                                                        const Shape& s, DType dt)>;
/// Parameters a kernel runs with: `lookup`'s answer when given and it has one, else the
/// variant's defaults.
Params resolve_params(const OpDef& op, const Variant& v, const Shape& s, DType dt, const ParamLookup& lookup = nullptr);
/// Register every CPU op and variant (kernels/cpu/*.cpp).
void register_cpu_kernels(Registry& r);
#ifdef RTX_HAVE_CUDA
/// Register every CUDA variant (kernels/cuda/*.cu); called after register_cpu_kernels.
void register_cuda_kernels(Registry& r);
#endif
/// The kernel registry of this build, built once on first use (CPU always, CUDA when compiled).
/// Kernels only: the model-level and distributed macro ops (gpt2_train_step, allreduce over
/// the world communicator) live in modules above kernels and are added by
/// measure::registry(), the registry of everything benchable.
const Registry& registry();

}  // namespace rtx::kernels
