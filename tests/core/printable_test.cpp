// printable(): which bytes are escaped under each policy, `also`, the byte cap, and that
// UTF-8 text is kept under Escape::Controls.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "rtx/core/printable.hpp"

using rtx::Escape;
using rtx::printable;

TEST_CASE("printable escapes controls, keeps UTF-8, and caps the length", "[cpu]") {
  using namespace std::string_literals;
  CHECK(printable("plain text: 1 | 2") == "plain text: 1 | 2");
  CHECK(printable("a\nb\r\tc") == "a\\x0Ab\\x0D\\x09c");
  CHECK(printable("\x1b[31mred\x1b[0m") == "\\x1B[31mred\\x1B[0m");  // no terminal escape gets through
  CHECK(printable("nul\0x"s) == "nul\\x00x");
  CHECK(printable("del\x7f") == "del\\x7F");
  CHECK(printable("caf\xc3\xa9 \xe2\x86\x92") == "caf\xc3\xa9 \xe2\x86\x92");  // UTF-8 kept for a terminal
  CHECK(printable("caf\xc3\xa9", Escape::NonAscii) == "caf\\xC3\\xA9");
  CHECK(printable("a b\\c", Escape::NonAscii, " \\") == "a\\x20b\\x5Cc");
  CHECK(printable("a|b", Escape::Controls, "|") == "a\\x7Cb");
  // Every byte value: exactly the ones the policy names are escaped, as \xHH.
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    const bool ctl = b < 0x20 || b == 0x7f;
    char want[8];
    std::snprintf(want, sizeof want, "\\x%02X", b);
    CHECK(printable(one) == (ctl ? std::string(want) : one));
    CHECK(printable(one, Escape::NonAscii) == ((ctl || b > 0x7f) ? std::string(want) : one));
  }
  CHECK(printable("abcdef", Escape::Controls, {}, 3) == "abc...");
  CHECK(printable("abc", Escape::Controls, {}, 3) == "abc");
  CHECK(printable("\n\n\n\n", Escape::Controls, {}, 2) == "\\x0A\\x0A...");
  CHECK(printable("") == "");
}
