// Tests of rtx-serve's prefix cache: the block tree (matching, sharing, partial copies, LRU
// eviction, reference counts, misuse) and the scheduler with it on, whose tokens and logprobs
// must be the same bits as with it off, under reuse, concurrency and a pool small enough to evict.
#include <catch2/catch.hpp>

#include <vector>

#include "models/gpt2_ref.hpp"
#include "rtx/core/error.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "rtx/serve/prefix_cache.hpp"
#include "rtx/serve/scheduler.hpp"
#include "serve/serve_test_util.hpp"

using namespace rtx;
using namespace rtx::serve;
using rtx::test::char_tok;
using rtx::test::Collector;
using rtx::test::make_cfg;
using rtx::test::random_ids;
using rtx::test::random_params;

TEST_CASE("prefix cache: matching full and partial blocks, sharing, limits", "[cpu][serve]") {
  KvCache kv(1, 1, 2, 4, 6);  // blocks of 4 positions
  PrefixCache pc(kv);
  const std::vector<int32_t> s = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(pc.match(s.data(), 9, 8).tokens(4) == 0);  // empty
  const int a = pc.alloc(), b = pc.alloc(), c = pc.alloc();
  CHECK(pc.insert(-1, s.data(), 4, a) == a);      // [1 2 3 4]
  CHECK(pc.insert(a, s.data() + 4, 2, b) == b);   // [5 6] after it (a finished sequence's tail)
  CHECK(pc.nodes() == 2);
  CHECK(pc.unheld() == 0);
  // The same tokens are not cached twice: the existing node comes back.
  CHECK(pc.insert(-1, s.data(), 4, c) == a);
  CHECK(pc.insert(-1, s.data(), 3, c) == a);      // a prefix of a cached block
  CHECK_FALSE(pc.is_node(c));
  pc.release(c);                                  // not a node: back to the pool
  pc.release(a);
  pc.release(b);
  CHECK(pc.unheld() == 2);
  CHECK(pc.available() == 6);  // 4 free + 2 cached, reclaimable

  // [1..7], limit 6: block a shared, then 2 positions of b copied.
  auto m = pc.match(s.data(), 7, 6);
  CHECK(m.shared == std::vector<int>{a});
  CHECK(m.copy_from == b);
  CHECK(m.copy_tokens == 2);
  CHECK(m.tokens(4) == 6);
  // The limit cuts a full block: its first 3 positions are copied, nothing shared.
  m = pc.match(s.data(), 4, 3);
  CHECK(m.shared.empty());
  CHECK(m.copy_from == a);
  CHECK(m.copy_tokens == 3);
  // A divergence inside the second block.
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 9, 9};
  m = pc.match(t.data(), 7, 6);
  CHECK(m.shared == std::vector<int>{a});
  CHECK(m.copy_tokens == 1);
  // No common first token: no match.
  const std::vector<int32_t> u = {2, 2, 3, 4, 5};
  CHECK(pc.match(u.data(), 5, 4).tokens(4) == 0);
  // Limit 0 (a one-token prompt): nothing.
  CHECK(pc.match(s.data(), 1, 0).tokens(4) == 0);
}

TEST_CASE("prefix cache: LRU eviction of unheld leaves; held nodes stay; misuse is Error(Internal)", "[cpu][serve]") {
  KvCache kv(1, 1, 2, 2, 4);  // blocks of 2 positions, 4 blocks
  PrefixCache pc(kv);
  const std::vector<int32_t> s = {1, 2, 3, 4, 5, 6};
  const int a = pc.alloc(), b = pc.alloc(), c = pc.alloc(), d = pc.alloc();
  CHECK(pc.alloc() == -1);  // pool empty, nothing cached
  pc.insert(-1, s.data(), 2, a);     // [1 2]
  pc.insert(a, s.data() + 2, 2, b);  // [1 2][3 4]
  const std::vector<int32_t> o = {7, 8};
  pc.insert(-1, o.data(), 2, c);     // [7 8]
  pc.release(c);                     // released first: least recently used
  pc.release(b);
  pc.release(a);
  pc.release(d);                     // a plain block: back to the pool
  CHECK(pc.unheld() == 3);
  CHECK(pc.available() == 4);
  CHECK(pc.alloc() == d);            // free blocks go first
  // Holding [1 2] keeps it and (being an inner node) its chain's root; its leaf b is unheld.
  pc.hold(a);
  CHECK(pc.unheld() == 2);
  CHECK(pc.unheld_among({a, b, c}) == 2);
  CHECK(pc.alloc() == c);            // the oldest unheld leaf
  CHECK_FALSE(pc.is_node(c));
  CHECK(pc.alloc() == b);            // then b; a is held
  CHECK(pc.alloc() == -1);
  CHECK(pc.is_node(a));
  CHECK(pc.match(s.data(), 6, 5).tokens(2) == 2);  // [1 2] still matches, [3 4] is gone
  pc.release(a);
  CHECK(pc.alloc() == a);            // now a leaf and unheld
  CHECK(pc.nodes() == 0);

  // Misuse.
  CHECK_THROWS_AS(pc.hold(a), Error);                  // not a node
  const int e = a;
  pc.insert(-1, s.data(), 2, e);
  CHECK_THROWS_AS(pc.insert(-1, s.data(), 2, e), Error);   // already a node
  CHECK_THROWS_AS(pc.insert(b, s.data(), 2, c), Error);    // parent not a node
  CHECK_THROWS_AS(pc.insert(-1, s.data(), 3, c), Error);   // more tokens than a block
  CHECK_THROWS_AS(pc.insert(-1, s.data(), 0, c), Error);
  pc.release(e);
  CHECK_THROWS_AS(pc.release(e), Error);                   // released twice
  pc.insert(-1, o.data(), 1, c);                           // a partial block cannot be a parent
  CHECK_THROWS_AS(pc.insert(c, s.data(), 2, b), Error);
}

