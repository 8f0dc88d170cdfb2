// The small rules with one home in core: FNV-1a and SHA-256 (hash.hpp) against their published
// test vectors, UTC time stamps (time.hpp) against known calendar dates, and the XML/HTML
// escaper (printable.hpp) against the XML 1.0 Char production.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <regex>
#include <string>

#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/core/time.hpp"

namespace {
uint64_t f64(const std::string& s, uint64_t h = rtx::kFnv1a64Basis) { return rtx::fnv1a64(s.data(), s.size(), h); }
uint32_t f32(const std::string& s, uint32_t h = rtx::kFnv1a32Basis) { return rtx::fnv1a32(s.data(), s.size(), h); }
}  // namespace

TEST_CASE("FNV-1a 32 and 64 match the published test vectors; chaining hashes the concatenation", "[cpu]") {
  // Vectors of the FNV reference test suite (Noll, isthe.com/chongo/tech/comp/fnv, test_fnv.c;
  // also draft-eastlake-fnv): "", "a", "foobar".
  CHECK(f32("") == 0x811c9dc5u);
  CHECK(f32("a") == 0xe40c292cu);
  CHECK(f32("foobar") == 0xbf9cf968u);
  CHECK(f64("") == 0xcbf29ce484222325ull);
  CHECK(f64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(f64("foobar") == 0x85944171f73967e8ull);
  CHECK(f64("bar", f64("foo")) == f64("foobar"));
  CHECK(f32("bar", f32("foo")) == f32("foobar"));
  const unsigned char bytes[] = {0x00, 0xff, 0x80};  // bytes, not chars: no sign extension
  uint64_t h = rtx::kFnv1a64Basis;
  for (unsigned char b : bytes) h = (h ^ b) * rtx::kFnv1a64Prime;
  CHECK(rtx::fnv1a64(bytes, sizeof bytes) == h);
}

TEST_CASE("SHA-256 matches the FIPS 180-4 / NIST examples, one shot and streamed", "[cpu]") {
  // NIST CSRC "Examples with Intermediate Values", SHA-256: "abc", the 448-bit message, and
  // FIPS 180-2 appendix B.3, one million 'a'.
  CHECK(rtx::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(rtx::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(rtx::sha256_hex(two_blocks) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  const std::string want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  CHECK(rtx::sha256_hex(million) == want);
  rtx::Sha256 s;  // uneven pieces across block boundaries
  size_t off = 0;
  for (size_t piece = 1; off < million.size(); piece = piece * 3 + 1) {
    const size_t n = std::min(piece, million.size() - off);
    s.update(million.data() + off, n);
    off += n;
  }
  CHECK(s.hex() == want);
  CHECK_THROWS_AS(s.hex(), rtx::Error);  // a finished digest cannot be read twice
}

TEST_CASE("UTC time stamps: known dates, both precisions, before 1970, rounding and bad input", "[cpu]") {
  using rtx::TimeStampPrecision;
  using rtx::utc_timestamp;
  // Dates from `date -u -d @N` (and Python's datetime.fromtimestamp(N, timezone.utc)).
  CHECK(utc_timestamp(0.0) == "1970-01-01T00:00:00.000Z");
  CHECK(utc_timestamp(1234567890.0, TimeStampPrecision::Seconds) == "2009-02-13T23:31:30Z");
  CHECK(utc_timestamp(951782400.0) == "2000-02-29T00:00:00.000Z");  // a leap day
  CHECK(utc_timestamp(-1.0) == "1969-12-31T23:59:59.000Z");
  CHECK(utc_timestamp(-0.5) == "1969-12-31T23:59:59.500Z");
  CHECK(utc_timestamp(4102444799.999) == "2099-12-31T23:59:59.999Z");
  // Rounded to the nearest millisecond, carrying into the seconds (never ".1000").
  CHECK(utc_timestamp(59.9996) == "1970-01-01T00:01:00.000Z");
  // Seconds precision truncates: a stamp never runs ahead of the time it names.
  CHECK(utc_timestamp(59.9996 - 0.5, TimeStampPrecision::Seconds) == "1970-01-01T00:00:59Z");
  using namespace std::chrono;
  CHECK(utc_timestamp(system_clock::time_point(milliseconds(1234567890123))) == "2009-02-13T23:31:30.123Z");
  CHECK_THROWS_AS(utc_timestamp(std::nan("")), rtx::Error);
  CHECK_THROWS_AS(utc_timestamp(std::numeric_limits<double>::infinity()), rtx::Error);
  CHECK_THROWS_AS(utc_timestamp(1e300), rtx::Error);
  // Now: the format, and the clock.
  const std::string now = rtx::utc_now();
  CHECK(std::regex_match(now, std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)")));
  CHECK(std::regex_match(rtx::utc_now(TimeStampPrecision::Seconds),
                         std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)")));
  const double t = duration<double>(system_clock::now().time_since_epoch()).count();
  CHECK(now.substr(0, 16) <= utc_timestamp(t).substr(0, 16));
}

TEST_CASE("xml_escape: the five markup characters, XML 1.0 Chars kept, everything else '?'", "[cpu]") {
  using rtx::xml_escape;
  CHECK(xml_escape("a<b>&\"'") == "a&lt;b&gt;&amp;&quot;&#39;");
  CHECK(xml_escape("&amp;") == "&amp;amp;");                     // escaping is not idempotent: no double-decoding
  CHECK(xml_escape("tab\tLF\nCR\r") == "tab\tLF\nCR\r");         // Char includes #x9 #xA #xD
  CHECK(xml_escape(std::string("a\0b\x01\x1f", 5)) == "a?b??");  // other C0 controls are not Chars
  CHECK(xml_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(xml_escape("\xff") == "?");                 // never valid in UTF-8
  CHECK(xml_escape("\xc0\xaf") == "??");            // overlong '/'
  CHECK(xml_escape("\xed\xa0\x80") == "???");       // a UTF-16 surrogate, U+D800
  CHECK(xml_escape("\xef\xbf\xbe") == "???");       // U+FFFE is not a Char
  CHECK(xml_escape("\xf4\x90\x80\x80") == "????");  // above U+10FFFF
  CHECK(xml_escape("ok\xe2\x82") == "ok??");        // truncated at the end
  std::string out = "<x>";
  rtx::xml_escape(out, "1 < 2");
  CHECK(out == "<x>1 &lt; 2");
}
