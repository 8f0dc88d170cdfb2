// CachingAllocator on a counting host backing: exact stats after scripted sequences, the
// fragmentation formula, best-fit reuse, split/coalesce, pool limit, and a random fuzz
// against a simple model (patterns written into live blocks must survive, no overlap).
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <new>
#include <thread>
#include <vector>

#include "rtx/core/allocator.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"

using namespace rtx;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Host backing that counts calls and live bytes, and can pretend to run out at `capacity`.
struct Counting {
  size_t allocs = 0, frees = 0, live_bytes = 0, capacity = SIZE_MAX;
  std::map<void*, size_t> live;
  AllocatorBacking backing() {
    AllocatorBacking b;
    b.alloc = [this](size_t n) -> void* {
      if (live_bytes + n > capacity) return nullptr;
      void* p = ::operator new(n, std::align_val_t(512));
      ++allocs;
      live_bytes += n;
      live[p] = n;
      return p;
    };
    b.free = [this](void* p, size_t n) {
      REQUIRE(live.count(p) == 1);
      REQUIRE(live[p] == n);
      live.erase(p);
      ++frees;
      live_bytes -= n;
      ::operator delete(p, std::align_val_t(512));
    };
    b.name = "counting-host";
    return b;
  }
};

double frag(double reserved, double allocated) { return reserved == 0 ? 0 : (reserved - allocated) / reserved * 100.0; }

}  // namespace

TEST_CASE("allocator: exact stats after a scripted sequence", "[cpu]") {
  Counting c;
  CachingAllocator a(c.backing());
  CHECK(a.allocate(0) == nullptr);
  void* p1 = a.allocate(1000);  // -> 1024 B block of a 2 MiB small segment
  auto s = a.stats();
  CHECK(s.allocated_bytes == 1024);
  CHECK(s.reserved_bytes == 2 * MiB);
  CHECK(s.segments == 1);
  CHECK(s.alloc_count == 1);
  CHECK(c.allocs == 1);
  CHECK(s.fragmentation_pct() == Approx(frag(2 * MiB, 1024)));
  CHECK(a.block_size(p1) == 1024);
  void* p2 = a.allocate(1);  // -> 512 B
  CHECK(a.block_size(p2) == 512);
  CHECK(static_cast<char*>(p2) == static_cast<char*>(p1) + 1024);  // split off the same segment
  void* p3 = a.allocate(3 * MiB);  // large: block 3 MiB in a 4 MiB segment
  s = a.stats();
  CHECK(s.allocated_bytes == 1536 + 3 * MiB);
  CHECK(s.reserved_bytes == 6 * MiB);
  CHECK(s.segments == 2);
  CHECK(s.live_blocks == 3);
  CHECK(s.largest_free_block == 2 * MiB - 1536);
  CHECK(c.allocs == 2);
  CHECK(s.fragmentation_pct() == Approx(frag(6.0 * MiB, 1536.0 + 3 * MiB)));
  a.deallocate(p2);
  a.deallocate(p1);
  s = a.stats();
  CHECK(s.allocated_bytes == 3 * MiB);
  CHECK(s.reserved_bytes == 6 * MiB);  // cached, not returned
  CHECK(s.free_count == 2);
  CHECK(s.peak_allocated_bytes == 1536 + 3 * MiB);
  CHECK(s.peak_reserved_bytes == 6 * MiB);
  CHECK(s.largest_free_block == 2 * MiB);  // the small segment coalesced back into one block
  CHECK(c.frees == 0);
  CHECK(s.fragmentation_pct() == Approx(50.0));
  a.empty_cache();
  s = a.stats();
  CHECK(s.reserved_bytes == 4 * MiB);
  CHECK(s.segments == 1);
  CHECK(s.backing_frees == 1);
  CHECK(c.frees == 1);
  CHECK(s.fragmentation_pct() == Approx(25.0));
  a.deallocate(p3);
  a.empty_cache();
  s = a.stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.reserved_bytes == 0);
  CHECK(s.segments == 0);
  CHECK(s.fragmentation_pct() == 0.0);
  CHECK(s.peak_reserved_bytes == 6 * MiB);
  a.reset_peaks();
  CHECK(a.stats().peak_reserved_bytes == 0);
  CHECK(c.allocs == c.frees);
}

