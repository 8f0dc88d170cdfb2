// Polygraph IR reverse-mode autodiff: one vector-Jacobian rule per forward kind.
#include "rtx/ir/autodiff.hpp"

#include <map>

#include "rtx/core/error.hpp"

namespace rtx::ir {

using nlohmann::json;

namespace {

json shape_json(const Shape& s) {
  json a = json::array();
  for (const auto& d : s) {
    if (d.is_const()) a.push_back(d.coeff);
    else a.push_back(d.str());
  }
  return a;
}

struct Rules {
  Graph& g;
  int op(Kind k, std::vector<int> in, json attrs = json::object()) { return g.add_node(k, in, std::move(attrs))[0]; }
  int reshape(int x, Shape s) { return g.value(x).shape == s ? x : op(Kind::Reshape, {x}, {{"shape", shape_json(s)}}); }
  int sum_to(int x, Shape s) { return g.value(x).shape == s ? x : op(Kind::SumTo, {x}, {{"shape", shape_json(s)}}); }
  int broadcast(int x, Shape s) { return g.value(x).shape == s ? x : op(Kind::Broadcast, {x}, {{"shape", shape_json(s)}}); }
  int scale(int x, double a) { return op(Kind::Scale, {x}, {{"alpha", a}}); }
  int mm(int a, int b, bool ta, bool tb) { return op(Kind::MatMul, {a, b}, {{"ta", ta}, {"tb", tb}}); }
  // [..., M, K] -> [prod(...)*M, K]
  int flat2(int x) {
    const Shape s = g.value(x).shape;
    if (s.size() == 2) return x;
    Shape lead(s.begin(), s.end() - 1);
    return reshape(x, {numel(lead), s.back()});
  }