TEST_CASE("kv cache: copy_block copies every layer's keys and values", "[cpu][serve]") {
  KvCache kv(3, 2, 4, 5, 3);
  for (int l = 0; l < 3; ++l)
    for (int i = 0; i < 2 * 5 * 4; ++i) {
      kv.k(l, 1)[i] = static_cast<float>(1000 * l + i);
      kv.v(l, 1)[i] = static_cast<float>(-1000 * l - i);
    }
  REQUIRE(kv.copy_block(2, 1));
  for (int l = 0; l < 3; ++l)
    for (int i = 0; i < 2 * 5 * 4; ++i) {
      CHECK(kv.k(l, 2)[i] == static_cast<float>(1000 * l + i));
      CHECK(kv.v(l, 2)[i] == static_cast<float>(-1000 * l - i));
    }
  CHECK_THROWS_AS(kv.copy_block(3, 1), Error);
  KvCache none(1, 1, 1, 1, 2, false);  // no host pool, no device pool attached: cannot copy
  CHECK_FALSE(none.copy_block(0, 1));
}

namespace {

GenRequest req(std::vector<int32_t> prompt, int max_tokens) {
  GenRequest g;
  g.prompt = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  g.top_logprobs = 2;
  return g;
}

/// Prompts sharing prefixes of several lengths (across block boundaries and inside blocks),
/// repeats, and unrelated ones.
std::vector<std::vector<int32_t>> prompts(int V) {
  const auto base = random_ids(23, V, 5);
  std::vector<std::vector<int32_t>> p;
  p.push_back(base);                                          // cold
  p.push_back(base);                                          // the same again
  p.emplace_back(base.begin(), base.begin() + 9);             // a prefix of it
  auto fork = std::vector<int32_t>(base.begin(), base.begin() + 13);
  for (int32_t x : random_ids(6, V, 6)) fork.push_back(x);    // diverges after 13
  p.push_back(fork);
  p.push_back(random_ids(17, V, 7));                          // unrelated
  p.push_back({base[0]});                                     // one token
  p.emplace_back(base.begin(), base.begin() + 8);             // exactly two blocks
  return p;
}

}  // namespace

