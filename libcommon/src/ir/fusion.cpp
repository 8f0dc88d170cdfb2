// Polygraph IR fusion: the fused node's program (parse/print) and the fusion passes
// (fuse_elementwise, fuse_matmul_bias) with their legality rules and refusal log.
// The fused kernels themselves are in exec.cpp (run_fused_f32 / the f64 reference).
#include "rtx/ir/fusion.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <set>

#include "rtx/core/error.hpp"

namespace rtx::ir {

using nlohmann::json;

namespace {

bool step_kind(Kind k) {
  switch (k) {
    case Kind::Add: case Kind::Sub: case Kind::Mul: case Kind::Scale: case Kind::Gelu: case Kind::Relu: case Kind::Silu:
    case Kind::Tanh: case Kind::Exp:
      return true;
    default:
      return false;
  }
}
size_t arity(Kind k) {
  if (k == Kind::LayerNorm) return 3;
  return k == Kind::Add || k == Kind::Sub || k == Kind::Mul ? 2 : 1;
}

std::string pattern_of(const std::vector<FusedStep>& steps) {
  std::string s;
  for (const FusedStep& st : steps) s += (s.empty() ? "" : ".") + std::string(kind_name(st.kind));
  return s;
}

}  // namespace

std::string parse_fused(const json& a, size_t n_inputs, FusedProgram& p) {
  p = FusedProgram{};
  if (!a.is_object() || !a.contains("steps") || !a["steps"].is_array() || a["steps"].empty())
    return "attribute 'steps' missing or not a non-empty array";
  if (!a.contains("emit") || !a["emit"].is_array()) return "attribute 'emit' missing or not an array";
  const json& steps = a["steps"];
  for (size_t k = 0; k < steps.size(); ++k) {
    const json& s = steps[k];
    const std::string at = "step " + std::to_string(k);
    if (!s.is_object() || !s.contains("kind") || !s["kind"].is_string()) return at + ": 'kind' missing";
    FusedStep st;
    try {
      st.kind = parse_kind(s["kind"].get<std::string>());
    } catch (const Error&) {
      return at + ": unknown kind '" + s["kind"].get<std::string>() + "'";
    }
    if (!step_kind(st.kind) && st.kind != Kind::LayerNorm)
      return at + ": kind '" + kind_name(st.kind) + "' cannot be a fused step (add, sub, mul, scale, gelu, relu, silu, tanh, exp, layernorm last)";
    if (st.kind == Kind::LayerNorm && k + 1 != steps.size()) return at + ": layernorm must be the last step";
    if (!s.contains("args") || !s["args"].is_array() || s["args"].size() != arity(st.kind))
      return at + " (" + kind_name(st.kind) + "): 'args' must list " + std::to_string(arity(st.kind)) + " operands";
    for (const json& x : s["args"]) {
      const std::string r = x.is_string() ? x.get<std::string>() : "";
      if (r.size() < 2 || (r[0] != 'i' && r[0] != 's') || !std::all_of(r.begin() + 1, r.end(), ::isdigit))
        return at + ": operand " + x.dump() + " is not \"iK\" (input K) or \"sK\" (step K)";
      const long v = std::stol(r.substr(1));
      if (r[0] == 'i' ? v >= static_cast<long>(n_inputs) : v >= static_cast<long>(k))
        return at + ": operand \"" + r + "\" out of range (" + std::to_string(n_inputs) + " inputs, " + std::to_string(k) + " earlier steps)";
      st.args.push_back(r[0] == 'i' ? static_cast<int>(v) : -static_cast<int>(v) - 1);
    }
    if (st.kind == Kind::Scale) {
      if (!s.contains("alpha") || !s["alpha"].is_number()) return at + " (scale): 'alpha' missing";
      st.alpha = s["alpha"].get<double>();
    }
    p.steps.push_back(st);
  }
  std::set<int> seen;
  for (const json& e : a["emit"]) {
    if (!e.is_number_integer()) return "emit entries must be step indices";
    const int k = e.get<int>();
    if (k < 0 || k >= static_cast<int>(p.steps.size()) || p.steps[static_cast<size_t>(k)].kind == Kind::LayerNorm || !seen.insert(k).second)
      return "emit entry " + std::to_string(k) + " is out of range, the layernorm step, or repeated";
    p.emit.push_back(k);
  }
  p.pattern = pattern_of(p.steps);
  if (a.contains("pattern") && (!a["pattern"].is_string() || a["pattern"].get<std::string>() != p.pattern))
    return "attribute 'pattern' " + a["pattern"].dump() + " is not the steps' kinds \"" + p.pattern + "\"";
  return "";
}

json fused_attrs(const FusedProgram& p) {
  json steps = json::array();
  for (const FusedStep& st : p.steps) {
    json args = json::array();
    for (int x : st.args) args.push_back(x >= 0 ? "i" + std::to_string(x) : "s" + std::to_string(-x - 1));
    json s = {{"kind", kind_name(st.kind)}, {"args", args}};
    if (st.kind == Kind::Scale) s["alpha"] = st.alpha;
    steps.push_back(s);
  }
  return json{{"pattern", pattern_of(p.steps)}, {"steps", steps}, {"emit", p.emit}};
}

int64_t fused_tile_rows(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

namespace {

/// A rewrite plan: groups of node ids (each becomes one node, built by `make`), the rest copied.
/// Emits units in a topological order (lowest first node id among the ready ones), so a group
/// lands after every producer of its inputs and before every reader of its outputs.
struct Group {
  std::vector<int> nodes;                   // in id order
  std::function<std::vector<int>(Graph& r, const std::vector<int>& nid)> make;  // new ids of `outs`
  std::vector<int> outs;                    // old value ids the new node's outputs stand for
};

Graph rewrite(const Graph& g, const std::vector<Group>& groups) {
  const size_t NN = g.nodes().size();
  std::vector<int> unit(NN, -1);  // node -> group index, -1: itself
  for (size_t k = 0; k < groups.size(); ++k)
    for (int n : groups[k].nodes) unit[static_cast<size_t>(n)] = static_cast<int>(k);
  // unit ids: nodes not grouped are unit (n), groups are NN + k; key = lowest node id
  auto uid = [&](int n) { return unit[static_cast<size_t>(n)] < 0 ? n : static_cast<int>(NN) + unit[static_cast<size_t>(n)]; };
  const size_t NU = NN + groups.size();
  std::vector<int> indeg(NU, 0), key(NU, INT32_MAX);
  std::vector<std::set<int>> succ(NU);
  std::vector<bool> live(NU, false);
  for (const Node& n : g.nodes()) {
    const int u = uid(n.id);
    live[static_cast<size_t>(u)] = true;
    key[static_cast<size_t>(u)] = std::min(key[static_cast<size_t>(u)], n.id);
    for (int i : n.inputs) {
      const int pu = uid(g.value(i).producer);
      if (pu != u && succ[static_cast<size_t>(pu)].insert(u).second) ++indeg[static_cast<size_t>(u)];
    }
  }
  using QE = std::pair<int, int>;  // key, unit
  std::priority_queue<QE, std::vector<QE>, std::greater<QE>> ready;
  for (size_t u = 0; u < NU; ++u)
    if (live[u] && indeg[u] == 0) ready.push({key[u], static_cast<int>(u)});
  Graph r(g.name());
  std::vector<int> nid(g.values().size(), -1);
  size_t done = 0;
  while (!ready.empty()) {
    const int u = ready.top().second;
    ready.pop();
    ++done;
    if (u < static_cast<int>(NN)) {
      const Node& n = g.node(u);
      if (n.kind == Kind::Input) {
        const Value& v = g.value(n.outputs[0]);
        V x = n.attrs.value("role", "input") == "param" ? r.param(v.name, v.shape, v.dtype) : r.input(v.name, v.shape, v.dtype, v.device);
        nid[static_cast<size_t>(v.id)] = x.id;
      } else {
        std::vector<int> ins;
        for (int i : n.inputs) ins.push_back(nid[static_cast<size_t>(i)]);
        const auto outs = r.add_node(n.kind, ins, n.attrs, g.value(n.outputs[0]).name);
        for (size_t k = 0; k < outs.size(); ++k) nid[static_cast<size_t>(n.outputs[k])] = outs[k];
      }
    } else {
      const Group& gr = groups[static_cast<size_t>(u) - NN];
      const auto outs = gr.make(r, nid);
      for (size_t k = 0; k < outs.size(); ++k) nid[static_cast<size_t>(gr.outs[k])] = outs[k];
    }
    for (int s : succ[static_cast<size_t>(u)])
      if (--indeg[static_cast<size_t>(s)] == 0) ready.push({key[static_cast<size_t>(s)], s});
  }
  size_t units = 0;
  for (size_t u = 0; u < NU; ++u) units += live[u] ? 1 : 0;
  if (done != units) throw_internal("fusion made a cycle (a legality check let a non-convex group through)", "ir fusion, graph '" + g.name() + "'");
  std::vector<int> outs;
  for (int o : g.outputs()) {
    if (nid[static_cast<size_t>(o)] < 0) throw_internal("fusion dropped output value " + std::to_string(o), "ir fusion");
    outs.push_back(nid[static_cast<size_t>(o)]);
  }
  r.set_outputs(outs);
  return r;
}

/// Readers of each value, and whether it is a graph output.
struct Uses {
  std::vector<std::vector<int>> readers;
  std::vector<bool> output;
  explicit Uses(const Graph& g) : readers(g.values().size()), output(g.values().size(), false) {
    for (const Node& n : g.nodes())
      for (int i : n.inputs) readers[static_cast<size_t>(i)].push_back(n.id);
    for (int o : g.outputs()) output[static_cast<size_t>(o)] = true;
  }
};

/// Does value v depend on any node in `group` (ids; all >= lo)? Walks producers back, only
/// through nodes with id > lo (earlier nodes cannot depend on the group: topological ids).
bool depends_on(const Graph& g, int v, const std::set<int>& group, int lo) {
  std::vector<int> stack{g.value(v).producer};
  std::set<int> seen;
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (group.count(n)) return true;
    if (n <= lo || !seen.insert(n).second) continue;
    for (int i : g.node(n).inputs) stack.push_back(g.value(i).producer);
  }
  return false;
}

bool is_row_of(const Shape& s, const Shape& S) { return s.size() == 1 && !S.empty() && s[0] == S.back(); }

}  // namespace

FusionVerdict fusion_legality(const Graph& g, std::vector<int> group) {
  auto no = [](const std::string& rule, const std::string& why) { return FusionVerdict{false, rule, why}; };
  if (group.size() < 2) return no("size", "a group needs at least 2 nodes");
  std::sort(group.begin(), group.end());
  if (std::adjacent_find(group.begin(), group.end()) != group.end()) return no("size", "a node is listed twice");
  for (int id : group)
    if (id < 0 || id >= static_cast<int>(g.nodes().size())) return no("node", "node " + std::to_string(id) + " does not exist");
  const std::set<int> members(group.begin(), group.end());
  const Node& first = g.node(group.front());
  const Shape S = g.value(first.outputs[0]).shape;
  if (S.empty()) return no("shape", "node " + std::to_string(first.id) + " makes a scalar: nothing to tile");
  for (size_t k = 0; k < group.size(); ++k) {
    const Node& n = g.node(group[k]);
    const std::string at = "node " + std::to_string(n.id) + " (" + kind_name(n.kind) + ")";
    const bool last = k + 1 == group.size();
    if (!step_kind(n.kind) && !(n.kind == Kind::LayerNorm && last))
      return no("kind", at + " is not an elementwise step (a layernorm only as the last): it keeps its own kernel, since fusing a "
                             "reduction or row op would change its reduction order");
    if (n.kind != Kind::LayerNorm && g.value(n.outputs[0]).shape != S)
      return no("shape", at + " makes " + shape_str(g.value(n.outputs[0]).shape) + ", not the group's " + shape_str(S) + " (a broadcast)");
    bool reads_group = k == 0;
    for (size_t a = 0; a < n.inputs.size(); ++a) {
      const int i = n.inputs[a];
      const Value& v = g.value(i);
      if (v.dtype != DType::F32) return no("dtype", at + ": operand %" + std::to_string(i) + " is not f32");
      if (members.count(v.producer)) {
        reads_group = true;
        if (n.kind == Kind::LayerNorm && a > 0) return no("shape", at + ": w or b comes from the group");
        continue;
      }
      const bool want_row = n.kind == Kind::LayerNorm && a > 0;
      if (want_row ? !is_row_of(v.shape, S) : !(v.shape == S || is_row_of(v.shape, S)))
        return no("shape", at + ": operand %" + std::to_string(i) + " " + shape_str(v.shape) + " is neither the group's shape " + shape_str(S) +
                               " nor a row");
      if (depends_on(g, i, members, group.front()))
        return no("convexity", at + ": operand %" + std::to_string(i) + " is computed from the group by a node outside it: the fused node "
                                    "would read it before it is written (a cycle)");
    }
    if (n.kind == Kind::LayerNorm && g.value(n.inputs[0]).shape != S) return no("shape", at + ": x is not the group's shape");
    if (!reads_group) return no("chain", at + " reads no value of the group: not a chain");
  }
  return FusionVerdict{true, "", ""};
}

namespace {

json refusal(const Node& n, const std::string& rule, const std::string& why) {
  return json{{"node", n.id}, {"kind", kind_name(n.kind)}, {"rule", rule}, {"reason", why}};
}

class FuseElementwise : public Pass {
 public:
  explicit FuseElementwise(const json& o) {
    if (!o.is_object()) throw_input("fuse_elementwise options must be an object", "ir passes");
    for (auto it = o.begin(); it != o.end(); ++it)
      if (it.key() != "max_steps") throw_input("fuse_elementwise: unknown option '" + it.key() + "' (known: max_steps)", "ir passes");
    if (o.contains("max_steps")) {
      if (!o["max_steps"].is_number_integer() || o["max_steps"].get<int>() < 2)
        throw_input("fuse_elementwise: max_steps must be an integer >= 2", "ir passes");
      max_steps_ = o["max_steps"].get<int>();
    }
  }
  std::string name() const override { return "fuse_elementwise"; }
  std::string illegal(const Graph&) const override { return ""; }
  json details() const override { return details_; }

