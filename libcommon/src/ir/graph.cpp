// Polygraph IR graph: symbolic dims, the shape functions of every node kind, the builder,
// the verifier and rebuild (the passes' rewriting primitive).
#include "rtx/ir/graph.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "rtx/core/error.hpp"
#include "rtx/ir/fusion.hpp"

namespace rtx::ir {

using nlohmann::json;

// ---------------------------------------------------------------- dims

static bool valid_sym(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

Dim Dim::sym(const std::string& name) {
  if (!valid_sym(name)) throw_input("bad dim symbol '" + name + "' (expected [A-Za-z_][A-Za-z0-9_]*)", "ir dim");
  Dim d;
  d.syms = {name};
  return d;
}

Dim Dim::parse(const std::string& text) {
  Dim d;
  size_t pos = 0;
  if (text.empty()) throw_input("empty dim", "ir dim");
  while (pos <= text.size()) {
    const size_t star = text.find('*', pos);
    const std::string tok = text.substr(pos, star == std::string::npos ? std::string::npos : star - pos);
    if (tok.empty()) throw_input("bad dim '" + text + "'", "ir dim");
    if (std::isdigit(static_cast<unsigned char>(tok[0]))) {
      for (char c : tok)
        if (!std::isdigit(static_cast<unsigned char>(c))) throw_input("bad dim '" + text + "'", "ir dim");
      if (tok.size() > 12) throw_input("dim too large '" + text + "'", "ir dim");
      d.coeff *= std::stoll(tok);
    } else {
      if (!valid_sym(tok)) throw_input("bad dim '" + text + "'", "ir dim");
      d.syms.push_back(tok);
    }
    if (star == std::string::npos) break;
    pos = star + 1;
  }
  std::sort(d.syms.begin(), d.syms.end());
  if (d.coeff < 0) throw_input("negative dim '" + text + "'", "ir dim");
  return d;
}

std::string Dim::str() const {
  std::string s;
  if (coeff != 1 || syms.empty()) s = std::to_string(coeff);
  for (const auto& y : syms) s += (s.empty() ? "" : "*") + y;
  return s;
}

Dim operator*(const Dim& a, const Dim& b) {
  Dim d;
  d.coeff = a.coeff * b.coeff;
  d.syms = a.syms;
  d.syms.insert(d.syms.end(), b.syms.begin(), b.syms.end());
  std::sort(d.syms.begin(), d.syms.end());
  return d;
}

bool dim_div(const Dim& a, const Dim& b, Dim& out) {
  if (b.coeff == 0 || a.coeff % b.coeff != 0) return false;
  std::multiset<std::string> rest(a.syms.begin(), a.syms.end());
  for (const auto& s : b.syms) {
    auto it = rest.find(s);
    if (it == rest.end()) return false;
    rest.erase(it);
  }
  out.coeff = a.coeff / b.coeff;
  out.syms.assign(rest.begin(), rest.end());
  return true;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + s[i].str();
  return r + "]";
}

Dim numel(const Shape& s) {
  Dim d(1);
  for (const auto& x : s) d = d * x;
  return d;
}

int64_t eval(const Dim& d, const Bindings& b) {
  int64_t v = d.coeff;
  for (const auto& s : d.syms) {
    auto it = b.find(s);
    if (it == b.end()) throw_input("dim symbol '" + s + "' is not bound", "ir bindings", "bind it, e.g. {\"" + s + "\": 4}");
    if (it->second < 1) throw_input("dim symbol '" + s + "' bound to " + std::to_string(it->second) + " (must be >= 1)", "ir bindings");
    v *= it->second;
  }
  return v;
}

std::vector<int64_t> eval(const Shape& s, const Bindings& b) {
  std::vector<int64_t> r;
  for (const auto& d : s) r.push_back(eval(d, b));
  return r;
}

int64_t eval_numel(const Shape& s, const Bindings& b) {
  int64_t n = 1;
  for (const auto& d : s) n *= eval(d, b);
  return n;
}

const char* device_name(Device d) noexcept { return d == Device::CPU ? "cpu" : "cuda"; }
Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::CPU;
  if (s == "cuda") return Device::CUDA;
  throw_input("unknown device '" + s + "' (expected cpu or cuda)", "ir value");
}

Shape Value::strides() const {
  Shape st(shape.size());
  Dim acc(1);
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc = acc * shape[i];
  }
  return st;
}

// ---------------------------------------------------------------- kinds

static const char* const kKindNames[kNumKinds] = {
    "input",   "full",      "matmul",    "add",        "sub",         "mul",          "scale",
    "gelu",    "relu",      "silu",      "tanh",       "exp",         "sum",          "mean",
    "reshape", "transpose", "broadcast", "sum_to",     "softmax",     "layernorm",    "attention",
    "gather",  "segment_sum", "encoder", "cross_entropy", "unary_grad", "softmax_backward",
    "layernorm_backward", "attention_backward", "encoder_backward", "cross_entropy_backward", "fused"};

