// rtx-serve's subcommands: each add_* declares its flags and returns the body that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

#include "rtx/cli/cli.hpp"

namespace rtx_serve {
using Body = std::function<int()>;
Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common);
Body add_bench(CLI::App& s, const rtx::cli::CommonOptions& common);
}  // namespace rtx_serve
