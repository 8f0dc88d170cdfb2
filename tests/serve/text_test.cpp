// TextStream and the UTF-8 decoder: stop strings across byte-level token splits, holdback,
// U+FFFD replacement (Unicode's Table 3-8 known answer), token offsets, and a randomized check
// against a from-scratch reference that recomputes every prefix.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/serve/text.hpp"

using namespace rtx;
using namespace rtx::serve;

namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

}  // namespace

TEST_CASE("utf8: Unicode Table 3-8 maximal subparts and WHATWG cases", "[cpu]") {
  // Unicode 15 section 3.9, Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  CHECK(utf8_sanitize("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64") ==
        "a" + kFFFD + kFFFD + kFFFD + "b" + kFFFD + "c" + kFFFD + kFFFD + "d");
  CHECK(utf8_sanitize("\xC0\xAF") == kFFFD + kFFFD);                 // overlong '/'
  CHECK(utf8_sanitize("\xED\xA0\x80") == kFFFD + kFFFD + kFFFD);     // surrogate D800
  CHECK(utf8_sanitize("\xF4\x90\x80\x80") == kFFFD + kFFFD + kFFFD + kFFFD);  // > U+10FFFF
  CHECK(utf8_sanitize("\xE2\x82") == kFFFD);                         // truncated at the end
  CHECK(utf8_sanitize("\xE0\x80\xAF") == kFFFD + kFFFD + kFFFD);     // overlong 3-byte '/'
  CHECK(utf8_sanitize("\xF0\x80\x80\xAF") == kFFFD + kFFFD + kFFFD + kFFFD);  // overlong 4-byte
  CHECK(utf8_sanitize("\xE0\xA0\x80\xED\x9F\xBF\xF4\x8F\xBF\xBF") ==
        "\xE0\xA0\x80\xED\x9F\xBF\xF4\x8F\xBF\xBF");  // U+0800, U+D7FF, U+10FFFF: bounds
  CHECK(utf8_sanitize("\xFF") == kFFFD);
  CHECK(utf8_sanitize("\xF0\x9F\x98\x80 \xC3\xA9") == "\xF0\x9F\x98\x80 \xC3\xA9");
  CHECK(utf8_valid("\xE2\x82\xAC"));
  CHECK_FALSE(utf8_valid("\xE2\x82"));
  CHECK(utf8_length("a\xC3\xA9\xF0\x9F\x98\x80") == 3);
}

TEST_CASE("utf8 decoder holds an incomplete sequence across chunks", "[cpu]") {
  Utf8Decoder d;
  std::string out;
  d.feed("a\xE2", out);
  CHECK(out == "a");
  CHECK(d.pending_bytes() == 1);
  d.feed("\x82", out);
  CHECK(out == "a");
  d.feed("\xAC" "b", out);
  CHECK(out == "a\xE2\x82\xAC" "b");
  CHECK(d.pending_bytes() == 0);
  d.feed("\xF0\x9F", out);
  d.feed("A", out);  // breaks the sequence: one U+FFFD, then 'A'
  CHECK(out == "a\xE2\x82\xAC" "b" + kFFFD + "A");
  d.feed("\xC3", out);
  d.finish(out);
  CHECK(out == "a\xE2\x82\xAC" "b" + kFFFD + "A" + kFFFD);
}

TEST_CASE("stop spanning three tokens", "[cpu]") {
  TextStream ts({"<stop>"});
  CHECK(ts.push("xx<") == "xx");
  CHECK(ts.held_bytes() == 1);
  CHECK(ts.push("st") == "");
  CHECK(ts.push("op>yy") == "");
  CHECK(ts.stopped());
  CHECK(ts.stop_index() == 0);
  CHECK(ts.text() == "xx");
  CHECK(ts.tokens_pushed() == 3);
  CHECK(ts.tokens_flushed() == 1);
  CHECK(ts.finish() == "");
  CHECK_THROWS_AS(ts.push("z"), Error);
}

TEST_CASE("stop ending in the middle of a token", "[cpu]") {
  TextStream ts({"\n\n"});
  CHECK(ts.push("Hello") == "Hello");
  CHECK(ts.push(" world\n") == " world");
  CHECK(ts.push("\nNext para") == "");
  CHECK(ts.stopped());
  CHECK(ts.text() == "Hello world");
  REQUIRE(ts.token_offsets().size() == 3);
  CHECK(ts.token_offsets()[0].byte_offset == 0);
  CHECK(ts.token_offsets()[1].byte_offset == 5);
  CHECK(ts.token_offsets()[2].byte_offset == 12);
  CHECK(ts.tokens_flushed() == 2);
}

TEST_CASE("stop inside one token with text after it", "[cpu]") {
  TextStream ts({"END"});
  CHECK(ts.push("abENDcd") == "ab");
  CHECK(ts.stopped());
  CHECK(ts.text() == "ab");
  CHECK(ts.tokens_flushed() == 1);
}

