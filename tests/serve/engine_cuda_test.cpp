// Tests of rtx-serve's models on CUDA (--device cuda).
// GPT-2: logits against a float64 forward at every position (odd sizes: head sizes 6..256, C not
// a multiple of 4, contexts past one 32-key chunk), batch invariance and prompt chunking bitwise,
// block-size independence, bad input, and the scheduler end to end with the device-only KV pool.
// Llama (stories260k, grouped-query attention): logits against the CPU model, llama2.c's greedy
// sample, batch invariance. Every case says SKIPPED and passes without a GPU (ctest then reports
// the test skipped); device selection is in device_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "models/gpt2_ref.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/io/tokenizer.hpp"
#include "rtx/serve/generate.hpp"
#include "rtx/serve/gpt2_serve.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/scheduler.hpp"
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
using rtx::test::reserve;
using rtx::test::run_alone;
using rtx::test::Seq;

namespace {

std::unique_ptr<Model> model_on(const models::Gpt2Config& c, uint64_t seed, int device) {
  LoadOptions o;
  o.cuda_device = device;
  return make_gpt2_model(c, random_params(c, seed), char_tok(std::min(c.vocab_size, 90)), ModelInfo{}, o);
}

KvCache cache_for(const Model& m, int block_tokens, int n_blocks) {
  const ModelInfo& i = m.info();
  return KvCache(i.n_layer, i.n_kv_head, i.head_dim, block_tokens, n_blocks, i.device == "cpu");
}

}  // namespace

TEST_CASE("gpt2 CUDA serving model: logits match a float64 forward at every position", "[cuda][serve]") {
  RTX_SKIP_WITHOUT_GPU();
  // Head sizes 8, 6 (C = 30: no float4 path, parameters not 16-byte aligned), 16, 256 and 160;
  // contexts of 40 and 70 cross the attention's 32-key chunks.
  for (const auto& c : {make_cfg(67, 24, 3, 2, 16), make_cfg(7, 30, 5, 1, 9), make_cfg(65, 64, 4, 2, 40),
                        make_cfg(50, 256, 1, 1, 40), make_cfg(33, 160, 1, 2, 70)}) {
    auto m = model_on(c, 11, 0);
    CHECK(m->info().device.rfind("cuda:0", 0) == 0);
    const auto ids = random_ids(c.block_size, c.vocab_size, 5);
    const auto want = reference_logits(c, random_params(c, 11), ids);
    for (int bt : {1, 5, 16}) {
      KvCache kv = cache_for(*m, bt, 80);
      CHECK_FALSE(kv.host_storage());
      Seq s;
      s.ids = ids;
      const auto got = run_alone(*m, kv, s, {});
      REQUIRE(got.size() == ids.size());
      for (size_t t = 0; t < got.size(); ++t) {
        INFO("config V" << c.vocab_size << " C" << c.n_embd << " heads " << c.n_head << " block_tokens " << bt
                        << " position " << t);
        CHECK(rel_err(got[t], want, static_cast<int>(t), c.vocab_size) < 2e-5);
      }
      // The whole prompt in one call: the last position's logits.
      Seq p;
      p.ids = ids;
      const auto once = run_alone(*m, kv, p, {static_cast<int>(ids.size())});
      REQUIRE(once.size() == 1);
      CHECK(rel_err(once[0], want, static_cast<int>(ids.size()) - 1, c.vocab_size) < 2e-5);
      CHECK(kv.used_blocks() == 0);
    }
  }
}

