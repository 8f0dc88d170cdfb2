// Helpers shared by the serving-engine tests (engine_test, engine_cuda_test, device_test): a
// one-character tokenizer, a sequence with its block table, and running a sequence alone.
#pragma once
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "rtx/io/tokenizer.hpp"
#include "rtx/serve/model.hpp"

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

}  // namespace rtx::test
