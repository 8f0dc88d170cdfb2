// CachingAllocator (best-fit free lists, split, coalesce, pool limit), the host backing,
// the per-device CUDA allocators, and the CUDA entry points of a build without CUDA.
#include "rtx/core/allocator.hpp"

#include <algorithm>
#include <cstdio>
#include <new>
#include <vector>

#include "rtx/core/cuda_rng.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/events.hpp"

namespace rtx {

// One block of a segment. Blocks of a segment form a doubly linked list in address order;
// the head (prev == nullptr) is never deleted while the segment lives, so it names it.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  bool free = true;
  bool small = true;
  Block* prev = nullptr;
  Block* next = nullptr;
};

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

namespace {
size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
bool is_pow2(size_t n) { return n != 0 && (n & (n - 1)) == 0; }
std::string fmt_bytes(size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu B (%.2f MiB)", n, static_cast<double>(n) / (1024.0 * 1024.0));
  return buf;
}
}  // namespace

CachingAllocator::CachingAllocator(AllocatorBacking backing, AllocatorConfig config)
    : backing_(std::move(backing)), cfg_(config) {
  if (!backing_.alloc || !backing_.free)
    throw_usage("allocator backing needs both alloc and free functions", "CachingAllocator(backing)");
  check_config(cfg_);
}

CachingAllocator::~CachingAllocator() {
  for (Block* head : segment_heads_) {
    size_t total = 0;
    char* base = head->ptr;
    for (Block* b = head; b;) {
      Block* n = b->next;
      total += b->size;
      delete b;
      b = n;
    }
    try {
      backing_.free(base, total);
    } catch (...) {
      // A destructor must not throw; the backing (e.g. a CUDA context torn down) is gone.
    }
  }
}

void CachingAllocator::check_config(const AllocatorConfig& c) {
  const char* where = "AllocatorConfig";
  if (!is_pow2(c.round_bytes) || c.round_bytes < 16)
    throw_usage("round_bytes must be a power of two >= 16, got " + std::to_string(c.round_bytes), where);
  if (c.small_limit == 0 || c.small_limit % c.round_bytes != 0)
    throw_usage("small_limit must be a positive multiple of round_bytes, got " + std::to_string(c.small_limit), where);
  if (c.small_segment_bytes < c.small_limit || c.small_segment_bytes % c.round_bytes != 0)
    throw_usage("small_segment_bytes must be >= small_limit and a multiple of round_bytes, got " +
                    std::to_string(c.small_segment_bytes), where);
  if (c.large_round_bytes == 0 || c.large_round_bytes % c.round_bytes != 0)
    throw_usage("large_round_bytes must be a positive multiple of round_bytes, got " +
                    std::to_string(c.large_round_bytes), where);
}

size_t CachingAllocator::round_size_locked(size_t bytes) const {
  return round_up(std::max<size_t>(bytes, 1), cfg_.round_bytes);
}

size_t CachingAllocator::round_size(size_t bytes) const {
  std::lock_guard<std::mutex> lk(mu_);
  return round_size_locked(bytes);
}

void CachingAllocator::bump_peaks() {
  st_.peak_allocated_bytes = std::max(st_.peak_allocated_bytes, st_.allocated_bytes);
  st_.peak_reserved_bytes = std::max(st_.peak_reserved_bytes, st_.reserved_bytes);
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t seg_bytes, bool small) {
  const auto oom = [&](const std::string& why) {
    throw_env("out of device memory: requested " + fmt_bytes(seg_bytes) + ", reserved " +
                  fmt_bytes(st_.reserved_bytes) + ", limit " +
                  (cfg_.pool_limit_bytes ? fmt_bytes(cfg_.pool_limit_bytes) : std::string("none")) + ": " + why,
              backing_.name, "free tensors, lower the batch size, or raise the pool limit");
  };
  if (cfg_.pool_limit_bytes && st_.reserved_bytes + seg_bytes > cfg_.pool_limit_bytes) {
    empty_cache_locked();
    ++st_.limit_flushes;
    if (st_.reserved_bytes + seg_bytes > cfg_.pool_limit_bytes) oom("pool limit exceeded");
  }
  void* p = backing_.alloc(seg_bytes);
  if (!p) {
    empty_cache_locked();
    ++st_.limit_flushes;
    p = backing_.alloc(seg_bytes);
    if (!p) oom("the backing has no memory left");
  }
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = seg_bytes;
  b->free = true;
  b->small = small;
  segment_heads_.insert(b);
  st_.reserved_bytes += seg_bytes;
  ++st_.segments;
  ++st_.backing_allocs;
  bump_peaks();
  return b;
}

void CachingAllocator::release_segment(Block* b) {
  RTX_CHECK(b->prev == nullptr && b->next == nullptr && b->free, "releasing a segment that is in use");
  backing_.free(b->ptr, b->size);
  st_.reserved_bytes -= b->size;
  --st_.segments;
  ++st_.backing_frees;
  segment_heads_.erase(b);
  delete b;
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const bool events = core::events_enabled();
  nlohmann::json frag;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t segments_before = st_.backing_allocs, flushes_before = st_.limit_flushes;
    p = allocate_locked(bytes);
    if (events) {
      const char* reason = st_.limit_flushes != flushes_before     ? "flush"
                           : st_.backing_allocs != segments_before ? "segment"
                           : st_.alloc_count % 1024 == 0           ? "periodic"
                                                                   : nullptr;
      if (reason) frag = frag_event_locked(reason);
    }
  }
  if (!frag.is_null()) core::emit_event("alloc.frag", std::move(frag));
  return p;
}

