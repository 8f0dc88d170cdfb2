// Flag parsing shared by the serving benchmark executables (serve_bench, attention_bench).
#pragma once

#include <cctype>
#include <exception>
#include <string>
#include <vector>

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

/// The command line with every "--flag=value" split into "--flag" "value", as getopt_long and
/// CLI11 accept both spellings. `switches` are the flags that take no value: "--switch=x" is
/// Error(Usage) naming it. Keep the object alive while argv() is used.
class SplitArgs {
 public:
  SplitArgs(int argc, char** argv, const std::vector<std::string>& switches = {}) {
    for (int i = 0; i < argc; ++i) {
      const std::string a = argv[i];
      const size_t eq = a.find('=');
      if (i > 0 && a.rfind("--", 0) == 0 && eq != std::string::npos && eq > 2) {
        for (const auto& sw : switches)
          if (a.compare(0, eq, sw) == 0 && sw.size() == eq) throw_usage("takes no value (got \"" + a + "\")", sw);
        s_.push_back(a.substr(0, eq));
        s_.push_back(a.substr(eq + 1));
      } else {
        s_.push_back(a);
      }
    }
    for (auto& x : s_) p_.push_back(x.data());
    p_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(s_.size()); }
  char** argv() { return p_.data(); }

 private:
  std::vector<std::string> s_;
  std::vector<char*> p_;
};

}  // namespace rtx::bench_args
