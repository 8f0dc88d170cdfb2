// rtx-serve's prefix cache (rtx/serve/prefix_cache.hpp).
#include "rtx/serve/prefix_cache.hpp"

#include <algorithm>
#include <string>

#include "rtx/core/error.hpp"

namespace rtx::serve {

PrefixCache::PrefixCache(KvCache& kv) : kv_(kv) {}

PrefixCache::Match PrefixCache::match(const int32_t* tokens, int n, int limit) const {
  Match m;
  const int B = kv_.block_tokens();
  limit = std::max(0, std::min(limit, n));
  int parent = -1, at = 0;
  while (at < limit) {
    const auto it = children_.find(key(parent, tokens[at]));
    if (it == children_.end()) break;
    int best = -1, best_len = 0;
    for (int c : it->second) {
      const Node& nd = nodes_.at(c);
      const int cap = std::min(static_cast<int>(nd.tokens.size()), limit - at);
      int l = 0;
      while (l < cap && nd.tokens[l] == tokens[at + l]) ++l;
      if (l > best_len) best = c, best_len = l;
    }
    if (best < 0) break;
    if (best_len == B) {  // a full block, wholly inside the limit: shared
      m.shared.push_back(best);
      parent = best;
      at += B;
      continue;
    }
    m.copy_from = best;
    m.copy_tokens = best_len;
    break;
  }
  return m;
}

int PrefixCache::unheld_among(const std::vector<int>& blocks) const {
  int z = 0;
  for (int b : blocks) {
    const auto it = nodes_.find(b);
    if (it != nodes_.end() && it->second.refs == 0) ++z;
  }
  return z;
}

void PrefixCache::set_evictable(int block, const Node& n, bool on) {
  if (on) leaves_.emplace(n.last_use, block);
  else leaves_.erase({n.last_use, block});
}

void PrefixCache::unlink(int block) {
  Node& n = nodes_.at(block);
  auto& sib = children_[key(n.parent, n.tokens[0])];
  sib.erase(std::remove(sib.begin(), sib.end(), block), sib.end());
  if (sib.empty()) children_.erase(key(n.parent, n.tokens[0]));
  if (n.parent >= 0) {
    Node& p = nodes_.at(n.parent);
    --p.children;
    if (p.children == 0 && p.refs == 0) set_evictable(n.parent, p, true);
  }
  nodes_.erase(block);
}

int PrefixCache::alloc() {
  if (kv_.free_blocks() > 0) return kv_.alloc();
  if (leaves_.empty()) return -1;
  const int victim = leaves_.begin()->second;
  leaves_.erase(leaves_.begin());
  unlink(victim);
  --unheld_;
  return victim;  // still counted as used by the pool: it passes straight to the sequence
}

void PrefixCache::hold(int block) {
  const auto it = nodes_.find(block);
  RTX_CHECK(it != nodes_.end(), "PrefixCache::hold: block " + std::to_string(block) + " is not a cached node");
  Node& n = it->second;
  if (n.refs == 0) {
    if (n.children == 0) set_evictable(block, n, false);
    --unheld_;
  }
  ++n.refs;
}

void PrefixCache::release(int block) {
  const auto it = nodes_.find(block);
  if (it == nodes_.end()) {
    kv_.free(block);
    return;
  }
  Node& n = it->second;
  RTX_CHECK(n.refs > 0, "PrefixCache::release: node " + std::to_string(block) + " is not held");
  if (--n.refs == 0) {
    n.last_use = ++clock_;
    ++unheld_;
    if (n.children == 0) set_evictable(block, n, true);
  }
}

int PrefixCache::insert(int parent, const int32_t* tokens, int n, int block) {
  const int B = kv_.block_tokens();
  RTX_CHECK(n >= 1 && n <= B, "PrefixCache::insert: " + std::to_string(n) + " tokens in a block of " + std::to_string(B));
  RTX_CHECK(!is_node(block), "PrefixCache::insert: block " + std::to_string(block) + " is already cached");
  if (parent >= 0) {
    const auto p = nodes_.find(parent);
    RTX_CHECK(p != nodes_.end() && static_cast<int>(p->second.tokens.size()) == B,
              "PrefixCache::insert: parent " + std::to_string(parent) + " is not a full cached block");
  }
  const uint64_t k = key(parent, tokens[0]);
  if (const auto it = children_.find(k); it != children_.end()) {
    for (int c : it->second) {
      const Node& nd = nodes_.at(c);
      if (static_cast<int>(nd.tokens.size()) < n) continue;
      if (std::equal(tokens, tokens + n, nd.tokens.begin())) return c;  // same tokens (or longer) cached
    }
  }
  Node nd;
  nd.parent = parent;
  nd.tokens.assign(tokens, tokens + n);
  nd.refs = 1;
  nd.last_use = ++clock_;
  if (parent >= 0) {
    Node& p = nodes_.at(parent);
    if (p.children == 0 && p.refs == 0) set_evictable(parent, p, false);
    ++p.children;
  }
  children_[k].push_back(block);
  nodes_.emplace(block, std::move(nd));
  return block;
}

}  // namespace rtx::serve