TEST_CASE("stop that is a prefix of another stop", "[cpu]") {
  SECTION("the shorter one completes first") {
    TextStream ts({"abc", "ab"});
    CHECK(ts.push("x") == "x");
    CHECK(ts.push("a") == "");
    CHECK(ts.push("b") == "");
    CHECK(ts.stopped());
    CHECK(ts.stop_index() == 1);
    CHECK(ts.text() == "x");
  }
  SECTION("both complete in one token at one position: the lower index wins") {
    TextStream ts({"abc", "ab"});
    CHECK(ts.push("xabc") == "x");
    CHECK(ts.stop_index() == 0);
  }
  SECTION("the longer one's prefix is held, then released") {
    TextStream ts({"abcd", "bx"});
    CHECK(ts.push("ab") == "");   // "ab" prefixes abcd (and "b" prefixes bx)
    CHECK(ts.push("c") == "");    // "abc" still prefixes abcd
    CHECK(ts.push("e") == "abce");
    CHECK_FALSE(ts.stopped());
    CHECK(ts.push("b") == "");
    CHECK(ts.push("x") == "");
    CHECK(ts.stop_index() == 1);
    CHECK(ts.text() == "abce");
  }
  SECTION("earliest start wins over the stop that completed") {
    TextStream ts({"yz", "xyz"});
    CHECK(ts.push("axy") == "a");
    CHECK(ts.push("z!") == "");
    CHECK(ts.stop_index() == 1);
    CHECK(ts.text() == "a");
  }
}

TEST_CASE("overlapping partial matches: aab with stop ab", "[cpu]") {
  TextStream ts({"ab"});
  CHECK(ts.push("a") == "");
  CHECK(ts.push("a") == "a");
  CHECK(ts.held_bytes() == 1);
  CHECK(ts.push("b") == "");
  CHECK(ts.stopped());
  CHECK(ts.text() == "a");
  CHECK(ts.tokens_flushed() == 1);  // token 1 starts at offset 1 == the stop's first byte
  SECTION("also within one token") {
    TextStream t2({"aab"});
    CHECK(t2.push("aaaa") == "aa");
    CHECK(t2.push("b!") == "");
    CHECK(t2.text() == "aa");
  }
}

TEST_CASE("holdback flushed at the end", "[cpu]") {
  TextStream ts({"</s>"});
  CHECK(ts.push("hi<") == "hi");
  CHECK(ts.push("/") == "");
  CHECK(ts.tokens_flushed() == 1);
  CHECK(ts.finish() == "</");
  CHECK_FALSE(ts.stopped());
  CHECK(ts.ended());
  CHECK(ts.text() == "hi</");
  CHECK(ts.tokens_flushed() == 2);
  CHECK_THROWS_AS(ts.finish(), Error);
  CHECK_THROWS_AS(ts.push("x"), Error);
}

TEST_CASE("4-byte emoji split over 4 tokens", "[cpu]") {
  TextStream ts({"!!"});
  CHECK(ts.push("\xF0") == "");
  CHECK(ts.push("\x9F") == "");
  CHECK(ts.push("\x98") == "");
  CHECK(ts.held_bytes() == 3);
  CHECK(ts.push("\x80") == "\xF0\x9F\x98\x80");
  CHECK(ts.push("!") == "");
  CHECK(ts.push("?") == "!?");
  const auto& off = ts.token_offsets();
  REQUIRE(off.size() == 6);
  for (int i = 0; i < 4; ++i) {
    CHECK(off[i].byte_offset == 0);
    CHECK(off[i].char_offset == 0);
  }
  CHECK(off[4].byte_offset == 4);
  CHECK(off[4].char_offset == 1);
  CHECK(off[5].byte_offset == 5);
  CHECK(off[5].char_offset == 2);
  CHECK(ts.finish() == "");
  CHECK(ts.text() == "\xF0\x9F\x98\x80!?");
}

TEST_CASE("stop containing a multi-byte character split by tokens", "[cpu]") {
  TextStream ts({"\xC3\xA9t\xC3\xA9"});  // "été"
  CHECK(ts.push("l'\xC3") == "l'");
  CHECK(ts.push("\xA9t\xC3") == "");
  CHECK(ts.push("\xA9 chaud") == "");
  CHECK(ts.stopped());
  CHECK(ts.text() == "l'");
}

TEST_CASE("invalid bytes become U+FFFD", "[cpu]") {
  TextStream ts;
  CHECK(ts.push("a\xFF") == "a" + kFFFD);
  CHECK(ts.push("\xC3") == "");
  CHECK(ts.push("(") == kFFFD + "(");
  CHECK(ts.push("\xE2\x82") == "");
  CHECK(ts.finish() == kFFFD);
  CHECK(ts.text() == "a" + kFFFD + kFFFD + "(" + kFFFD);
  // Offsets count the replacement's three bytes, one code point.
  REQUIRE(ts.token_offsets().size() == 4);
  CHECK(ts.token_offsets()[1].byte_offset == 4);
  CHECK(ts.token_offsets()[2].byte_offset == 4);
  CHECK(ts.token_offsets()[3].byte_offset == 8);
  CHECK(ts.token_offsets()[3].char_offset == 4);
}