  bool run(Graph& g) const override {
    details_ = json{{"groups", json::array()}, {"refused", json::array()}, {"refused_count", 0}};
    const Uses use(g);
    std::vector<bool> taken(g.nodes().size(), false);
    std::vector<Made> groups;
    int refused = 0;
    auto refuse = [&](const Node& n, const std::string& rule, const std::string& why) {
      if (refused++ < 64) details_["refused"].push_back(refusal(n, rule, why));
    };
    for (const Node& start : g.nodes()) {
      if (taken[static_cast<size_t>(start.id)] || !step_kind(start.kind)) continue;
      const Shape S = g.value(start.outputs[0]).shape;
      // the start node itself must be a legal first step
      if (S.empty() || g.value(start.outputs[0]).dtype != DType::F32) continue;
      bool ok = true;
      for (int i : start.inputs) ok = ok && g.value(i).dtype == DType::F32 && (g.value(i).shape == S || is_row_of(g.value(i).shape, S));
      if (!ok) continue;  // a broadcasting node is not a chain start (refused below when a chain reaches it)
      std::vector<int> chain{start.id};
      std::set<int> members{start.id};
      bool ended = false;  // a layernorm closes the chain
      while (!ended) {
        // the earliest reader of a chain value that is not in the chain
        int next = -1;
        for (int m : chain)
          for (int o : g.node(m).outputs)
            for (int rd : use.readers[static_cast<size_t>(o)])
              if (!members.count(rd) && (next < 0 || rd < next)) next = rd;
        if (next < 0) break;
        const Node& c = g.node(next);
        if (taken[static_cast<size_t>(c.id)]) break;
        if (!step_kind(c.kind) && c.kind != Kind::LayerNorm &&
            (c.kind == Kind::UnaryGrad || c.kind == Kind::LayerNormBackward || c.kind == Kind::SumTo))
          break;  // backward readers of a forward chain: not steps, nothing to report
        std::vector<int> cand = chain;
        cand.push_back(c.id);
        if (static_cast<int>(cand.size()) > max_steps_) {
          refuse(c, "size", "the chain already has max_steps " + std::to_string(max_steps_) + " steps");
          break;
        }
        const FusionVerdict v = fusion_legality(g, cand);
        if (!v.legal) {
          refuse(c, v.rule, v.reason);
          break;
        }
        chain.push_back(c.id);
        members.insert(c.id);
        ended = c.kind == Kind::LayerNorm;
      }
      if (chain.size() < 2) continue;
      std::sort(chain.begin(), chain.end());
      for (int m : chain) taken[static_cast<size_t>(m)] = true;
      groups.push_back(make_group(g, use, chain));
      details_["groups"].push_back(json{{"nodes", chain}, {"pattern", groups.back().pattern}});
    }
    details_["refused_count"] = refused;
    if (groups.empty()) return false;
    std::vector<Group> gs;
    for (auto& x : groups) gs.push_back(x.group);
    g = rewrite(g, gs);
    return true;
  }