TEST_CASE("allocator: freed blocks are reused without calling the backing", "[cpu]") {
  Counting c;
  CachingAllocator a(c.backing());
  void* p = a.allocate(1000);
  a.deallocate(p);
  CHECK(a.allocate(700) == p);  // rounds to the same 1024 B class, best fit is p
  void* big = a.allocate(5 * MiB + 3);
  CHECK(a.block_size(big) == 5 * MiB + 512);
  a.deallocate(big);
  CHECK(a.allocate(5 * MiB) == big);
  CHECK(c.allocs == 2);
  CHECK(a.stats().backing_allocs == 2);
  CHECK(a.stats().alloc_count == 4);
}

TEST_CASE("allocator: best fit, split and coalesce", "[cpu]") {
  Counting c;
  CachingAllocator a(c.backing());
  char* a1 = static_cast<char*>(a.allocate(4096));
  char* s1 = static_cast<char*>(a.allocate(512));
  char* a2 = static_cast<char*>(a.allocate(1024));
  char* s2 = static_cast<char*>(a.allocate(512));
  char* a3 = static_cast<char*>(a.allocate(2048));
  char* s3 = static_cast<char*>(a.allocate(512));
  CHECK(s1 == a1 + 4096);
  CHECK(a3 == s2 + 512);
  a.deallocate(a1);
  a.deallocate(a2);
  a.deallocate(a3);
  CHECK(a.allocate(1000) == a2);  // 1024: exact fit, not the 2 MiB tail nor a1
  CHECK(a.allocate(2000) == a3);  // 2048
  char* x = static_cast<char*>(a.allocate(3000));  // 3072 from a1 (4096), split
  CHECK(x == a1);
  CHECK(a.allocate(1024) == a1 + 3072);  // the 1024 B remainder of the split
  CHECK(c.allocs == 1);

  // coalesce: three neighbours freed in the order left, right, middle merge to one segment
  Counting c2;
  CachingAllocator b(c2.backing());
  char* l = static_cast<char*>(b.allocate(1024));
  char* m = static_cast<char*>(b.allocate(1024));
  char* r = static_cast<char*>(b.allocate(1024));
  CHECK(m == l + 1024);
  CHECK(r == m + 1024);
  b.deallocate(l);
  b.deallocate(r);  // merges with the free tail
  CHECK(b.stats().largest_free_block == 2 * MiB - 2048);
  b.deallocate(m);  // merges left and right
  CHECK(b.stats().largest_free_block == 2 * MiB);
  CHECK(b.allocate(1 * MiB) == l);  // the merged block is reused from its start
  CHECK(c2.allocs == 1);
  CHECK(s3 == a3 + 2048);
}

TEST_CASE("allocator: small and large pools are separate", "[cpu]") {
  Counting c;
  CachingAllocator a(c.backing());
  void* big = a.allocate(3 * MiB);  // 4 MiB segment, 1 MiB free tail in the large pool
  void* small = a.allocate(1 * KiB);  // must not come from the large tail
  CHECK(a.stats().segments == 2);
  CHECK(static_cast<char*>(small) != static_cast<char*>(big) + 3 * MiB);
  void* mid = a.allocate(1 * MiB + 512);  // large, 1 MiB + 512 does not fit the 1 MiB tail
  CHECK(a.stats().segments == 3);
  void* tail = a.allocate(1 * MiB);  // exactly small_limit: small pool
  CHECK(static_cast<char*>(tail) != static_cast<char*>(big) + 3 * MiB);
  a.deallocate(big);
  a.deallocate(small);
  a.deallocate(mid);
  a.deallocate(tail);
  a.empty_cache();
  CHECK(c.live_bytes == 0);
}