TEST_CASE("empty tokens", "[cpu]") {
  TextStream ts({"ab"});
  CHECK(ts.push("") == "");
  CHECK(ts.push("x") == "x");
  CHECK(ts.push("") == "");
  CHECK(ts.push("\xC3") == "");
  CHECK(ts.push("") == "");
  CHECK(ts.push("\xA9") == "\xC3\xA9");
  CHECK(ts.tokens_pushed() == 6);
  CHECK(ts.token_offsets()[0].byte_offset == 0);
  CHECK(ts.token_offsets()[2].byte_offset == 1);
  CHECK(ts.token_offsets()[4].byte_offset == 1);
  CHECK(ts.tokens_flushed() == 6);
  CHECK(ts.finish() == "");
}

TEST_CASE("stop at the very first byte", "[cpu]") {
  TextStream ts({"a"});
  CHECK(ts.push("abc") == "");
  CHECK(ts.stopped());
  CHECK(ts.text().empty());
  CHECK(ts.tokens_flushed() == 0);
  TextStream t2({"\n"});
  CHECK(t2.push("") == "");
  CHECK(t2.push("\nfoo") == "");
  CHECK(t2.tokens_flushed() == 0);
}

TEST_CASE("no stops: everything passes through", "[cpu]") {
  TextStream ts;
  CHECK(ts.push("hello") == "hello");
  CHECK(ts.push(" ") == " ");
  CHECK(ts.finish() == "");
  CHECK(ts.tokens_flushed() == 2);
}

TEST_CASE("bad stop lists", "[cpu]") {
  CHECK_THROWS_AS(TextStream({"a", "b", "c", "d", "e"}), Error);
  CHECK_THROWS_AS(TextStream({"a", ""}), Error);
  CHECK_THROWS_AS(TextStream({"\xC3"}), Error);
  try {
    TextStream({"a", ""});
  } catch (const Error& e) {
    CHECK(e.where() == "stop[1]");
  }
  CHECK_NOTHROW(TextStream({"a", "a", "b", "c"}));
}

// Reference: from scratch for every prefix of whole (valid UTF-8) token bytes. The decoded text
// after k tokens is the longest prefix ending on a character boundary; generation stops at the
// first k where a stop occurs; what may be sent is that text minus its longest suffix that is a
// proper prefix of a stop.
namespace {
size_t complete_prefix(const std::string& s) {
  size_t n = s.size(), i = n;
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return 0;
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  return (n - (i - 1) >= len) ? n : i - 1;
}
}  // namespace

TEST_CASE("randomized splits against a from-scratch reference", "[cpu]") {
  std::mt19937 rng(12345);
  const std::vector<std::string> alphabet = {"a", "b", "\n", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"};
  for (int iter = 0; iter < 400; ++iter) {
    std::string full;
    const int chars = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < chars; ++i) full += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const int nstops = static_cast<int>(rng() % 5);
    for (int s = 0; s < nstops; ++s) {
      std::string st;
      const int len = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < len; ++i) st += alphabet[rng() % alphabet.size()];
      stops.push_back(st);
    }
    std::vector<std::string> tokens;
    for (size_t p = 0; p < full.size();) {
      const size_t len = std::min<size_t>(rng() % 5, full.size() - p);  // 0..4 bytes, empty allowed
      tokens.push_back(full.substr(p, len));
      p += len;
    }
    TextStream ts(stops);
    std::string sent, prefix;
    for (size_t k = 0; k < tokens.size(); ++k) {
      prefix += tokens[k];
      const std::string decoded = prefix.substr(0, complete_prefix(prefix));
      size_t cut = std::string::npos;
      for (const auto& s : stops) cut = std::min(cut, decoded.find(s));
      const std::string chunk = ts.push(tokens[k]);
      sent += chunk;
      INFO("iter " << iter << " token " << k);
      CHECK(utf8_valid(chunk));
      CHECK(ts.token_offsets()[k].byte_offset == complete_prefix(prefix.substr(0, prefix.size() - tokens[k].size())));
      if (cut != std::string::npos) {
        REQUIRE(ts.stopped());
        CHECK(sent == decoded.substr(0, cut));
        break;
      }
      size_t hold = 0;
      for (const auto& s : stops)
        for (size_t j = 1; j < s.size() && j <= decoded.size(); ++j)
          if (decoded.compare(decoded.size() - j, j, s, 0, j) == 0) hold = std::max(hold, j);
      REQUIRE_FALSE(ts.stopped());
      CHECK(sent == decoded.substr(0, decoded.size() - hold));
    }
    if (!ts.stopped()) {
      sent += ts.finish();
      CHECK(sent == full);
    }
    CHECK(sent == ts.text());
  }
}
