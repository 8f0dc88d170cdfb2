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

}  // namespace rtx
