// The paged KV cache of rtx-serve (rtx/serve/model.hpp): one flat pool of blocks, a free list.
#include <limits>
#include <string>

#include "rtx/core/error.hpp"
#include "rtx/serve/model.hpp"

namespace rtx::serve {

KvCache::KvCache(int n_layer, int n_kv_head, int head_dim, int block_tokens, int n_blocks)
    : n_layer_(n_layer), n_kv_head_(n_kv_head), head_dim_(head_dim), block_tokens_(block_tokens), n_blocks_(n_blocks) {
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
  if (per_block > std::numeric_limits<size_t>::max() / sizeof(float) / n_blocks)
    throw_input("KvCache: " + std::to_string(n_blocks) + " blocks of " + std::to_string(per_block) +
                    " floats overflow the address space", "n_blocks", "use fewer or smaller blocks");
  n_elems_ = per_block * n_blocks;
  data_.reset(new float[n_elems_]());
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

}  // namespace rtx::serve