 private:
  struct Made {
    Group group;
    std::string pattern;
  };
  static Made make_group(const Graph& g, const Uses& use, const std::vector<int>& chain) {
    FusedProgram p;
    std::vector<int> inputs;  // old value ids
    std::map<int, int> step_of;  // old value id -> step index
    const std::set<int> members(chain.begin(), chain.end());
    // input 0 must have the chain's shape: the first full-shaped operand of the first step
    const Shape S = g.value(g.node(chain.front()).outputs[0]).shape;
    for (int i : g.node(chain.front()).inputs)
      if (g.value(i).shape == S) {
        inputs.push_back(i);
        break;
      }
    auto arg = [&](int v) {
      auto it = step_of.find(v);
      if (it != step_of.end()) return -it->second - 1;
      auto f = std::find(inputs.begin(), inputs.end(), v);
      if (f != inputs.end()) return static_cast<int>(f - inputs.begin());
      inputs.push_back(v);
      return static_cast<int>(inputs.size()) - 1;
    };
    std::vector<int> outs;
    for (int m : chain) {
      const Node& n = g.node(m);
      FusedStep st;
      st.kind = n.kind;
      for (int i : n.inputs) st.args.push_back(arg(i));
      if (n.kind == Kind::Scale) st.alpha = n.attrs["alpha"].get<double>();
      step_of[n.outputs[0]] = static_cast<int>(p.steps.size());
      p.steps.push_back(st);
    }
    // emit: chain values read outside it or graph outputs (the last elementwise step always)
    for (size_t k = 0; k < chain.size(); ++k) {
      const Node& n = g.node(chain[k]);
      if (n.kind == Kind::LayerNorm) continue;
      const int v = n.outputs[0];
      bool outside = use.output[static_cast<size_t>(v)] || (k + 1 == chain.size());
      for (int rd : use.readers[static_cast<size_t>(v)]) outside = outside || !members.count(rd);
      if (outside) {
        p.emit.push_back(static_cast<int>(k));
        outs.push_back(v);
      }
    }
    if (p.layernorm_tail())
      for (int o : g.node(chain.back()).outputs) outs.push_back(o);
    const json attrs = fused_attrs(p);
    std::string name = g.value(outs.front()).name;
    Made m;
    m.pattern = attrs["pattern"];
    m.group.nodes = chain;
    m.group.outs = outs;
    m.group.make = [inputs, attrs, name](Graph& r, const std::vector<int>& nid) {
      std::vector<int> ins;
      for (int i : inputs) ins.push_back(nid[static_cast<size_t>(i)]);
      return r.add_node(Kind::Fused, ins, attrs, name);
    };
    return m;
  }

