// Fuzz target: rtx-serve's TextStream (UTF-8 holdback, stop strings) on arbitrary bytes.
// Input layout: byte 0 % 5 = stop count; each stop: a length byte (% 16) and its bytes; the
// rest: tokens, each a length byte (% 8) and its bytes. Checks TextStream's contract against
// utf8_sanitize of all the bytes pushed (an independent whole-string decode).
#include <algorithm>
#include <string>
#include <algorithm>
#include <string_view>
#include <vector>

#include "fuzz_util.hpp"
#include "rtx/core/error.hpp"
#include "rtx/serve/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rtx::serve;
  size_t at = 0;
  auto take = [&](size_t n) {
    n = std::min(n, size - at);
    std::string s(reinterpret_cast<const char*>(data) + at, n);
    at += n;
    return s;
  };
  if (size == 0) return 0;
  const size_t nstops = data[at++] % 5;
  std::vector<std::string> stops;
  for (size_t i = 0; i < nstops && at < size; ++i) stops.push_back(take(data[at++] % 16));
  try {
    TextStream ts(stops);
    std::string out, pushed;
    size_t last_byte_offset = 0;
    while (at < size && !ts.ended()) {
      const std::string tok = take(data[at++] % 8);
      pushed += tok;
      out += ts.push(tok);
      const auto& offs = ts.token_offsets();
      RTX_FUZZ_CHECK(offs.size() == ts.tokens_pushed(), "one offset per token");
      RTX_FUZZ_CHECK(offs.back().byte_offset >= last_byte_offset, "offsets decrease");
      last_byte_offset = offs.back().byte_offset;
      RTX_FUZZ_CHECK(ts.tokens_flushed() <= ts.tokens_pushed(), "flushed > pushed");
      RTX_FUZZ_CHECK(utf8_valid(out), "returned text is not well-formed UTF-8");
    }
    out += ts.finish();
    RTX_FUZZ_CHECK(out == ts.text(), "returned pieces != text()");
    RTX_FUZZ_CHECK(utf8_valid(out), "text() is not well-formed UTF-8");
    const std::string full = utf8_sanitize(pushed);
    if (ts.stopped()) {
      const std::string& stop = stops.at(static_cast<size_t>(ts.stop_index()));
      RTX_FUZZ_CHECK(full.compare(0, out.size(), out) == 0, "text is not a prefix of the decoded stream");
      RTX_FUZZ_CHECK(full.compare(out.size(), stop.size(), stop) == 0, "the stop does not follow the text");
      for (const auto& s : stops) RTX_FUZZ_CHECK(out.find(s) == std::string::npos, "a stop inside the text");
    } else {
      RTX_FUZZ_CHECK(out == full, "text != utf8_sanitize(all bytes)");
      RTX_FUZZ_CHECK(ts.tokens_flushed() == ts.tokens_pushed(), "unflushed tokens after finish");
      for (const auto& s : stops) RTX_FUZZ_CHECK(out.find(s) == std::string::npos, "missed stop");
    }
  } catch (const rtx::Error&) {
  }
  return 0;
}
