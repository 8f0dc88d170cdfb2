// rtx-train checkpoints: one safetensors file holding the GPT-2 weights (layout names), the
// AdamW moments ("optim.m.<name>", "optim.v.<name>"), and in __metadata__ the schema
// ("rtx.checkpoint.v1"), model config, run config, tokenizer, step and RNG state.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/models/gpt2.hpp"

namespace rtx::models {

/// A checkpoint in memory. `params`, `m`, `v` are f32 in gpt2_param_layout(model) order.
struct Checkpoint {
  Gpt2Config model;
  nlohmann::json run_config;   ///< TrainConfig::to_json() of the run that wrote it ({} if none)
  nlohmann::json tokenizer;    ///< Tokenizer::to_json() (null if none)
  int step = 0;                ///< optimizer steps completed
  uint64_t seed = 0;           ///< the run's seed (batches are a function of seed and step)
  double best_val_loss = 0;    ///< best validation loss seen so far (0 if none)
  std::vector<float> params, m, v;  ///< m and v empty when saved without optimizer state
};

/// Write `ck` to `path` atomically (temp file, fsync, rename) with a SHA-256 of the data.
/// Throws Error(Input) when the vectors do not match the model's parameter count,
/// Error(Environment) on write failure (the previous file, if any, is left intact).
void save_checkpoint(const std::string& path, const Checkpoint& ck);

/// Read and verify a checkpoint (schema, checksum, every tensor's name, shape and dtype against
/// the layout of the stored config). `with_optimizer` false skips the moments. Throws
/// Error(Input) naming the file and what is wrong for a missing, truncated or corrupt file.
Checkpoint load_checkpoint(const std::string& path, bool with_optimizer = true);

}  // namespace rtx::models
