// GPT-2 expressed in the Polygraph IR (rtx::ir): the same architecture and parameter layout as
// Gpt2 (gpt2.hpp), built with the IR builder; the backward comes from IR autodiff. Not a
// training loop: the host feeds batches and applies AdamW (docs/ir.md, control flow).
#pragma once
#include <cstdint>
#include <vector>

#include "rtx/ir/exec.hpp"
#include "rtx/ir/graph.hpp"
#include "rtx/models/gpt2.hpp"

namespace rtx::models {

/// A GPT-2 graph for one B x T batch and where its parts are.
struct Gpt2Graph {
  ir::Graph graph{"gpt2"};
  std::vector<int> params;  ///< value id per gpt2_param_layout tensor (inputs named as the layout)
  int ids = -1;             ///< input "ids" i32 (B,T)
  int targets = -1;         ///< input "targets" i32 (B,T)
  int logits = -1;          ///< (B,T,V)
  int loss = -1;            ///< [] mean cross-entropy over the B*T positions
  std::vector<int> grads;   ///< with_backward: d(loss)/d(param) per layout tensor, else empty
  int first_backward = -1;  ///< with_backward: the first node of the backward (autodiff's), else -1
};

/// Build GPT-2 forward (llm.c's layer order: encoder; per layer ln_1, c_attn, attention,
/// c_proj, residual, ln_2, c_fc, gelu, c_proj, residual; ln_f; logits = lnf @ wte^T (tied);
/// cross-entropy) for a B x T batch, T <= block_size. Graph outputs: loss, logits, then (with
/// `with_backward`) every parameter's gradient in layout order. Intermediates are named with
/// the layer index ("l3.ln_1", "l3.qkv", ...). Error(Input) on a bad config or B, T.
Gpt2Graph gpt2_graph(const Gpt2Config& cfg, int B, int T, bool with_backward);

/// Feeds for gpt2_graph: `params` (gpt2_num_params floats, layout order), ids and targets
/// (B*T each, in [0,V)).
ir::Feeds gpt2_feeds(const Gpt2Config& cfg, const float* params, const int32_t* ids, const int32_t* targets, int B, int T);

}  // namespace rtx::models
