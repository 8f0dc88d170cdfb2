// Polygraph IR planner: schedule, liveness, best-fit buffer reuse, in-place and views,
// and the recomputation rewrite.
#include "rtx/ir/planner.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <functional>
#include <queue>

#include "rtx/core/error.hpp"

namespace rtx::ir {

std::vector<int> schedule(const Graph& g) {
  const size_t N = g.nodes().size();
  std::vector<int> indeg(N, 0);
  std::vector<std::vector<int>> succ(N);
  for (const Node& n : g.nodes())
    for (int i : n.inputs) {
      const int p = g.value(i).producer;
      succ[p].push_back(n.id);
      ++indeg[n.id];
    }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < N; ++i)
    if (indeg[i] == 0) ready.push(static_cast<int>(i));
  std::vector<int> order;
  while (!ready.empty()) {
    const int n = ready.top();
    ready.pop();
    order.push_back(n);
    for (int s : succ[n])
      if (--indeg[s] == 0) ready.push(s);
  }
  if (order.size() != N) throw_input("graph '" + g.name() + "' has a cycle", "ir schedule");
  return order;
}

namespace {

constexpr int64_t kAlign = 64;
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Best-fit allocator over one growing arena; frees merge with their neighbours.
class Arena {
 public:
  int64_t alloc(int64_t size) {
    size = align_up(std::max<int64_t>(size, 1));
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
    if (best != free_.end()) {
      const int64_t off = best->first, rest = best->second - size;
      free_.erase(best);
      if (rest > 0) free_[off + size] = rest;
      return off;
    }
    // grow: reuse a free block that ends at the top
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == top_) {
        const int64_t off = last->first;
        free_.erase(last);
        top_ = off + size;
        peak_ = std::max(peak_, top_);
        return off;
      }
    }
    const int64_t off = top_;
    top_ += size;
    peak_ = std::max(peak_, top_);
    return off;
  }
  void release(int64_t off, int64_t size) {
    size = align_up(std::max<int64_t>(size, 1));
    auto it = free_.emplace(off, size).first;
    auto nx = std::next(it);
    if (nx != free_.end() && off + size == nx->first) {
      it->second += nx->second;
      free_.erase(nx);
    }
    if (it != free_.begin()) {
      auto pv = std::prev(it);
      if (pv->first + pv->second == it->first) {
        pv->second += it->second;
        free_.erase(it);
      }
    }
  }
  int64_t peak() const { return peak_; }

 private:
  std::map<int64_t, int64_t> free_;  // offset -> size
  int64_t top_ = 0, peak_ = 0;
};

}  // namespace