TEST_CASE("gpt2 CUDA serving model: batch invariance and prompt chunking, bitwise", "[cuda][serve]") {
  RTX_SKIP_WITHOUT_GPU();
  const auto c = make_cfg(67, 64, 2, 2, 96);
  auto m = model_on(c, 3, 0);
  const int V = c.vocab_size;
  KvCache kv = cache_for(*m, 8, 256);
  Seq a;
  a.ids = random_ids(45, V, 1);  // 40 prompt tokens: more than one 32-key chunk
  const auto alone = run_alone(*m, kv, a, {40});
  const auto split = run_alone(*m, kv, a, {13, 27});
  REQUIRE(split.size() == alone.size() + 1);
  for (size_t i = 0; i < alone.size(); ++i) REQUIRE(std::memcmp(alone[i].data(), split[i + 1].data(), V * 4) == 0);
  // Other block sizes: the keys are read in the same order, so the same bits.
  for (int bt : {1, 3, 32}) {
    KvCache other = cache_for(*m, bt, 256);
    const auto b = run_alone(*m, other, a, {40});
    REQUIRE(b.size() == alone.size());
    for (size_t i = 0; i < alone.size(); ++i) REQUIRE(std::memcmp(alone[i].data(), b[i].data(), V * 4) == 0);
  }
  // Among 16 others of other lengths (more than the GEMM's 8-row pass), A neither first nor last;
  // every wanted row must equal its sequence's run alone.
  std::vector<Seq> others(16);
  for (int o = 0; o < 16; ++o) others[o].ids = random_ids(3 + 5 * o, V, 100 + o);
  std::vector<std::vector<std::vector<float>>> others_alone(16), others_mixed(16);
  for (int o = 0; o < 16; ++o) others_alone[o] = run_alone(*m, kv, others[o], {std::min<int>(3 + o, 3 + 5 * o)});
  Seq A = a;
  std::vector<std::vector<float>> mixed;
  std::vector<int> row_of(16, -1);
  size_t ai = 0;
  std::vector<size_t> oi(16, 0);
  while (ai < A.ids.size()) {
    std::vector<SeqBatch> batch;
    int a_row = -1, wanted = 0;
    for (int o = 0; o < 16; ++o) {
      if (o == 5) {  // A's place in the batch
        const int na = ai == 0 ? 40 : 1;
        reserve(kv, A, A.pos + na);
        a_row = wanted++;
        batch.push_back({A.ids.data() + ai, na, A.pos, A.blocks.data(), static_cast<int>(A.blocks.size()), true});
        A.pos += na;
        ai += na;
      }
      Seq& s = others[o];
      if (oi[o] >= s.ids.size()) continue;
      const int n = std::min<int>(oi[o] == 0 ? 3 + o : 1, static_cast<int>(s.ids.size() - oi[o]));
      reserve(kv, s, s.pos + n);
      const bool want = o % 3 != 1;
      batch.push_back({s.ids.data() + oi[o], n, s.pos, s.blocks.data(), static_cast<int>(s.blocks.size()), want});
      row_of[o] = want ? wanted : -2;  // -2: in the batch without logits
      wanted += want;
      s.pos += n;
      oi[o] += n;
    }
    std::vector<float> lg(static_cast<size_t>(wanted) * V);
    m->forward(batch, kv, lg.data());
    mixed.emplace_back(lg.begin() + static_cast<long>(a_row) * V, lg.begin() + static_cast<long>(a_row + 1) * V);
    for (int o = 0; o < 16; ++o) {
      if (row_of[o] >= 0)
        others_mixed[o].emplace_back(lg.begin() + static_cast<long>(row_of[o]) * V,
                                     lg.begin() + static_cast<long>(row_of[o] + 1) * V);
      else if (row_of[o] == -2)
        others_mixed[o].emplace_back();  // no logits this call
      row_of[o] = -1;
    }
  }
  for (int o = 0; o < 16; ++o) {
    if (o % 3 == 1) continue;
    INFO("other " << o);
    // The loop ends with A, so the longer ones stop early: compare the calls they got.
    REQUIRE(!others_mixed[o].empty());
    REQUIRE(others_mixed[o].size() <= others_alone[o].size());
    for (size_t i = 0; i < others_mixed[o].size(); ++i)
      REQUIRE(std::memcmp(others_alone[o][i].data(), others_mixed[o][i].data(), V * 4) == 0);
  }
  REQUIRE(mixed.size() == alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    INFO("call " << i);
    REQUIRE(std::memcmp(alone[i].data(), mixed[i].data(), V * 4) == 0);
  }
}

