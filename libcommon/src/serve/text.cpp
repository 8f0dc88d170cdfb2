// rtx-serve's incremental text output: WHATWG UTF-8 decoding, stop strings and holdback.
#include "rtx/serve/text.hpp"

#include <algorithm>

#include "rtx/core/error.hpp"

namespace rtx::serve {

namespace {
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

// ---- Utf8Decoder (WHATWG Encoding Standard, 9.1.2) --------------------------------------------

void Utf8Decoder::feed(std::string_view bytes, std::string& out) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    if (needed_ == 0) {
      if (b <= 0x7F) {
        out.push_back(static_cast<char>(b));
      } else if (b >= 0xC2 && b <= 0xDF) {
        needed_ = 1;
        pending_.assign(1, static_cast<char>(b));
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower_ = 0xA0;  // no overlong 3-byte forms
        if (b == 0xED) upper_ = 0x9F;  // no surrogates
        needed_ = 2;
        pending_.assign(1, static_cast<char>(b));
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower_ = 0x90;  // no overlong 4-byte forms
        if (b == 0xF4) upper_ = 0x8F;  // nothing above U+10FFFF
        needed_ = 3;
        pending_.assign(1, static_cast<char>(b));
      } else {
        out += kReplacement;  // 80..C1, F5..FF can never start a sequence
      }
      continue;
    }
    if (b < lower_ || b > upper_) {
      // The pending sequence is a maximal subpart: one U+FFFD, then this byte starts afresh.
      pending_.clear();
      needed_ = 0;
      lower_ = 0x80;
      upper_ = 0xBF;
      out += kReplacement;
      --i;
      continue;
    }
    lower_ = 0x80;
    upper_ = 0xBF;
    pending_.push_back(static_cast<char>(b));
    if (--needed_ == 0) {
      out += pending_;
      pending_.clear();
    }
  }
}

void Utf8Decoder::finish(std::string& out) {
  if (needed_ != 0) out += kReplacement;
  pending_.clear();
  needed_ = 0;
  lower_ = 0x80;
  upper_ = 0xBF;
}

std::string utf8_sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8Decoder d;
  d.feed(bytes, out);
  d.finish(out);
  return out;
}

bool utf8_valid(std::string_view bytes) { return utf8_sanitize(bytes) == bytes; }

size_t utf8_length(std::string_view text) {
  size_t n = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

// ---- TextStream -------------------------------------------------------------------------------

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  if (stops_.size() > kMaxStops)
    throw_input("too many stop strings: " + std::to_string(stops_.size()) + " (at most " +
                    std::to_string(kMaxStops) + ")",
                "stop", "pass at most 4 stop strings");
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string where = "stop[" + std::to_string(i) + "]";
    if (stops_[i].empty()) throw_input("empty stop string", where, "remove it or give a non-empty string");
    if (!utf8_valid(stops_[i])) throw_input("stop string is not valid UTF-8", where);
  }
}

size_t TextStream::holdback() const {
  size_t hold = 0;
  for (const std::string& s : stops_) {
    // Longest k < |s| such that pending_ ends with s[0, k).
    size_t k = std::min(s.size() - 1, pending_.size());
    for (; k > hold; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) break;
    if (k > hold) hold = k;
  }
  return hold;
}

void TextStream::check_stops() {
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = pending_.find(stops_[i]);
    if (at < best) {  // strictly earlier: the lowest index wins a tie
      best = at;
      stop_index_ = static_cast<int>(i);
    }
  }
  if (best != std::string::npos) pending_.resize(best);
}

std::string TextStream::push(std::string_view token_bytes) {
  if (ended_)
    throw_usage("TextStream::push after the stream ended (a stop matched or finish() was called)",
                "rtx::serve::TextStream", "end generation when push() reports stopped()");
  offsets_.push_back(TokenOffset{decoded_bytes_, decoded_chars_});
  const size_t before = pending_.size();
  decoder_.feed(token_bytes, pending_);
  const std::string_view added(pending_.data() + before, pending_.size() - before);
  decoded_bytes_ += added.size();
  decoded_chars_ += utf8_length(added);

  // A stop can only begin inside pending_: any suffix that could start one was held back.
  check_stops();
  size_t send = pending_.size();
  if (stopped())
    ended_ = true;
  else
    send -= holdback();
  std::string out = pending_.substr(0, send);
  pending_.erase(0, send);
  emitted_ += out;
  return out;
}

std::string TextStream::finish() {
  if (ended_) {
    if (stopped()) return {};
    throw_usage("TextStream::finish called twice", "rtx::serve::TextStream");
  }
  ended_ = true;
  const size_t before = pending_.size();
  decoder_.finish(pending_);
  const std::string_view added(pending_.data() + before, pending_.size() - before);
  decoded_bytes_ += added.size();
  decoded_chars_ += utf8_length(added);
  check_stops();  // a U+FFFD from the incomplete tail may complete a stop containing U+FFFD
  std::string out = std::move(pending_);
  pending_.clear();
  emitted_ += out;
  return out;
}

size_t TextStream::tokens_flushed() const noexcept {
  if (ended_ && !stopped()) return offsets_.size();
  size_t n = 0;
  while (n < offsets_.size() && offsets_[n].byte_offset < emitted_.size()) ++n;
  return n;
}

}  // namespace rtx::serve
