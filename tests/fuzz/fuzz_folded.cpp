// Fuzz target: folded stacks ("frame;frame count", FlameGraph's collapsed format) read by
// rtx::trace::read_folded, written back and rendered. The weight read must equal the counts
// summed independently in 128 bits; accepted text must round-trip; rejections are rtx::Error.
#include <string>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/trace/flamegraph.hpp"
#include "rtx/trace/folded.hpp"

namespace {

/// Sum of the counts of `text` computed apart from the reader: per line, the token after the
/// last space/tab (trailing whitespace and '\r' dropped), digits with an optional ".d..."
/// rounded half up. Returns false for a line the reader must refuse.
bool expected_total(const std::string& text, unsigned __int128& total) {
  total = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t' || line.back() == '\n' ||
                             line.back() == '\v' || line.back() == '\f'))
      line.pop_back();
    if (line.empty()) {
      if (nl == text.size()) break;
      continue;
    }
    const size_t sp = line.find_last_of(" \t");
    if (sp == std::string::npos) return false;
    const std::string c = line.substr(sp + 1);
    unsigned __int128 w = 0;
    size_t i = 0;
    bool digits = false;
    for (; i < c.size() && c[i] >= '0' && c[i] <= '9'; ++i) {
      w = w * 10 + static_cast<unsigned>(c[i] - '0');
      digits = true;
      if (w > (static_cast<unsigned __int128>(1) << 100)) return false;
    }
    if (i < c.size() && c[i] == '.') {
      size_t j = i + 1;
      while (j < c.size() && c[j] >= '0' && c[j] <= '9') ++j;
      if (j == c.size() && (digits || j > i + 1)) {
        if (i + 1 < c.size() && c[i + 1] >= '5') ++w;
        i = j;
        digits = true;
      }
    }
    if (!digits || i != c.size()) return false;
    total += w;
    if (nl == text.size()) break;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rtx::trace;
  // Gzip input is decoded by the reader; the independent sum only applies to plain text.
  const bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const std::string text(reinterpret_cast<const char*>(data), size);
  rtx::fuzz::MemFile file(data, size);
  StackTrie trie;
  try {
    read_folded(file.path(), trie);
  } catch (const rtx::Error&) {
    return 0;
  }
  unsigned __int128 want = 0;
  if (!gz && text.find('\0') == std::string::npos && expected_total(text, want))
    RTX_FUZZ_CHECK(want == trie.total_weight(0), "weight read != counts summed in 128 bits");
  const std::string folded = write_folded(trie);
  // A text whose first bytes are the gzip magic is read as gzip (the readers sniff content, as
  // documented); a first frame named "\x1f\x8b..." cannot round-trip, by design.
  if (folded.size() >= 2 && static_cast<unsigned char>(folded[0]) == 0x1f && static_cast<unsigned char>(folded[1]) == 0x8b)
    return 0;
  rtx::fuzz::MemFile again(reinterpret_cast<const uint8_t*>(folded.data()), folded.size());
  StackTrie back;
  try {
    read_folded(again.path(), back);
  } catch (const rtx::Error& e) {
    RTX_FUZZ_CHECK(false, std::string("written folded text does not read back: ") + e.what());
  }
  RTX_FUZZ_CHECK(back.total_weight(0) == trie.total_weight(0), "round trip changed the weight");
  RTX_FUZZ_CHECK(write_folded(back) == folded, "folded text does not round-trip");
  // Rendering costs O(nodes x depth): only for small tries, so the fuzzer keeps its pace.
  if (trie.total_weight(0) > 0 && trie.nodes().size() <= 256) {
    FlameOptions o;
    o.minwidth = 0;
    const std::string svg = render_flamegraph(trie, o);
    RTX_FUZZ_CHECK(svg.rfind("<?xml", 0) == 0 && svg.find("</svg>") != std::string::npos, "SVG not a document");
  }
  return 0;
}
