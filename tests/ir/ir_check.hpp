// Shared checks of the IR tests: seeded feeds, the max-norm relative error, and the gradcheck
// (autodiff in float64 vs float64 central differences; the f32 executor vs the float64
// interpreter on the forward+backward graph).
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rtx/ir/autodiff.hpp"
#include "rtx/ir/exec.hpp"
#include "rtx/ir/graph.hpp"

namespace irtest {

using namespace rtx::ir;

/// Uniform [-1,1) for f32 inputs; i32 inputs uniform in [0, hi) where hi comes from `int_hi`
/// (input name -> exclusive bound; default 2).
inline Feeds random_feeds(const Graph& g, const Bindings& b, uint64_t seed, const std::map<std::string, int>& int_hi = {}) {
  std::mt19937_64 rng(seed);
  Feeds f;
  for (int v : g.inputs()) {
    const Value& x = g.value(v);
    std::vector<double> d(static_cast<size_t>(eval_numel(x.shape, b)));
    if (x.dtype == rtx::DType::I32) {
      const int hi = int_hi.count(x.name) ? int_hi.at(x.name) : 2;
      for (auto& e : d) e = static_cast<double>(rng() % static_cast<uint64_t>(hi));
    } else {
      std::uniform_real_distribution<double> u(-1.0, 1.0);
      // round to f32 so both executors see the same inputs
      for (auto& e : d) e = static_cast<double>(static_cast<float>(u(rng)));
    }
    f[x.name] = std::move(d);
  }
  return f;
}

/// max|a-b| / max(max|b|, floor): check.hpp's max-norm relative error.
template <class A>
double rel_err(const std::vector<A>& a, const std::vector<double>& b, double floor = 1e-6) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= num)) num = std::isnan(d) ? INFINITY : std::max(num, d);
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

/// Sum of y * R (R a fresh random input "R<tag>"), reduced to a scalar: gives every element of
/// y its own cotangent.
inline V scalarize(Graph& g, V y, const std::string& tag) {
  V z = y * g.input("R" + tag, y.shape());
  while (!z.shape().empty()) z = g.sum(z, 0);
  return z;
}

struct GradcheckResult {
  double grad_err = 0;   ///< autodiff (f64) vs central differences (f64)
  double exec_err = 0;   ///< f32 executor vs f64 interpreter over loss, y and grads
  std::string worst;     ///< what gave the largest gradient error
  std::string worst_exec;  ///< which output gave the largest executor error
};

/// Gradcheck of `loss` with respect to every f32 input except the R* cotangent inputs:
/// appends the backward to g, marks loss and the grads as outputs, compares.
/// `fd_max` elements per input are perturbed (evenly spread); h the central-difference step.
inline GradcheckResult gradcheck(Graph& g, V loss, const Bindings& b, uint64_t seed,
                                 const std::map<std::string, int>& int_hi = {}, size_t fd_max = 48, double h = 1e-5) {
  std::vector<int> wrt;
  for (int v : g.inputs())
    if (g.value(v).dtype == rtx::DType::F32 && g.value(v).name[0] != 'R') wrt.push_back(v);
  const int outputs_before = static_cast<int>(g.outputs().size());
  const Graph fwd = g;  // central differences need only the forward
  const auto br = backward(g, loss.id, wrt);
  g.mark_output(loss);
  for (int gr : br.grads) g.mark_output(gr);
  const Feeds feeds = random_feeds(g, b, seed, int_hi);
  const auto ref = interpret_f64(g, b, feeds);
  GradcheckResult res;
  for (size_t w = 0; w < wrt.size(); ++w) {
    const std::string name = g.value(wrt[w]).name;
    const std::vector<double>& x = feeds.at(name);
    std::vector<double> fd, ad;
    const size_t n = x.size(), step = std::max<size_t>(1, n / fd_max);
    for (size_t i = 0; i < n; i += step) {
      Feeds f = feeds;
      f[name][i] = x[i] + h;
      const double lp = interpret_f64(fwd, b, f)[loss.id][0];
      f[name][i] = x[i] - h;
      const double lm = interpret_f64(fwd, b, f)[loss.id][0];
      fd.push_back((lp - lm) / (2 * h));
      ad.push_back(ref[br.grads[w]][i]);
    }
    const double e = rel_err(ad, fd, 1e-3);
    if (e > res.grad_err) {
      res.grad_err = e;
      res.worst = "d/d" + name;
    }
  }
  const auto run = run_f32(g, b, feeds);
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const double e = rel_err(run.outputs[k], ref[g.outputs()[k]], 1e-3);
    if (e > res.exec_err) {
      res.exec_err = e;
      res.worst_exec = "%" + std::to_string(g.outputs()[k]) + " (" + kind_name(g.producer(g.outputs()[k]).kind) + ")";
    }
  }
  (void)outputs_before;
  return res;
}

