// Tests of rtx-serve's engine: the paged KV cache, the GPT-2 serving model against a float64
// forward, batch invariance (bitwise), bad input, loading from GGUF and checkpoints.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "models/gpt2_ref.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/dtype.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/io/gguf.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/models/export.hpp"
#include "rtx/serve/attention.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "rtx/serve/generate.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/scheduler.hpp"
#include "rtx/serve/tuning.hpp"
#include "serve/serve_test_util.hpp"
#include "test_util.hpp"

using namespace rtx;
using namespace rtx::serve;
using rtx::test::make_cfg;
using rtx::test::random_ids;
using rtx::test::random_params;
using rtx::test::reference_logits;
using rtx::test::rel_err;
using rtx::test::char_tok;
using rtx::test::Collector;
using rtx::test::reserve;
using rtx::test::run_alone;
using rtx::test::Seq;

namespace {

std::unique_ptr<Model> tiny_model(const models::Gpt2Config& c, uint64_t seed, int threads = 0) {
  LoadOptions o;
  o.threads = threads;
  return make_gpt2_model(c, random_params(c, seed), char_tok(c.vocab_size), ModelInfo{}, o);
}

}  // namespace

TEST_CASE("kv cache: blocks are handed out once, freed once, and counted", "[cpu][serve]") {
  KvCache kv(2, 3, 5, 4, 3);
  CHECK(kv.total_blocks() == 3);
  CHECK(kv.blocks_for(0) == 0);
  CHECK(kv.blocks_for(1) == 1);
  CHECK(kv.blocks_for(4) == 1);
  CHECK(kv.blocks_for(5) == 2);
  CHECK(kv.bytes() == sizeof(float) * 3 * 2 * 2 * 3 * 4 * 5);
  const int a = kv.alloc(), b = kv.alloc(), c = kv.alloc();
  CHECK(a != b);
  CHECK(b != c);
  CHECK(kv.alloc() == -1);
  CHECK(kv.used_blocks() == 3);
  // Slabs do not overlap: K and V of every (layer, block) are distinct regions.
  CHECK(kv.v(0, a) - kv.k(0, a) == 3 * 4 * 5);
  CHECK(kv.k(1, a) - kv.k(0, a) == 2 * 3 * 4 * 5);
  kv.free(b);
  CHECK(kv.free_blocks() == 1);
  CHECK_THROWS_AS(kv.free(b), Error);
  CHECK_THROWS_AS(kv.free(7), Error);
  CHECK(kv.alloc() == b);
  CHECK_THROWS_AS(KvCache(0, 1, 1, 1, 1), Error);
  CHECK_THROWS_AS(KvCache(1, 1, 1, 1, 0), Error);
}

TEST_CASE("kv cache f16: half the bytes, its own accessors, block copies, names", "[cpu][serve]") {
  KvCache kv(2, 3, 5, 4, 3, true, KvType::F16);
  CHECK(kv.type() == KvType::F16);
  CHECK(kv.bytes() == 2 * 3 * 2 * 2 * 3 * 4 * 5);
  CHECK(kv.host_storage());
  const int a = kv.alloc(), b = kv.alloc();
  CHECK(kv.v16(0, a) - kv.k16(0, a) == 3 * 4 * 5);
  CHECK(kv.k16(1, a) - kv.k16(0, a) == 2 * 3 * 4 * 5);
  CHECK_THROWS_AS(kv.k(0, a), Error);  // the f32 view of an f16 pool is a programming error
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < 3 * 4 * 5; ++i) {
      kv.k16(l, a)[i] = static_cast<uint16_t>(100 * l + i);
      kv.v16(l, a)[i] = static_cast<uint16_t>(60000 - 100 * l - i);
    }
  REQUIRE(kv.copy_block(b, a));
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < 3 * 4 * 5; ++i) {
      CHECK(kv.k16(l, b)[i] == static_cast<uint16_t>(100 * l + i));
      CHECK(kv.v16(l, b)[i] == static_cast<uint16_t>(60000 - 100 * l - i));
    }
  KvCache k32(2, 3, 5, 4, 3);
  CHECK_THROWS_AS(k32.k16(0, 0), Error);
  // kv_store's rounding (vcvtps2ph where the CPU has F16C) is f32_to_f16's, bit for bit, at the
  // edges: zeros, f16 subnormals, ties to even, the largest finite, overflow to inf; head size
  // 19 also takes the scalar tail.
  {
    const std::vector<float> edge = {0.0f, -0.0f, 1e-8f, 3e-8f, 6e-8f, -5.9604645e-8f, 3.0517578e-5f, 6.1035156e-5f,
                                     1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, -2.0f - 1.0f / 1024, 65504.0f, 65519.0f,
                                     65520.0f, -1e6f, 0.1f, -0.333333f, 1e-4f, 7.0f};
    const int HS = static_cast<int>(edge.size());
    KvCache e16(1, 2, HS, 3, 1, true, KvType::F16);
    const int32_t blk = e16.alloc();
    std::vector<float> krow(2 * HS), vrow(2 * HS);
    for (int i = 0; i < 2 * HS; ++i) krow[i] = edge[i % HS] * (i < HS ? 1.0f : -1.0f), vrow[i] = -krow[i];
    kv_store(e16, 0, &blk, 2, krow.data(), vrow.data());
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < HS; ++d) {
        INFO("head " << h << " element " << d << " value " << krow[h * HS + d]);
        CHECK(e16.k16(0, blk)[(h * 3 + 2) * HS + d] == f32_to_f16(krow[h * HS + d]));
        CHECK(e16.v16(0, blk)[(h * 3 + 2) * HS + d] == f32_to_f16(vrow[h * HS + d]));
      }
    CHECK(f32_to_f16(65520.0f) == 0x7c00);  // the reference itself: overflow is inf
    CHECK(f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);  // a tie goes to the even neighbour
  }
  // A device pool is f32: an f16 cache without host storage is refused, naming the knob.
  try {
    KvCache dev(2, 3, 5, 4, 3, false, KvType::F16);
    FAIL("an f16 pool without host storage was accepted");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::Input);
    CHECK(std::string(e.what()).find("f32") != std::string::npos);
  }
  CHECK(parse_kv_type("f16", "x") == KvType::F16);
  CHECK(parse_kv_type("float32", "x") == KvType::F32);
  CHECK(std::string(kv_type_name(KvType::F16)) == "f16");
  CHECK_THROWS_AS(parse_kv_type("q8_0", "x"), Error);
  CHECK_THROWS_AS(parse_kv_type("", "x"), Error);
}

TEST_CASE("gpt2 serving model: logits match a float64 forward at every position", "[cpu][serve]") {
  for (const auto& c : {make_cfg(67, 24, 3, 2, 16), make_cfg(7, 30, 5, 1, 9), make_cfg(65, 64, 4, 2, 40)}) {
    auto m = tiny_model(c, 11);
    const auto ids = random_ids(c.block_size, c.vocab_size, 5);
    const auto want = reference_logits(c, random_params(c, 11), ids);
    for (int bt : {1, 4, 16}) {
      KvCache kv(c.n_layer, c.n_head, c.n_embd / c.n_head, bt, 64);
      Seq s;
      s.ids = ids;
      const auto got = run_alone(*m, kv, s, {});  // one token per call: logits of every position
      REQUIRE(got.size() == ids.size());
      for (size_t t = 0; t < got.size(); ++t) {
        INFO("config V" << c.vocab_size << " C" << c.n_embd << " block_tokens " << bt << " position " << t);
        CHECK(rel_err(got[t], want, static_cast<int>(t), c.vocab_size) < 1e-5);
      }
      CHECK(kv.used_blocks() == 0);
    }
  }
}

TEST_CASE("gpt2 serving model: an f16 KV cache stays within binary16 rounding of a float64 forward", "[cpu][serve]") {
  const auto c = make_cfg(65, 64, 4, 2, 40);
  auto m = tiny_model(c, 11);
  const auto ids = random_ids(c.block_size, c.vocab_size, 5);
  const auto want = reference_logits(c, random_params(c, 11), ids);
  for (int bt : {1, 16}) {
    KvCache kv(c.n_layer, c.n_head, c.n_embd / c.n_head, bt, 64, true, KvType::F16);
    Seq s;
    s.ids = ids;
    const auto got = run_alone(*m, kv, s, {});
    REQUIRE(got.size() == ids.size());
    double worst = 0;
    for (size_t t = 0; t < got.size(); ++t) {
      INFO("block_tokens " << bt << " position " << t);
      CHECK(rel_err(got[t], want, static_cast<int>(t), c.vocab_size) < 2e-3);  // binary16: 2^-11 relative per value
      worst = std::max(worst, rel_err(got[t], want, static_cast<int>(t), c.vocab_size));
    }
    CHECK(worst > 1e-6);  // the pool really rounded (an f32 pool stays below 1e-5, mostly far below)
    CHECK(kv.used_blocks() == 0);
  }
}

