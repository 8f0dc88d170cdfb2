// Helpers shared by the serving-engine tests (engine_test, engine_cuda_test, device_test): a
// one-character tokenizer, a sequence with its block table, and running a sequence alone.
#pragma once
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rtx/io/tokenizer.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/scheduler.hpp"

namespace rtx::test {

/// A char tokenizer with exactly V symbols (printable ASCII from '!'; V <= 94).
inline std::unique_ptr<io::Tokenizer> char_tok(int V) {
  std::string text;
  for (int i = 0; i < V; ++i) text += static_cast<char>('!' + i);
  return io::make_char_tokenizer_from_text(text);
}

/// A sequence in flight: its tokens, block table and position.
struct Seq {
  std::vector<int32_t> ids;
  std::vector<int32_t> blocks;
  int pos = 0;
};

/// Makes sure `s` has blocks for `positions` positions (REQUIREs the pool has them).
inline void reserve(serve::KvCache& kv, Seq& s, int positions) {
  while (static_cast<int>(s.blocks.size()) < kv.blocks_for(positions)) {
    const int b = kv.alloc();
    REQUIRE(b >= 0);
    s.blocks.push_back(b);
  }
}

/// Runs `s.ids` through `m` alone, in calls of the sizes in `chunks` (then one token per call);
/// returns the logits after each call and frees the blocks it took.
inline std::vector<std::vector<float>> run_alone(serve::Model& m, serve::KvCache& kv, Seq s,
                                                 const std::vector<int>& chunks) {
  std::vector<std::vector<float>> out;
  const int V = m.info().vocab;
  size_t i = 0, c = 0;
  while (i < s.ids.size()) {
    const int n = c < chunks.size() ? chunks[c++] : 1;
    reserve(kv, s, s.pos + n);
    std::vector<float> lg(V);
    m.forward({serve::SeqBatch{s.ids.data() + i, n, s.pos, s.blocks.data(), static_cast<int>(s.blocks.size()), true}},
              kv, lg.data());
    out.push_back(lg);
    s.pos += n;
    i += n;
  }
  for (int b : s.blocks) kv.free(b);
  return out;
}

/// Collects one scheduler request's events (tokens; the chosen token's logprob and each top
/// logprob + its id, in order); wait() blocks until the final one (60 s at most).
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  serve::Finish finish = serve::Finish::None;
  std::chrono::steady_clock::time_point first_token{};
  int stop_after = -1;  // return false after this many tokens
  serve::EventFn fn() {
    return [this](const serve::TokenEvent& ev) {
      std::lock_guard<std::mutex> g(mu);
      if (ev.finish != serve::Finish::None) {
        finish = ev.finish;
        cv.notify_all();
        return true;
      }
      if (tokens.empty()) first_token = std::chrono::steady_clock::now();
      tokens.push_back(ev.token);
      logprobs.push_back(ev.logprob);
      for (const auto& [id, lp] : ev.top) logprobs.push_back(lp + static_cast<float>(id));
      return stop_after < 0 || static_cast<int>(tokens.size()) < stop_after;
    };
  }
  serve::Finish wait() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, std::chrono::seconds(60), [&] { return finish != serve::Finish::None; });
    return finish;
  }
};

}  // namespace rtx::test
