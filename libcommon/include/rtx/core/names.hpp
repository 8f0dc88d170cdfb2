// Finding a name among known ones: "did you mean" suggestions for ops, cases and flags' values.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace rtx {

/// Levenshtein distance between `a` and `b` (insertions, deletions, substitutions of bytes).
size_t edit_distance(const std::string& a, const std::string& b);

/// Up to `max` names of `names` close to `name`, closest first: those containing it (or
/// contained in it) first, then the nearest by edit_distance within max(4, |name| / 2).
std::vector<std::string> close_matches(const std::vector<std::string>& names, const std::string& name, size_t max = 5);

}  // namespace rtx
