// Polygraph IR fusion (issue 39): the `fused` node kind (a chain of elementwise steps, optionally
// ending in a layernorm, run as one kernel over row tiles) and the passes that make fused nodes:
// fuse_elementwise (bias + GELU, residual add + layernorm input, scale chains, ...) and
// fuse_matmul_bias (a bias add folded into the matmul's epilogue). Each pass has an explicit
// legality rule and reports every refusal with its reason (Pass::details, in the
// `compiler.pass` event). docs/ir.md "Fusion" has the rules and why the kernels are composed
// ahead of time.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/ir/graph.hpp"
#include "rtx/ir/passes.hpp"

namespace rtx::ir {

/// One step of a fused chain: kind add|sub|mul (two args), scale (one arg, alpha), gelu|relu|
/// silu|tanh|exp (one arg), or layernorm (x, w, b; last step only). An arg >= 0 is the fused
/// node's input of that index; an arg < 0 is the value of step (-arg - 1), an earlier step.
struct FusedStep {
  Kind kind = Kind::Add;
  std::vector<int> args;
  double alpha = 1.0;
};

/// A fused node's program (its attrs, parsed). Outputs of the node: the emitted steps' values
/// in `emit` order (each of the chain's shape S = input 0's shape), then, when the chain ends
/// in a layernorm, its y [S], mean [S without the last dim] and rstd (the same).
struct FusedProgram {
  std::string pattern;  ///< the step kinds joined by '.', e.g. "add.gelu", "add.layernorm"
  std::vector<FusedStep> steps;
  std::vector<int> emit;  ///< step indices whose values are outputs (never the layernorm step)
  bool layernorm_tail() const { return !steps.empty() && steps.back().kind == Kind::LayerNorm; }
};

/// Parse and check a fused node's attrs {"pattern", "steps": [{"kind", "args": ["i0", "s1", ...],
/// "alpha"}], "emit": [step indices]} for a node with `n_inputs` inputs. Returns "" and fills
/// `p`, or the reason the attrs are malformed (unknown step kind, arg out of range or not
/// earlier, layernorm not last, emit not distinct or out of range, pattern not the steps' kinds).
std::string parse_fused(const nlohmann::json& attrs, size_t n_inputs, FusedProgram& p);
/// The attrs of `p` (pattern recomputed from the steps).
nlohmann::json fused_attrs(const FusedProgram& p);

/// Rows per tile of the fused kernel for rows of `n` floats: whole rows, about 64 KiB of each
/// buffer, so a tile's intermediates stay in L1/L2. Fixed (not per thread), so results do not
/// depend on the thread count.
int64_t fused_tile_rows(int64_t n);

/// The legality check's answer for one proposed group.
struct FusionVerdict {
  bool legal = false;
  std::string rule;    ///< the rule that refused: size, node, kind, shape, dtype, convexity, chain ("" when legal)
  std::string reason;  ///< a sentence naming the node and operand
};
/// May these nodes (ids, any order) become one fused node? The rules of fuse_elementwise below
/// (kind, shape, dtype, convexity, each node after the first reads the group). The check the
/// pass applies to every extension, callable for a proposed grouping (rtx-evolve's IR-rewrite
/// proposer; the planted illegal fusions of ir_fusion_test).
FusionVerdict fusion_legality(const Graph& g, std::vector<int> group);

/// Fuse chains of elementwise nodes (add, sub, mul, scale, gelu, relu, silu, tanh, exp) of one
/// shape S, whose other operands are S-shaped or a row [S.back()] (a bias), into one `fused`
/// node; a chain may end in the layernorm that reads it (residual add + layernorm input).
/// Legality, per node joining a chain (the refusal reason names the node and the rule):
///  - kind: an elementwise step, or a layernorm as the last step; anything else keeps its own
///    kernel (a reduction or softmax would change its reduction order or need whole tensors);
///  - shape: the node's output is S (no broadcast to a larger shape) and its other operands are
///    S or a row: other broadcasts are refused;
///  - dtype f32;
///  - convexity: no operand from outside the chain may depend on a chain node (the fused node
///    would read a value computed after it: a cycle, or a read of a buffer not yet written);
///  - size: at most options.max_steps steps (default 6).
/// Intermediates read outside the chain (or graph outputs) are emitted as outputs; the others
/// never reach memory. Chains of one node are left alone.
std::unique_ptr<Pass> make_fuse_elementwise_pass(const nlohmann::json& options = nlohmann::json::object());

/// Fold `add(matmul(a, b), bias)` (either operand order) with bias a row [N] of the matmul's
/// output [..., N] into the matmul (a third input: the GEMM epilogue adds it, as
/// kernels::matmul_forward's bias). Legality: bias rank 1 of length N and f32; the matmul's
/// output read only by this add and not a graph output (else it must exist unbiased); the
/// matmul not already biased. Refusals carry the reason. Runs after autodiff (a biased matmul
/// has no backward rule).
std::unique_ptr<Pass> make_fuse_matmul_bias_pass();

}  // namespace rtx::ir
