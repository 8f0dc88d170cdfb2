// SequenceRunner (rtx/serve/generate.hpp): one sequence through a serving model.
#include "rtx/serve/generate.hpp"

namespace rtx::serve {

namespace {
constexpr int kBlock = 16;
}

SequenceRunner::SequenceRunner(Model& model)
    : model_(model),
      kv_(model.info().n_layer, model.info().n_kv_head, model.info().head_dim, kBlock,
          (model.info().context + kBlock - 1) / kBlock, model.info().device == "cpu"),
      logits_(model.info().vocab) {
  blocks_.resize(kv_.total_blocks());
  for (auto& b : blocks_) b = kv_.alloc();
}

const float* SequenceRunner::reset_and_prefill(const int32_t* ids, int n) {
  pos_ = 0;
  model_.forward({SeqBatch{ids, n, 0, blocks_.data(), static_cast<int>(blocks_.size()), true}}, kv_, logits_.data());
  pos_ = n;
  return logits_.data();
}

const float* SequenceRunner::step(int32_t token) {
  model_.forward({SeqBatch{&token, 1, pos_, blocks_.data(), static_cast<int>(blocks_.size()), true}}, kv_,
                 logits_.data());
  ++pos_;
  return logits_.data();
}

}  // namespace rtx::serve
