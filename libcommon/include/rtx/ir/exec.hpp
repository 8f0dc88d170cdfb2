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
#include "rtx/kernels/matmul.hpp"

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
  kernels::MatmulParams matmul{};  ///< passed to every registry matmul call (defaults: blocked, ISA defaults)
};

/// What run_f32 returns: the graph outputs (in outputs() order, i32 outputs converted) and the plan.
struct ExecResult {
  std::vector<std::vector<float>> outputs;
  Plan plan;
};

/// Run `g` on the CPU in f32. Errors as interpret_f64.
ExecResult run_f32(const Graph& g, const Bindings& b, const Feeds& feeds, const ExecOptions& opt = {});

/// A graph prepared to run many times at one binding (what run_f32 does once): the plan is made
/// and the arena allocated once, shapes are evaluated once, and external values (opt.plan.external:
/// graph inputs and outputs) live in the caller's memory, bound with bind(), so parameters and
/// gradients are neither copied in nor out. Other inputs are written through data() before a run;
/// outputs are read through data() after it. The schedule can be run in parts (run(begin, end),
/// positions in plan().order): e.g. a training step's forward, then, after the host has looked
/// at the loss, its backward. Same bits as run_f32 for the same graph, inputs and threads.
/// Not thread-safe; the graph must outlive the executor.
class Executor {
 public:
  /// Error(Input) on an unbound dim, Error(Usage) on a bad external id, Error(Environment) when
  /// the arena cannot be allocated.
  Executor(const Graph& g, const Bindings& b, const ExecOptions& opt = {});
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor();
  /// Bind external value `v` to `p` (eval_numel of its shape floats or int32s, 64-byte alignment
  /// not required). Error(Usage) when `v` is not external or `p` is null.
  void bind(int v, float* p);
  /// The value's memory (arena or bound). Valid until the executor dies (or, external, rebound).
  /// An intermediate's contents are only meaningful until the plan reuses its bytes.
  float* data(int v);
  /// Run schedule positions [begin, end) (default: all). Input nodes are skipped (their data is
  /// already in place). Error(Usage) when an external value used by these nodes is unbound, or
  /// the range is out of [0, order size].
  void run(size_t begin = 0, size_t end = SIZE_MAX);
  /// Position in plan().order of node `n` (the first position holding a node id >= n when `n`
  /// itself is absent): where a part of the graph starts.
  size_t position_of(int n) const;
  const Plan& plan() const { return plan_; }
  const Graph& graph() const { return g_; }

 private:
  const Graph& g_;
  ExecOptions opt_;
  Plan plan_;
  float* arena_ = nullptr;
  std::vector<float*> bound_;                   // per value id (external values)
  std::vector<std::vector<int64_t>> shape_;     // per value id, evaluated
  std::vector<const float*> in_;                // scratch per node
  std::vector<float*> out_;
  std::vector<std::vector<int64_t>> is_, os_;
  bool captured_ = false;
};

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