const char* kind_name(Kind k) noexcept {
  const int i = static_cast<int>(k);
  return i >= 0 && i < kNumKinds ? kKindNames[i] : "?";
}

Kind parse_kind(const std::string& name) {
  for (int i = 0; i < kNumKinds; ++i)
    if (name == kKindNames[i]) return static_cast<Kind>(i);
  std::string known;
  for (int i = 0; i < kNumKinds; ++i) known += (i ? ", " : "") + std::string(kKindNames[i]);
  throw_input("unknown node kind '" + name + "'", "ir node", "known kinds: " + known);
}

bool is_elementwise(Kind k) noexcept {
  switch (k) {
    case Kind::Add: case Kind::Sub: case Kind::Mul: case Kind::Scale: case Kind::Gelu: case Kind::Relu:
    case Kind::Silu: case Kind::Tanh: case Kind::Exp: case Kind::UnaryGrad:
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------- shape functions

namespace {

[[noreturn]] void bad(const std::string& what) { throw_input(what, "ir shape"); }

Shape shape_attr(const json& attrs, const char* key) {
  if (!attrs.contains(key) || !attrs[key].is_array()) bad(std::string("attribute '") + key + "' missing or not an array of dims");
  Shape s;
  for (const auto& d : attrs[key]) {
    if (d.is_number_integer()) {
      if (d.get<int64_t>() < 1) bad(std::string("attribute '") + key + "' has a dim < 1");
      s.push_back(Dim(d.get<int64_t>()));
    } else if (d.is_string()) {
      s.push_back(Dim::parse(d.get<std::string>()));
    } else {
      bad(std::string("attribute '") + key + "' has a dim that is neither integer nor string");
    }
  }
  return s;
}

Dim dim_attr(const json& attrs, const char* key) {
  if (!attrs.contains(key)) bad(std::string("attribute '") + key + "' missing");
  const json& d = attrs[key];
  if (d.is_number_integer() && d.get<int64_t>() >= 1) return Dim(d.get<int64_t>());
  if (d.is_string()) return Dim::parse(d.get<std::string>());
  bad(std::string("attribute '") + key + "' is not a dim");
}

int64_t int_attr(const json& attrs, const char* key) {
  if (!attrs.contains(key) || !attrs[key].is_number_integer()) bad(std::string("attribute '") + key + "' missing or not an integer");
  return attrs[key].get<int64_t>();
}

bool bool_attr(const json& attrs, const char* key, bool def) {
  if (!attrs.contains(key)) return def;
  if (!attrs[key].is_boolean()) bad(std::string("attribute '") + key + "' is not a boolean");
  return attrs[key].get<bool>();
}

void need_n(const std::vector<const Value*>& in, size_t n) {
  if (in.size() != n) bad("expects " + std::to_string(n) + " inputs, got " + std::to_string(in.size()));
}
void need_f32(const Value& v, const char* what) {
  if (v.dtype != DType::F32) bad(std::string(what) + " must be f32, got " + dtype_name(v.dtype));
}
void need_i32(const Value& v, const char* what) {
  if (v.dtype != DType::I32) bad(std::string(what) + " must be i32, got " + dtype_name(v.dtype));
}
void need_rank(const Value& v, size_t lo, const char* what) {
  if (v.shape.size() < lo) bad(std::string(what) + " needs rank >= " + std::to_string(lo) + ", got " + shape_str(v.shape));
}

// numpy broadcasting of two shapes; "" on success.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape& out) {
  const size_t n = std::max(a.size(), b.size());
  out.assign(n, Dim(1));
  for (size_t i = 0; i < n; ++i) {
    const Dim da = i < n - a.size() ? Dim(1) : a[i - (n - a.size())];
    const Dim db = i < n - b.size() ? Dim(1) : b[i - (n - b.size())];
    if (da == db || db == Dim(1)) out[i] = da;
    else if (da == Dim(1)) out[i] = db;
    else return false;
  }
  return true;
}

int norm_axis(int64_t axis, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) bad("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

}  // namespace

std::vector<std::pair<DType, Shape>> infer(Kind kind, const std::vector<const Value*>& in, const json& attrs) {
  using R = std::vector<std::pair<DType, Shape>>;
  if (!attrs.is_object()) bad("attributes must be a JSON object");
  switch (kind) {
    case Kind::Input: {
      need_n(in, 0);
      bad("input nodes are made by Graph::input/param, not add_node");
    }
    case Kind::Full: {
      need_n(in, 0);
      if (!attrs.contains("value") || !attrs["value"].is_number()) bad("attribute 'value' missing or not a number");
      return R{{DType::F32, shape_attr(attrs, "shape")}};
    }
    case Kind::MatMul: {
      if (in.size() != 2 && in.size() != 3) bad("expects 2 inputs (or 3 with a bias), got " + std::to_string(in.size()));
      const Value &a = *in[0], &b = *in[1];
      need_f32(a, "a");
      need_f32(b, "b");
      const bool ta = bool_attr(attrs, "ta", false), tb = bool_attr(attrs, "tb", false);
      if (b.shape.size() != 2) bad("b must be 2-D, got " + shape_str(b.shape));
      if (ta ? a.shape.size() != 2 : a.shape.size() < 2)
        bad(std::string("a must be ") + (ta ? "2-D when ta" : "at least 2-D") + ", got " + shape_str(a.shape));
      const size_t r = a.shape.size();
      const Dim M = ta ? a.shape[1] : a.shape[r - 2], Ka = ta ? a.shape[0] : a.shape[r - 1];
      const Dim Kb = tb ? b.shape[1] : b.shape[0], N = tb ? b.shape[0] : b.shape[1];
      if (Ka != Kb)
        bad("inner dims differ: a " + shape_str(a.shape) + " K=" + Ka.str() + ", b " + shape_str(b.shape) + " K=" + Kb.str());
      if (in.size() == 3) {
        need_f32(*in[2], "bias");
        if (in[2]->shape.size() != 1 || in[2]->shape[0] != N) bad("bias must be [" + N.str() + "], got " + shape_str(in[2]->shape));
      }
      Shape out(a.shape.begin(), a.shape.end() - 2);
      out.push_back(M);
      out.push_back(N);
      return R{{DType::F32, out}};
    }
    case Kind::Fused: {
      FusedProgram p;
      if (const std::string why = parse_fused(attrs, in.size(), p); !why.empty()) bad(why);
      for (size_t k = 0; k < in.size(); ++k) need_f32(*in[k], "fused input");
      const Shape& S = in[0]->shape;
      if (S.empty()) bad("input 0 must have rank >= 1 (the chain's shape)");
      const Shape row{S.back()};
      for (size_t k = 0; k < in.size(); ++k)
        if (in[k]->shape != S && in[k]->shape != row)
          bad("input " + std::to_string(k) + " " + shape_str(in[k]->shape) + " is neither the chain's " + shape_str(S) + " nor a row " + shape_str(row));
      std::vector<bool> full;  // per step: has shape S (else a row)
      auto is_full = [&](int a) { return a >= 0 ? in[static_cast<size_t>(a)]->shape == S : bool(full[static_cast<size_t>(-a - 1)]); };
      for (size_t k = 0; k < p.steps.size(); ++k) {
        const FusedStep& st = p.steps[k];
        if (st.kind == Kind::LayerNorm) {
          if (!is_full(st.args[0]) || st.args[1] < 0 || st.args[2] < 0 || in[static_cast<size_t>(st.args[1])]->shape != row ||
              in[static_cast<size_t>(st.args[2])]->shape != row)
            bad("step " + std::to_string(k) + " (layernorm) needs x of the chain's shape and rows w, b");
        } else if (st.args.size() == 2 ? !(is_full(st.args[0]) || is_full(st.args[1])) : !is_full(st.args[0])) {
          bad("step " + std::to_string(k) + " (" + kind_name(st.kind) + ") has no operand of the chain's shape " + shape_str(S));
        }
        full.push_back(true);
      }
      R r;
      for (size_t k = 0; k < p.emit.size(); ++k) r.push_back({DType::F32, S});
      if (p.layernorm_tail()) {
        const Shape rows(S.begin(), S.end() - 1);
        r.push_back({DType::F32, S});
        r.push_back({DType::F32, rows});
        r.push_back({DType::F32, rows});
      }
      if (r.empty()) bad("a fused node must have an output (emit a step or end in a layernorm)");
      return r;
    }
    case Kind::Add: case Kind::Sub: case Kind::Mul: {
      need_n(in, 2);
      need_f32(*in[0], "a");
      need_f32(*in[1], "b");
      Shape out;
      if (!broadcast_shapes(in[0]->shape, in[1]->shape, out))
        bad("shapes do not broadcast: " + shape_str(in[0]->shape) + " and " + shape_str(in[1]->shape));
      return R{{DType::F32, out}};
    }
    case Kind::Scale:
      need_n(in, 1);
      need_f32(*in[0], "x");
      if (!attrs.contains("alpha") || !attrs["alpha"].is_number()) bad("attribute 'alpha' missing or not a number");
      return R{{DType::F32, in[0]->shape}};
    case Kind::Gelu: case Kind::Relu: case Kind::Silu: case Kind::Tanh: case Kind::Exp: case Kind::Softmax:
      need_n(in, 1);
      need_f32(*in[0], "x");
      if (kind == Kind::Softmax) need_rank(*in[0], 1, "x");
      return R{{DType::F32, in[0]->shape}};
    case Kind::Sum: case Kind::Mean: {
      need_n(in, 1);
      need_f32(*in[0], "x");
      need_rank(*in[0], 1, "x");
      const int ax = norm_axis(int_attr(attrs, "axis"), in[0]->shape.size());
      Shape out = in[0]->shape;
      if (bool_attr(attrs, "keepdim", false)) out[ax] = Dim(1);
      else out.erase(out.begin() + ax);
      return R{{DType::F32, out}};
    }
    case Kind::Reshape: {
      need_n(in, 1);
      const Shape s = shape_attr(attrs, "shape");
      if (numel(s) != numel(in[0]->shape))
        bad("element count differs: x " + shape_str(in[0]->shape) + " (" + numel(in[0]->shape).str() + "), shape " +
            shape_str(s) + " (" + numel(s).str() + ")");
      return R{{in[0]->dtype, s}};
    }
    case Kind::Transpose: {
      need_n(in, 1);
      if (!attrs.contains("perm") || !attrs["perm"].is_array()) bad("attribute 'perm' missing or not an array");
      const auto perm = attrs["perm"].get<std::vector<int64_t>>();
      const size_t r = in[0]->shape.size();
      if (perm.size() != r) bad("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(r));
      std::vector<bool> seen(r, false);
      Shape out;
      for (int64_t p : perm) {
        if (p < 0 || p >= static_cast<int64_t>(r) || seen[p]) bad("perm " + attrs["perm"].dump() + " is not a permutation");
        seen[p] = true;
        out.push_back(in[0]->shape[p]);
      }
      return R{{in[0]->dtype, out}};
    }
    case Kind::Broadcast: {
      need_n(in, 1);
      need_f32(*in[0], "x");
      const Shape s = shape_attr(attrs, "shape");
      Shape out;
      if (!broadcast_shapes(in[0]->shape, s, out) || out != s)
        bad("x " + shape_str(in[0]->shape) + " does not broadcast to " + shape_str(s));
      return R{{DType::F32, s}};
    }
    case Kind::SumTo: {
      need_n(in, 1);
      need_f32(*in[0], "x");
      const Shape s = shape_attr(attrs, "shape");
      Shape out;
      if (!broadcast_shapes(in[0]->shape, s, out) || out != in[0]->shape)
        bad("x " + shape_str(in[0]->shape) + " is not a broadcast of " + shape_str(s));
      return R{{DType::F32, s}};
    }
    case Kind::LayerNorm: {
      need_n(in, 3);
      for (int i = 0; i < 3; ++i) need_f32(*in[i], i == 0 ? "x" : i == 1 ? "w" : "b");
      need_rank(*in[0], 1, "x");
      const Dim C = in[0]->shape.back();
      for (int i = 1; i < 3; ++i)
        if (in[i]->shape != Shape{C})
          bad(std::string(i == 1 ? "w" : "b") + " must be [" + C.str() + "], got " + shape_str(in[i]->shape));
      Shape rows(in[0]->shape.begin(), in[0]->shape.end() - 1);
      return R{{DType::F32, in[0]->shape}, {DType::F32, rows}, {DType::F32, rows}};
    }
    case Kind::Attention: case Kind::AttentionBackward: {
      const bool bw = kind == Kind::AttentionBackward;
      need_n(in, bw ? 4 : 1);
      const Value& qkv = *in[bw ? 1 : 0];
      need_f32(qkv, "qkv");
      if (qkv.shape.size() != 3) bad("qkv must be [B,T,3C], got " + shape_str(qkv.shape));
      const int64_t NH = int_attr(attrs, "NH");
      if (NH < 1) bad("NH must be >= 1");
      Dim C, HS;
      if (!dim_div(qkv.shape[2], Dim(3), C)) bad("qkv's last dim " + qkv.shape[2].str() + " is not 3*C");
      if (!dim_div(C, Dim(NH), HS)) bad("C=" + C.str() + " is not a multiple of NH=" + std::to_string(NH));
      const Dim B = qkv.shape[0], T = qkv.shape[1];
      if (!bw) return R{{DType::F32, {B, T, C}}, {DType::F32, {B, Dim(NH), T}}};
      if (in[0]->shape != Shape{B, T, C}) bad("dout must be " + shape_str({B, T, C}) + ", got " + shape_str(in[0]->shape));
      if (in[2]->shape != Shape{B, T, C}) bad("out must be " + shape_str({B, T, C}) + ", got " + shape_str(in[2]->shape));
      if (in[3]->shape != Shape{B, Dim(NH), T}) bad("lse must be " + shape_str({B, Dim(NH), T}) + ", got " + shape_str(in[3]->shape));
      return R{{DType::F32, qkv.shape}};
    }
    case Kind::Gather: {
      need_n(in, 2);
      need_f32(*in[0], "table");
      need_i32(*in[1], "ids");
      need_rank(*in[0], 1, "table");
      Shape out = in[1]->shape;
      out.insert(out.end(), in[0]->shape.begin() + 1, in[0]->shape.end());
      return R{{DType::F32, out}};
    }
    case Kind::SegmentSum: {
      need_n(in, 2);
      need_f32(*in[0], "data");
      need_i32(*in[1], "ids");
      need_rank(*in[0], 1, "data");
      if (in[1]->shape != Shape{in[0]->shape[0]})
        bad("ids must be [" + in[0]->shape[0].str() + "] (one per data row), got " + shape_str(in[1]->shape));
      Shape out = in[0]->shape;
      out[0] = dim_attr(attrs, "segments");
      return R{{DType::F32, out}};
    }
    case Kind::Encoder: {
      need_n(in, 3);
      need_i32(*in[0], "ids");
      need_f32(*in[1], "wte");
      need_f32(*in[2], "wpe");
      if (in[0]->shape.size() != 2) bad("ids must be [B,T], got " + shape_str(in[0]->shape));
      if (in[1]->shape.size() != 2 || in[2]->shape.size() != 2 || in[1]->shape[1] != in[2]->shape[1])
        bad("wte [V,C] and wpe [P,C] must share C, got " + shape_str(in[1]->shape) + " and " + shape_str(in[2]->shape));
      if (in[2]->shape[0].is_const() && in[0]->shape[1].is_const() && in[2]->shape[0].coeff < in[0]->shape[1].coeff)
        bad("wpe has " + in[2]->shape[0].str() + " positions < T=" + in[0]->shape[1].str());
      return R{{DType::F32, {in[0]->shape[0], in[0]->shape[1], in[1]->shape[1]}}};
    }
    case Kind::EncoderBackward: {
      need_n(in, 2);
      need_f32(*in[0], "dout");
      need_i32(*in[1], "ids");
      if (in[0]->shape.size() != 3 || in[1]->shape.size() != 2 || in[0]->shape[0] != in[1]->shape[0] ||
          in[0]->shape[1] != in[1]->shape[1])
        bad("dout must be [B,T,C] and ids [B,T], got " + shape_str(in[0]->shape) + " and " + shape_str(in[1]->shape));
      const Dim C = in[0]->shape[2];
      return R{{DType::F32, {dim_attr(attrs, "V"), C}}, {DType::F32, {dim_attr(attrs, "P"), C}}};
    }
    case Kind::CrossEntropy: {
      need_n(in, 2);
      need_f32(*in[0], "logits");
      need_i32(*in[1], "targets");
      need_rank(*in[0], 1, "logits");
      Shape rows(in[0]->shape.begin(), in[0]->shape.end() - 1);
      if (in[1]->shape != rows) bad("targets must be " + shape_str(rows) + ", got " + shape_str(in[1]->shape));
      return R{{DType::F32, rows}};
    }
    case Kind::CrossEntropyBackward: {
      need_n(in, 3);
      need_f32(*in[0], "dlosses");
      need_f32(*in[1], "logits");
      need_i32(*in[2], "targets");
      need_rank(*in[1], 1, "logits");
      Shape rows(in[1]->shape.begin(), in[1]->shape.end() - 1);
      if (in[0]->shape != rows || in[2]->shape != rows)
        bad("dlosses and targets must be " + shape_str(rows) + ", got " + shape_str(in[0]->shape) + " and " +
            shape_str(in[2]->shape));
      return R{{DType::F32, in[1]->shape}};
    }
    case Kind::UnaryGrad: {
      need_n(in, 2);
      need_f32(*in[0], "x");
      need_f32(*in[1], "dy");
      if (in[0]->shape != in[1]->shape) bad("x " + shape_str(in[0]->shape) + " and dy " + shape_str(in[1]->shape) + " differ");
      if (!attrs.contains("fn") || !attrs["fn"].is_string()) bad("attribute 'fn' missing");
      const std::string fn = attrs["fn"];
      if (fn != "gelu" && fn != "relu" && fn != "silu" && fn != "tanh" && fn != "exp")
        bad("attribute 'fn' is '" + fn + "' (expected gelu|relu|silu|tanh|exp)");
      return R{{DType::F32, in[0]->shape}};
    }
    case Kind::SoftmaxBackward:
      need_n(in, 2);
      need_f32(*in[0], "y");
      need_f32(*in[1], "dy");
      if (in[0]->shape != in[1]->shape) bad("y " + shape_str(in[0]->shape) + " and dy " + shape_str(in[1]->shape) + " differ");
      need_rank(*in[0], 1, "y");
      return R{{DType::F32, in[0]->shape}};
    case Kind::LayerNormBackward: {
      need_n(in, 5);
      for (int i = 0; i < 5; ++i) need_f32(*in[i], "layernorm_backward input");
      const Shape& x = in[1]->shape;
      need_rank(*in[1], 1, "x");
      const Dim C = x.back();
      Shape rows(x.begin(), x.end() - 1);
      if (in[0]->shape != x) bad("dy " + shape_str(in[0]->shape) + " differs from x " + shape_str(x));
      if (in[2]->shape != Shape{C}) bad("w must be [" + C.str() + "], got " + shape_str(in[2]->shape));
      if (in[3]->shape != rows || in[4]->shape != rows) bad("mean and rstd must be " + shape_str(rows));
      return R{{DType::F32, x}, {DType::F32, {C}}, {DType::F32, {C}}};
    }
  }
  bad("unknown kind");
}

// ---------------------------------------------------------------- graph

const Value& V::value() const {
  if (!g) throw_input("empty value handle", "ir builder");
  return g->value(id);
}

const Value& Graph::value(int id) const {
  if (id < 0 || id >= static_cast<int>(values_.size()))
    throw_input("value id " + std::to_string(id) + " does not exist (graph has " + std::to_string(values_.size()) + ")",
                "graph '" + name_ + "'");
  return values_[id];
}

const Node& Graph::node(int id) const {
  if (id < 0 || id >= static_cast<int>(nodes_.size()))
    throw_input("node id " + std::to_string(id) + " does not exist", "graph '" + name_ + "'");
  return nodes_[id];
}

std::vector<int> Graph::add_node(Kind kind, const std::vector<int>& inputs, json attrs, const std::string& name) {
  const int nid = static_cast<int>(nodes_.size());
  const std::string where = "graph '" + name_ + "', node " + std::to_string(nid) + " (" + kind_name(kind) + ")";
  std::vector<const Value*> ins;
  for (int i : inputs) {
    if (i < 0 || i >= static_cast<int>(values_.size()))
      throw_input("input value " + std::to_string(i) + " does not exist", where);
    ins.push_back(&values_[i]);
  }
  std::vector<std::pair<DType, Shape>> outs;
  try {
    outs = infer(kind, ins, attrs);
  } catch (const Error& e) {
    throw_input(e.message(), where);
  }
  Node n;
  n.id = nid;
  n.kind = kind;
  n.inputs = inputs;
  n.attrs = std::move(attrs);
  const Device dev = ins.empty() ? Device::CPU : ins[0]->device;  // before values_ grows (ins dangle)
  for (size_t k = 0; k < outs.size(); ++k) {
    Value v;
    v.id = static_cast<int>(values_.size());
    v.dtype = outs[k].first;
    v.shape = outs[k].second;
    v.device = dev;
    v.producer = nid;
    v.index = static_cast<int>(k);
    if (k == 0) v.name = name;
    n.outputs.push_back(v.id);
    values_.push_back(std::move(v));
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().outputs;
}

V Graph::input(const std::string& name, Shape shape, DType dt, Device dev) {
  if (name.empty()) throw_input("an input needs a name", "graph '" + name_ + "'");
  if (find_input(name) >= 0) throw_input("duplicate input name '" + name + "'", "graph '" + name_ + "'");
  if (dt != DType::F32 && dt != DType::I32)
    throw_input("input '" + name + "': dtype " + dtype_name(dt) + " not supported (f32, i32)", "graph '" + name_ + "'");
  for (const auto& d : shape)
    if (d.coeff < 1) throw_input("input '" + name + "': dim < 1 in " + shape_str(shape), "graph '" + name_ + "'");
  Node n;
  n.id = static_cast<int>(nodes_.size());
  n.kind = Kind::Input;
  n.attrs = json{{"role", "input"}};
  Value v;
  v.id = static_cast<int>(values_.size());
  v.dtype = dt;
  v.shape = std::move(shape);
  v.device = dev;
  v.name = name;
  v.producer = n.id;
  n.outputs = {v.id};
  values_.push_back(std::move(v));
  nodes_.push_back(std::move(n));
  return V{this, values_.back().id};
}

V Graph::param(const std::string& name, Shape shape, DType dt) {
  V v = input(name, std::move(shape), dt);
  nodes_.back().attrs["role"] = "param";
  return v;
}

static json shape_json(const Shape& s) {
  json a = json::array();
  for (const auto& d : s) {
    if (d.is_const()) a.push_back(d.coeff);
    else a.push_back(d.str());
  }
  return a;
}

V Graph::full(Shape shape, double value) { return v(add_node(Kind::Full, {}, {{"shape", shape_json(shape)}, {"value", value}})[0]); }
V Graph::matmul(V a, V b, bool ta, bool tb) { return v(add_node(Kind::MatMul, {a.id, b.id}, {{"ta", ta}, {"tb", tb}})[0]); }
V Graph::add(V a, V b) { return v(add_node(Kind::Add, {a.id, b.id})[0]); }
V Graph::sub(V a, V b) { return v(add_node(Kind::Sub, {a.id, b.id})[0]); }
V Graph::mul(V a, V b) { return v(add_node(Kind::Mul, {a.id, b.id})[0]); }
V Graph::scale(V x, double alpha) { return v(add_node(Kind::Scale, {x.id}, {{"alpha", alpha}})[0]); }
V Graph::gelu(V x) { return v(add_node(Kind::Gelu, {x.id})[0]); }
V Graph::relu(V x) { return v(add_node(Kind::Relu, {x.id})[0]); }
V Graph::silu(V x) { return v(add_node(Kind::Silu, {x.id})[0]); }
V Graph::tanh(V x) { return v(add_node(Kind::Tanh, {x.id})[0]); }
V Graph::exp(V x) { return v(add_node(Kind::Exp, {x.id})[0]); }
V Graph::sum(V x, int axis, bool keepdim) {
  const int ax = axis < 0 ? axis + static_cast<int>(value(x.id).shape.size()) : axis;
  return v(add_node(Kind::Sum, {x.id}, {{"axis", ax}, {"keepdim", keepdim}})[0]);
}
V Graph::mean(V x, int axis, bool keepdim) {
  const int ax = axis < 0 ? axis + static_cast<int>(value(x.id).shape.size()) : axis;
  return v(add_node(Kind::Mean, {x.id}, {{"axis", ax}, {"keepdim", keepdim}})[0]);
}
V Graph::reshape(V x, Shape shape) { return v(add_node(Kind::Reshape, {x.id}, {{"shape", shape_json(shape)}})[0]); }
V Graph::transpose(V x, std::vector<int> perm) { return v(add_node(Kind::Transpose, {x.id}, {{"perm", perm}})[0]); }
V Graph::transpose(V x, int a, int b) {
  const int r = static_cast<int>(value(x.id).shape.size());
  std::vector<int> perm(r);
  for (int i = 0; i < r; ++i) perm[i] = i;
  if (a < 0) a += r;
  if (b < 0) b += r;
  if (a < 0 || a >= r || b < 0 || b >= r)
    throw_input("transpose axes " + std::to_string(a) + "," + std::to_string(b) + " out of range for rank " + std::to_string(r),
                "graph '" + name_ + "'");
  std::swap(perm[a], perm[b]);
  return transpose(x, perm);
}
V Graph::broadcast(V x, Shape shape) { return v(add_node(Kind::Broadcast, {x.id}, {{"shape", shape_json(shape)}})[0]); }
V Graph::sum_to(V x, Shape shape) { return v(add_node(Kind::SumTo, {x.id}, {{"shape", shape_json(shape)}})[0]); }
V Graph::softmax(V x) { return v(add_node(Kind::Softmax, {x.id})[0]); }
V Graph::layernorm(V x, V w, V b) { return v(add_node(Kind::LayerNorm, {x.id, w.id, b.id})[0]); }
V Graph::attention(V qkv, int NH) { return v(add_node(Kind::Attention, {qkv.id}, {{"NH", NH}})[0]); }
V Graph::gather(V table, V ids) { return v(add_node(Kind::Gather, {table.id, ids.id})[0]); }
V Graph::segment_sum(V data, V ids, Dim segments) {
  json s = segments.is_const() ? json(segments.coeff) : json(segments.str());
  return v(add_node(Kind::SegmentSum, {data.id, ids.id}, {{"segments", s}})[0]);
}
V Graph::encoder(V ids, V wte, V wpe) { return v(add_node(Kind::Encoder, {ids.id, wte.id, wpe.id})[0]); }
V Graph::cross_entropy(V logits, V targets) { return v(add_node(Kind::CrossEntropy, {logits.id, targets.id})[0]); }
V Graph::linear(V x, V w, V b) {
  V y = matmul(x, w, false, true);
  return b.g ? add(y, b) : y;
}

V Graph::named(V x, const std::string& name) {
  values_.at(x.id).name = name;
  return x;
}
void Graph::mark_output(V x) { mark_output(x.id); }
void Graph::mark_output(int id) {
  value(id);
  outputs_.push_back(id);
}

int Graph::find_input(const std::string& name) const {
  for (const auto& n : nodes_)
    if (n.kind == Kind::Input && values_[n.outputs[0]].name == name) return n.outputs[0];
  return -1;
}

std::vector<int> Graph::inputs() const {
  std::vector<int> r;
  for (const auto& n : nodes_)
    if (n.kind == Kind::Input) r.push_back(n.outputs[0]);
  return r;
}

void Graph::verify() const {
  const std::string g = "graph '" + name_ + "'";
  std::set<std::string> names;
  std::vector<bool> defined(values_.size(), false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const std::string where = g + ", node " + std::to_string(i) + " (" + kind_name(n.kind) + ")";
    if (n.id != static_cast<int>(i)) throw_input("id field is " + std::to_string(n.id), where);
    std::vector<const Value*> ins;
    for (int in : n.inputs) {
      if (in < 0 || in >= static_cast<int>(values_.size())) throw_input("input value " + std::to_string(in) + " does not exist", where);
      if (!defined[in])
        throw_input("input value " + std::to_string(in) + " is used before the node that makes it (not topological)", where);
      ins.push_back(&values_[in]);
    }
    if (n.kind == Kind::Input) {
      if (!n.inputs.empty() || n.outputs.size() != 1) throw_input("an input node has no inputs and one output", where);
      const Value& v = values_.at(n.outputs[0]);
      if (v.name.empty() || !names.insert(v.name).second)
        throw_input("input name '" + v.name + "' empty or not unique", where);
      const std::string role = n.attrs.value("role", "");
      if (role != "input" && role != "param") throw_input("role must be input or param, got '" + role + "'", where);
    } else {
      std::vector<std::pair<DType, Shape>> outs;
      try {
        outs = infer(n.kind, ins, n.attrs);
      } catch (const Error& e) {
        throw_input(e.message(), where);
      }
      if (outs.size() != n.outputs.size())
        throw_input("has " + std::to_string(n.outputs.size()) + " outputs, kind makes " + std::to_string(outs.size()), where);
      for (size_t k = 0; k < outs.size(); ++k) {
        const int o = n.outputs[k];
        if (o < 0 || o >= static_cast<int>(values_.size())) throw_input("output value " + std::to_string(o) + " does not exist", where);
        const Value& v = values_[o];
        if (v.dtype != outs[k].first || v.shape != outs[k].second)
          throw_input("output " + std::to_string(k) + " (value " + std::to_string(o) + ") is " + dtype_name(v.dtype) +
                          shape_str(v.shape) + ", the shape function gives " + dtype_name(outs[k].first) + shape_str(outs[k].second),
                      where);
      }
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int o = n.outputs[k];
      if (o < 0 || o >= static_cast<int>(values_.size()) || defined[o] || values_[o].producer != n.id ||
          values_[o].index != static_cast<int>(k))
        throw_input("output value " + std::to_string(o) + " is not owned by this node", where);
      defined[o] = true;
    }
  }
  for (size_t v = 0; v < values_.size(); ++v)
    if (!defined[v]) throw_input(g + ": value " + std::to_string(v) + " has no producer", g);
  for (int o : outputs_)
    if (o < 0 || o >= static_cast<int>(values_.size())) throw_input(g + ": graph output " + std::to_string(o) + " does not exist", g);
}

Graph rebuild(const Graph& g, const std::vector<bool>& keep, const std::map<int, int>& replace, std::vector<int>* new_id_of) {
  Graph r(g.name());
  std::vector<int> nid(g.values().size(), -1);
  auto resolve = [&](int v) {
    for (int guard = 0; guard < 1 << 20; ++guard) {
      auto it = replace.find(v);
      if (it == replace.end() || it->second == v) return v;
      v = it->second;
    }
    throw_internal("rebuild: replacement cycle", "ir rebuild");
  };
  for (const Node& n : g.nodes()) {
    if (!keep.at(n.id)) continue;
    if (n.kind == Kind::Input) {
      const Value& v = g.value(n.outputs[0]);
      V x = n.attrs.value("role", "input") == "param" ? r.param(v.name, v.shape, v.dtype) : r.input(v.name, v.shape, v.dtype, v.device);
      nid[v.id] = x.id;
      continue;
    }
    std::vector<int> ins;
    for (int i : n.inputs) {
      const int m = nid[resolve(i)];
      if (m < 0) throw_internal("rebuild: node " + std::to_string(n.id) + " keeps an input that was dropped", "ir rebuild");
      ins.push_back(m);
    }
    const auto outs = r.add_node(n.kind, ins, n.attrs, g.value(n.outputs[0]).name);
    for (size_t k = 0; k < outs.size(); ++k) nid[n.outputs[k]] = outs[k];
  }
  std::vector<int> outs;
  for (int o : g.outputs()) {
    const int m = nid[resolve(o)];
    if (m < 0) throw_internal("rebuild: graph output " + std::to_string(o) + " was dropped", "ir rebuild");
    outs.push_back(m);
  }
  r.set_outputs(outs);
  for (size_t v = 0; v < g.values().size(); ++v)
    if (nid[v] < 0 && replace.count(static_cast<int>(v))) nid[v] = nid[resolve(static_cast<int>(v))];
  if (new_id_of) *new_id_of = nid;
  return r;
}

V operator+(V a, V b) { return a.g->add(a, b); }
V operator-(V a, V b) { return a.g->sub(a, b); }
V operator*(V a, V b) { return a.g->mul(a, b); }
V operator*(V a, double s) { return a.g->scale(a, s); }
V operator*(double s, V a) { return a.g->scale(a, s); }

}  // namespace rtx::ir
