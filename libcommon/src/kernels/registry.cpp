// Registry bookkeeping, shape/param strings and parameter-space enumeration.
#include "rtx/kernels/registry.hpp"

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

size_t ParamSpace::grid_size() const {
  size_t n = 1;
  for (const auto& q : params) n *= q.values.size();
  return n;
}

Params ParamSpace::at(size_t index) const {
  Params p;
  for (size_t i = params.size(); i-- > 0;) {
    const auto& q = params[i];
    p[q.name] = q.values[index % q.values.size()];
    index /= q.values.size();
  }
  return p;
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

static ParamLookup g_lookup;

void set_param_lookup(ParamLookup f) { g_lookup = std::move(f); }

Params resolve_params(const OpDef& op, const Variant& v, const Shape& s, DType dt) {
  if (g_lookup) {
    if (auto p = g_lookup(op.name, v.name, s, dt)) return *p;
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
