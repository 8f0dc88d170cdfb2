// Caching allocator over a pluggable backing (cudaMalloc/cudaFree on the GPU, a host
// backing for tests): size-rounded blocks, best-fit free lists, split and coalesce, stats.
// Not a general-purpose malloc: one mutex, no per-stream pools.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_map>

namespace rtx {

/// Where segments come from: `alloc(bytes)` returns memory or nullptr when out of memory
/// (it may also throw rtx::Error for other failures); `free(ptr, bytes)` returns it.
struct AllocatorBacking {
  std::function<void*(size_t bytes)> alloc;
  std::function<void(void* ptr, size_t bytes)> free;
  std::string name;  ///< for messages, e.g. "cuda:0" or "host"
};

/// Allocator knobs (the "memory planner" proposes changes to these). All sizes in bytes.
/// Rounding and segment sizes follow PyTorch's CUDACachingAllocator (512 B blocks, 2 MiB
/// segments for requests up to 1 MiB, larger segments rounded to 2 MiB).
struct AllocatorConfig {
  bool caching = true;                   ///< false: every allocate/deallocate goes to the backing
  size_t round_bytes = 512;              ///< block granularity; a power of two >= 16
  size_t small_limit = 1 << 20;          ///< requests <= this come from the small pool
  size_t small_segment_bytes = 2 << 20;  ///< segment size of the small pool (>= small_limit)
  size_t large_round_bytes = 2 << 20;    ///< large segments are the request rounded up to this
  size_t pool_limit_bytes = 0;           ///< max reserved bytes; 0 means no limit
};

/// Counters of one allocator. "allocated" counts live blocks at their rounded size;
/// "reserved" counts segments obtained from the backing.
struct AllocatorStats {
  size_t allocated_bytes = 0, reserved_bytes = 0;
  size_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  size_t segments = 0;                      ///< live segments
  size_t live_blocks = 0;                   ///< blocks handed out and not yet freed
  uint64_t alloc_count = 0, free_count = 0;  ///< allocate()/deallocate() calls that did something
  uint64_t backing_allocs = 0, backing_frees = 0;  ///< segments obtained from / returned to the backing
  uint64_t limit_flushes = 0;              ///< times the pool limit or an OOM forced empty_cache()
  size_t largest_free_block = 0;           ///< biggest cached free block, bytes
  /// (reserved - allocated) / reserved * 100: reserved-but-free share of reserved; 0 when nothing is reserved.
  double fragmentation_pct() const noexcept {
    return reserved_bytes == 0 ? 0.0
                               : 100.0 * static_cast<double>(reserved_bytes - allocated_bytes) /
                                     static_cast<double>(reserved_bytes);
  }
};

/// A caching allocator: requests are rounded up to `round_bytes`; requests up to
/// `small_limit` are carved out of `small_segment_bytes` segments, larger ones out of
/// segments rounded to `large_round_bytes`. Freed blocks are cached in size-ordered free
/// lists (one small pool, one large pool), reused best-fit, split when larger than needed
/// and coalesced with free neighbours in the same segment. Thread-safe (one mutex).
/// Block addresses are aligned to `round_bytes` when the backing's segments are.
class CachingAllocator {
 public:
  /// Throws rtx::Error(Usage) naming the bad knob when `config` is invalid.
  explicit CachingAllocator(AllocatorBacking backing, AllocatorConfig config = {});
  /// Returns every segment to the backing (live blocks too: free them first).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` bytes; nullptr for 0 bytes. When the pool limit (or the
  /// backing) runs out, frees the cache and retries once, then throws rtx::Error(Environment)
  /// "out of device memory: requested X, reserved Y, limit Z".
  /// Telemetry (core/events.hpp, topic "alloc.frag"): when events are on, an event with the
  /// pool's state {allocator, reason, reserved_bytes, allocated_bytes, fragmentation_pct,
  /// largest_free_block, segments, live_blocks, alloc_count} follows every allocation burst
  /// that grew the pool (reason "segment": a new segment from the backing), a flush forced by
  /// the limit or an OOM ("flush"), every 1024th allocation ("periodic"), and empty_cache()
  /// ("empty_cache"). Emitted after the lock is released.
  void* allocate(size_t bytes);
  /// Return a block from allocate(); nullptr is a no-op. Throws rtx::Error(Usage) for a
  /// pointer this allocator did not hand out (or already freed).
  void deallocate(void* ptr);
  /// Return every fully free segment to the backing.
  void empty_cache();
  /// Rounded size of a live block (what allocated_bytes counts). Throws Usage if unknown.
  size_t block_size(const void* ptr) const;

  AllocatorStats stats() const;
  /// Set the peaks to the current values.
  void reset_peaks();
  AllocatorConfig config() const;
  /// Change the knobs; applies to later allocations (cached segments stay). Throws Usage if invalid.
  void set_config(const AllocatorConfig& config);
  /// Rounded block size for a request of `bytes` under the current config.
  size_t round_size(size_t bytes) const;
  const std::string& name() const noexcept { return backing_.name; }

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeList = std::set<Block*, BySize>;

  void* allocate_locked(size_t bytes);
  AllocatorStats stats_locked() const;
  /// The fields of an "alloc.frag" event (see allocate()).
  nlohmann::json frag_event_locked(const char* reason) const;
  Block* new_segment(size_t seg_bytes, bool small);
  void release_segment(Block* b);
  void empty_cache_locked();
  static void check_config(const AllocatorConfig& c);
  size_t round_size_locked(size_t bytes) const;
  void bump_peaks();

  AllocatorBacking backing_;
  AllocatorConfig cfg_;
  mutable std::mutex mu_;
  FreeList small_free_, large_free_;
  std::unordered_map<const void*, Block*> live_;
  std::set<Block*> segment_heads_;
  AllocatorStats st_;
};

/// Host backing: 512-byte aligned operator new/delete. For tests and CPU-side pools.
AllocatorBacking host_backing();
/// CUDA backing for device `device`: cudaSetDevice + cudaMalloc / cudaFree; returns nullptr
/// on cudaErrorMemoryAllocation. Throws rtx::Error(Environment) when the CUDA backend is not
/// built or no GPU is present.
AllocatorBacking cuda_backing(int device);
/// The process-wide caching allocator of CUDA device `device` (created on first use, never
/// destroyed so it outlives static destructors). Throws rtx::Error(Environment) without a GPU
/// and rtx::Error(Usage) for a device index out of range.
CachingAllocator& cuda_allocator(int device = 0);

}  // namespace rtx
