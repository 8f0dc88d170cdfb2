// Polygraph IR planner: a topological schedule, buffer liveness and reuse in one arena,
// in-place execution where legal, and the activation-recomputation policy knob.
// Not an executor: exec.hpp runs a graph with a Plan.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rtx/ir/graph.hpp"

namespace rtx::ir {

/// What the planner may do. reuse: a buffer is freed after its value's last use and its bytes
/// reused (best fit); inplace: an elementwise node writes over an input whose buffer has no
/// later use (same dtype and size, not a graph input or output) and a reshape aliases its
/// input (a view, no copy).
/// external: value ids (graph inputs or graph outputs) whose memory the caller provides
/// (Executor::bind): they get no arena bytes, nothing is written over them in place, and an
/// external output is never a view (its producer writes it).
struct PlanOptions {
  bool reuse = true;
  bool inplace = true;
  std::vector<int> external;
};

/// A memory plan at one binding of the symbolic dims. Offsets are in bytes into one arena,
/// 64-byte aligned. Graph inputs and outputs live for the whole run.
struct Plan {
  std::vector<int> order;        ///< node ids in execution order
  std::vector<int64_t> bytes;    ///< per value id: elements * 4 (f32 and i32)
  std::vector<int64_t> offset;   ///< per value id: byte offset into the arena
  std::vector<int> shares;       ///< per value id: the input value whose buffer it took (in place or view), -1
  std::vector<int> ext;          ///< per value id: the external value whose memory it is (itself or a view of it), -1: arena
  int64_t arena_bytes = 0;       ///< peak bytes: the arena size
  int64_t sum_bytes = 0;         ///< sum of every value's bytes (the plan without reuse)
  int inplace = 0;               ///< elementwise nodes run in place
  int views = 0;                 ///< reshapes planned as views
};

/// Kahn's algorithm over the data dependencies, lowest node id first among the ready nodes
/// (so a graph built in program order runs in program order). Error(Input) on a cycle.
std::vector<int> schedule(const Graph& g);

/// Plan `g` at `b` (every symbol its dims use must be bound: Error(Input) otherwise; an
/// external id that is no graph input or output: Error(Usage)). arena_bytes excludes external
/// values; sum_bytes counts every value.
Plan plan(const Graph& g, const Bindings& b, const PlanOptions& opt = {});

/// Activation recomputation policy: None keeps every forward value the backward reads;
/// Elementwise recomputes the outputs of forward elementwise nodes (gelu, add, scale, ...)
/// right before their first use by the backward (node id >= first_backward_node), so those
/// activations die at their last forward use. Trades FLOPs for peak memory; results are the
/// same bits (the same kernel recomputes the same values).
enum class Recompute { None, Elementwise };
/// "none" | "elementwise"; Error(Usage) otherwise.
Recompute parse_recompute(const std::string& s);
/// `g` rewritten under `policy` (None: a copy). Outputs keep their meaning.
Graph apply_recompute(const Graph& g, int first_backward_node, Recompute policy);

}  // namespace rtx::ir
