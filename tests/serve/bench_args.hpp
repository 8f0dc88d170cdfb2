// Flag parsing shared by the serving benchmark executables (serve_bench, attention_bench).
#pragma once

#include <exception>
#include <string>

#include "rtx/core/error.hpp"

namespace rtx::bench_args {

/// The whole decimal integer v in [lo, 1e9], else Error(Usage) naming `flag` (where) and v.
inline int parse_int(const std::string& v, const std::string& flag, int lo) {
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || x < lo || x > 1000000000)
    throw_usage("\"" + v + "\" is not an integer >= " + std::to_string(lo), flag);
  return static_cast<int>(x);
}

}  // namespace rtx::bench_args
