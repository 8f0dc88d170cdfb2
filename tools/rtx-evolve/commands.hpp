// rtx-evolve subcommand wiring: each add_* declares one subcommand's flags and returns the body
// that runs it (calling rtx::evolve in libcommon).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

#include "rtx/cli/cli.hpp"

namespace rtx_evolve {
using Body = std::function<int()>;
Body add_run(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_status(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_history(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_export(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_submit(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_validate(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_approve(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_rollback(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_rehearse(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_keygen(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_report(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_trial(CLI::App& app);
Body add_kg(CLI::App& app, const rtx::cli::CommonOptions& common);
Body add_mcp(CLI::App& app, const rtx::cli::CommonOptions& common);
}  // namespace rtx_evolve
