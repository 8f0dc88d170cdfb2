// Bench ops of the models module: model-level macro ops that rtx-bench, rtx-tune and
// rtx-evolve measure like kernels (measure::registry() adds them to the kernel registry).
#pragma once
#include "rtx/kernels/registry.hpp"

namespace rtx::models {

/// Register the model-level macro ops: today "gpt2_train_step", a whole GPT-2 training step
/// (forward, backward, AdamW) at dims {L, C, NH, V, B, T} (models/train_step_op.cpp).
void register_model_ops(kernels::Registry& r);

}  // namespace rtx::models