TEST_CASE("allocator: pool limit frees the cache and then fails with a clear error", "[cpu]") {
  Counting c;
  AllocatorConfig cfg;
  cfg.pool_limit_bytes = 5 * MiB;
  CachingAllocator a(c.backing(), cfg);
  void* big = a.allocate(3 * MiB);  // 4 MiB reserved
  try {
    a.allocate(KiB);  // needs a 2 MiB small segment: 6 > 5 MiB, nothing cached to free
    FAIL("pool limit not enforced");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
    const std::string m = e.message();
    CHECK(m.find("out of device memory: requested 2097152 B") != std::string::npos);
    CHECK(m.find("reserved 4194304 B") != std::string::npos);
    CHECK(m.find("limit 5242880 B") != std::string::npos);
  }
  CHECK(a.stats().limit_flushes == 1);
  CHECK(a.stats().reserved_bytes == 4 * MiB);
  a.deallocate(big);  // cached: reserved stays 4 MiB
  void* s = a.allocate(KiB);  // flush frees the 4 MiB segment, then fits
  CHECK(s != nullptr);
  auto st = a.stats();
  CHECK(st.limit_flushes == 2);
  CHECK(st.reserved_bytes == 2 * MiB);
  CHECK(st.backing_frees == 1);
  // a single request above the limit
  CHECK_THROWS_AS(a.allocate(6 * MiB), Error);
  a.deallocate(s);
}

TEST_CASE("allocator: backing out of memory frees the cache and retries", "[cpu]") {
  Counting c;
  c.capacity = 5 * MiB;
  CachingAllocator a(c.backing());
  a.deallocate(a.allocate(KiB));  // a cached 2 MiB small segment
  void* p = a.allocate(4 * MiB);  // 2 + 4 > 5: backing fails, cache flushed, retry works
  CHECK(p != nullptr);
  CHECK(c.frees == 1);
  CHECK(a.stats().limit_flushes == 1);
  try {
    a.allocate(4 * MiB);
    FAIL("backing exhaustion not reported");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Environment);
    CHECK(std::string(e.what()).find("out of device memory") != std::string::npos);
    CHECK(e.where() == "counting-host");
  }
  a.deallocate(p);
}

TEST_CASE("allocator: caching off goes to the backing every time", "[cpu]") {
  Counting c;
  AllocatorConfig cfg;
  cfg.caching = false;
  CachingAllocator a(c.backing(), cfg);
  void* p = a.allocate(100);
  void* q = a.allocate(3 * MiB + 1);
  auto s = a.stats();
  CHECK(s.reserved_bytes == 512 + 3 * MiB + 512);
  CHECK(s.allocated_bytes == s.reserved_bytes);
  CHECK(s.fragmentation_pct() == 0.0);
  a.deallocate(p);
  a.deallocate(q);
  CHECK(c.allocs == 2);
  CHECK(c.frees == 2);
  CHECK(a.stats().reserved_bytes == 0);
}

TEST_CASE("allocator: config knobs and bad input", "[cpu]") {
  Counting c;
  AllocatorConfig cfg;
  cfg.round_bytes = 256;
  cfg.small_segment_bytes = 64 * KiB;
  cfg.small_limit = 16 * KiB;
  cfg.large_round_bytes = 128 * KiB;
  CachingAllocator a(c.backing(), cfg);
  void* p = a.allocate(1);
  CHECK(a.block_size(p) == 256);
  CHECK(a.stats().reserved_bytes == 64 * KiB);
  void* q = a.allocate(17 * KiB);  // large: segment round_up(17 KiB, 128 KiB)
  CHECK(a.stats().reserved_bytes == 64 * KiB + 128 * KiB);
  CHECK(a.round_size(257) == 512);
  AllocatorConfig bad = cfg;
  bad.round_bytes = 100;
  CHECK_THROWS_AS(a.set_config(bad), Error);
  bad = cfg;
  bad.small_segment_bytes = 8 * KiB;  // below small_limit
  CHECK_THROWS_AS(a.set_config(bad), Error);
  CHECK_THROWS_AS(CachingAllocator(c.backing(), bad), Error);
  CHECK(a.config().round_bytes == 256);
  int local = 0;
  try {
    a.deallocate(&local);
    FAIL("unknown pointer accepted");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Usage);
  }
  a.deallocate(p);
  CHECK_THROWS_AS(a.deallocate(p), Error);  // double free
  a.deallocate(nullptr);
  a.deallocate(q);
  CHECK_THROWS_AS(CachingAllocator(AllocatorBacking{}), Error);
}

TEST_CASE("allocator: destructor returns every segment", "[cpu]") {
  Counting c;
  {
    CachingAllocator a(c.backing());
    a.allocate(100);
    a.allocate(3 * MiB);
    void* q = a.allocate(5 * MiB);
    a.deallocate(q);
  }
  CHECK(c.allocs == 3);
  CHECK(c.frees == 3);
  CHECK(c.live_bytes == 0);
}

