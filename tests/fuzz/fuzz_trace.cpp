// Fuzz target: Chrome Trace Event JSON (rtx::trace::read_trace, load_trace, validate,
// fold_trace) on arbitrary bytes, gzip included. Accepted traces must fold into a flame graph
// whose folded text reads back to the same stacks; rejections must be rtx::Error.
#include <cmath>
#include <string>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/trace/flamegraph.hpp"
#include "rtx/trace/folded.hpp"
#include "rtx/trace/trace_event.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rtx::trace;
  rtx::fuzz::MemFile file(data, size);
  uint64_t delivered = 0;
  try {
    const TraceInfo info = read_trace(file.path(), [&](Event&& e) {
      ++delivered;
      RTX_FUZZ_CHECK(e.ph != 0, "event without a phase");
      RTX_FUZZ_CHECK(std::isnan(e.ts) || std::isfinite(e.ts), "infinite ts");
      RTX_FUZZ_CHECK(e.args.is_null() || e.args.is_object(), "args neither null nor an object");
    });
    RTX_FUZZ_CHECK(info.events == delivered, "TraceInfo.events != events delivered");
    for (const auto& [id, text] : info.string_ids)
      RTX_FUZZ_CHECK(id >= (int64_t(1) << 40), "string pid/tid mapped below 2^40: " + text);
    const Trace t = load_trace(file.path());
    RTX_FUZZ_CHECK(t.events.size() == delivered, "load_trace and read_trace disagree on the count");
    for (const Violation& v : validate(t.events))
      RTX_FUZZ_CHECK(v.index < t.events.size() && !v.rule.empty(), "violation outside the trace: " + v.message);
  } catch (const rtx::Error&) {
    return 0;
  }
  // Fold (CPU, GPU and automatic) and round-trip the folded text.
  for (FoldMode mode : {FoldMode::Auto, FoldMode::Cpu, FoldMode::Gpu}) {
    StackTrie trie;
    try {
      const FoldResult r = fold_trace(file.path(), trie, 0, mode);
      RTX_FUZZ_CHECK(r.events == delivered, "fold saw another number of events");
      RTX_FUZZ_CHECK(trie.total_weight(0) == r.total_ns, "trie weight != total_ns");
      const std::string folded = write_folded(trie);
      if (folded.size() >= 2 && static_cast<unsigned char>(folded[0]) == 0x1f && static_cast<unsigned char>(folded[1]) == 0x8b)
        continue;  // read back as gzip by design (see fuzz_folded.cpp)
      rtx::fuzz::MemFile again(reinterpret_cast<const uint8_t*>(folded.data()), folded.size());
      StackTrie back;
      read_folded(again.path(), back);
      RTX_FUZZ_CHECK(back.total_weight(0) == r.total_ns, "folded text lost weight");
      RTX_FUZZ_CHECK(write_folded(back) == folded, "folded text does not round-trip");
      if (r.total_ns > 0 && trie.nodes().size() <= 256) {  // rendering only small tries
        FlameOptions o;
        const std::string svg = render_flamegraph(trie, o);
        RTX_FUZZ_CHECK(svg.rfind("<?xml", 0) == 0 && svg.find("</svg>") != std::string::npos, "SVG not a document");
      }
    } catch (const rtx::Error&) {
    }
  }
  return 0;
}