  int max_steps_ = 6;
  mutable json details_ = json::object();
};

class FuseMatmulBias : public Pass {
 public:
  std::string name() const override { return "fuse_matmul_bias"; }
  std::string illegal(const Graph&) const override { return ""; }
  json details() const override { return details_; }
  bool run(Graph& g) const override {
    details_ = json{{"fused", json::array()}, {"refused", json::array()}};
    const Uses use(g);
    std::vector<Group> groups;
    for (const Node& n : g.nodes()) {
      if (n.kind != Kind::Add) continue;
      for (int side = 0; side < 2; ++side) {
        const int mm_v = n.inputs[static_cast<size_t>(side)], bias = n.inputs[static_cast<size_t>(1 - side)];
        const Node& mm = g.producer(mm_v);
        if (mm.kind != Kind::MatMul) continue;
        const Shape& out = g.value(mm_v).shape;
        const Shape& bs = g.value(bias).shape;
        auto refuse = [&](const std::string& rule, const std::string& why) {
          details_["refused"].push_back(json{{"node", n.id}, {"matmul", mm.id}, {"rule", rule}, {"reason", why}});
        };
        if (bs.size() != 1 || bs[0] != out.back() || g.value(bias).dtype != DType::F32) {
          if (bs.size() == 1) refuse("shape", "the other operand " + shape_str(bs) + " is not a row [" + out.back().str() + "]");
          continue;
        }
        if (mm.inputs.size() == 3) {
          refuse("bias", "the matmul already has a bias");
          continue;
        }
        if (use.readers[static_cast<size_t>(mm_v)].size() != 1 || use.output[static_cast<size_t>(mm_v)]) {
          refuse("readers", "the matmul's output is also read elsewhere (or is a graph output): it must exist without the bias");
          continue;
        }
        if (g.value(n.outputs[0]).shape != out) {
          refuse("shape", "the add broadcasts beyond the matmul's output");
          continue;
        }
        Group gr;
        gr.nodes = {mm.id, n.id};
        gr.outs = {n.outputs[0]};
        const std::vector<int> ins = {mm.inputs[0], mm.inputs[1], bias};
        const json attrs = mm.attrs;
        const std::string name = g.value(n.outputs[0]).name;
        gr.make = [ins, attrs, name](Graph& r, const std::vector<int>& nid) {
          return r.add_node(Kind::MatMul, {nid[static_cast<size_t>(ins[0])], nid[static_cast<size_t>(ins[1])], nid[static_cast<size_t>(ins[2])]}, attrs, name);
        };
        details_["fused"].push_back(json{{"matmul", mm.id}, {"add", n.id}});
        groups.push_back(gr);
        break;
      }
    }
    if (groups.empty()) return false;
    g = rewrite(g, groups);
    return true;
  }

 private:
  mutable json details_ = json::object();
};

}  // namespace

std::unique_ptr<Pass> make_fuse_elementwise_pass(const json& options) { return std::make_unique<FuseElementwise>(options); }
std::unique_ptr<Pass> make_fuse_matmul_bias_pass() { return std::make_unique<FuseMatmulBias>(); }

}  // namespace rtx::ir