TEST_CASE("allocator: random alloc/free against a model", "[cpu]") {
  Counting c;
  AllocatorConfig cfg;
  cfg.small_limit = 16 * KiB;
  cfg.small_segment_bytes = 64 * KiB;
  cfg.large_round_bytes = 256 * KiB;
  CachingAllocator a(c.backing(), cfg);
  struct Live {
    size_t req, rounded;
    uint8_t tag;
  };
  std::map<char*, Live> live;  // the model: address -> block
  Philox rng(7);
  size_t model_alloc = 0;
  uint64_t allocs = 0, frees = 0;
  const auto verify = [](char* p, const Live& b) {
    for (size_t i = 0; i < b.req; ++i)
      if (static_cast<uint8_t>(p[i]) != static_cast<uint8_t>(b.tag + i)) return false;
    return true;
  };
  for (int step = 0; step < 6000; ++step) {
    const bool do_alloc = live.empty() || (rng.next_u32() % 100) < 55;
    if (do_alloc) {
      const uint32_t k = rng.next_u32() % 10;
      size_t req = k < 6 ? 1 + rng.next_u32() % (4 * KiB) : k < 9 ? 1 + rng.next_u32() % (32 * KiB)
                                                                  : 1 + rng.next_u32() % (700 * KiB);
      char* p = static_cast<char*>(a.allocate(req));
      REQUIRE(p != nullptr);
      REQUIRE(reinterpret_cast<uintptr_t>(p) % 512 == 0);
      const size_t rounded = (req + 511) / 512 * 512;
      REQUIRE(a.block_size(p) == rounded);
      // no overlap with live blocks
      auto next = live.lower_bound(p);
      if (next != live.end()) REQUIRE(p + rounded <= next->first);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        REQUIRE(prev->first + prev->second.rounded <= p);
      }
      const uint8_t tag = static_cast<uint8_t>(rng.next_u32());
      for (size_t i = 0; i < req; ++i) p[i] = static_cast<char>(static_cast<uint8_t>(tag + i));
      live[p] = Live{req, rounded, tag};
      model_alloc += rounded;
      ++allocs;
    } else {
      auto it = live.begin();
      std::advance(it, rng.next_u32() % live.size());
      REQUIRE(verify(it->first, it->second));
      a.deallocate(it->first);
      model_alloc -= it->second.rounded;
      live.erase(it);
      ++frees;
    }
    if (step % 997 == 0) a.empty_cache();
    const auto s = a.stats();
    REQUIRE(s.allocated_bytes == model_alloc);
    REQUIRE(s.live_blocks == live.size());
    REQUIRE(s.reserved_bytes == c.live_bytes);
    REQUIRE(s.segments == c.live.size());
    REQUIRE(s.alloc_count == allocs);
    REQUIRE(s.free_count == frees);
    REQUIRE(s.reserved_bytes >= s.allocated_bytes);
  }
  for (auto& [p, b] : live) {
    REQUIRE(verify(p, b));
    a.deallocate(p);
  }
  const auto s = a.stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.peak_allocated_bytes > 0);
  CHECK(s.backing_allocs >= 2);
  a.empty_cache();
  CHECK(a.stats().reserved_bytes == 0);
  CHECK(c.allocs == c.frees);
}

TEST_CASE("allocator: concurrent alloc/free from several threads", "[cpu]") {
  Counting c;
  CachingAllocator a(c.backing());
  std::vector<std::thread> ts;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      Philox rng(100 + t);
      std::vector<std::pair<char*, size_t>> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.size() < 8 && (rng.next_u32() & 1)) {
          const size_t n = 1 + rng.next_u32() % 3000;
          char* p = static_cast<char*>(a.allocate(n));
          std::memset(p, t + 1, n);
          mine.emplace_back(p, n);
        } else if (!mine.empty()) {
          auto [p, n] = mine.back();
          mine.pop_back();
          for (size_t k = 0; k < n; ++k) bad[t] += p[k] != static_cast<char>(t + 1);
          a.deallocate(p);
        }
      }
      for (auto [p, n] : mine) a.deallocate(p);
    });
  }
  for (auto& th : ts) th.join();
  for (int b : bad) CHECK(b == 0);
  CHECK(a.stats().allocated_bytes == 0);
  CHECK(a.stats().alloc_count == a.stats().free_count);
}
