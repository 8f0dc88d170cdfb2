// One sequence through a serving model (rtx-train sample, tests, benchmarks): the same forward
// as rtx-serve's batched steps, so a prompt and seed give the same tokens here as from the
// server, alone or among other requests (the models' batch invariance).
#pragma once
#include <cstdint>
#include <vector>

#include "rtx/models/infer.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve {

/// A serving model as a models::LogitsSource (for models::generate): one sequence with a
/// private KV cache of the model's context (blocks of 16 positions). The model must outlive it.
/// Errors as Model::forward (an id out of range, positions past the context: Error(Input)).
class SequenceRunner final : public models::LogitsSource {
 public:
  explicit SequenceRunner(Model& model);
  const float* reset_and_prefill(const int32_t* ids, int n) override;
  const float* step(int32_t token) override;
  int position() const override { return pos_; }
  int capacity() const override { return model_.info().context; }
  int vocab() const override { return model_.info().vocab; }

 private:
  Model& model_;
  KvCache kv_;
  std::vector<int32_t> blocks_;
  std::vector<float> logits_;
  int pos_ = 0;
};

}  // namespace rtx::serve
