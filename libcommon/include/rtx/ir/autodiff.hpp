// Polygraph IR reverse-mode autodiff: the backward of a value, built from per-kind rules as
// more nodes of the same graph (ggml's build_backward_expand), with gradient accumulation
// (an add node) where a value fans out. Rules: autodiff.cpp, one case per forward kind.
#pragma once
#include <vector>

#include "rtx/ir/graph.hpp"

namespace rtx::ir {

/// What backward() added.
struct BackwardResult {
  std::vector<int> grads;       ///< per `wrt` entry: the value holding d(loss)/d(wrt)
  int first_backward_node = 0;  ///< nodes from this id on are the backward (recompute's boundary)
};

/// Append to `g` the gradient of `loss` with respect to each value in `wrt` (f32 values).
/// `seed` is d(final)/d(loss) (same shape as loss); -1 means ones (loss usually a scalar []).
/// A wrt value that loss does not depend on gets a zero tensor. Error(Input) for an i32 wrt,
/// a path through a kind without a rule (the derivative kinds: *_backward, unary_grad), the
/// mean/rstd outputs of layernorm or lse of attention on the path, or a mean over a symbolic axis.
BackwardResult backward(Graph& g, int loss, const std::vector<int>& wrt, int seed = -1);

}  // namespace rtx::ir
