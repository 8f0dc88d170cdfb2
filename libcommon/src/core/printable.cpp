#include "rtx/core/printable.hpp"

#include <algorithm>

namespace rtx {

std::string printable(std::string_view s, Escape e, std::string_view also, size_t max_bytes) {
  static const char* hex = "0123456789ABCDEF";
  const size_t n = max_bytes > 0 ? std::min(s.size(), max_bytes) : s.size();
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const bool escape = c < 0x20 || c == 0x7f || (e == Escape::NonAscii && c > 0x7f) ||
                        also.find(static_cast<char>(c)) != std::string_view::npos;
    if (!escape) {
      out += static_cast<char>(c);
      continue;
    }
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  if (n < s.size()) out += "...";
  return out;
}

void xml_escape(std::string& out, std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default: out += (c < 0x20 && c != '\t' && c != '\n' && c != '\r') ? '?' : static_cast<char>(c);
      }
      ++i;
      continue;
    }
    size_t need = 0;
    if ((c & 0xE0) == 0xC0 && c >= 0xC2) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0 && c <= 0xF4) need = 4;
    bool ok = need > 0 && i + need <= n;
    for (size_t k = 1; ok && k < need; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (ok && need == 3 && c == 0xE0 && p[i + 1] < 0xA0) ok = false;   // overlong
    if (ok && need == 3 && c == 0xED && p[i + 1] >= 0xA0) ok = false;  // surrogate
    if (ok && need == 3 && c == 0xEF && p[i + 1] == 0xBF && (p[i + 2] == 0xBE || p[i + 2] == 0xBF)) ok = false;
    if (ok && need == 4 && c == 0xF0 && p[i + 1] < 0x90) ok = false;   // overlong
    if (ok && need == 4 && c == 0xF4 && p[i + 1] >= 0x90) ok = false;  // > U+10FFFF
    if (ok) {
      out.append(s.data() + i, need);
      i += need;
    } else {
      out += '?';
      ++i;
    }
  }
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  xml_escape(out, s);
  return out;
}

}  // namespace rtx
