// Registry bookkeeping, shape/param strings and parameter-space enumeration.
//
// HOW TO ADD AN OP (ggml's test-backend-ops style: declare it once, the generic tests find it).
// Example to copy: gelu_forward (grep it in each file below). Shape letters: problems.hpp's head.
//  1. Problem + oracle: declare `Problem make_<op>_problem(const Shape&, DType, uint64_t seed)` in
//     src/kernels/problems.hpp and write it in problems_ops.cpp (problems_matmul.cpp for matmul):
//     inputs from seeded Philox (fill_uniform(seed, subseq); uniform() there), outputs with an
//     empty `init` (poisoned with NaN before each checked run, so unwritten elements are caught)
//     or their initial values for an accumulating "+=" output, and a float64 plain-loop
//     reference of every output. A missing or
//     bad dim is Error(Input) naming it. This reference is the oracle of every test, of rtx-bench's
//     output check and of the tuner's correctness check: keep it a plain loop.
//  2. CPU kernel: the public entry `void <op>(float* out, const float* in..., dims, const OpParams*)`
//     with its shape comment in include/rtx/kernels/ops.hpp; the entry (argument checks,
//     core::KernelRun telemetry, OpenMP chunking) in cpu/ops_cpu.cpp; the per-ISA body once in
//     cpu/ops_simd.inc (compiled by ops_scalar/avx2/avx512.cpp; its pointer in ops_simd.hpp's SimdOps).
//     A new file goes into cpu/ops.cmake.
//  3. Register it in register_cpu_ops (cpu/ops_register.cpp): an OpDef via op(name, doc, dims,
//     work model {FLOP, bytes}, test shapes: odd sizes that cross the vector width and the chunk)
//     with tolerances, and a cpu_variant(name, ParamSpace (the tunable parameters, each with its
//     default), validate (the reason a point is skipped, "" when it runs), the problem factory of
//     step 1, the runner). Per-ISA default parameters go in a constexpr <op>_configs.hpp table.
//     register_cpu_kernels (cpu/register_cpu.cpp) is the one place CPU ops join; no static
//     self-registration (a static library drops it silently).
//  4. CUDA (optional): the kernel in cuda/ops_cuda.cu (or cuda/<op>_cuda.cu, added to
//     cuda/sources.cmake), declared in include/rtx/kernels/cuda_ops.hpp, and a variant "cuda.v1"
//     added with add_variant(...) in cuda/ops_register_cuda.cpp, which register_cuda_kernels calls.
//     Same problem factory, so the same oracle.
//  5. Tests that now pick it up with no edit: kernels_registry_test (tests/kernels/registry_test.cpp:
//     every CPU variant at every test shape and a few parameter points against the reference,
//     outputs fully written, checksums equal across runs; also add the op's name to the expected
//     set of its first TEST_CASE, which fails while it is missing) and, on a GPU machine,
//     kernels_registry_cuda_test (the same walk over the CUDA variants, scripts/gpu-check).
//     Hand-checked values at known points belong in tests/kernels/ops_test.cpp.
//  6. It is now measurable and tunable by name: `rtx-bench list`, a case {"op": "<op>", ...} in a
//     bench pack (docs/bench_packs.md), `rtx-tune run --op <op> --shape ...` over its ParamSpace.
//     Model and dist macro ops (gpt2_train_step, allreduce_world) are added by
//     measure::registry(), not here: kernels sits below models and dist.
#include "rtx/kernels/registry.hpp"

#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "rtx/core/error.hpp"

namespace rtx::kernels {

const char* backend_name(Backend b) noexcept { return b == Backend::CPU ? "cpu" : "cuda"; }

Backend parse_backend(const std::string& s) {
  if (s == "cpu") return Backend::CPU;
  if (s == "cuda" || s == "gpu") return Backend::CUDA;
  throw_usage("unknown backend '" + s + "'", "--backend", "use cpu or cuda");
}

std::string shape_to_string(const Shape& s) {
  std::string out;
  for (const auto& [k, v] : s) {
    if (!out.empty()) out += ",";
    out += k + "=" + std::to_string(v);
  }
  return out;
}

std::string params_to_string(const Params& p) { return shape_to_string(p); }

static int64_t parse_dim(const std::string& tok, const std::string& whole) {
  try {
    size_t pos = 0;
    long long v = std::stoll(tok, &pos);
    if (pos != tok.size() || v < 0) throw std::invalid_argument("x");
    return v;
  } catch (const std::exception&) {
    throw_input("bad dimension '" + tok + "' in shape '" + whole + "'", "shape", "dimensions are non-negative integers");
  }
}

Shape parse_shape(const std::string& s, const std::vector<std::string>& dims) {
  Shape out;
  if (s.find('=') == std::string::npos) {
    std::vector<std::string> toks;
    std::stringstream ss(s);
    std::string t;
    while (std::getline(ss, t, 'x')) toks.push_back(t);
    if (dims.empty() || toks.size() != dims.size())
      throw_input("shape '" + s + "' has " + std::to_string(toks.size()) + " dims, expected " + std::to_string(dims.size()),
                  "shape", "write NAME=V,... or " + std::to_string(dims.size()) + " values joined by 'x'");
    for (size_t i = 0; i < toks.size(); ++i) out[dims[i]] = parse_dim(toks[i], s);
    return out;
  }
  std::stringstream ss(s);
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw_input("bad shape entry '" + kv + "' in '" + s + "'", "shape", "write NAME=V");
    out[kv.substr(0, eq)] = parse_dim(kv.substr(eq + 1), s);
  }
  return out;
}

