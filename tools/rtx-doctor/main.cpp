// rtx-doctor: is this machine fit to measure? Binds flags, runs rtx::app::doctor::run, prints
// the report as text (stdout) or rtx.doctor.v1 JSON (--json). Exit 1 on any FAIL.
#include <iostream>
#include <string>
#include <vector>

#include "rtx/app/doctor.hpp"
#include "rtx/cli/cli.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rtx-doctor: check this host, the rtx store and the GPUs; measure memory and GEMM peaks",
               "rtx-doctor"};
  rtx::cli::CommonOptions common;
  rtx::cli::add_common_options(app, common);
  rtx::app::doctor::DoctorOptions opts;
  app.add_flag("--quick", opts.quick, "Skip the performance probes (STREAM, SGEMM, GPU copy and GEMM)");
  bool no_save = false;
  app.add_flag("--no-save", no_save, "Do not store the report in the store");
  app.footer(
      "Exit codes: 0 no FAIL (WARNs are informative), 1 a check FAILed, 2 usage error or corrupt store,\n"
      "3 environment (store not writable), 4 internal error.");
  return rtx::cli::run_tool(app, argc, argv, common, [&]() -> int {
    opts.db = common.db;
    opts.save = !no_save;
    opts.seed = common.seed;
    opts.args.assign(argv, argv + argc);
    opts.progress = !common.quiet && !common.json && rtx::cli::stderr_is_tty();
    const auto report = rtx::app::doctor::run(opts);
    if (common.json) {
      std::cout << report.to_json().dump(2) << std::endl;  // machine output on stdout
      if (!common.quiet) std::cerr << report.render_text(rtx::cli::use_color());  // human text on stderr
    } else if (!common.quiet) {
      std::cout << report.render_text(rtx::cli::use_color());
    }
    return report.exit_code();
  });
}
