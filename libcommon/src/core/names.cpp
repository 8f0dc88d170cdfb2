// "Did you mean" helpers (names.hpp).
#include "rtx/core/names.hpp"

#include <algorithm>
#include <utility>

namespace rtx {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> close_matches(const std::vector<std::string>& names, const std::string& name, size_t max) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& n : names) {
    const bool sub = !name.empty() && (n.find(name) != std::string::npos || name.find(n) != std::string::npos);
    scored.push_back({sub ? 0 : 1 + edit_distance(n, name), n});
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (const auto& [d, n] : scored) {
    if (out.size() >= max) break;
    if (d == 0 || d <= std::max<size_t>(4, name.size() / 2)) out.push_back(n);
  }
  return out;
}

}  // namespace rtx
