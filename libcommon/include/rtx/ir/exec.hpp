// Polygraph IR executors: the float64 interpreter (the oracle: plain loops, every value in
// double) and the CPU f32 executor, which runs each node with the registry's CPU kernel where
// the registry has one (matmul, gelu, layernorm, softmax, attention, encoder, crossentropy,
// residual add: the kernels the hand-written GPT-2 calls) and plain loops otherwise, over a
// planned arena. Deterministic: same graph, feeds, bindings and threads give the same bits.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rtx/ir/graph.hpp"
#include "rtx/ir/planner.hpp"

namespace rtx::ir {

/// Input values by input name, row-major; i32 inputs as exact integers in doubles. Every
/// input must be fed with exactly its element count (Error(Input) naming the input).
using Feeds = std::map<std::string, std::vector<double>>;

/// Run `g` in float64: returns every value's elements, indexed by value id (i32 values as
/// doubles). Error(Input) on a missing/short feed, an unbound dim or an index out of range
/// (naming the node).
std::vector<std::vector<double>> interpret_f64(const Graph& g, const Bindings& b, const Feeds& feeds);

/// Executor options: the plan's options; whether to publish telemetry (graph.capture once per
/// run, a span per node, "ir.<kind>", with the node id and output shape).
struct ExecOptions {
  PlanOptions plan;
  bool telemetry = true;
};

/// What run_f32 returns: the graph outputs (in outputs() order, i32 outputs converted) and the plan.
struct ExecResult {
  std::vector<std::vector<float>> outputs;
  Plan plan;
};

/// Run `g` on the CPU in f32. Errors as interpret_f64.
ExecResult run_f32(const Graph& g, const Bindings& b, const Feeds& feeds, const ExecOptions& opt = {});

/// A kind's f32 implementation, for the hook below: input and output pointers (i32 values as
/// int32_t* reinterpreted from float*), shapes evaluated. Outputs are zero-filled before the call.
struct F32Args {
  const Node* node = nullptr;
  std::vector<const float*> in;
  std::vector<float*> out;
  std::vector<std::vector<int64_t>> in_shape, out_shape;
};
using F32Kernel = std::function<void(const F32Args&)>;
/// Replace the f32 executor's implementation of `kind` (nullptr restores the built-in): the hook
/// through which registry ops added later (e.g. sparse segment_sum/gather kernels for graph
/// learning) serve an existing node kind. Not thread-safe against running executors.
void set_f32_kernel(Kind kind, F32Kernel k);

}  // namespace rtx::ir
