// rtx-bench: measure bench packs (run), judge A/B results (compare), inspect packs (list)
// and artifacts (show). Flags only; the logic is rtx::app::bench in libcommon.
#include <iostream>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rtx-bench: statistically sound kernel benchmarks over the op registry", "rtx-bench"};
  rtx::cli::CommonOptions common;
  rtx::cli::add_common_options(app, common);
  rtx::cli::Subcommands subs(app);
  subs.add("run", "Run a bench pack and write an rtx.bench.v1 artifact",
      [&](CLI::App& s) { return rtx_bench::add_run(s, common, argc, argv); });
  subs.add("compare", "Compare two rtx.bench.v1 artifacts (exit 1 on a significant regression)",
      [&](CLI::App& s) { return rtx_bench::add_compare(s, common); });
  subs.add("list", "List the cases of a pack after expansion, with skip reasons",
      [&](CLI::App& s) { return rtx_bench::add_list(s, common); });
  subs.add("show", "Print an rtx.bench.v1 artifact as a table",
      [&](CLI::App& s) { return rtx_bench::add_show(s, common); });
  app.footer("Exit codes: 0 ok; 1 a check failed or a regression was found; 2 usage or input error;\n"
             "3 environment missing (e.g. --backend cuda without a GPU); 4 internal error.");
  return rtx::cli::run_tool(app, argc, argv, common, [&]() { return subs.run(); });
}
