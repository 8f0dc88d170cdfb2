// trace_gen: benchmark input generator (not a test). Writes a Chrome trace of N X events,
// nested 4 deep on 8 threads (names from a pool of 64), and its folded stacks:
//   trace_gen N out.json [out.folded]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rtx/trace/folded.hpp"
#include "rtx/trace/trace_event.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: trace_gen N out.json [out.folded]\n");
    return 2;
  }
  const long n = std::atol(argv[1]);
  rtx::trace::TraceWriter w(argv[2], {});
  uint64_t state = 42;
  auto rnd = [&]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  long written = 0;
  double t[8] = {0};
  while (written < n) {
    const int tid = static_cast<int>(rnd() % 8);
    // One top-level op with 3 levels of children: 1 + 1 + 1 + 1 events.
    const double dur = 40 + rnd() % 100;
    double ts = t[tid];
    rtx::trace::Event e;
    e.pid = 1;
    e.tid = tid + 1;
    for (int d = 0; d < 4 && written < n; ++d) {
      e.name = "layer" + std::to_string(d) + ".op" + std::to_string(rnd() % 16);
      e.ts = ts + d * 1.5;
      e.dur = dur - d * 9.25;
      w.add(e);
      ++written;
    }
    t[tid] = ts + dur + 0.5;
  }
  w.commit();
  if (argc > 3) {
    rtx::trace::StackTrie trie;
    rtx::trace::fold_trace(argv[2], trie, 0, rtx::trace::FoldMode::Cpu);
    std::FILE* f = std::fopen(argv[3], "w");
    const std::string s = rtx::trace::write_folded(trie);
    std::fwrite(s.data(), 1, s.size(), f);
    std::fclose(f);
  }
  return 0;
}