TEST_CASE("gpt2 CUDA serving model: bad input is refused before the cache changes", "[cuda][serve]") {
  RTX_SKIP_WITHOUT_GPU();
  const auto c = make_cfg(67, 24, 3, 2, 16);
  auto m = model_on(c, 7, 0);
  KvCache kv = cache_for(*m, 4, 8);
  Seq full;
  full.ids = random_ids(7, c.vocab_size, 2);
  const auto ref = run_alone(*m, kv, full, {6});  // logits after 6 tokens, then after the 7th
  REQUIRE(ref.size() == 2);
  // Prefill the 6 tokens, then bad calls, then one decode step at position 6: it reads the cached
  // keys of positions 0..5, so a bad call that wrote into the cache would show in its bits.
  Seq s;
  reserve(kv, s, 7);
  const int nb = static_cast<int>(s.blocks.size());
  std::vector<float> lg(c.vocab_size);
  m->forward({SeqBatch{full.ids.data(), 6, 0, s.blocks.data(), nb, true}}, kv, lg.data());
  CHECK(std::memcmp(lg.data(), ref[0].data(), lg.size() * 4) == 0);
  std::vector<int32_t> bad(full.ids.begin(), full.ids.begin() + 6);
  bad[3] = c.vocab_size;  // out of range, after valid ones
  CHECK_THROWS_AS(m->forward({SeqBatch{bad.data(), 6, 0, s.blocks.data(), nb, true}}, kv, lg.data()), Error);
  bad[3] = -1;
  CHECK_THROWS_AS(m->forward({SeqBatch{bad.data(), 6, 0, s.blocks.data(), nb, true}}, kv, lg.data()), Error);
  CHECK_THROWS_AS(m->forward({SeqBatch{full.ids.data(), 6, 12, s.blocks.data(), nb, true}}, kv, lg.data()), Error);
  CHECK_THROWS_AS(m->forward({SeqBatch{full.ids.data(), 6, 0, s.blocks.data(), 1, true}}, kv, lg.data()), Error);
  CHECK_THROWS_AS(m->forward({SeqBatch{full.ids.data(), 6, 0, s.blocks.data(), nb, true}}, kv, nullptr), Error);
  // A cache of another geometry is refused.
  KvCache wrong(c.n_layer + 1, c.n_head, c.n_embd / c.n_head, 4, 8, false);
  CHECK_THROWS_AS(m->forward({SeqBatch{full.ids.data(), 6, 0, s.blocks.data(), nb, true}}, wrong, lg.data()), Error);
  // An empty batch is a no-op.
  m->forward({}, kv, nullptr);
  m->forward({SeqBatch{&full.ids[6], 1, 6, s.blocks.data(), nb, true}}, kv, lg.data());
  CHECK(std::memcmp(lg.data(), ref[1].data(), lg.size() * 4) == 0);
}

TEST_CASE("gpt2 CUDA serving model: the scheduler serves it, greedy tokens equal one sequence alone",
          "[cuda][serve]") {
  RTX_SKIP_WITHOUT_GPU();
  const auto c = make_cfg(67, 64, 4, 2, 64);
  auto m = model_on(c, 9, 0);
  const std::vector<std::vector<int32_t>> prompts = {random_ids(3, 67, 1), random_ids(11, 67, 2), {5}};
  // Greedy continuation of each prompt alone (SequenceRunner: the rtx-train sample path).
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) {
    SequenceRunner run(*m);
    const float* lg = run.reset_and_prefill(p.data(), static_cast<int>(p.size()));
    std::vector<int32_t> out;
    for (int i = 0; i < 12; ++i) {
      out.push_back(static_cast<int32_t>(std::max_element(lg, lg + c.vocab_size) - lg));
      lg = run.step(out.back());
    }
    want.push_back(out);
  }
  SchedulerConfig sc;
  sc.max_batch = 4;
  sc.prefill_chunk = 5;
  Scheduler sched(*m, sc);
  struct Got {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> tokens;
    Finish finish = Finish::None;
  };
  std::vector<std::unique_ptr<Got>> got;
  for (const auto& p : prompts) {
    got.push_back(std::make_unique<Got>());
    Got* g = got.back().get();
    GenRequest r;
    r.prompt = p;
    r.max_tokens = 12;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    REQUIRE(sched.submit(r, [g](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lk(g->mu);
      if (ev.finish != Finish::None) {
        g->finish = ev.finish;
        g->cv.notify_all();
      } else {
        g->tokens.push_back(ev.token);
      }
      return true;
    }));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    std::unique_lock<std::mutex> lk(got[i]->mu);
    got[i]->cv.wait_for(lk, std::chrono::seconds(60), [&] { return got[i]->finish != Finish::None; });
    INFO("prompt " << i);
    CHECK(got[i]->finish == Finish::Length);
    CHECK(got[i]->tokens == want[i]);
  }
  CHECK(sched.stats().kv_blocks_used == 0);
}

namespace {

/// stories260k (llama, 5 layers, dim 64, 8 query and 4 key/value heads of 8, vocab 512) on `device`
/// (-1: the CPU model).
std::unique_ptr<Model> stories(int device) {
  LoadOptions o;
  o.cuda_device = device;
  return load_model(rtx::test::data_dir() + "/stories260k/tinyllamas-stories-260k-f32.gguf", o);
}

/// Max |a - b| over max |b|.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return d / m;
}

}  // namespace