TEST_CASE("gpt2 serving model: batch invariance, bitwise", "[cpu][serve]") {
  const auto c = make_cfg(67, 48, 3, 2, 64);
  for (KvType kt : {KvType::F32, KvType::F16})
  for (int threads : {1, 2}) {
    INFO("KV " << kv_type_name(kt) << ", threads " << threads);
    auto m = tiny_model(c, 3, threads);
    const int V = c.vocab_size;
    KvCache kv(c.n_layer, c.n_head, c.n_embd / c.n_head, 8, 128, true, kt);
    Seq a;
    a.ids = random_ids(19, V, 1);
    // Alone: prompt of 7 in one call, then one per call.
    const auto alone = run_alone(*m, kv, a, {7});
    // Alone, prompt split 3 + 4: the logits after the prompt and every step are the same bits.
    const auto split = run_alone(*m, kv, a, {3, 4});
    REQUIRE(split.size() == alone.size() + 1);
    for (size_t i = 0; i < alone.size(); ++i)
      REQUIRE(std::memcmp(alone[i].data(), split[i + 1].data(), V * sizeof(float)) == 0);
    // Among three others of other lengths, joining and leaving at different steps.
    std::vector<Seq> others(3);
    for (int o = 0; o < 3; ++o) others[o].ids = random_ids(5 + 11 * o, V, 100 + o);
    Seq A = a;
    std::vector<std::vector<float>> mixed;
    size_t ai = 0;
    std::vector<size_t> oi(3, 0);
    for (int step = 0; ai < A.ids.size(); ++step) {
      std::vector<SeqBatch> batch;
      std::vector<Seq*> who;
      const int na = ai == 0 ? 7 : 1;
      reserve(kv, A, A.pos + na);
      batch.push_back({A.ids.data() + ai, na, A.pos, A.blocks.data(), static_cast<int>(A.blocks.size()), true});
      who.push_back(&A);
      for (int o = 0; o < 3; ++o) {
        Seq& s = others[o];
        if (step < o || oi[o] >= s.ids.size()) continue;  // joins late, leaves when done
        const int n = std::min<int>(oi[o] == 0 ? 5 : 1, static_cast<int>(s.ids.size() - oi[o]));
        reserve(kv, s, s.pos + n);
        // Put one of them before A to move A's rows in the matmuls.
        SeqBatch b{s.ids.data() + oi[o], n, s.pos, s.blocks.data(), static_cast<int>(s.blocks.size()), o != 1};
        if (o == 0) batch.insert(batch.begin(), b);
        else batch.push_back(b);
        s.pos += n;
        oi[o] += n;
      }
      int wanted = 0;
      for (const auto& b : batch) wanted += b.want_logits;
      std::vector<float> lg(static_cast<size_t>(wanted) * V);
      m->forward(batch, kv, lg.data());
      // A's row among the wanted rows.
      int row = 0;
      for (const auto& b : batch) {
        if (b.tokens == A.ids.data() + ai) break;
        row += b.want_logits;
      }
      mixed.emplace_back(lg.begin() + static_cast<long>(row) * V, lg.begin() + static_cast<long>(row + 1) * V);
      A.pos += na;
      ai += na;
    }
    REQUIRE(mixed.size() == alone.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      INFO("threads " << threads << " call " << i);
      REQUIRE(std::memcmp(alone[i].data(), mixed[i].data(), V * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("gpt2 serving model: bad batches throw Error(Input) and change nothing", "[cpu][serve]") {
  const auto c = make_cfg(67, 24, 3, 2, 16);
  auto m = tiny_model(c, 7);
  KvCache kv(c.n_layer, c.n_head, 8, 4, 8);
  Seq s;
  s.ids = random_ids(6, c.vocab_size, 2);
  const auto clean = run_alone(*m, kv, s, {3});
  reserve(kv, s, 3);
  std::vector<float> lg(c.vocab_size);
  SeqBatch ok{s.ids.data(), 3, 0, s.blocks.data(), static_cast<int>(s.blocks.size()), true};
  m->forward({ok}, kv, lg.data());
  s.pos = 3;
  const int32_t bad_id = 67, neg_id = -1;
  const auto category = [&](SeqBatch b) {
    try {
      m->forward({b}, kv, lg.data());
    } catch (const Error& e) {
      return e.category();
    }
    return ErrorCategory::Internal;
  };
  CHECK(category({&bad_id, 1, 3, s.blocks.data(), 1, true}) == ErrorCategory::Input);
  CHECK(category({&neg_id, 1, 3, s.blocks.data(), 1, true}) == ErrorCategory::Input);
  CHECK(category({s.ids.data(), 0, 3, s.blocks.data(), 1, true}) == ErrorCategory::Input);
  CHECK(category({s.ids.data(), 2, 3, s.blocks.data(), 1, true}) == ErrorCategory::Input);  // table too short
  CHECK(category({s.ids.data(), 1, 16, s.blocks.data(), 1, true}) == ErrorCategory::Input);  // past the context
  const int32_t foreign = 99;
  CHECK(category({s.ids.data(), 1, 0, &foreign, 1, true}) == ErrorCategory::Input);
  m->forward({}, kv, nullptr);  // an empty batch does nothing
  // The sequence continues as if the bad calls never happened.
  for (int i = 3; i < 6; ++i) {
    reserve(kv, s, i + 1);
    SeqBatch b{s.ids.data() + i, 1, i, s.blocks.data(), static_cast<int>(s.blocks.size()), true};
    m->forward({b}, kv, lg.data());
    REQUIRE(std::memcmp(lg.data(), clean[i - 2].data(), lg.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("gpt2 serving model: GGUF export round trip gives the same logits", "[cpu][serve]") {
  const auto c = make_cfg(67, 24, 3, 2, 16);
  const auto params = random_params(c, 9);
  const auto dir = test::temp_dir();
  const std::string path = dir + "/m.gguf";
  auto tok = char_tok(67);
  models::export_gpt2_gguf(c, params.data(), params.size(), *tok, path);
  auto direct = make_gpt2_model(c, params, char_tok(67), ModelInfo{});
  auto loaded = load_model(path);
  CHECK(loaded->info().arch == "gpt2");
  CHECK(loaded->info().vocab == 67);
  CHECK(loaded->info().context == 16);
  CHECK(loaded->info().path == path);
  CHECK(loaded->tokenizer().kind() == "char");
  CHECK(loaded->tokenizer().encode("!#") == std::vector<int32_t>{0, 2});
  KvCache kv(c.n_layer, c.n_head, 8, 4, 8);
  Seq s;
  s.ids = random_ids(9, 67, 4);
  const auto a = run_alone(*direct, kv, s, {4});
  const auto b = run_alone(*loaded, kv, s, {4});
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(std::memcmp(a[i].data(), b[i].data(), 67 * sizeof(float)) == 0);
  // Not a model file: a clear error naming the file.
  std::ofstream(dir + "/junk.bin") << "not a model";
  CHECK_THROWS_WITH(load_model(dir + "/junk.bin"), Catch::Contains("no GGUF magic") && Catch::Contains("rtx-train checkpoint"));
  CHECK_THROWS_AS(load_model(dir + "/missing.gguf"), Error);
  // A .gguf that is not GGUF is called that (not "not a safetensors file").
  std::ofstream(dir + "/fake.gguf") << "PK\x03\x04 a zip";
  CHECK_THROWS_WITH(load_model(dir + "/fake.gguf"), Catch::Contains("not a GGUF file") && Catch::Contains("\"PK\\x03\\x04\""));
}

// ---- scheduler ------------------------------------------------------------------------------

namespace {

GenRequest greedy(std::vector<int32_t> prompt, int max_tokens, Lane lane = Lane::Interactive) {
  GenRequest g;
  g.prompt = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0;
  g.lane = lane;
  g.ignore_eos = true;
  return g;
}

}  // namespace

TEST_CASE("scheduler: tokens equal one-sequence generation; finish reasons; stop by callback", "[cpu][serve]") {
  const auto c = make_cfg(67, 24, 3, 2, 32);
  auto m = tiny_model(c, 21);
  SchedulerConfig sc;
  sc.prefill_chunk = 3;
  Scheduler s(*m, sc);
  const auto prompt = random_ids(5, 67, 8);
  // Reference: SequenceRunner + models::generate (the rtx-train sample path).
  SequenceRunner runner(*m);
  models::SamplerConfig g0;
  g0.temperature = 0;
  models::Sampler greedy_sampler(g0);
  const auto ref = models::generate(runner, prompt, 12, greedy_sampler, -1);
  Collector a;
  REQUIRE(s.submit(greedy(prompt, 12), a.fn()));
  CHECK(a.wait() == Finish::Length);
  CHECK(a.tokens == ref.tokens);
  // Stop by callback after 4 tokens.
  Collector b;
  b.stop_after = 4;
  REQUIRE(s.submit(greedy(prompt, 12), b.fn()));
  CHECK(b.wait() == Finish::Stop);
  CHECK(b.tokens.size() == 4);
  // max_tokens 0: prefill only.
  Collector z;
  REQUIRE(s.submit(greedy(prompt, 0), z.fn()));
  CHECK(z.wait() == Finish::Length);
  CHECK(z.tokens.empty());
  // The context bounds generation: 30 prompt tokens + up to 2 more positions.
  Collector full;
  REQUIRE(s.submit(greedy(random_ids(30, 67, 9), 50), full.fn()));
  CHECK(full.wait() == Finish::Length);
  CHECK(full.tokens.size() == 3);  // positions 30, 31 are fed; the third token has no room
  // The callback is released with the last event: whatever it holds (the HTTP server's Job,
  // which holds the handle) is freed with the request, not kept alive by a cycle.
  auto held = std::make_shared<int>(7);
  Collector rel;
  RequestHandle h = s.submit(greedy(prompt, 3), [&rel, held](const TokenEvent& ev) { return rel.fn()(ev); });
  REQUIRE(h);
  CHECK(rel.wait() == Finish::Length);
  for (int i = 0; i < 100 && held.use_count() > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(held.use_count() == 1);
  const auto st = s.stats();
  CHECK(st.kv_blocks_used == 0);
  CHECK(st.finished_by[static_cast<int>(Finish::Length)] == 4);
  CHECK(st.finished_by[static_cast<int>(Finish::Stop)] == 1);
}

namespace {

/// Forwards to `inner` and records each call's per-sequence token counts (decode rows first);
/// each call also sleeps `per_row` per token row, so that a step's time grows with its rows
/// clearly above timer noise (the tiny model alone takes microseconds).
class RecordingModel : public Model {
 public:
  explicit RecordingModel(Model& inner, std::chrono::microseconds per_row = {}) : inner_(inner), per_row_(per_row) {}
  const ModelInfo& info() const override { return inner_.info(); }
  const io::Tokenizer& tokenizer() const override { return inner_.tokenizer(); }
  void forward(const std::vector<SeqBatch>& batch, KvCache& kv, float* logits) override {
    std::vector<int> ns;
    for (const auto& b : batch) ns.push_back(b.n);
    {
      std::lock_guard<std::mutex> g(mu_);
      calls_.push_back(ns);
    }
    inner_.forward(batch, kv, logits);
    int rows = 0;
    for (const auto& b : batch) rows += b.n;
    if (per_row_.count() > 0) std::this_thread::sleep_for(per_row_ * rows);
  }
  std::vector<std::vector<int>> calls() {
    std::lock_guard<std::mutex> g(mu_);
    return calls_;
  }

 private:
  Model& inner_;
  std::chrono::microseconds per_row_;
  std::mutex mu_;
  std::vector<std::vector<int>> calls_;
};

}  // namespace

TEST_CASE("scheduler: a TPOT target cuts prompt chunks while an interactive sequence decodes; tokens unchanged",
          "[cpu][serve]") {
  const auto c = make_cfg(67, 24, 3, 2, 256);
  auto inner = tiny_model(c, 31);
  const auto a_prompt = random_ids(20, 67, 1);
  const auto b_prompt = random_ids(200, 67, 2);
  // A decodes; once it has 5 tokens (the step-time fit has seen A's 20-row prefill and 1-row
  // decode steps, at 1 ms per row), B's 200-token prompt arrives.
  const auto serve_pair = [&](double target_ms, std::vector<std::vector<int>>& calls, SchedulerStats& st) {
    RecordingModel rec(*inner, std::chrono::milliseconds(1));
    SchedulerConfig sc;
    sc.tpot_target_ms = target_ms;
    sc.prefix_cache = false;
    Scheduler s(rec, sc);
    Collector a, b;
    // A's 5th token holds the step thread until B is queued, so B joins while A decodes.
    std::mutex gm;
    std::condition_variable gcv;
    bool at5 = false, b_in = false;
    int count = 0;
    EventFn afn = a.fn();
    REQUIRE(s.submit(greedy(a_prompt, 200), [&](const TokenEvent& ev) {
      const bool go = afn(ev);
      if (ev.finish == Finish::None && ++count == 5) {
        std::unique_lock<std::mutex> lk(gm);
        at5 = true;
        gcv.notify_all();
        gcv.wait(lk, [&] { return b_in; });
      }
      return go;
    }));
    {
      std::unique_lock<std::mutex> lk(gm);
      REQUIRE(gcv.wait_for(lk, std::chrono::seconds(60), [&] { return at5; }));
    }
    REQUIRE(s.submit(greedy(b_prompt, 4), b.fn()));
    {
      std::lock_guard<std::mutex> lk(gm);
      b_in = true;
    }
    gcv.notify_all();
    CHECK(a.wait() == Finish::Length);
    CHECK(b.wait() == Finish::Length);
    calls = rec.calls();
    st = s.stats();
    return std::make_pair(a.tokens, b.tokens);
  };
  std::vector<std::vector<int>> free_calls, cut_calls;
  SchedulerStats free_st, cut_st;
  const auto free_out = serve_pair(0, free_calls, free_st);
  // 1 ns per step cannot be met, and a quarter of it buys no prompt token (1 ms per row): every
  // step with A's decode row takes kMinPrefillTokens of B.
  const auto cut_out = serve_pair(1e-6, cut_calls, cut_st);
  CHECK(cut_out == free_out);  // batch invariance: the chunking moves timings, never tokens
  CHECK(free_out.first.size() == 200);
  CHECK(free_out.second.size() == 4);
  const auto b_chunks = [&](const std::vector<std::vector<int>>& calls) {
    std::vector<int> out;  // B's prompt chunks: the second sequence of a two-sequence step, while B prefills
    int done = 0;
    for (const auto& ns : calls)
      if (ns.size() == 2 && done < 200) {
        out.push_back(ns[1]);
        done += ns[1];
      }
    return out;
  };
  const auto fc = b_chunks(free_calls), cc = b_chunks(cut_calls);
  CHECK(fc == std::vector<int>{200});  // no target: the whole prompt in one step (chunk 256, budget 512)
  REQUIRE(cc.size() == 13);            // 12 x 16 + 8
  for (size_t i = 0; i + 1 < cc.size(); ++i) CHECK(cc[i] == kMinPrefillTokens);
  CHECK(cc.back() == 200 - 12 * kMinPrefillTokens);
  CHECK(free_st.steps_tpot_capped == 0);
  CHECK(cut_st.steps_tpot_capped == 12);  // the last chunk (8 tokens) was not cut
  // The fit's coefficients are not checked here: by the end, ~170 one-row decode steps have
  // made the rows term collinear with the constant (the unit test above checks the fit).
}

TEST_CASE("scheduler: refusals name the reason; queue bound; timeouts; cancel; shutdown", "[cpu][serve]") {
  const auto c = make_cfg(67, 24, 3, 2, 32);
  auto m = tiny_model(c, 22);
  SchedulerConfig sc;
  sc.max_batch = 1;
  sc.max_queue = 1;
  sc.kv_block_tokens = 4;
  sc.kv_blocks = 4;  // 16 positions in the pool
  Scheduler s(*m, sc);
  Scheduler::Refusal why;
  std::string detail;
  Collector sink;
  CHECK_FALSE(s.submit(greedy({}, 4), sink.fn(), &why, &detail));
  CHECK(why == Scheduler::Refusal::BadRequest);
  CHECK_FALSE(s.submit(greedy({1, 99}, 4), sink.fn(), &why, &detail));
  CHECK(why == Scheduler::Refusal::BadRequest);
  CHECK_THAT(detail, Catch::Contains("99"));
  CHECK_FALSE(s.submit(greedy(random_ids(40, 67, 1), 1), sink.fn(), &why, &detail));
  CHECK(why == Scheduler::Refusal::TooLong);
  CHECK_FALSE(s.submit(greedy(random_ids(10, 67, 1), 10), sink.fn(), &why, &detail));  // 20 positions > pool
  CHECK(why == Scheduler::Refusal::CompletionTooLong);  // the prompt alone (11 positions) fits
  CHECK_THAT(detail, Catch::Contains("reduce max_tokens"));
  CHECK_FALSE(s.submit(greedy(random_ids(16, 67, 1), 4), sink.fn(), &why, &detail));  // 17 positions > pool
  CHECK(why == Scheduler::Refusal::TooLong);
  auto bad_sampling = greedy({1}, 2);
  bad_sampling.sampling.temperature = -1;
  CHECK_FALSE(s.submit(bad_sampling, sink.fn(), &why, &detail));
  CHECK(why == Scheduler::Refusal::BadRequest);
  // Cancel a running request: finish Cancelled, blocks back. Its first token waits in the
  // callback until the cancel is in, so the request cannot finish its 14 tokens first (it did,
  // once, under TSan).
  Collector run;
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool cancelled = false;
  auto collect = run.fn();
  auto h = s.submit(greedy({1, 2}, 14), [&](const TokenEvent& ev) {
    if (ev.finish == Finish::None) {
      std::unique_lock<std::mutex> lk(gate_mu);
      gate_cv.wait(lk, [&] { return cancelled; });
    }
    return collect(ev);
  });
  REQUIRE(h);
  s.cancel(h);
  {
    std::lock_guard<std::mutex> g(gate_mu);
    cancelled = true;
  }
  gate_cv.notify_all();
  CHECK(run.wait() == Finish::Cancelled);
  CHECK(run.tokens.size() < 14);
  CHECK(s.stats().kv_blocks_used == 0);
  CHECK(s.stats().requests_rejected == 6);
}

TEST_CASE("scheduler: the interactive lane is admitted before the batch lane", "[cpu][serve]") {
  const auto c = make_cfg(67, 24, 3, 2, 64);
  auto m = tiny_model(c, 23);
  SchedulerConfig sc;
  sc.max_batch = 1;
  sc.token_budget = 1;
  sc.prefill_chunk = 1;
  Scheduler s(*m, sc);
  Collector first, batch, inter;
  REQUIRE(s.submit(greedy(random_ids(8, 67, 1), 40), first.fn()));  // occupies the only slot
  REQUIRE(s.submit(greedy({1, 2, 3}, 3, Lane::Batch), batch.fn()));
  REQUIRE(s.submit(greedy({4, 5, 6}, 3, Lane::Interactive), inter.fn()));
  CHECK(first.wait() == Finish::Length);
  CHECK(batch.wait() == Finish::Length);
  CHECK(inter.wait() == Finish::Length);
  CHECK(inter.first_token < batch.first_token);
  const auto st = s.stats();
  CHECK(st.lane_requests[0] == 2);
  CHECK(st.lane_requests[1] == 1);
}

TEST_CASE("scheduler: a request past its timeout ends with finish timeout; shutdown cancels at the deadline",
          "[cpu][serve]") {
  const auto c = make_cfg(67, 256, 4, 4, 512);  // ~0.3 ms a step: 500 tokens take far past 50 ms
  auto m = tiny_model(c, 24, 1);
  SchedulerConfig sc;
  sc.request_timeout_s = 0.05;
  {
    Scheduler s(*m, sc);
    Collector t;
    REQUIRE(s.submit(greedy({1}, 500), t.fn()));
    CHECK(t.wait() == Finish::Timeout);
    CHECK(t.tokens.size() < 500);
  }
  sc.request_timeout_s = 600;
  Scheduler s(*m, sc);
  Collector a;
  REQUIRE(s.submit(greedy({1}, 500), a.fn()));
  const auto t0 = std::chrono::steady_clock::now();
  s.shutdown(0.02);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5);
  CHECK(a.wait() == Finish::Cancelled);
  Scheduler::Refusal why;
  Collector late;
  CHECK_FALSE(s.submit(greedy({1}, 2), late.fn(), &why));
  CHECK(why == Scheduler::Refusal::ShuttingDown);
}

TEST_CASE("scheduler config: JSON round trip and validation name the knob", "[cpu][serve]") {
  SchedulerConfig c;
  c.max_batch = 8;
  c.batch_window_ms = 2.5;
  c.kv_type = KvType::F16;
  const auto back = SchedulerConfig::from_json(c.to_json());
  CHECK(back.max_batch == 8);
  CHECK(back.batch_window_ms == 2.5);
  CHECK(back.kv_type == KvType::F16);
  CHECK(c.to_json()["kv_type"] == "f16");
  CHECK(SchedulerConfig{}.kv_type == KvType::F32);
  CHECK_THROWS_WITH(SchedulerConfig::from_json({{"kv_type", "q4"}}), Catch::Contains("kv_type") && Catch::Contains("q4"));
  CHECK_THROWS_WITH(SchedulerConfig::from_json({{"kv_type", 16}}), Catch::Contains("kv_type"));
  CHECK_THROWS_WITH(SchedulerConfig::from_json({{"max_batch", 0}}), Catch::Contains("max_batch"));
  CHECK_THROWS_WITH(SchedulerConfig::from_json({{"max_batch", "8"}}), Catch::Contains("max_batch"));
  CHECK_THROWS_WITH(SchedulerConfig::from_json({{"bogus", 1}}), Catch::Contains("bogus"));
  CHECK_THROWS_WITH(SchedulerConfig::from_json({{"token_budget", 4}, {"max_batch", 8}}), Catch::Contains("token_budget"));
  c.tpot_target_ms = 42.5;
  CHECK(SchedulerConfig::from_json(c.to_json()).tpot_target_ms == 42.5);
  CHECK(SchedulerConfig{}.tpot_target_ms == 0);  // off by default
  CHECK_THROWS_WITH(SchedulerConfig::from_json({{"tpot_target_ms", -1}}), Catch::Contains("tpot_target_ms"));
  CHECK_THROWS_WITH(SchedulerConfig::from_json({{"tpot_target_ms", "5"}}), Catch::Contains("tpot_target_ms"));
  SchedulerConfig nan_target;
  nan_target.tpot_target_ms = std::nan("");
  CHECK_THROWS_WITH(nan_target.validate(), Catch::Contains("tpot_target_ms"));
}

TEST_CASE("step time model: recovers its coefficients; they stay >= 0; it forgets", "[cpu][serve]") {
  CHECK(attended_pairs(1, 0) == 1);
  CHECK(attended_pairs(1, 9) == 10);
  CHECK(attended_pairs(7, 127) == 7 * 127 + 28);  // keys 128..134 for the 7 queries
  StepShape sh;
  sh.add(1, 9, true);     // a decode row at position 9 reads 10 keys
  sh.add(7, 127, false);  // a 7-token prompt chunk
  CHECK(sh.rows == 8);
  CHECK(sh.decode_keys == 10);
  CHECK(sh.prefill_pairs == 7 * 127 + 28);
  CHECK_THROWS_WITH(StepTimeModel(0), Catch::Contains("forget"));
  CHECK_THROWS_WITH(StepTimeModel(1.5), Catch::Contains("forget"));
  uint64_t x = 12345;
  const auto next = [&x](int mod) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((x >> 33) % static_cast<uint64_t>(mod));
  };
  // Steps of a served workload: 1-32 decode rows at random positions, a prompt chunk or none.
  const auto random_step = [&] {
    StepShape s;
    const int decode = 1 + next(32);
    for (int i = 0; i < decode; ++i) s.add(1, next(1000), true);
    if (next(2)) s.add(1 + next(300), next(600), false);
    return s;
  };
  const double coef[4] = {2e-3, 1e-4, 4e-6, 2e-8};  // seconds: per step, row, decode key, prompt pair
  const auto truth = [&](const StepShape& s, double k = 1) {
    return k * (coef[0] + coef[1] * s.rows + coef[2] * s.decode_keys + coef[3] * s.prefill_pairs);
  };
  // Exact data from known coefficients: the fit returns them.
  StepTimeModel m(0.97);
  CHECK_FALSE(m.ready());
  CHECK(m.predict(sh) == 0);
  for (int i = 0; i < 80; ++i) {
    const StepShape s = random_step();
    m.observe(s, truth(s));
    if (i == 1) CHECK_FALSE(m.ready());
  }
  REQUIRE(m.ready());
  CHECK(m.observations() == 80);
  for (int i = 0; i < 4; ++i) CHECK(m.coefficients()[i] == Approx(coef[i]).epsilon(1e-6));
  CHECK(m.predict(sh) == Approx(truth(sh)).epsilon(1e-6));
  // Bad observations are ignored.
  StepShape bad = sh;
  bad.rows = std::nan("");
  m.observe(bad, 1);
  m.observe(sh, -1);
  bad = sh;
  bad.decode_keys = INFINITY;
  m.observe(bad, 1);
  CHECK(m.observations() == 80);
  // Forgetting: after 300 steps of a machine twice as slow, the fit is the new one.
  StepTimeModel f(0.9);
  for (int i = 0; i < 40; ++i) {
    const StepShape s = random_step();
    f.observe(s, truth(s));
  }
  for (int i = 0; i < 300; ++i) {
    const StepShape s = random_step();
    f.observe(s, truth(s, 2));
  }
  for (int i = 0; i < 4; ++i) CHECK(f.coefficients()[i] == Approx(2 * coef[i]).epsilon(1e-4));
  // A long steady decode (32 rows every step, no prompt) after varied steps: rows and prompt
  // pairs no longer vary, and their old observations are forgotten (0.97^1000 ~ 6e-14); the
  // prior keeps their estimates, so the first prompt chunk after it is still predicted right.
  StepTimeModel steady(0.97);
  for (int i = 0; i < 80; ++i) {
    const StepShape s = random_step();
    steady.observe(s, truth(s));
  }
  for (int i = 0; i < 1000; ++i) {
    StepShape s;
    for (int j = 0; j < 32; ++j) s.add(1, 100 + (i + 37 * j) % 900, true);
    steady.observe(s, truth(s));
  }
  StepShape burst;
  for (int j = 0; j < 32; ++j) burst.add(1, 500, true);
  burst.add(256, 0, false);
  CHECK(steady.predict(burst) == Approx(truth(burst)).epsilon(1e-3));
  CHECK(steady.coefficients()[1] == Approx(coef[1]).epsilon(1e-3));
  CHECK(steady.coefficients()[3] == Approx(coef[3]).epsilon(1e-3));
  // Time falling with rows (noise, another process): no negative slope; the fit is the mean.
  StepTimeModel g(1);
  double sum = 0;
  for (int i = 0; i < 10; ++i) {
    const double t = 5e-3 - 1e-5 * i;
    StepShape s;
    s.rows = 1 + i;
    g.observe(s, t);
    sum += t;
  }
  CHECK(g.coefficients()[1] == 0);
  CHECK(g.coefficients()[2] == 0);
  CHECK(g.coefficients()[3] == 0);
  CHECK(g.coefficients()[0] == Approx(sum / 10).epsilon(1e-12));
  // Rows constant and no prompts (decode-only steps of one batch): the decode keys explain time.
  StepTimeModel h(1);
  for (int i = 0; i < 10; ++i) {
    StepShape s;
    s.rows = 8;
    s.decode_keys = 1000.0 * (i + 1);
    h.observe(s, 1e-3 + 1e-7 * s.decode_keys);
  }
  StepShape q;
  q.rows = 8;
  q.decode_keys = 20000;
  CHECK(h.predict(q) == Approx(1e-3 + 1e-7 * 20000).epsilon(1e-6));
}

TEST_CASE("scheduler tuning: space rules, knob mapping, batched runs equal sequential ones, objective", "[cpu][serve]") {
  const std::string path = rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  BatchWorkload w;
  w.requests = 5;
  w.prompt_tokens = 7;
  w.max_tokens = 6;
  w.seed = 3;
  const tune::Space s = scheduler_space(2, w);
  REQUIRE(s.params.size() == 5);
  CHECK(s.params[0].values == std::vector<int64_t>{0, 1, 2});
  CHECK(s.size() == 3 * 7 * 6 * 5 * 3);
  const tune::Params d = s.defaults();
  CHECK(s.validate(d).empty());  // the default max_batch (32) stays measurable
  CHECK(scheduler_config_from(d).to_json() == SchedulerConfig{}.to_json());
  tune::Params p = d;
  p["max_batch"] = 8;
  CHECK_THAT(s.validate(p), Catch::Contains("max_batch 8 > the workload's 5 requests"));
  p["max_batch"] = 4;
  p["token_budget"] = 64;
  p["prefill_chunk"] = 128;
  CHECK_THAT(s.validate(p), Catch::Contains("prefill_chunk"));
  p["prefill_chunk"] = 16;
  CHECK(s.validate(p).empty());
  p["threads"] = 1;
  const SchedulerConfig c = scheduler_config_from(p);
  CHECK(c.max_batch == 4);
  CHECK(c.token_budget == 64);
  CHECK(c.prefill_chunk == 16);
  CHECK(c.kv_block_tokens == SchedulerConfig{}.kv_block_tokens);
  CHECK(tuned_threads(p) == 1);
  CHECK(tuned_threads({}) == 0);
  CHECK_THROWS_WITH(scheduler_config_from({{"max_batches", 4}}), Catch::Contains("unknown scheduler knob 'max_batches'"));
  CHECK_THROWS_AS(scheduler_config_from({{"max_batch", 0}}), Error);

  CHECK(BatchWorkload::from_shape({{"requests", 3}, {"gen", 2}}, "w").requests == 3);
  CHECK(BatchWorkload::from_shape({{"requests", 3}, {"gen", 2}}, "w").prompt_tokens == BatchWorkload{}.prompt_tokens);
  CHECK_THROWS_WITH(BatchWorkload::from_shape({{"requests", 0}}, "--workload"), Catch::Contains("requests=0 is outside"));
  CHECK_THROWS_WITH(BatchWorkload::from_shape({{"tokens", 3}}, "--workload"), Catch::Contains("unknown workload dim 'tokens'"));
  CHECK(BatchWorkload::from_shape(w.shape(), "w").shape() == w.shape());
  CHECK(tune_model_name("/a/b/my model|v1.gguf") == "my_model_v1");

  // Batching must not change what a request generates: every request of a batched run equals
  // the same request run one at a time (max_batch 1), and prefill chunking changes nothing.
  auto model = load_model(path);
  SchedulerConfig one;
  one.max_batch = 1;
  const BatchRun seq = run_batch(*model, one, w);
  const BatchRun bat = run_batch(*model, c, w);
  REQUIRE(seq.outputs.size() == 5);
  CHECK(seq.tokens == 5 * 6);
  for (size_t r = 0; r < 5; ++r) {
    INFO("request " << r);
    CHECK(bat.outputs[r] == seq.outputs[r]);
  }
  CHECK(bat.checksum == seq.checksum);
  CHECK(seq.seconds > 0);
  w.seed = 4;
  CHECK(run_batch(*model, c, w).checksum != seq.checksum);  // other prompts, other tokens
  w.seed = 3;

  SchedulerObjective obj(path, w);
  tune::EvalBudget b;
  b.min_samples = 2;
  b.max_samples = 3;
  b.max_time = 0.01;
  for (const tune::Params& q : {d, p}) {
    const tune::Evaluation e = obj.evaluate(q, b);
    INFO(e.reason);
    CHECK(e.status == tune::Evaluation::Status::Ok);
    CHECK(e.samples.size() >= 2);
    CHECK(e.samples.size() <= 3);
    CHECK(e.median > 0);
  }
  const tune::Evaluation bad = obj.evaluate({{"max_batch", 4}, {"token_budget", 2}}, b);
  CHECK(bad.status == tune::Evaluation::Status::Skip);
  CHECK_THAT(bad.reason, Catch::Contains("token_budget"));
}

TEST_CASE("quantized GGUF: stories260k with Q8_0 weights serves within quantization error of f32", "[cpu][serve]") {
  const std::string src = rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  const io::GgufFile f = io::GgufFile::open(src);
  io::GgufWriter w;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") w.add(k, v);
  std::deque<std::vector<float>> floats;
  std::deque<std::vector<uint8_t>> blocks;
  size_t quantized = 0;
  for (const auto& t : f.tensors()) {
    floats.push_back(f.tensor_f32(t.name));
    const std::vector<float>& x = floats.back();
    if (t.ne.size() == 2 && t.ne[0] % 32 == 0) {
      std::vector<uint8_t> q = rtx::test::quantize_q8_0(x);  // ggml's reference quantizer
      blocks.push_back(std::move(q));
      w.add_tensor(t.name, io::GgmlType::Q8_0, t.ne, blocks.back().data());
      ++quantized;
    } else {
      w.add_tensor(t.name, io::GgmlType::F32, t.ne, x.data());  // ffn rows of 172 are not whole blocks
    }
  }
  const std::string path = rtx::test::temp_dir() + "/stories-q8_0.gguf";
  w.write(path);
  CHECK(quantized >= 20);
  CHECK(io::GgufFile::open(path).tensor("blk.0.attn_q.weight").type == static_cast<uint32_t>(io::GgmlType::Q8_0));

  auto mf = load_model(src);
  // W8A32 (exact weights, f32 inputs): the comparison with the dequantized model below holds to
  // float summation order. The default (8-bit inputs where the CPU has AVX2) is the next test's.
  LoadOptions w8a32;
  w8a32.int8_activations = false;
  auto mq = load_model(path, w8a32);
  const ModelInfo& fi = mf->info();
  CHECK(mq->info().vocab == fi.vocab);
  CHECK(mq->info().n_layer == fi.n_layer);
  Seq s;
  s.ids = random_ids(20, fi.vocab, 7);
  KvCache kf(fi.n_layer, fi.n_kv_head, fi.head_dim, 16, 8), kq(fi.n_layer, fi.n_kv_head, fi.head_dim, 16, 8);
  const auto lf = run_alone(*mf, kf, s, {12});
  const auto lq = run_alone(*mq, kq, s, {12});
  REQUIRE(lf.size() == lq.size());
  int same_top = 0;
  for (size_t i = 0; i < lf.size(); ++i) {
    INFO("call " << i);
    double err = 0, scale = 0;
    for (size_t v = 0; v < lf[i].size(); ++v) {
      err = std::max(err, std::fabs(static_cast<double>(lq[i][v]) - lf[i][v]));
      scale = std::max(scale, std::fabs(static_cast<double>(lf[i][v])));
    }
    CHECK(err > 0);              // the weights really are quantized
    CHECK(err <= 0.03 * scale);  // Q8_0: 8-bit weights, errors of a few tenths of a percent per weight
    same_top += std::max_element(lf[i].begin(), lf[i].end()) - lf[i].begin() ==
                std::max_element(lq[i].begin(), lq[i].end()) - lq[i].begin();
  }
  CHECK(same_top >= static_cast<int>(lf.size()) - 1);

  // The Q8_0 matrices ran the W8A32 kernel; dequantized to f32 at load they must give the same
  // logits up to float summation order (two different kernels, the same weights).
  CHECK(mf->info().weights == "f32");
  CHECK(mq->info().weights.rfind("q8_0 ", 0) == 0);
  CHECK_THAT(mq->info().weights, Catch::EndsWith(", f32 activations"));
  CHECK(mq->info().param_bytes < mf->info().param_bytes / 2);
  LoadOptions deq;
  deq.keep_quantized = false;
  auto md = load_model(path, deq);
  CHECK(md->info().weights == "f32");
  KvCache kd(fi.n_layer, fi.n_kv_head, fi.head_dim, 16, 8);
  const auto ld = run_alone(*md, kd, s, {12});
  for (size_t i = 0; i < ld.size(); ++i) {
    double err = 0, scale = 0;
    for (size_t v = 0; v < ld[i].size(); ++v) {
      err = std::max(err, std::fabs(static_cast<double>(lq[i][v]) - ld[i][v]));
      scale = std::max(scale, std::fabs(static_cast<double>(ld[i][v])));
    }
    INFO("call " << i);
    CHECK(err <= 1e-4 * scale);
  }
}

TEST_CASE("quantized GGUF: GPT-2 with Q8_0 matrices: W8A8 by default, W8A32 with f32 activations", "[cpu][serve]") {
  // C = 256, so every matrix has K a multiple of 256: the default load runs the W8A8 kernel
  // (8-bit inputs; AVX-512 VNNI's x16 layout, or the x8 one's signed pmaddubsw), int8_activations
  // false the W8A32 one (exact weights); both against the model dequantized to f32 at load.
  const auto c = make_cfg(67, 256, 4, 2, 32);
  const std::string dir = rtx::test::temp_dir();
  const auto tok = char_tok(c.vocab_size);
  const std::vector<float> params = random_params(c, 22);
  models::export_gpt2_gguf(c, params.data(), params.size(), *tok, dir + "/f32.gguf");
  const io::GgufFile f = io::GgufFile::open(dir + "/f32.gguf");
  io::GgufWriter w;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") w.add(k, v);
  std::deque<std::vector<float>> floats;
  std::deque<std::vector<uint8_t>> blocks;
  int quantized = 0;
  for (const auto& t : f.tensors()) {
    floats.push_back(f.tensor_f32(t.name));
    if (t.ne.size() == 2 && t.ne[0] % 256 == 0 && t.name != "position_embd.weight") {
      blocks.push_back(rtx::test::quantize_q8_0(floats.back()));
      w.add_tensor(t.name, io::GgmlType::Q8_0, t.ne, blocks.back().data());
      ++quantized;
    } else {
      w.add_tensor(t.name, io::GgmlType::F32, t.ne, floats.back().data());
    }
  }
  REQUIRE(quantized == 9);  // wte + 4 matrices x 2 layers
  w.write(dir + "/q8.gguf");
  auto m8 = load_model(dir + "/q8.gguf");
  LoadOptions f32;
  f32.int8_activations = false;
  auto mq = load_model(dir + "/q8.gguf", f32);
  LoadOptions deq;
  deq.keep_quantized = false;
  auto md = load_model(dir + "/q8.gguf", deq);
  // "8-bit activations" wherever the CPU has AVX2; "f32 activations" only on a scalar build.
  CHECK(m8->info().weights == (kernels::cpu_isa_active() == kernels::Isa::Scalar ? "q8_0 9/9, f32 activations"
                                                                                : "q8_0 9/9, 8-bit activations"));
  CHECK(mq->info().weights == "q8_0 9/9, f32 activations");
  Seq s;
  s.ids = random_ids(23, c.vocab_size, 4);
  auto logits = [&](Model& m) {
    KvCache kv(c.n_layer, c.n_head, c.n_embd / c.n_head, 16, 8);
    return run_alone(m, kv, s, {9, 1});
  };
  const auto l8 = logits(*m8), lq = logits(*mq), ld = logits(*md);
  REQUIRE(l8.size() == ld.size());
  REQUIRE(lq.size() == ld.size());
  // 8-bit inputs on this random-weight model: 1.5-5% L2 per call, as the K-quant test below
  // (a wrong lane order or offset gives ~100%).
  double mean_rel = 0;
  for (size_t i = 0; i < ld.size(); ++i) {
    double err = 0, scale = 0, d2 = 0, n2 = 0;
    for (size_t v = 0; v < ld[i].size(); ++v) {
      REQUIRE(std::isfinite(l8[i][v]));
      err = std::max(err, std::fabs(static_cast<double>(lq[i][v]) - ld[i][v]));
      scale = std::max(scale, std::fabs(static_cast<double>(ld[i][v])));
      const double d = static_cast<double>(l8[i][v]) - ld[i][v];
      d2 += d * d;
      n2 += static_cast<double>(ld[i][v]) * ld[i][v];
    }
    INFO("call " << i << " W8A32 err " << err << " scale " << scale << ", W8A8 L2 relative " << std::sqrt(d2 / n2));
    CHECK(err <= 1e-4 * scale);
    CHECK(std::sqrt(d2 / n2) <= 0.08);
    mean_rel += std::sqrt(d2 / n2) / static_cast<double>(ld.size());
  }
  CHECK(mean_rel <= 0.04);
}

TEST_CASE("quantized GGUF: GPT-2 with K-quant matrices (Q4_K, Q5_K, Q6_K) matches its dequantized self", "[cpu][serve]") {
  // A GPT-2 whose 2-D matrices (C = 256: whole super-blocks) are random K-quant blocks, one
  // type after another; the 1-D tensors and wpe stay F32. Loaded as is, the matrices run the
  // quantized kernels; loaded with keep_quantized false they are dequantized to f32 and packed:
  // the same weights (kquant rebuilds ggml's values exactly), so the logits agree up to
  // summation order.
  const auto c = make_cfg(67, 256, 4, 2, 32);  // V, C, heads, layers, context
  const std::string dir = rtx::test::temp_dir();
  const auto tok = char_tok(c.vocab_size);
  const std::vector<float> params = random_params(c, 21);
  models::export_gpt2_gguf(c, params.data(), params.size(), *tok, dir + "/f32.gguf");
  const io::GgufFile f = io::GgufFile::open(dir + "/f32.gguf");
  io::GgufWriter w;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") w.add(k, v);
  std::deque<std::vector<float>> floats;
  std::deque<std::vector<uint8_t>> blocks;
  const uint32_t types[] = {12, 13, 14};
  const size_t bytes[] = {144, 176, 210};
  int next = 0;
  rtx::Philox rng(5, 9);
  for (const auto& t : f.tensors()) {
    if (t.ne.size() == 2 && t.ne[0] % 256 == 0 && t.name != "position_embd.weight") {
      const int ty = next++ % 3;
      const size_t nsb = t.ne[0] / 256 * t.ne[1];
      std::vector<uint8_t> b(nsb * bytes[ty]);
      for (auto& x : b) x = static_cast<uint8_t>(rng.next_u32());
      for (size_t sb = 0; sb < nsb; ++sb)  // small finite f16 super-scales: weights of a few 0.01
        for (size_t at : ty == 2 ? std::vector<size_t>{208} : std::vector<size_t>{0, 2}) {
          const uint16_t h = rtx::f32_to_f16(static_cast<float>(2e-6 * (1 + rng.next_u32() % 100)));
          b[sb * bytes[ty] + at] = static_cast<uint8_t>(h & 0xFF);
          b[sb * bytes[ty] + at + 1] = static_cast<uint8_t>(h >> 8);
        }
      blocks.push_back(std::move(b));
      w.add_tensor(t.name, static_cast<io::GgmlType>(types[ty]), t.ne, blocks.back().data());
    } else {
      floats.push_back(f.tensor_f32(t.name));
      w.add_tensor(t.name, io::GgmlType::F32, t.ne, floats.back().data());
    }
  }
  REQUIRE(next == 9);  // wte + 4 matrices x 2 layers
  w.write(dir + "/kq.gguf");

  LoadOptions f32;
  f32.int8_activations = false;
  auto mq = load_model(dir + "/kq.gguf", f32);  // weights rebuilt exactly, f32 activations
  auto m8 = load_model(dir + "/kq.gguf");       // the default: 8-bit activations
  LoadOptions deq;
  deq.keep_quantized = false;
  auto md = load_model(dir + "/kq.gguf", deq);
  INFO(mq->info().weights);
  for (const char* fmt : {"q4_k 3/9", "q5_k 3/9", "q6_k 3/9", "f32 activations"}) CHECK_THAT(mq->info().weights, Catch::Contains(fmt));
  CHECK_THAT(m8->info().weights, Catch::EndsWith(", 8-bit activations"));
  CHECK(md->info().weights == "f32");
  CHECK(mq->info().param_bytes < md->info().param_bytes / 2);
  Seq s;
  s.ids = random_ids(23, c.vocab_size, 4);
  KvCache kq(c.n_layer, c.n_head, c.n_embd / c.n_head, 16, 8), kd(c.n_layer, c.n_head, c.n_embd / c.n_head, 16, 8);
  const auto lq = run_alone(*mq, kq, s, {9, 1});  // a prefill chunk, then single tokens
  const auto ld = run_alone(*md, kd, s, {9, 1});
  KvCache k8(c.n_layer, c.n_head, c.n_embd / c.n_head, 16, 8);
  const auto l8 = run_alone(*m8, k8, s, {9, 1});
  REQUIRE(l8.size() == ld.size());
  REQUIRE(lq.size() == ld.size());
  REQUIRE_FALSE(lq.empty());
  for (size_t i = 0; i < lq.size(); ++i) {
    double err = 0, scale = 0;
    for (size_t v = 0; v < lq[i].size(); ++v) {
      REQUIRE(std::isfinite(lq[i][v]));
      err = std::max(err, std::fabs(static_cast<double>(lq[i][v]) - ld[i][v]));
      scale = std::max(scale, std::fabs(static_cast<double>(ld[i][v])));
    }
    INFO("call " << i << " err " << err << " scale " << scale);
    CHECK(scale > 0);
    CHECK(err <= 1e-4 * scale);
    // 8-bit activations: logits within a few percent in the L2 norm (this random-weight model
    // has no trained structure to keep errors from growing over its layers).
    double d2 = 0, n2 = 0;
    for (size_t v = 0; v < l8[i].size(); ++v) {
      const double d = static_cast<double>(l8[i][v]) - ld[i][v];
      d2 += d * d;
      n2 += static_cast<double>(ld[i][v]) * ld[i][v];
    }
    INFO("8-bit activations: L2 relative difference " << std::sqrt(d2 / n2));
    CHECK(d2 > 0);
    CHECK(std::sqrt(d2 / n2) <= 0.05);
  }
}

namespace {

/// A model whose logits are NaN for any sequence whose first token is 0 (a model with a
/// corrupt weight reached by some inputs only); otherwise the wrapped model's.
class NanModel final : public Model {
 public:
  explicit NanModel(std::unique_ptr<Model> m) : m_(std::move(m)) {}
  const ModelInfo& info() const override { return m_->info(); }
  const io::Tokenizer& tokenizer() const override { return m_->tokenizer(); }
  void forward(const std::vector<SeqBatch>& batch, KvCache& kv, float* logits) override {
    m_->forward(batch, kv, logits);
    int row = 0;
    for (const auto& b : batch) {
      if (!b.want_logits) continue;
      if (b.pos == 0 && b.tokens[0] == 0)
        std::fill(logits + static_cast<size_t>(row) * info().vocab, logits + static_cast<size_t>(row + 1) * info().vocab, NAN);
      ++row;
    }
  }

 private:
  std::unique_ptr<Model> m_;
};

}  // namespace

TEST_CASE("scheduler: NaN logits fail that request with finish error; the engine and the others go on", "[cpu][serve]") {
  const auto c = make_cfg(67, 48, 3, 2, 64);
  NanModel m(tiny_model(c, 5));
  SchedulerConfig cfg;
  cfg.max_batch = 4;
  Scheduler s(m, cfg);
  Collector bad, good, after;
  REQUIRE(s.submit(greedy({0, 5, 6}, 8), bad.fn()));
  REQUIRE(s.submit(greedy({3, 5, 6}, 8), good.fn()));
  CHECK(bad.wait() == Finish::Error);
  CHECK(good.wait() == Finish::Length);
  CHECK(good.tokens.size() == 8);
  REQUIRE(s.submit(greedy({4, 4}, 3), after.fn()));
  CHECK(after.wait() == Finish::Length);
  CHECK(s.stats().finished_by[static_cast<int>(Finish::Error)] == 1);
}

TEST_CASE("model loaders refuse NaN/Inf weights at load, naming the tensor (f32 and Q8_0 scales)", "[cpu][serve]") {
  const std::string src = rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf";
  const io::GgufFile f = io::GgufFile::open(src);
  // Copy of the stories model with one value of `target` replaced: an f32 NaN, or (q8) the
  // tensor written as Q8_0 whose first block's f16 scale is +Inf (0x7c00).
  auto write_with = [&](const std::string& target, bool q8) {
    io::GgufWriter w;
    for (const auto& [k, v] : f.metadata())
      if (k != "general.alignment") w.add(k, v);
    std::deque<std::vector<float>> floats;
    std::deque<std::vector<uint8_t>> blocks;
    for (const auto& t : f.tensors()) {
      floats.push_back(f.tensor_f32(t.name));
      if (t.name == target && q8) {
        std::vector<uint8_t> q(floats.back().size() / 32 * 34, 0);
        for (size_t b = 0; b < q.size() / 34; ++b) q[b * 34 + 1] = 0x20;  // d = 2^-7, all q = 0
        q[0] = 0x00;
        q[1] = 0x7c;  // +Inf
        blocks.push_back(std::move(q));
        w.add_tensor(t.name, io::GgmlType::Q8_0, t.ne, blocks.back().data());
        continue;
      }
      if (t.name == target) floats.back()[3] = NAN;
      w.add_tensor(t.name, io::GgmlType::F32, t.ne, floats.back().data());
    }
    const std::string path = rtx::test::temp_dir() + "/nan-" + std::to_string(q8) + ".gguf";
    w.write(path);
    return path;
  };
  for (const auto& [target, q8] : {std::pair<std::string, bool>{"blk.0.attn_norm.weight", false},
                                   std::pair<std::string, bool>{"blk.1.attn_q.weight", true}}) {
    INFO(target);
    try {
      load_model(write_with(target, q8));
      FAIL("expected the load to fail");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::Input);
      CHECK_THAT(std::string(e.what()) + " " + e.where(), Catch::Contains(target) && Catch::Contains("non-finite weight"));
    }
  }
}

/// Every block of `kv`'s pool (n of them) allocated, in reverse order: a block table whose
/// blocks are out of order, as a busy server's are.
static std::vector<int32_t> reversed_table(KvCache& kv, int n) {
  std::vector<int32_t> table;
  for (int b = 0; b < n; ++b) table.push_back(kv.alloc());
  std::reverse(table.begin(), table.end());
  return table;
}

TEST_CASE("paged_attention: float64 softmax reference, every ISA, odd head sizes and key counts", "[cpu][serve]") {
  // Keys and values stored through a shuffled block table (blocks out of order, the last one
  // partly filled); reference: softmax(scale * q.k) . v in float64. Head sizes cover the
  // AVX-512 path (multiples of 16 up to 128), the AVX2 one (multiples of 8 up to 128: 8, 40)
  // and the generic one (144, and every size on Scalar). An f16 pool: the same against the
  // keys and values rounded to binary16 (f32_to_f16, round to nearest even), which kv_store
  // must have stored bit for bit.
  const kernels::Isa saved = kernels::cpu_isa_active();
  for (KvType kt : {KvType::F32, KvType::F16})
  for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (static_cast<int>(isa) > static_cast<int>(kernels::cpu_isa_supported())) continue;
    kernels::set_cpu_isa(isa);
    for (int HS : {8, 16, 40, 64, 128, 144})
      for (int BT : {5, 16})
        for (int n_keys : {1, 7, 127}) {
          const int H = 3, L = 2, nb = (n_keys + BT - 1) / BT;
          KvCache kv(L, H, HS, BT, nb + 3, true, kt);
          const std::vector<int32_t> table = reversed_table(kv, nb + 3);
          Philox rng(static_cast<uint64_t>(HS * 1000 + BT * 10 + n_keys), 3);
          auto u = [&] { return static_cast<float>(rng.next_u32() % 2001) / 1000.0f - 1.0f; };
          std::vector<float> k(static_cast<size_t>(n_keys) * H * HS), v(k.size()), q(static_cast<size_t>(H) * HS);
          for (auto& x : k) x = u();
          for (auto& x : v) x = u();
          for (auto& x : q) x = 2 * u();
          for (int l = 0; l < L; ++l)
            for (int t = 0; t < n_keys; ++t)
              kv_store(kv, l, table.data(), t, k.data() + static_cast<size_t>(t) * H * HS, v.data() + static_cast<size_t>(t) * H * HS);
          if (kt == KvType::F16) {
            // Stored bits: key t, head h, element e sits at slot t % BT of block table[t / BT].
            for (int t = 0; t < n_keys; t += 3)
              for (int h = 0; h < H; ++h)
                for (int e = 0; e < HS; e += 5) {
                  const size_t at = (static_cast<size_t>(h) * BT + t % BT) * HS + e, in = (static_cast<size_t>(t) * H + h) * HS + e;
                  REQUIRE(kv.k16(1, table[t / BT])[at] == f32_to_f16(k[in]));
                  REQUIRE(kv.v16(1, table[t / BT])[at] == f32_to_f16(v[in]));
                }
            for (auto& x : k) x = f16_to_f32(f32_to_f16(x));  // the reference sees what the pool holds
            for (auto& x : v) x = f16_to_f32(f32_to_f16(x));
          }
          const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
          std::vector<float> scratch(n_keys), out(HS, NAN);
          for (int h = 0; h < H; ++h) {
            paged_attention(out.data(), q.data() + static_cast<size_t>(h) * HS, n_keys, kv, 1, h, table.data(), scale, scratch.data());
            std::vector<double> w(n_keys);
            double mx = -1e300, sum = 0;
            for (int t = 0; t < n_keys; ++t) {
              double d = 0;
              for (int e = 0; e < HS; ++e)
                d += static_cast<double>(q[static_cast<size_t>(h) * HS + e]) * k[(static_cast<size_t>(t) * H + h) * HS + e];
              w[t] = d * scale;
              mx = std::max(mx, w[t]);
            }
            for (double& x : w) sum += (x = std::exp(x - mx));
            double err = 0;
            for (int e = 0; e < HS; ++e) {
              double ref = 0;
              for (int t = 0; t < n_keys; ++t) ref += w[t] * v[(static_cast<size_t>(t) * H + h) * HS + e];
              ref /= sum;
              REQUIRE(std::isfinite(out[e]));
              err = std::max(err, std::fabs(out[e] - ref));
            }
            INFO(kv_type_name(kt) << " isa " << static_cast<int>(isa) << " HS " << HS << " BT " << BT << " keys " << n_keys
                                  << " head " << h);
            CHECK(err <= 2e-6);
          }
          // A NaN in the query reaches every output (never a finite, silently wrong row).
          std::vector<float> qn(q.begin(), q.begin() + HS);
          qn[HS / 2] = NAN;
          paged_attention(out.data(), qn.data(), n_keys, kv, 1, 0, table.data(), scale, scratch.data());
          for (int e = 0; e < HS; ++e) CHECK(std::isnan(out[e]));
        }
  }
  kernels::set_cpu_isa(saved);
}

TEST_CASE("paged_attention_heads: every head bit for bit paged_attention's, any split, grouped-query heads", "[cpu][serve]") {
  // The reference is paged_attention per head (itself checked against float64 above); the heads
  // walk must give the same bits for every split of the heads into calls, with 1 or 2 query
  // heads per KV head, on every ISA and pool type, odd head sizes and key counts (a partial
  // last block), and more heads in one call than a kernel walks at once (70 > 64).
  const kernels::Isa saved = kernels::cpu_isa_active();
  for (KvType kt : {KvType::F32, KvType::F16})
    for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
      if (static_cast<int>(isa) > static_cast<int>(kernels::cpu_isa_supported())) continue;
      kernels::set_cpu_isa(isa);
      for (int HS : {8, 40, 64, 144})
        for (int qpk : {1, 2})
          for (int n_keys : {1, 7, 127}) {
            // 70 query heads (over 35 KV heads) for the small sizes, 5 or 6 otherwise.
            const int NKV = qpk == 1 ? 5 : (HS <= 40 && n_keys != 7 ? 35 : 3), NH = NKV * qpk, BT = 16;
            const int nb = (n_keys + BT - 1) / BT;
            KvCache kv(2, NKV, HS, BT, nb + 2, true, kt);
            const std::vector<int32_t> table = reversed_table(kv, nb + 2);
            Philox rng(static_cast<uint64_t>(HS * 1000 + qpk * 100 + n_keys), 5);
            auto u = [&] { return static_cast<float>(rng.next_u32() % 2001) / 1000.0f - 1.0f; };
            std::vector<float> kr(static_cast<size_t>(NKV) * HS), vr(kr.size()), q(static_cast<size_t>(NH) * HS);
            for (int t = 0; t < n_keys; ++t) {
              for (auto& x : kr) x = u();
              for (auto& x : vr) x = u();
              kv_store(kv, 1, table.data(), t, kr.data(), vr.data());
            }
            for (auto& x : q) x = 2 * u();
            const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
            std::vector<float> ref(q.size()), scratch(static_cast<size_t>(NH) * n_keys);
            for (int h = 0; h < NH; ++h)
              paged_attention(ref.data() + static_cast<size_t>(h) * HS, q.data() + static_cast<size_t>(h) * HS, n_keys,
                              kv, 1, h / qpk, table.data(), scale, scratch.data());
            for (int g : {1, 2, 3, NH}) {
              std::vector<float> out(q.size(), NAN);
              for (int h = 0; h < NH; h += g)
                paged_attention_heads(out.data() + static_cast<size_t>(h) * HS, q.data() + static_cast<size_t>(h) * HS,
                                      n_keys, kv, 1, h, std::min(g, NH - h), qpk, table.data(), scale, scratch.data());
              INFO(kv_type_name(kt) << " isa " << static_cast<int>(isa) << " HS " << HS << " q/kv " << qpk << " keys "
                                    << n_keys << " heads per call " << g);
              CHECK(std::memcmp(out.data(), ref.data(), sizeof(float) * out.size()) == 0);
            }
          }
    }
  kernels::set_cpu_isa(saved);
}

TEST_CASE("paged_attention_tile: a prompt chunk's rows, bit for bit paged_attention's row by row", "[cpu][serve]") {
  // Rows r of a tile have n_keys + r keys (causal). Odd key counts put rows on both sides of a
  // block edge; 7 rows x 12 heads = 84 lanes is over the 64 one kernel call walks.
  const kernels::Isa saved = kernels::cpu_isa_active();
  for (KvType kt : {KvType::F32, KvType::F16})
    for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
      if (static_cast<int>(isa) > static_cast<int>(kernels::cpu_isa_supported())) continue;
      kernels::set_cpu_isa(isa);
      for (int HS : {8, 40, 64})
        for (int qpk : {1, 3})
          for (int n_rows : {1, 2, 4, 7})
            for (int n_keys : {1, 14, 16, 33, 100}) {
              const int NKV = qpk == 1 ? 12 : 2, NH = NKV * qpk, BT = 16, total = n_keys + n_rows - 1;
              const int nb = (total + BT - 1) / BT;
              KvCache kv(1, NKV, HS, BT, nb + 1, true, kt);
              const std::vector<int32_t> table = reversed_table(kv, nb + 1);
              Philox rng(static_cast<uint64_t>(HS * 10000 + qpk * 1000 + n_rows * 100 + n_keys), 11);
              auto u = [&] { return static_cast<float>(rng.next_u32() % 2001) / 1000.0f - 1.0f; };
              std::vector<float> kr(static_cast<size_t>(NKV) * HS), vr(kr.size());
              for (int t = 0; t < total; ++t) {
                for (auto& x : kr) x = u();
                for (auto& x : vr) x = u();
                kv_store(kv, 0, table.data(), t, kr.data(), vr.data());
              }
              const size_t qs = static_cast<size_t>(NH) * HS + 3, os = static_cast<size_t>(NH) * HS + 5;  // padded rows
              std::vector<float> q(qs * n_rows), ref(os * n_rows, 0.f), out(os * n_rows, 0.f);
              for (auto& x : q) x = 3 * u();
              std::vector<float> scratch(static_cast<size_t>(64) * total);
              for (int r = 0; r < n_rows; ++r)
                for (int h = 0; h < NH; ++h)
                  paged_attention(ref.data() + r * os + static_cast<size_t>(h) * HS, q.data() + r * qs + static_cast<size_t>(h) * HS,
                                  n_keys + r, kv, 0, h / qpk, table.data(), 0.125f, scratch.data());
              paged_attention_tile(out.data(), os, q.data(), qs, n_rows, n_keys, kv, 0, 0, NH, qpk, table.data(), 0.125f,
                                   scratch.data());
              INFO(kv_type_name(kt) << " isa " << static_cast<int>(isa) << " HS " << HS << " q/kv " << qpk << " rows "
                                    << n_rows << " keys " << n_keys);
              CHECK(std::memcmp(out.data(), ref.data(), sizeof(float) * out.size()) == 0);
            }
    }
  kernels::set_cpu_isa(saved);
}

TEST_CASE("paged_attention: the block size changes no bits (keys folded 16 or 8 at a time, or one by one)", "[cpu][serve]") {
  // A block of 16 (AVX-512) or 8 (AVX2) keys or more is folded several keys at a time
  // (fold16 / fold8); a block of 5 one key at a time; the rest of the arithmetic does not depend
  // on the block size. The same keys in pools of 5, 8, 16 and 32 positions per block must give
  // the same bits, so the many-key fold is the one-key fold.
  const kernels::Isa saved = kernels::cpu_isa_active();
  for (KvType kt : {KvType::F32, KvType::F16})
    for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
      if (static_cast<int>(isa) > static_cast<int>(kernels::cpu_isa_supported())) continue;
      kernels::set_cpu_isa(isa);
      for (int HS : {8, 16, 40, 64, 128})
        for (int n_keys : {8, 16, 33, 127, 200}) {
          const int H = 2;
          Philox rng(static_cast<uint64_t>(HS * 1000 + n_keys), 9);
          auto u = [&] { return static_cast<float>(rng.next_u32() % 2001) / 1000.0f - 1.0f; };
          std::vector<float> k(static_cast<size_t>(n_keys) * H * HS), v(k.size()), q(static_cast<size_t>(H) * HS);
          for (auto& x : k) x = u();
          for (auto& x : v) x = u();
          for (auto& x : q) x = 3 * u();
          std::vector<float> ref;
          for (int BT : {5, 8, 16, 32}) {
            const int nb = (n_keys + BT - 1) / BT;
            KvCache kv(1, H, HS, BT, nb + 1, true, kt);
            const std::vector<int32_t> table = reversed_table(kv, nb + 1);
            for (int t = 0; t < n_keys; ++t)
              kv_store(kv, 0, table.data(), t, k.data() + static_cast<size_t>(t) * H * HS, v.data() + static_cast<size_t>(t) * H * HS);
            std::vector<float> out(q.size(), NAN), scratch(static_cast<size_t>(H) * n_keys);
            paged_attention_heads(out.data(), q.data(), n_keys, kv, 0, 0, H, 1, table.data(), 0.125f, scratch.data());
            if (ref.empty()) {
              ref = out;
              continue;
            }
            INFO(kv_type_name(kt) << " isa " << static_cast<int>(isa) << " HS " << HS << " keys " << n_keys << " block " << BT);
            CHECK(std::memcmp(out.data(), ref.data(), sizeof(float) * out.size()) == 0);
          }
        }
    }
  kernels::set_cpu_isa(saved);
}

TEST_CASE("attention_heads_per_call: whole rows when the rows fill the threads, split otherwise", "[cpu][serve]") {
  CHECK(attention_heads_per_call(32, 12, 2) == 12);  // 32 calls for 2 threads
  CHECK(attention_heads_per_call(8, 12, 2) == 12);   // 8 = 4 per thread
  CHECK(attention_heads_per_call(1, 12, 2) == 2);    // 6 calls of 2 heads
  CHECK(attention_heads_per_call(3, 12, 2) == 4);    // 3 per row, 9 in all
  CHECK(attention_heads_per_call(1, 12, 64) == 1);   // one head per call at most
  CHECK(attention_heads_per_call(1, 1, 1) == 1);
  CHECK(attention_heads_per_call(0, 12, 2) == 1);
  CHECK(attention_heads_per_call(5, 12, 0) == 12);
  // The plan: every (row, head) once; a call's rows are one sequence's, at most kAttentionRowTile;
  // the scratch it returns holds every call's lanes (rows x heads, at most 64 at a time) times
  // the keys of its last row (pos + row in sequence + 1), computed here from the positions.
  for (const std::vector<int>& ns : std::vector<std::vector<int>>{{1}, {1, 1, 1}, {9}, {1, 4, 7, 1}, {130, 1}})
    for (int heads : {1, 5, 12, 70}) {
      std::vector<SeqBatch> batch;
      std::vector<int> seq_of, pos_of;
      for (int n : ns) {
        SeqBatch b;
        b.n = n;
        b.pos = 3 * static_cast<int>(batch.size()) + (n == 1 ? 40 : 0);  // decode rows deep in their context
        for (int i = 0; i < n; ++i) seq_of.push_back(static_cast<int>(batch.size())), pos_of.push_back(b.pos + i);
        batch.push_back(b);
      }
      const int rows = static_cast<int>(seq_of.size());
      std::vector<AttentionCall> calls;
      const size_t per_thread = plan_attention_calls(calls, batch, heads, 2, 200);
      std::vector<int> seen(static_cast<size_t>(rows) * heads, 0);
      size_t most = 0;
      for (const AttentionCall& c : calls) {
        REQUIRE((c.row >= 0 && c.n_rows >= 1 && c.n_rows <= kAttentionRowTile && c.row + c.n_rows <= rows));
        REQUIRE((c.h0 >= 0 && c.n_heads >= 1 && c.h0 + c.n_heads <= heads));
        CHECK(seq_of[c.row] == seq_of[c.row + c.n_rows - 1]);
        const size_t last_keys = static_cast<size_t>(pos_of[c.row + c.n_rows - 1] + 1);
        most = std::max(most, static_cast<size_t>(std::min(c.n_rows * c.n_heads, 64)) * last_keys);
        for (int r = c.row; r < c.row + c.n_rows; ++r)
          for (int h = c.h0; h < c.h0 + c.n_heads; ++h) ++seen[static_cast<size_t>(r) * heads + h];
      }
      CHECK(std::count(seen.begin(), seen.end(), 1) == rows * heads);
      CHECK(per_thread == most);  // enough, and no more than the keys in use (not lanes x context)
    }
}