Params ParamSpace::defaults() const {
  Params p;
  for (const auto& q : params) p[q.name] = q.default_value;
  return p;
}

size_t grid_size(const std::vector<Param>& params) {
  size_t n = 1;
  for (const auto& q : params) n *= q.values.size();
  return n;
}

std::vector<size_t> grid_digits(const std::vector<Param>& params, size_t index) {
  RTX_CHECK(index < grid_size(params), "grid index " + std::to_string(index) + " out of range");
  std::vector<size_t> d(params.size());
  for (size_t k = params.size(); k-- > 0;) {
    d[k] = index % params[k].values.size();
    index /= params[k].values.size();
  }
  return d;
}

size_t grid_index(const std::vector<Param>& params, const std::vector<size_t>& digits) {
  RTX_CHECK(digits.size() == params.size(), "digit count");
  size_t i = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    RTX_CHECK(digits[k] < params[k].values.size(), "grid digit out of range for " + params[k].name);
    i = i * params[k].values.size() + digits[k];
  }
  return i;
}

Params grid_point(const std::vector<Param>& params, size_t index) {
  const std::vector<size_t> d = grid_digits(params, index);
  Params p;
  for (size_t k = 0; k < params.size(); ++k) p[params[k].name] = params[k].values[d[k]];
  return p;
}

size_t ParamSpace::grid_size() const { return kernels::grid_size(params); }

Params ParamSpace::at(size_t index) const { return grid_point(params, index); }

std::string shape_problem(const OpDef& op, const Shape& s, DType dt, double max_bytes) {
  auto listed = [](const std::vector<std::string>& v, const std::string& k) {
    for (const auto& x : v)
      if (x == k) return true;
    return false;
  };
  for (const auto& d : op.dims)
    if (!s.count(d)) return "shape has no dim " + d + " (" + op.name + " needs " + [&] {
      std::string all;
      for (const auto& x : op.dims) all += (all.empty() ? "" : ",") + x;
      return all;
    }() + ")";
  constexpr int64_t kMaxDim = 2147483647;
  for (const auto& [k, v] : s) {
    const bool required = listed(op.dims, k);
    if (!required && !listed(op.optional_dims, k)) return "dim " + k + " is not a dim of " + op.name;
    if (v < (required ? 1 : 0)) return "dim " + k + " = " + std::to_string(v) + " must be >= " + (required ? "1" : "0");
    if (v > kMaxDim) return "dim " + k + " = " + std::to_string(v) + " exceeds 2^31-1";
  }
  if (max_bytes > 0 && op.work) {
    const double b = op.work(s, dt).bytes;
    if (!(b <= max_bytes)) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "working set %.3g GiB exceeds the %.3g GiB limit (memory of this machine)",
                    b / 1073741824.0, max_bytes / 1073741824.0);
      return buf;
    }
  }
  return "";
}

double host_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<double>(pages) * static_cast<double>(size) : 0.0;
}

double OpDef::tolerance(DType dt) const {
  return (dt == DType::BF16 || dt == DType::F16) ? tol_bf16 : tol_f32;
}

void Registry::add(OpDef op) {
  if (find(op.name)) throw_internal("op '" + op.name + "' registered twice");
  ops_.push_back(std::move(op));
}

void Registry::add_variant(const std::string& op_name, Variant v) {
  for (auto& o : ops_) {
    if (o.name == op_name) {
      for (const auto& e : o.variants)
        if (e.name == v.name) throw_internal("variant '" + v.name + "' of op '" + op_name + "' registered twice");
      o.variants.push_back(std::move(v));
      return;
    }
  }
  throw_internal("add_variant: no op '" + op_name + "'");
}

const OpDef* Registry::find(const std::string& name) const {
  for (const auto& o : ops_)
    if (o.name == name) return &o;
  return nullptr;
}

const OpDef& Registry::op(const std::string& name) const {
  if (const OpDef* o = find(name)) return *o;
  std::string known;
  for (const auto& o : ops_) known += (known.empty() ? "" : ", ") + o.name;
  throw_input("unknown op '" + name + "'", "op", "known ops: " + known);
}

const Variant& Registry::variant(const std::string& op_name, const std::string& v) const {
  const OpDef& o = op(op_name);
  for (const auto& e : o.variants)
    if (e.name == v) return e;
  std::string known;
  for (const auto& e : o.variants) known += (known.empty() ? "" : ", ") + e.name;
  throw_input("op '" + op_name + "' has no variant '" + v + "'", "variant", "variants: " + known);
}

Params resolve_params(const OpDef& op, const Variant& v, const Shape& s, DType dt, const ParamLookup& lookup) {
  if (lookup) {
    if (auto p = lookup(op.name, v.name, s, dt)) return *p;
  }
  return v.space.defaults();
}

const Registry& registry() {
  static const Registry r = [] {
    Registry x;
    register_cpu_kernels(x);
#ifdef RTX_HAVE_CUDA
    register_cuda_kernels(x);
#endif
    return x;
  }();
  return r;
}

}  // namespace rtx::kernels
