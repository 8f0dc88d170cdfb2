// Text from files, stores and clients made safe to print: one escaper for the suite.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace rtx {

/// Which bytes printable() shows as \xHH.
enum class Escape {
  Controls,  ///< C0 controls (0x00-0x1F) and DEL: for a terminal or a table; UTF-8 text stays
  NonAscii,  ///< every byte outside printable ASCII 0x20-0x7E: for logs and protocol messages
};

/// `s` safe to print: the bytes `e` names, and any in `also`, as \xHH (two uppercase hex
/// digits), so text from a file, a store or a client cannot move the cursor, forge a log line
/// or end a table row. At most `max_bytes` input bytes are shown, then "..." (0 = all).
std::string printable(std::string_view s, Escape e = Escape::Controls, std::string_view also = {},
                      size_t max_bytes = 0);

/// Append `s` to `out` as XML 1.0 / HTML text or attribute content (one escaper for SVG and
/// HTML): '&' '<' '>' '"' '\'' as &amp; &lt; &gt; &quot; &#39; (a numeric reference, valid in
/// XML and in HTML 4, which has no &apos;); tab, LF and CR kept; any other byte that is not an
/// XML 1.0 Char (W3C XML 1.0 section 2.2: C0 controls, U+FFFE, U+FFFF) or not well-formed
/// UTF-8 (RFC 3629: overlongs, surrogates, > U+10FFFF, truncated sequences) becomes '?', so
/// the document stays well-formed whatever the input.
void xml_escape(std::string& out, std::string_view s);
/// `s` escaped as xml_escape(out, s).
std::string xml_escape(std::string_view s);

}  // namespace rtx