  // Gradients of n's inputs (-1: none) given its outputs' gradients (-1: none).
  std::vector<int> vjp(const Node n, const std::vector<int>& gy) {
    const std::string where = "node " + std::to_string(n.id) + " (" + kind_name(n.kind) + ")";
    std::vector<int> r(n.inputs.size(), -1);
    for (size_t k = 1; k < gy.size(); ++k)
      if (gy[k] >= 0)
        throw_input(where + ": output " + std::to_string(k) + " is on the path to the loss; only output 0 has a gradient rule", where);
    const int dy = gy[0];
    auto in = [&](int i) -> Value { return g.value(n.inputs[i]); };  // a copy: adding nodes reallocates
    if (n.kind == Kind::Fused || (n.kind == Kind::MatMul && n.inputs.size() == 3))
      throw_input(where + ": a fused node has no backward rule: run the fusion passes after autodiff", where);
    switch (n.kind) {
      case Kind::Input: case Kind::Full: return r;
      case Kind::MatMul: {
        const bool ta = n.attrs.value("ta", false), tb = n.attrs.value("tb", false);
        const int a = n.inputs[0], b = n.inputs[1];
        // op(a) [..,M,K] @ op(b) [K,N] = y [..,M,N]
        r[0] = ta ? mm(b, dy, tb, true) : mm(dy, b, false, !tb);
        const int a2 = ta ? a : flat2(a), dy2 = flat2(dy);
        if (!tb) r[1] = ta ? mm(a, dy2, false, false) : mm(a2, dy2, true, false);
        else r[1] = ta ? mm(dy2, a, true, true) : mm(dy2, a2, true, false);
        return r;
      }
      case Kind::Add:
        r[0] = sum_to(dy, in(0).shape);
        r[1] = sum_to(dy, in(1).shape);
        return r;
      case Kind::Sub:
        r[0] = sum_to(dy, in(0).shape);
        r[1] = sum_to(scale(dy, -1.0), in(1).shape);
        return r;
      case Kind::Mul:
        r[0] = sum_to(op(Kind::Mul, {dy, n.inputs[1]}), in(0).shape);
        r[1] = sum_to(op(Kind::Mul, {dy, n.inputs[0]}), in(1).shape);
        return r;
      case Kind::Scale: r[0] = scale(dy, n.attrs["alpha"].get<double>()); return r;
      case Kind::Gelu: case Kind::Relu: case Kind::Silu: case Kind::Tanh: case Kind::Exp: {
        static const std::map<Kind, const char*> fn = {
            {Kind::Gelu, "gelu"}, {Kind::Relu, "relu"}, {Kind::Silu, "silu"}, {Kind::Tanh, "tanh"}, {Kind::Exp, "exp"}};
        r[0] = op(Kind::UnaryGrad, {n.inputs[0], dy}, {{"fn", fn.at(n.kind)}});
        return r;
      }
      case Kind::Sum: case Kind::Mean: {
        const int ax = n.attrs["axis"].get<int>();
        Shape keep = in(0).shape;
        const Dim R = keep[ax];
        keep[ax] = Dim(1);
        int d = broadcast(reshape(dy, keep), in(0).shape);
        if (n.kind == Kind::Mean) {
          if (!R.is_const()) throw_input(where + ": mean over the symbolic axis " + R.str() + " has no backward; use sum and scale", where);
          d = scale(d, 1.0 / static_cast<double>(R.coeff));
        }
        r[0] = d;
        return r;
      }
      case Kind::Reshape: r[0] = reshape(dy, in(0).shape); return r;
      case Kind::Transpose: {
        const auto perm = n.attrs["perm"].get<std::vector<int>>();
        std::vector<int> inv(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int>(i);
        r[0] = op(Kind::Transpose, {dy}, {{"perm", inv}});
        return r;
      }
      case Kind::Broadcast: r[0] = sum_to(dy, in(0).shape); return r;
      case Kind::SumTo: r[0] = broadcast(dy, in(0).shape); return r;
      case Kind::Softmax: r[0] = op(Kind::SoftmaxBackward, {n.outputs[0], dy}); return r;
      case Kind::LayerNorm: {
        const auto o = g.add_node(Kind::LayerNormBackward, {dy, n.inputs[0], n.inputs[1], n.outputs[1], n.outputs[2]});
        r = {o[0], o[1], o[2]};
        return r;
      }
      case Kind::Attention:
        r[0] = op(Kind::AttentionBackward, {dy, n.inputs[0], n.outputs[0], n.outputs[1]}, {{"NH", n.attrs["NH"]}});
        return r;
      case Kind::Gather: {
        const Shape ts = in(0).shape;
        const Dim E = numel(in(1).shape);
        Shape rows = {E};
        rows.insert(rows.end(), ts.begin() + 1, ts.end());
        const int ids = reshape(n.inputs[1], {E});
        const Dim S = ts[0];
        r[0] = op(Kind::SegmentSum, {reshape(dy, rows), ids}, {{"segments", S.is_const() ? json(S.coeff) : json(S.str())}});
        return r;
      }
      case Kind::SegmentSum: r[0] = op(Kind::Gather, {dy, n.inputs[1]}); return r;
      case Kind::Encoder: {
        const Dim V = in(1).shape[0], P = in(2).shape[0];
        const auto o = g.add_node(Kind::EncoderBackward, {dy, n.inputs[0]},
                                  {{"V", V.is_const() ? json(V.coeff) : json(V.str())}, {"P", P.is_const() ? json(P.coeff) : json(P.str())}});
        r[1] = o[0];
        r[2] = o[1];
        return r;
      }
      case Kind::CrossEntropy: r[0] = op(Kind::CrossEntropyBackward, {dy, n.inputs[0], n.inputs[1]}); return r;
      default:
        throw_input(where + ": kind " + kind_name(n.kind) + " has no backward rule (it is a derivative kind)", where);
    }
  }
};

}  // namespace

BackwardResult backward(Graph& g, int loss, const std::vector<int>& wrt, int seed) {
  const size_t NV = g.values().size();
  g.value(loss);
  for (int w : wrt)
    if (g.value(w).dtype != DType::F32)
      throw_input("cannot differentiate with respect to value " + std::to_string(w) + " of dtype " + dtype_name(g.value(w).dtype),
                  "ir autodiff");
  // depends[v]: v depends on some wrt; needed[v]: loss depends on v.
  std::vector<bool> depends(NV, false), needed(NV, false);
  for (int w : wrt) depends[w] = true;
  for (const Node& n : g.nodes()) {
    bool d = false;
    for (int i : n.inputs) d = d || depends[i];
    if (d)
      for (int o : n.outputs) depends[o] = true;
  }
  needed[loss] = true;
  const int last = g.value(loss).producer;
  for (int nid = last; nid >= 0; --nid) {
    const Node& n = g.node(nid);
    bool any = false;
    for (int o : n.outputs) any = any || needed[o];
    if (any)
      for (int i : n.inputs) needed[i] = true;
  }
  BackwardResult res;
  res.first_backward_node = static_cast<int>(g.nodes().size());
  Rules rules{g};
  std::map<int, int> grad;
  if (seed < 0) {
    json s = json::array();
    for (const auto& d : g.value(loss).shape) s.push_back(d.is_const() ? json(d.coeff) : json(d.str()));
    seed = g.add_node(Kind::Full, {}, {{"shape", s}, {"value", 1.0}})[0];
  } else if (g.value(seed).shape != g.value(loss).shape) {
    throw_input("seed " + shape_str(g.value(seed).shape) + " differs from the loss " + shape_str(g.value(loss).shape), "ir autodiff");
  }
  grad[loss] = seed;
  for (int nid = last; nid >= 0; --nid) {
    const Node n = g.node(nid);  // copy: adding nodes reallocates
    std::vector<int> gy;
    bool any = false;
    for (int o : n.outputs) {
      auto it = grad.find(o);
      gy.push_back(it == grad.end() ? -1 : it->second);
      any = any || it != grad.end();
    }
    if (!any || n.kind == Kind::Input) continue;
    bool wanted = false;
    for (int i : n.inputs) wanted = wanted || (depends[i] && g.value(i).dtype == DType::F32);
    if (!wanted) continue;
    const std::vector<int> gx = rules.vjp(n, gy);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int i = n.inputs[k];
      if (gx[k] < 0 || !depends[i] || !needed[i]) continue;
      auto it = grad.find(i);
      if (it == grad.end()) grad[i] = gx[k];
      else it->second = g.add_node(Kind::Add, {it->second, gx[k]})[0];  // fan-out: accumulate
    }
  }
  for (int w : wrt) {
    auto it = grad.find(w);
    if (it != grad.end()) {
      res.grads.push_back(it->second);
    } else {
      json s = json::array();
      for (const auto& d : g.value(w).shape) s.push_back(d.is_const() ? json(d.coeff) : json(d.str()));
      res.grads.push_back(g.add_node(Kind::Full, {}, {{"shape", s}, {"value", 0.0}})[0]);
    }
  }
  return res;
}

}  // namespace rtx::ir
