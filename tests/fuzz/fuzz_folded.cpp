// Fuzz target: folded stacks ("frame;frame count", FlameGraph's collapsed format) read by
// rtx::trace::read_folded, written back and rendered. The weight read must equal the counts
// summed independently in 128 bits (fixed point, malformed lines skipped as the reader skips
// them); accepted text must round-trip; rejections are rtx::Error.
#include <algorithm>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/trace/flamegraph.hpp"
#include "rtx/trace/folded.hpp"

namespace {

/// A count token: digits with an optional ".digits" (or ".digits" alone).
bool count_token(const std::string& c, std::string& ip, std::string& fp) {
  size_t i = 0;
  while (i < c.size() && c[i] >= '0' && c[i] <= '9') ++i;
  ip = c.substr(0, i);
  fp.clear();
  if (i < c.size() && c[i] == '.') {
    size_t j = i + 1;
    while (j < c.size() && c[j] >= '0' && c[j] <= '9') ++j;
    fp = c.substr(i + 1, j - i - 1);
    i = j;
  }
  return i == c.size() && (!ip.empty() || !fp.empty());
}

/// Sum of the NEW counts (the last count of a line) of `text` computed apart from the reader, as
/// fixed point with `digits` fractional digits: the most any counted line's counts have (at most
/// 6; more are rounded half up). A line counts when it ends with a blank and a count and has a
/// non-empty frame before it (or before a second, BASE, count); other lines are skipped, as the
/// reader skips malformed lines. Returns false when a sum passes 2^100 (the reader refuses).
bool expected_total(const std::string& text, unsigned __int128& total, int& digits) {
  struct Line {
    std::string ip[2], fp[2];
    int n;
  };
  std::vector<Line> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t' || line.back() == '\n' ||
                             line.back() == '\v' || line.back() == '\f'))
      line.pop_back();
    const bool last = nl == text.size();
    const size_t sp = line.empty() ? std::string::npos : line.find_last_of(" \t");
    Line l{};
    l.n = 1;
    if (sp != std::string::npos && count_token(line.substr(sp + 1), l.ip[0], l.fp[0])) {
      std::string stack = line.substr(0, sp);
      while (!stack.empty() && (stack.back() == ' ' || stack.back() == '\t')) stack.pop_back();
      const size_t sp2 = stack.find_last_of(" \t");
      if (!stack.empty() && sp2 != std::string::npos && count_token(stack.substr(sp2 + 1), l.ip[1], l.fp[1])) {
        l.n = 2;
        stack.resize(sp2);
        while (!stack.empty() && (stack.back() == ' ' || stack.back() == '\t')) stack.pop_back();
      }
      // A frame survives when it is not empty; the leaf's trailing blanks are dropped (they are
      // the count's separator in written text), so a line counts when its stack holds anything
      // but ';' and blanks.
      if (stack.find_first_not_of("; \t") != std::string::npos) lines.push_back(l);
    }
    if (last) break;
  }
  digits = 0;
  for (const Line& l : lines)
    for (int k = 0; k < l.n; ++k) digits = std::max(digits, static_cast<int>(std::min<size_t>(l.fp[k].size(), 6)));
  total = 0;
  for (const Line& l : lines) {
    unsigned __int128 w = 0;
    for (char ch : l.ip[0]) {
      w = w * 10 + static_cast<unsigned>(ch - '0');
      if (w > (static_cast<unsigned __int128>(1) << 100)) return false;
    }
    for (int k = 0; k < digits; ++k) w = w * 10 + (k < static_cast<int>(l.fp[0].size()) ? l.fp[0][k] - '0' : 0);
    if (static_cast<int>(l.fp[0].size()) > digits && l.fp[0][digits] >= '5') ++w;
    total += w;
    if (total > (static_cast<unsigned __int128>(1) << 100)) return false;
  }
  return true;
}

/// `w` with `from` fractional digits expressed with `to` >= from digits.
unsigned __int128 rescale(uint64_t w, int from, int to) {
  unsigned __int128 r = w;
  for (int i = from; i < to; ++i) r *= 10;
  return r;
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
  int digits = 0;
  if (!gz && text.find('\0') == std::string::npos && expected_total(text, want, digits)) {
    RTX_FUZZ_CHECK(digits == trie.frac_digits(), "fixed-point digits differ from the most fractional digits met");
    RTX_FUZZ_CHECK(want == trie.total_weight(0), "weight read != counts summed in 128 bits");
  }
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
  // Written text may need fewer fractional digits than were read (0.25 + 0.75 = 1): compare scaled.
  RTX_FUZZ_CHECK(back.frac_digits() <= trie.frac_digits() &&
                     rescale(back.total_weight(0), back.frac_digits(), trie.frac_digits()) == trie.total_weight(0),
                 "round trip changed the weight");
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