Plan plan(const Graph& g, const Bindings& b, const PlanOptions& opt) {
  Plan p;
  const size_t NV = g.values().size();
  p.order = schedule(g);
  p.bytes.assign(NV, 0);
  p.offset.assign(NV, -1);
  p.shares.assign(NV, -1);
  p.ext.assign(NV, -1);
  for (const Value& v : g.values()) {
    p.bytes[v.id] = eval_numel(v.shape, b) * 4;
    p.sum_bytes += p.bytes[v.id];
  }
  // Buffers: each value points to one; aliases (in place, views) share it.
  struct Buf {
    int64_t off = 0, size = 0;
    int pending = 0;  // uses still to come, over every value in the buffer
    bool pinned = false, freed = false;
  };
  std::vector<Buf> bufs;
  std::vector<int> buf_of(NV, -1), uses(NV, 0);
  std::vector<bool> pinned(NV, false);
  for (const Node& n : g.nodes()) {
    for (int i : n.inputs) ++uses[i];
    if (n.kind == Kind::Input) pinned[n.outputs[0]] = true;
  }
  for (int o : g.outputs()) pinned[o] = true;
  std::vector<bool> external(NV, false);
  for (int v : opt.external) {
    if (v < 0 || v >= static_cast<int>(NV) ||
        !(g.value(v).producer >= 0 && (g.producer(v).kind == Kind::Input ||
                                       std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end())))
      throw_usage("external value " + std::to_string(v) + " is not a graph input or output", "ir plan of '" + g.name() + "'");
    external[v] = true;
    p.ext[v] = v;
  }
  Arena arena;
  auto new_buf = [&](int v) {
    Buf bf;
    bf.size = p.bytes[v];
    bf.off = external[v] ? -1 : arena.alloc(bf.size);
    bf.pending = uses[v];
    bf.pinned = pinned[v] || !opt.reuse;
    bufs.push_back(bf);
    buf_of[v] = static_cast<int>(bufs.size()) - 1;
  };
  auto maybe_free = [&](int bi) {
    Buf& bf = bufs[bi];
    if (bf.pending == 0 && !bf.pinned && !bf.freed && bf.off >= 0) {
      arena.release(bf.off, bf.size);
      bf.freed = true;
    }
  };
  // graph inputs first: they are bound before the run and live through it
  for (int v : g.inputs()) {
    new_buf(v);
    p.offset[v] = bufs[buf_of[v]].off;
  }
  for (int nid : p.order) {
    const Node& n = g.node(nid);
    if (n.kind == Kind::Input) {
      for (int i : n.inputs) --bufs[buf_of[i]].pending;
      continue;
    }
    // uses of each input buffer by this node
    std::map<int, int> here;
    for (int i : n.inputs) ++here[buf_of[i]];
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int o = n.outputs[k];
      int take = -1;
      if (external[o]) {
        // written by its producer into the caller's memory: no view, no in place
      } else if (opt.inplace && k == 0 && n.kind == Kind::Reshape) {
        take = n.inputs[0];
        ++p.views;
      } else if (opt.inplace && k == 0 && is_elementwise(n.kind) && n.kind != Kind::UnaryGrad) {
        for (int i : n.inputs) {
          const Value &vi = g.value(i), &vo = g.value(o);
          const Buf& bf = bufs[buf_of[i]];
          if (vi.dtype == vo.dtype && vi.shape == vo.shape && !bf.pinned && bf.size == p.bytes[o] && bf.pending == here[buf_of[i]]) {
            take = i;
            ++p.inplace;
            break;
          }
        }
      }
      if (take >= 0) {
        const int bi = buf_of[take];
        buf_of[o] = bi;
        bufs[bi].pending += uses[o];
        if (pinned[o]) bufs[bi].pinned = true;
        p.shares[o] = take;
        p.ext[o] = p.ext[take];
      } else {
        new_buf(o);
      }
      p.offset[o] = bufs[buf_of[o]].off;
    }
    for (int i : n.inputs) {
      --bufs[buf_of[i]].pending;
      maybe_free(buf_of[i]);
    }
    for (int o : n.outputs) maybe_free(buf_of[o]);  // values nobody reads
  }
  p.arena_bytes = arena.peak();
  return p;
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::None;
  if (s == "elementwise") return Recompute::Elementwise;
  throw_usage("unknown recompute policy '" + s + "' (expected none or elementwise)", "ir planner");
}

Graph apply_recompute(const Graph& g, int first_backward_node, Recompute policy) {
  std::vector<bool> keep(g.nodes().size(), true);
  if (policy == Recompute::None) return rebuild(g, keep, {});
  // Replay the nodes; before each backward node, clone the forward elementwise producers of its
  // inputs (once each) and read the clones.
  Graph r(g.name());
  std::vector<int> nid(g.values().size(), -1), clone(g.values().size(), -1);
  std::vector<bool> cloneable(g.values().size(), false);
  for (const Node& n : g.nodes())
    if (n.id < first_backward_node && is_elementwise(n.kind))
      for (int o : n.outputs) cloneable[o] = true;
  std::vector<bool> is_graph_out(g.values().size(), false);
  for (int o : g.outputs()) is_graph_out[o] = true;
  std::function<int(int)> recompute = [&](int v) -> int {
    if (!cloneable[v] || is_graph_out[v]) return nid[v];
    if (clone[v] >= 0) return clone[v];
    const Node& p = g.producer(v);
    std::vector<int> ins;
    for (int i : p.inputs) ins.push_back(nid[i]);
    const auto outs = r.add_node(p.kind, ins, p.attrs, g.value(v).name.empty() ? "" : g.value(v).name + ".recompute");
    clone[v] = outs[0];
    return clone[v];
  };
  for (const Node& n : g.nodes()) {
    if (n.kind == Kind::Input) {
      const Value& v = g.value(n.outputs[0]);
      V x = n.attrs.value("role", "input") == "param" ? r.param(v.name, v.shape, v.dtype) : r.input(v.name, v.shape, v.dtype, v.device);
      nid[v.id] = x.id;
      continue;
    }
    std::vector<int> ins;
    for (int i : n.inputs) ins.push_back(n.id >= first_backward_node ? recompute(i) : nid[i]);
    const auto outs = r.add_node(n.kind, ins, n.attrs, g.value(n.outputs[0]).name);
    for (size_t k = 0; k < outs.size(); ++k) nid[n.outputs[k]] = outs[k];
  }
  std::vector<int> outs;
  for (int o : g.outputs()) outs.push_back(nid[o]);
  r.set_outputs(outs);
  return r;
}

}  // namespace rtx::ir