nlohmann::json CachingAllocator::frag_event_locked(const char* reason) const {
  const AllocatorStats s = stats_locked();
  return {{"allocator", backing_.name},
          {"reason", reason},
          {"reserved_bytes", s.reserved_bytes},
          {"allocated_bytes", s.allocated_bytes},
          {"fragmentation_pct", s.fragmentation_pct()},
          {"largest_free_block", s.largest_free_block},
          {"segments", s.segments},
          {"live_blocks", s.live_blocks},
          {"alloc_count", s.alloc_count}};
}

void* CachingAllocator::allocate_locked(size_t bytes) {
  if (bytes > (SIZE_MAX >> 2)) throw_usage("allocation of " + std::to_string(bytes) + " bytes is absurd", backing_.name);
  const size_t size = round_size_locked(bytes);
  const bool small = size <= cfg_.small_limit;
  Block* b = nullptr;
  if (!cfg_.caching) {
    b = new_segment(size, small);
  } else {
    FreeList& pool = small ? small_free_ : large_free_;
    Block key;
    key.size = size;
    key.ptr = nullptr;
    auto it = pool.lower_bound(&key);
    if (it != pool.end()) {
      b = *it;
      pool.erase(it);
    } else {
      b = new_segment(small ? cfg_.small_segment_bytes : round_up(size, cfg_.large_round_bytes), small);
    }
    if (b->size - size >= cfg_.round_bytes) {  // split: the remainder goes back to the pool
      Block* r = new Block;
      r->ptr = b->ptr + size;
      r->size = b->size - size;
      r->free = true;
      r->small = b->small;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = size;
      pool.insert(r);
    }
  }
  b->free = false;
  live_[b->ptr] = b;
  st_.allocated_bytes += b->size;
  ++st_.live_blocks;
  ++st_.alloc_count;
  bump_peaks();
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end())
    throw_usage("deallocate of a pointer this allocator did not hand out or already freed", backing_.name);
  Block* b = it->second;
  live_.erase(it);
  b->free = true;
  st_.allocated_bytes -= b->size;
  --st_.live_blocks;
  ++st_.free_count;
  FreeList& pool = b->small ? small_free_ : large_free_;
  if (Block* n = b->next; n && n->free) {  // coalesce with the right neighbour
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (b->next) b->next->prev = b;
    delete n;
  }
  if (Block* p = b->prev; p && p->free) {  // and with the left one
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (p->next) p->next->prev = p;
    delete b;
    b = p;
  }
  if (!cfg_.caching && b->prev == nullptr && b->next == nullptr)
    release_segment(b);
  else
    pool.insert(b);
}

void CachingAllocator::empty_cache_locked() {
  for (FreeList* pool : {&small_free_, &large_free_}) {
    std::vector<Block*> whole;
    for (Block* b : *pool)
      if (b->prev == nullptr && b->next == nullptr) whole.push_back(b);
    for (Block* b : whole) {
      pool->erase(b);
      release_segment(b);
    }
  }
}

void CachingAllocator::empty_cache() {
  nlohmann::json frag;
  {
    std::lock_guard<std::mutex> lk(mu_);
    empty_cache_locked();
    if (core::events_enabled()) frag = frag_event_locked("empty_cache");
  }
  if (!frag.is_null()) core::emit_event("alloc.frag", std::move(frag));
}

size_t CachingAllocator::block_size(const void* ptr) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) throw_usage("block_size of a pointer that is not a live block", backing_.name);
  return it->second->size;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_locked();
}

AllocatorStats CachingAllocator::stats_locked() const {
  AllocatorStats s = st_;
  s.largest_free_block = 0;
  if (!small_free_.empty()) s.largest_free_block = (*small_free_.rbegin())->size;
  if (!large_free_.empty()) s.largest_free_block = std::max(s.largest_free_block, (*large_free_.rbegin())->size);
  return s;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lk(mu_);
  st_.peak_allocated_bytes = st_.allocated_bytes;
  st_.peak_reserved_bytes = st_.reserved_bytes;
}

AllocatorConfig CachingAllocator::config() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cfg_;
}

void CachingAllocator::set_config(const AllocatorConfig& config) {
  check_config(config);
  std::lock_guard<std::mutex> lk(mu_);
  cfg_ = config;
}

AllocatorBacking host_backing() {
  AllocatorBacking b;
  b.alloc = [](size_t n) -> void* { return ::operator new(n, std::align_val_t(512), std::nothrow); };
  b.free = [](void* p, size_t) { ::operator delete(p, std::align_val_t(512)); };
  b.name = "host";
  return b;
}

CachingAllocator& cuda_allocator(int device) {
  require_cuda("cuda_allocator(" + std::to_string(device) + ")");
  const int n = cuda_device_count();
  if (device < 0 || device >= n)
    throw_usage("CUDA device index " + std::to_string(device) + " out of range (" + std::to_string(n) +
                    " device(s))", "device");
  static std::mutex mu;
  static std::vector<CachingAllocator*> allocs;  // leaked on purpose: outlives static destructors
  std::lock_guard<std::mutex> lk(mu);
  if (allocs.size() < static_cast<size_t>(n)) allocs.resize(static_cast<size_t>(n), nullptr);
  if (!allocs[device]) allocs[device] = new CachingAllocator(cuda_backing(device));
  return *allocs[device];
}

#ifndef RTX_HAVE_CUDA
AllocatorBacking cuda_backing(int device) {
  throw_env("this rtx build has no CUDA backend", "cuda_backing(" + std::to_string(device) + ")",
            "rebuild with the CUDA toolkit installed, or use --backend cpu");
}

void cuda_fill_uniform(float*, size_t, uint64_t, uint64_t, float, float, void*) {
  throw_env("this rtx build has no CUDA backend", "cuda_fill_uniform",
            "rebuild with the CUDA toolkit installed, or use rtx::philox_uniform on the CPU");
}
#endif

}  // namespace rtx