TEST_CASE("scheduler with the prefix cache: the same bits as without it; hits counted; nothing leaks",
          "[cpu][serve]") {
  const auto c = make_cfg(67, 48, 3, 2, 64);
  auto m = make_gpt2_model(c, random_params(c, 31), char_tok(67), ModelInfo{}, LoadOptions{});
  const auto ps = prompts(67);
  const int max_tokens = 9;
  // Reference: the cache off, one request at a time.
  std::vector<std::vector<int32_t>> ref_tok;
  std::vector<std::vector<float>> ref_lp;
  {
    SchedulerConfig sc;
    sc.prefix_cache = false;
    sc.kv_block_tokens = 4;
    Scheduler s(*m, sc);
    for (const auto& p : ps) {
      Collector r;
      REQUIRE(s.submit(req(p, max_tokens), r.fn()));
      REQUIRE(r.wait() == Finish::Length);
      ref_tok.push_back(r.tokens);
      ref_lp.push_back(r.logprobs);
    }
    CHECK(s.stats().prefix_cache_hits == 0);
  }

  SECTION("one at a time: hits where the prompts share cached positions") {
    SchedulerConfig sc;
    sc.kv_block_tokens = 4;
    Scheduler s(*m, sc);
    std::vector<int> cached;
    for (size_t i = 0; i < ps.size(); ++i) {
      Collector r;
      auto h = s.submit(req(ps[i], max_tokens), r.fn());
      REQUIRE(h);
      REQUIRE(r.wait() == Finish::Length);
      CHECK(r.tokens == ref_tok[i]);
      CHECK(r.logprobs == ref_lp[i]);  // bitwise: == on floats
      cached.push_back(s.times(h).cached_tokens);
    }
    // cold; 22 of 23 (the last is computed for its logits); 8 of 9; 13 (the fork point);
    // unrelated; a one-token prompt computes its token; 7 of 8.
    CHECK(cached == std::vector<int>{0, 22, 8, 13, 0, 0, 7});
    const auto st = s.stats();
    CHECK(st.prefix_cache_hits == 22 + 8 + 13 + 7);
    size_t total = 0;
    for (const auto& p : ps) total += p.size();
    CHECK(st.prefix_cache_queries == total);
    CHECK(st.kv_blocks_used == 0);
    CHECK(st.kv_blocks_cached > 0);
  }

  SECTION("all at once and twice over, with a pool that must evict") {
    SchedulerConfig sc;
    sc.kv_block_tokens = 4;
    sc.max_batch = 3;
    sc.prefill_chunk = 5;
    sc.kv_blocks = 24;  // each request reserves up to 8 blocks: cached ones get evicted
    Scheduler s(*m, sc);
    std::vector<std::unique_ptr<Collector>> rs;
    for (int round = 0; round < 2; ++round)
      for (const auto& p : ps) {
        rs.push_back(std::make_unique<Collector>());
        REQUIRE(s.submit(req(p, max_tokens), rs.back()->fn()));
      }
    for (size_t i = 0; i < rs.size(); ++i) {
      REQUIRE(rs[i]->wait() == Finish::Length);
      CHECK(rs[i]->tokens == ref_tok[i % ps.size()]);
      CHECK(rs[i]->logprobs == ref_lp[i % ps.size()]);
    }
    const auto st = s.stats();
    CHECK(st.prefix_cache_hits > 0);
    CHECK(st.kv_blocks_used == 0);
    CHECK(st.kv_blocks_cached <= 24);
  }
}

TEST_CASE("scheduler with the prefix cache: a hit the full pool cannot pin is cut, never half-applied",
          "[cpu][serve]") {
  // The pool holds exactly one request. A's blocks all stay cached; B shares A's first block and
  // matches the next in part, but pinning that block for the copy would leave one block short,
  // so B takes only the shared block (and must still give the same bits as without the cache).
  const auto c = make_cfg(67, 48, 3, 2, 64);
  auto m = make_gpt2_model(c, random_params(c, 41), char_tok(67), ModelInfo{}, LoadOptions{});
  const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {1, 2, 3, 4, 5, 6};
  const auto run = [&](bool cache, std::vector<int>* cached) {
    SchedulerConfig sc;
    sc.prefix_cache = cache;
    sc.kv_block_tokens = 4;
    sc.kv_blocks = 3;
    sc.max_batch = 1;
    Scheduler s(*m, sc);
    std::vector<std::vector<float>> out;
    for (const auto& [p, n] : {std::pair{a, 6}, std::pair{b, 4}, std::pair{a, 6}}) {
      Collector r;
      auto h = s.submit(req(p, n), r.fn());
      REQUIRE(h);
      REQUIRE(r.wait() == Finish::Length);
      out.push_back(r.logprobs);
      if (cached) cached->push_back(s.times(h).cached_tokens);
    }
    CHECK(s.stats().kv_blocks_used == 0);
    return out;
  };
  std::vector<int> cached;
  const auto with = run(true, &cached);
  const auto without = run(false, nullptr);
  CHECK(with == without);
  CHECK(cached == std::vector<int>{0, 4, 4});  // B: the shared block only; A again: its first block
}

TEST_CASE("scheduler config: prefix_cache in JSON", "[cpu][serve]") {
  SchedulerConfig c;
  CHECK(c.prefix_cache);
  CHECK(c.to_json()["prefix_cache"] == true);
  CHECK_FALSE(SchedulerConfig::from_json(nlohmann::json{{"prefix_cache", false}}).prefix_cache);
  CHECK_THROWS_AS(SchedulerConfig::from_json(nlohmann::json{{"prefix_cache", 1}}), Error);
}
