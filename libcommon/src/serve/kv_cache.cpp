// The paged KV cache of rtx-serve (rtx/serve/model.hpp): one flat pool of blocks, a free list.
#include <cstring>
#include <limits>
#include <string>

#include "rtx/core/error.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve {

const char* kv_type_name(KvType t) { return t == KvType::F16 ? "f16" : "f32"; }

KvType parse_kv_type(const std::string& s, const std::string& where) {
  if (s == "f32" || s == "float32") return KvType::F32;
  if (s == "f16" || s == "float16") return KvType::F16;
  throw_input("KV cache type \"" + s + "\" is not one of f32, f16", where);
}

void KvCache::wrong_pool(const char* want) const {
  throw_internal(std::string("KvCache: this access needs ") + want + ", but the pool is " +
                     (host_storage() ? kv_type_name(type_) : "held on a device (no host storage)"),
                 "kv");
}

KvCache::KvCache(int n_layer, int n_kv_head, int head_dim, int block_tokens, int n_blocks, bool host_storage,
                 KvType type)
    : n_layer_(n_layer), n_kv_head_(n_kv_head), head_dim_(head_dim), block_tokens_(block_tokens), n_blocks_(n_blocks),
      type_(type) {
  const auto check = [](const char* what, int v) {
    if (v < 1)
      throw_input(std::string("KvCache: ") + what + " = " + std::to_string(v) + " must be >= 1", what,
                  "pass a positive size");
  };
  check("n_layer", n_layer);
  check("n_kv_head", n_kv_head);
  check("head_dim", head_dim);
  check("block_tokens", block_tokens);
  check("n_blocks", n_blocks);
  block_floats_ = static_cast<size_t>(n_kv_head) * block_tokens * head_dim;
  const size_t per_block = block_floats_ * 2 * n_layer;
  if (type != KvType::F32 && !host_storage)
    throw_input(std::string("KvCache: a ") + kv_type_name(type) +
                    " pool needs host storage; a device (CUDA) model keeps its KV cache in f32",
                "kv_type", "use kv_type f32 with a CUDA model");
  if (per_block > std::numeric_limits<size_t>::max() / sizeof(float) / n_blocks)
    throw_input("KvCache: " + std::to_string(n_blocks) + " blocks of " + std::to_string(per_block) +
                    " floats overflow the address space", "n_blocks", "use fewer or smaller blocks");
  n_elems_ = per_block * n_blocks;
  if (host_storage && type == KvType::F32) data_.reset(new float[n_elems_]());
  if (host_storage && type == KvType::F16) data16_.reset(new uint16_t[n_elems_]());
  free_.reserve(n_blocks);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // pop_back hands out 0, 1, 2, ...
  is_free_.assign(n_blocks, 1);
}

int KvCache::alloc() {
  if (free_.empty()) return -1;
  const int b = free_.back();
  free_.pop_back();
  is_free_[b] = 0;
  return b;
}

void KvCache::free(int block) {
  RTX_CHECK(block >= 0 && block < n_blocks_, "KvCache::free: block id out of range");
  RTX_CHECK(!is_free_[block], "KvCache::free: block freed twice");
  is_free_[block] = 1;
  free_.push_back(block);
}

bool KvCache::copy_block(int dst, int src) {
  RTX_CHECK(dst >= 0 && dst < n_blocks_ && src >= 0 && src < n_blocks_, "KvCache::copy_block: block id out of range");
  if (dst == src) return true;
  const size_t n = block_floats_ * 2 * n_layer_;  // a block's layers are contiguous (offset())
  if (backing_) {
    if (!backing_->copy(offset(0, dst, 0), offset(0, src, 0), n)) return false;
  } else if (!host_storage()) {
    return false;
  }
  if (data_) std::memcpy(data_.get() + offset(0, dst, 0), data_.get() + offset(0, src, 0), n * sizeof(float));
  if (data16_) std::memcpy(data16_.get() + offset(0, dst, 0), data16_.get() + offset(0, src, 0), n * sizeof(uint16_t));
  return true;
}

int check_forward(const std::vector<SeqBatch>& batch, const KvCache& kv, const ModelInfo& info, const float* logits,
                  const std::string& model) {
  if (kv.n_layer() != info.n_layer || kv.n_kv_head() != info.n_kv_head || kv.head_dim() != info.head_dim)
    throw_input(model + ": the KV cache holds (layers " + std::to_string(kv.n_layer()) + ", kv heads " +
                    std::to_string(kv.n_kv_head()) + ", head dim " + std::to_string(kv.head_dim()) +
                    ") but the model needs (" + std::to_string(info.n_layer) + ", " + std::to_string(info.n_kv_head) +
                    ", " + std::to_string(info.head_dim) + ")",
                "kv", "build the KvCache from the model's ModelInfo");
  if (info.device == "cpu" && !kv.host_storage())
    throw_input(model + ": the KV cache has no host storage but the model runs on the CPU", "kv",
                "build the KvCache with host_storage true for a CPU model");
  long rows = 0;
  bool any_logits = false;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SeqBatch& b = batch[s];
    const std::string where = "batch[" + std::to_string(s) + "]";
    if (b.n < 1 || !b.tokens)
      throw_input(model + ": " + where + " has n = " + std::to_string(b.n) + (b.tokens ? "" : " and no tokens") +
                      "; each sequence needs >= 1 token",
                  where);
    if (b.pos < 0 || b.pos > info.context - b.n)
      throw_input(model + ": " + where + " covers positions [" + std::to_string(b.pos) + ", " +
                      std::to_string(static_cast<long long>(b.pos) + b.n) + "), outside the context of " +
                      std::to_string(info.context),
                  where, "shorten the sequence to the model's context");
    for (int t = 0; t < b.n; ++t)
      if (b.tokens[t] < 0 || b.tokens[t] >= info.vocab)
        throw_input(model + ": " + where + " token " + std::to_string(t) + " = " + std::to_string(b.tokens[t]) +
                        " is outside [0, " + std::to_string(info.vocab) + ")",
                    where + ".tokens");
    const int need = kv.blocks_for(b.pos + b.n);
    if (b.n_blocks < need || !b.blocks)
      throw_input(model + ": " + where + " has a block table of " + std::to_string(b.n_blocks) +
                      " blocks; positions [0, " + std::to_string(b.pos + b.n) + ") need " + std::to_string(need),
                  where + ".blocks", "allocate more KV blocks for the sequence");
    for (int i = 0; i < need; ++i)
      if (b.blocks[i] < 0 || b.blocks[i] >= kv.total_blocks())
        throw_input(model + ": " + where + " block table entry " + std::to_string(i) + " = " +
                        std::to_string(b.blocks[i]) + " is not a block of the cache (0.." +
                        std::to_string(kv.total_blocks() - 1) + ")",
                    where + ".blocks");
    any_logits = any_logits || b.want_logits;
    rows += b.n;
  }
  if (rows > (1 << 24)) throw_input(model + ": a batch of " + std::to_string(rows) + " rows is too large", "batch");
  if (any_logits && !logits) throw_input(model + ": a sequence wants logits but the logits pointer is null", "logits");
  return static_cast<int>(rows);
}

}  // namespace rtx::serve
