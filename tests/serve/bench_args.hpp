// Flag parsing shared by the serving benchmark executables (serve_bench, attention_bench).
#pragma once

#include <cctype>
#include <exception>
#include <string>

#include "rtx/core/error.hpp"

namespace rtx::bench_args {

/// The whole decimal integer v in [lo, 1e9] (no leading space), else Error(Usage) naming `flag`
/// (where) and v.
inline int parse_int(const std::string& v, const std::string& flag, int lo) {
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || std::isspace(static_cast<unsigned char>(v[0])) || x < lo || x > 1000000000)
    throw_usage("\"" + v + "\" is not an integer in [" + std::to_string(lo) + ", 1000000000]", flag);
  return static_cast<int>(x);
}

}  // namespace rtx::bench_args
