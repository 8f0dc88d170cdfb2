// rtx-serve's incremental text output: raw token bytes in, client-safe UTF-8 text out, with stop
// strings matched however the tokens split them. Pure (no model, no HTTP); one per request.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace rtx::serve {

/// Most stop strings one request may carry (the OpenAI API's limit for `stop`).
constexpr size_t kMaxStops = 4;

/// The UTF-8 decoder of the WHATWG Encoding Standard (section 9.1.2 "UTF-8 decoder"), fed one
/// chunk at a time. Valid sequences pass through byte for byte; each maximal subpart of an
/// ill-formed sequence (Unicode 15, section 3.9, "U+FFFD Substitution of Maximal Subparts")
/// becomes one U+FFFD (EF BF BD). Overlong forms, surrogates (ED A0..BF) and code points above
/// U+10FFFF are ill-formed. An incomplete sequence at the end of a chunk is held until a later
/// chunk completes it; finish() turns a still-incomplete one into U+FFFD.
class Utf8Decoder {
 public:
  /// Decode `bytes`, appending the complete characters to `out`.
  void feed(std::string_view bytes, std::string& out);
  /// End of input: appends U+FFFD when an incomplete sequence is pending, then resets.
  void finish(std::string& out);
  /// Bytes of the incomplete trailing sequence held back (0..3).
  size_t pending_bytes() const noexcept { return pending_.size(); }

 private:
  std::string pending_;  // lead byte and continuation bytes seen so far of the current sequence
  int needed_ = 0;       // continuation bytes still expected
  unsigned char lower_ = 0x80, upper_ = 0xBF;
};

/// `bytes` with every ill-formed part replaced by U+FFFD (Utf8Decoder over the whole string).
std::string utf8_sanitize(std::string_view bytes);
/// True when `bytes` is well-formed UTF-8 (no replacement would be made).
bool utf8_valid(std::string_view bytes);
/// Code points in well-formed UTF-8 `text` (bytes that are not continuation bytes 10xxxxxx).
size_t utf8_length(std::string_view text);

/// Where one pushed token's text begins in the output, for usage and logprobs bookkeeping.
/// Offsets are those of the decoded stream (before any stop cut): the length of the text whose
/// characters were complete before this token's bytes arrived. A token that continues a
/// character begun by an earlier token (a split UTF-8 sequence) therefore gets that character's
/// offset; an empty token gets the offset where the next character will start. Offsets never
/// decrease from one token to the next.
struct TokenOffset {
  size_t byte_offset = 0;  ///< in bytes of the UTF-8 output
  size_t char_offset = 0;  ///< in code points (what a Python/JS client indexes by)
};

/// Incremental detokenizer with stop strings for one generated sequence.
///
/// Contract:
/// - push(bytes) is called once per generated token with io::Tokenizer::token_bytes(id) (any
///   bytes, possibly a partial UTF-8 sequence or empty). It returns the text that may be sent to
///   the client now, possibly empty. finish() returns the rest when generation ends for another
///   reason (EOS, max_tokens, cancel). The concatenation of everything returned equals text().
/// - Decoding: the bytes of all tokens form one stream decoded by Utf8Decoder, so returned text
///   is always well-formed UTF-8 and never splits a character: an incomplete trailing sequence is
///   held until a later token completes it; invalid bytes become U+FFFD; an incomplete sequence
///   still pending at finish() becomes one U+FFFD.
/// - Stops are matched on the decoded text (so a stop may span several tokens or end inside one).
///   After each push, if any stop occurs anywhere in the decoded text, the stream stops: the
///   output ends right before the first byte of the earliest-starting occurrence, the stop text
///   and everything after it are never returned, stopped() becomes true and stop_index() names
///   the stop (the lowest index among stops starting at that position). Generation must end.
/// - Holdback: while not stopped, the longest suffix of the unsent text that is a proper prefix
///   of some stop is held back (it might become a stop); it is released as soon as it can no
///   longer start a stop, and in full by finish().
/// - push() after the stream ended (a stop matched, or finish() was called) and a second
///   finish() without a stop throw Error(Usage); finish() after a stop returns "".
class TextStream {
 public:
  /// `stops`: at most kMaxStops non-empty, well-formed UTF-8 strings (duplicates are allowed).
  /// Throws Error(Input) naming "stop[i]" otherwise.
  explicit TextStream(std::vector<std::string> stops = {});

  /// Feed one token's raw bytes; returns the text that may be sent now (well-formed UTF-8).
  std::string push(std::string_view token_bytes);
  /// Generation ended without a stop match (or after one, returning ""): flush the held text
  /// and any incomplete sequence (as U+FFFD, unless a stop already matched).
  std::string finish();

  /// True once a stop string matched (finish_reason "stop").
  bool stopped() const noexcept { return stop_index_ >= 0; }
  /// Index into the constructor's `stops` of the stop that matched, -1 when none.
  int stop_index() const noexcept { return stop_index_; }
  /// True after a stop matched or finish() was called.
  bool ended() const noexcept { return ended_; }

  /// All text returned so far (push + finish results, concatenated).
  const std::string& text() const noexcept { return emitted_; }
  /// Bytes held back right now (incomplete UTF-8 plus possible stop prefix).
  size_t held_bytes() const noexcept { return pending_.size() + decoder_.pending_bytes(); }

  /// Tokens pushed so far (every one counts as a generated token for `usage`).
  size_t tokens_pushed() const noexcept { return offsets_.size(); }
  /// Offsets of every pushed token, in push order (see TokenOffset).
  const std::vector<TokenOffset>& token_offsets() const noexcept { return offsets_; }
  /// How many leading tokens have their text (at least partly) in the returned text: tokens
  /// whose byte_offset < text().size(); once the stream ended without a stop, every pushed
  /// token. Tokens at or after a stop's first byte never count. Non-decreasing over time, so a
  /// streaming server attaches the logprobs of tokens [reported, tokens_flushed()) to a chunk.
  size_t tokens_flushed() const noexcept;

 private:
  void check_stops();  // sets stop_index_ and truncates pending_ on a match
  size_t holdback() const;

  std::vector<std::string> stops_;
  Utf8Decoder decoder_;
  std::string pending_;   // decoded text not yet returned
  std::string emitted_;   // all text returned
  size_t decoded_bytes_ = 0, decoded_chars_ = 0;  // length of the whole decoded stream so far
  std::vector<TokenOffset> offsets_;
  int stop_index_ = -1;
  bool ended_ = false;
};

}  // namespace rtx::serve
