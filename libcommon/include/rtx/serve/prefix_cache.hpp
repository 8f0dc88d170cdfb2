// rtx-serve's prefix cache: KV blocks of earlier sequences kept after they finish and reused by
// later prompts that start with the same tokens (vLLM's automatic prefix caching, at block
// granularity, plus a copied partial block as llama.cpp's cache_prompt reuses any common prefix).
#pragma once
#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rtx/serve/model.hpp"

namespace rtx::serve {

/// A tree of cached KV blocks over a KvCache. A node is one block of the pool holding the keys
/// and values of `n` tokens (n = block_tokens for a full block; fewer for the last block of a
/// finished sequence) that follow the tokens of its parent chain from position 0. Only full
/// blocks have children. Nodes are reference counted by the sequences whose block tables hold
/// them; a node no sequence holds stays cached until the pool needs its block, then the least
/// recently used such leaf is evicted (a node's descendants are never held when it is not, so
/// leaves go first and every unheld node is reclaimable).
///
/// Reuse is exact on the CPU models: a token's keys and values depend only on the tokens before
/// it, because the kernels' arithmetic per row does not depend on the batch (rtx-serve's batch
/// invariance), so a cached block holds the same bits a fresh prefill would write.
/// Not thread-safe: the scheduler thread alone calls it.
class PrefixCache {
 public:
  /// Caches blocks of `kv` (which must outlive this).
  explicit PrefixCache(KvCache& kv);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  /// The longest cached prefix of tokens[0, limit): `shared` full blocks to hold (in position
  /// order, shared.size() * block_tokens positions), then optionally `copy_from`, a node whose
  /// first `copy_tokens` positions continue the prefix (a partial block, or a full one that
  /// matches only in part or would pass `limit`): copy it into a block of the sequence's own,
  /// which will write the positions after them. tokens() = the positions covered.
  struct Match {
    std::vector<int> shared;
    int copy_from = -1;
    int copy_tokens = 0;
    int tokens(int block_tokens) const { return static_cast<int>(shared.size()) * block_tokens + copy_tokens; }
  };
  /// Looks `tokens` up without changing anything. limit <= n (the scheduler passes n - 1 so
  /// that at least one prompt token is computed, for its logits).
  Match match(const int32_t* tokens, int n, int limit) const;

  /// Blocks that alloc() can hand out: the pool's free blocks plus the cached nodes no sequence
  /// holds.
  int available() const { return kv_.free_blocks() + unheld_; }
  /// Cached nodes no sequence holds (reclaimable).
  int unheld() const { return unheld_; }
  /// Cached nodes in all (held or not).
  int nodes() const { return static_cast<int>(nodes_.size()); }
  /// How many of `blocks` are cached nodes that no sequence holds (holding them takes them out
  /// of available()).
  int unheld_among(const std::vector<int>& blocks) const;

  /// A block for a sequence: a free block of the pool, else the least recently used unheld leaf,
  /// evicted. -1 when neither exists.
  int alloc();
  /// A sequence takes a reference on node `block` (from a Match). Error(Internal) if not a node.
  void hold(int block);
  /// A sequence gives back `block`: a node loses one reference (cached, reclaimable at 0);
  /// any other block returns to the pool.
  void release(int block);
  /// Whether `block` is a cached node.
  bool is_node(int block) const { return nodes_.count(block) != 0; }

  /// Registers the sequence's own `block`, holding tokens[0, n) after the chain ending at node
  /// `parent` (-1: at position 0), as a node held once (by that sequence). When a node with the
  /// same tokens already exists (or, for n < block_tokens, one whose tokens start with them),
  /// nothing is registered and that node is returned; else `block`. Error(Internal) when
  /// `parent` is not a full node, `block` already is a node, or n is outside [1, block_tokens].
  int insert(int parent, const int32_t* tokens, int n, int block);

 private:
  struct Node {
    int parent = -1;
    std::vector<int32_t> tokens;  // 1..block_tokens ids
    int children = 0;
    int refs = 0;
    uint64_t last_use = 0;
  };
  static uint64_t key(int parent, int32_t first) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent + 1)) << 32) | static_cast<uint32_t>(first);
  }
  void set_evictable(int block, const Node& n, bool on);
  void unlink(int block);

  KvCache& kv_;
  std::unordered_map<int, Node> nodes_;
  std::unordered_map<uint64_t, std::vector<int>> children_;  // (parent, first token) -> nodes
  std::set<std::pair<uint64_t, int>> leaves_;                // unheld leaves by last use
  int unheld_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace rtx::serve
