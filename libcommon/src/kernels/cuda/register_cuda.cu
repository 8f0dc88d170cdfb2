// register_cuda_kernels: the one place CUDA variants join the registry (explicit, no statics),
// plus the shared registration helpers of cuda_register.hpp. Runs after register_cpu_kernels.
#include <algorithm>
#include <climits>

#include "cuda_register.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"

namespace rtx::kernels {
namespace cuda_reg {

void add_variant(Registry& r, const std::string& op, const std::string& name, std::vector<DType> dtypes,
                 ParamSpace space, Validate validate, ProblemFactory factory, RunnerFactory runner) {
  const OpDef* o = r.find(op);
  if (!o) return;
  const double tol_f32 = o->tol_f32, tol_bf16 = o->tol_bf16;
  if (!validate) validate = [](const Shape&, const Params&) { return std::string(); };
  Variant v;
  v.name = name;
  v.backend = Backend::CUDA;
  v.dtypes = dtypes;
  v.space = space;
  v.validate = validate;
  v.make = [=](const Shape& s, DType dt, const Params& given, uint64_t seed) -> std::unique_ptr<Instance> {
    require_cuda(op + " " + name);
    if (std::find(dtypes.begin(), dtypes.end(), dt) == dtypes.end()) {
      std::string ok;
      for (DType d : dtypes) ok += std::string(ok.empty() ? "" : ", ") + dtype_name(d);
      throw_input(op + " " + name + ": dtype " + dtype_name(dt) + " is not supported", "dtype", "use " + ok);
    }
    Params p = space.defaults();
    for (const auto& [k, val] : given) p[k] = val;
    Problem prob = factory(s, dt, seed);  // validates the shape first
    if (std::string why = validate(s, p); !why.empty())
      throw_input(op + " " + name + ": parameters " + params_to_string(p) + " rejected: " + why, "params",
                  "pick a combination the variant's validate accepts");
    Runner run = runner(prob, p);
    const double tol = (dt == DType::BF16 || dt == DType::F16) ? tol_bf16 : tol_f32;
    return make_cuda_instance(std::move(prob), p, tol, std::move(run));
  };
  r.add_variant(op, std::move(v));
}

static size_t find_tensor(const std::vector<std::string>& names, const std::string& name, const char* kind) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return i;
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw_internal(std::string("CUDA runner: problem has no ") + kind + " tensor '" + name + "' (has: " + known + ")");
}

size_t input_index(const Problem& p, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& t : p.inputs) names.push_back(t.name);
  return find_tensor(names, name, "input");
}

size_t output_index(const Problem& p, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& t : p.outputs) names.push_back(t.name);
  return find_tensor(names, name, "output");
}

bool accumulates(const Problem& p, const std::string& name) { return !p.outputs[output_index(p, name)].init.empty(); }

int dim(const Shape& s, const char* d) {
  auto it = s.find(d);
  if (it == s.end()) throw_input(std::string("shape '") + shape_to_string(s) + "' has no dim " + d, d);
  if (it->second <= 0 || it->second > INT_MAX)
    throw_input(std::string("dim ") + d + " = " + std::to_string(it->second) + " is out of range", d);
  return static_cast<int>(it->second);
}

int64_t param(const Params& p, const char* name, int64_t def) {
  auto it = p.find(name);
  return it == p.end() ? def : it->second;
}

}  // namespace cuda_reg

void register_cuda_kernels(Registry& r) {
  cuda_reg::register_matmul(r);
  cuda_reg::register_ops(r);
  cuda_reg::register_attention(r);
  cuda_reg::register_sparse(r);
  cuda_reg::register_allreduce(r);
}

}  // namespace rtx::kernels
