// rtx-serve's subcommands: each add_* declares its flags and returns the body that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "rtx/app/serve.hpp"
#include "rtx/cli/cli.hpp"
#include "rtx/core/error.hpp"

namespace rtx_serve {
using Body = std::function<int()>;
Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common);
Body add_bench(CLI::App& s, const rtx::cli::CommonOptions& common);

/// Refuses an API key that cannot work (empty, whitespace, control bytes): the library's rule.
using rtx::app::serve::check_api_key;
}  // namespace rtx_serve
