// rtx-serve's subcommands: each add_* declares its flags and returns the body that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "rtx/cli/cli.hpp"
#include "rtx/core/error.hpp"

namespace rtx_serve {
using Body = std::function<int()>;
Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common);
Body add_bench(CLI::App& s, const rtx::cli::CommonOptions& common);

/// Refuses an API key that cannot work, for `run` (the server's key) and `bench` (the one it
/// sends): empty (`empty_means` says what that would do, e.g. "it would turn authentication
/// off"), or with whitespace (cpp-httplib trims a header's surrounding whitespace, so it could
/// never match) or a control byte (not sendable in an Authorization header). Throws
/// rtx::Error(Usage) (exit 2) naming `where`, the flag or the variable.
inline void check_api_key(const std::string& key, const std::string& where, const std::string& empty_means,
                          const std::string& how_to_omit) {
  if (key.empty()) rtx::throw_usage("empty API key: " + empty_means + "; " + how_to_omit, where);
  for (const char c : key)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      rtx::throw_usage("the API key has whitespace or a control byte, which a client cannot send in an Authorization "
                       "header",
                       where, "use printable ASCII without spaces");
}
}  // namespace rtx_serve
