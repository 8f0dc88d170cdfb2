// rtx-tune: search kernel parameters (run), compare strategies on a recorded grid (efficiency), list tuned profiles (show), move them between
// machines (export / import). Flags only; the logic is rtx::app::tune in libcommon.
#include <iostream>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rtx-tune: auto-tune kernel parameters into per-hardware profiles", "rtx-tune"};
  rtx::cli::CommonOptions common;
  rtx::cli::add_common_options(app, common);
  rtx::cli::Subcommands subs(app);
  subs.add("run", "Search the parameter space of an op (or every case of a bench pack) and record the best as a profile",
      [&](CLI::App& s) { return rtx_tune::add_run(s, common, argc, argv); });
  subs.add("efficiency", "Replay each strategy over seeds against a recorded grid: evaluations to reach the optimum",
      [&](CLI::App& s) { return rtx_tune::add_efficiency(s, common); });
  subs.add("show", "List the current tuned profiles (--stats: trial counts and lookup outcomes)",
      [&](CLI::App& s) { return rtx_tune::add_show(s, common); });
  subs.add("export", "Write the current profiles as an rtx.profile.v1 artifact",
      [&](CLI::App& s) { return rtx_tune::add_export(s, common); });
  subs.add("import", "Import an rtx.profile.v1 artifact (all or nothing; another SKU needs --force)",
      [&](CLI::App& s) { return rtx_tune::add_import(s, common); });
  app.footer("Exit codes: 0 ok; 1 no configuration passed its correctness check for some key; 2 usage or input\n"
             "error (also an import for another SKU without --force); 3 environment missing; 4 internal error.");
  return rtx::cli::run_tool(app, argc, argv, common, [&]() { return subs.run(); });
}
