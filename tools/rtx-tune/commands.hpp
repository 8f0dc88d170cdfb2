// rtx-tune subcommand wiring: each add_* declares one subcommand's flags on the CLI::App and
// returns the function that runs it (calling rtx::app::tune::run_* in libcommon).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

#include "rtx/cli/cli.hpp"

namespace rtx_tune {
using Body = std::function<int()>;
Body add_run(CLI::App& app, const rtx::cli::CommonOptions& common, int argc, char** argv);
Body add_efficiency(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_show(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_export(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_import(CLI::App& app, const rtx::cli::CommonOptions& common);
}  // namespace rtx_tune