/// The f32 executor node by node: every node's f32 output vs the float64 reference of that
/// kind evaluated on the very f32 values the executor fed it (so each kind's own error is
/// measured, without the amplification of the nodes before it). Returns the largest
/// max-norm relative error per kind (layernorm's divided by its rows' condition number).
inline std::map<std::string, double> node_errors(const Graph& g, const Bindings& b, const Feeds& feeds) {
  Graph all = g;
  std::vector<int> ids(g.values().size());
  for (size_t v = 0; v < ids.size(); ++v) ids[v] = static_cast<int>(v);
  all.set_outputs(ids);
  ExecOptions o;
  o.telemetry = false;
  const auto run = run_f32(all, b, feeds, o);
  std::map<std::string, double> worst;
  for (const Node& n : g.nodes()) {
    if (n.kind == Kind::Input) continue;
    Graph one("node");
    Feeds f;
    std::vector<int> ins;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value& v = g.value(n.inputs[i]);
      const std::string name = "in" + std::to_string(i);
      ins.push_back(one.input(name, v.shape, v.dtype).id);
      f[name] = std::vector<double>(run.outputs[v.id].begin(), run.outputs[v.id].end());
    }
    const auto outs = one.add_node(n.kind, ins, n.attrs);
    const auto ref = interpret_f64(one, b, f);
    // layernorm's f32 error grows with the rows' condition max|x| * rstd (x - mean cancels when a
    // row's values are nearly equal): its error is measured in units of that condition
    double cond = 1;
    if (n.kind == Kind::LayerNorm)
      for (size_t i = 0; i < f["in0"].size(); ++i) {
        const int64_t C = eval(g.value(n.inputs[0]).shape.back(), b);
        cond = std::max(cond, std::fabs(f["in0"][i]) * ref[outs[2]][i / static_cast<size_t>(C)]);
      }
    double& w = worst[kind_name(n.kind)];
    for (size_t k = 0; k < outs.size(); ++k) {
      const double e = rel_err(run.outputs[n.outputs[k]], ref[outs[k]], 1e-3) / cond;
      w = std::max(w, e);
      if (std::getenv("IR_DEBUG") && e > 1e-5) {
        fprintf(stderr, "node %d %s err %g\n", n.id, kind_name(n.kind), e);
        for (size_t i = 0; i < ref[outs[k]].size(); ++i) fprintf(stderr, "  %.9g vs %.9g  in0 %.9g in1 %.9g\n", run.outputs[n.outputs[k]][i], ref[outs[k]][i], f["in0"][i % f["in0"].size()], f.count("in1") ? f["in1"][i % f["in1"].size()] : 0.0);
      }
    }
  }
  return worst;
}

/// The registry's bound for a kind's f32 result (check.hpp max-norm relative error): 1e-4 for
/// the matmul class (matmul, attention and its backward: sums of many products in f32), 1e-5
/// for the rest.
inline double kind_tolerance(const std::string& kind) {
  return kind == "matmul" || kind == "attention" || kind == "attention_backward" ? 1e-4 : 1e-5;
}

}  // namespace irtest