TEST_CASE("llama CUDA serving model: stories260k logits match the CPU model; the documented greedy sample",
          "[cuda][serve]") {
  RTX_SKIP_WITHOUT_GPU();
  auto gpu = stories(0), cpu = stories(-1);
  CHECK(gpu->info().device.rfind("cuda:0", 0) == 0);
  CHECK(gpu->info().n_kv_head == 4);  // grouped-query attention
  Seq s;
  s.ids = gpu->tokenizer().encode("Once upon a time, there was a little girl named Lily. She loved to play");
  s.ids.insert(s.ids.begin(), gpu->info().bos);
  for (int bt : {1, 16}) {
    KvCache kg = cache_for(*gpu, bt, 128), kc = cache_for(*cpu, bt, 128);
    const auto g = run_alone(*gpu, kg, s, {5});
    const auto c = run_alone(*cpu, kc, s, {5});
    REQUIRE(g.size() == c.size());
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("block_tokens " << bt << " call " << i);
      CHECK(max_rel(g[i], c[i]) < 1e-4);  // both are f32 with different summation orders
    }
  }
  // Greedy continuation of "Once upon a time" (llama2.c's documented stories260K sample).
  SequenceRunner run(*gpu);
  std::vector<int32_t> ids = {gpu->info().bos};
  for (int32_t t : gpu->tokenizer().encode("Once upon a time")) ids.push_back(t);
  const float* lg = run.reset_and_prefill(ids.data(), static_cast<int>(ids.size()));
  std::vector<int32_t> out;
  for (int i = 0; i < 40; ++i) {
    out.push_back(static_cast<int32_t>(std::max_element(lg, lg + gpu->info().vocab) - lg));
    lg = run.step(out.back());
  }
  const std::string text = "Once upon a time" + gpu->tokenizer().decode(out);
  const std::string sample = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
  INFO("generated: " << text);
  CHECK(text.compare(0, sample.size(), sample) == 0);
}

TEST_CASE("llama CUDA serving model: batch invariance with grouped-query attention, bitwise", "[cuda][serve]") {
  RTX_SKIP_WITHOUT_GPU();
  auto m = stories(0);
  const int V = m->info().vocab;
  KvCache kv = cache_for(*m, 16, 256);
  Seq a;
  a.ids = random_ids(45, V, 4);
  const auto alone = run_alone(*m, kv, a, {40});
  const auto split = run_alone(*m, kv, a, {17, 23});
  REQUIRE(split.size() == alone.size() + 1);
  for (size_t i = 0; i < alone.size(); ++i) REQUIRE(std::memcmp(alone[i].data(), split[i + 1].data(), V * 4) == 0);
  // A among 9 others (prompts of 2..26 tokens, then one token per call), in the middle.
  std::vector<Seq> others(9);
  for (int o = 0; o < 9; ++o) others[o].ids = random_ids(2 + 3 * o + 6, V, 50 + o);
  Seq A = a;
  size_t ai = 0;
  std::vector<size_t> oi(9, 0);
  std::vector<std::vector<float>> mixed;
  while (ai < A.ids.size()) {
    std::vector<SeqBatch> batch;
    int a_row = -1, wanted = 0;
    for (int o = 0; o < 9; ++o) {
      if (o == 4) {
        const int na = ai == 0 ? 40 : 1;
        reserve(kv, A, A.pos + na);
        a_row = wanted++;
        batch.push_back({A.ids.data() + ai, na, A.pos, A.blocks.data(), static_cast<int>(A.blocks.size()), true});
        A.pos += na;
        ai += na;
      }
      Seq& s = others[o];
      if (oi[o] >= s.ids.size()) continue;
      const int n = oi[o] == 0 ? 2 + 3 * o : 1;
      reserve(kv, s, s.pos + n);
      batch.push_back({s.ids.data() + oi[o], n, s.pos, s.blocks.data(), static_cast<int>(s.blocks.size()), true});
      ++wanted;
      s.pos += n;
      oi[o] += n;
    }
    std::vector<float> lg(static_cast<size_t>(wanted) * V);
    m->forward(batch, kv, lg.data());
    mixed.emplace_back(lg.begin() + static_cast<long>(a_row) * V, lg.begin() + static_cast<long>(a_row + 1) * V);
  }
  REQUIRE(mixed.size() == alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    INFO("call " << i);
    REQUIRE(std::memcmp(alone[i].data(), mixed[i].data(), V * 4) == 0);
  }
}
