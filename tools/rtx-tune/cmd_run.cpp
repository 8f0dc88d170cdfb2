// `rtx-tune run`: binds flags into rtx::app::tune::RunCommand.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/app/bench.hpp"
#include "rtx/app/tune.hpp"

namespace rtx_tune {

Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common, int argc, char** argv) {
  auto c = std::make_shared<rtx::app::tune::RunCommand>();
  s.add_option("--pack", c->pack, "Tune every case of this bench pack (rtx.benchpack.v1)");
  s.add_option("--op", c->op, "Op to tune (registry name, e.g. matmul_forward)");
  s.add_option("--shape", c->shape, "Shape, e.g. M=64,N=64,K=64 or 64x64x64 (dims in the op's order)");
  s.add_option("--variant", c->variant, "Variant (default: the backend's first tunable one)");
  s.add_option("--dtype", c->dtype, "f32 or bf16")->capture_default_str();
  s.add_option("--backend", c->backend, "cpu or cuda")->capture_default_str();
  s.add_option("--strategy", c->strategy, "grid, random, halving or tpe")->capture_default_str();
  s.add_option("--budget", c->budget, "Evaluations (200evals, 200) or wall time (120s, 5m)")->capture_default_str();
  s.add_flag("--replay", c->replay, "Run the strategy against recorded trials only: nothing is timed or written");
  s.add_option("--min-samples", c->min_samples, "Fewest timed samples per configuration")->capture_default_str();
  s.add_option("--max-samples", c->max_samples, "Most timed samples per configuration")->capture_default_str();
  s.add_option("--max-time", c->max_time, "Seconds of sampling per configuration")->capture_default_str();
  s.add_option("--abort-ratio", c->abort_ratio, "Stop a candidate early above this x the best median (0: never)")
      ->capture_default_str();
  CLI::App* parent = s.get_parent();
  return [c, parent, &common, argc, argv]() {
    c->seed = common.seed;
    if (const CLI::Option* seed = parent ? parent->get_option_no_throw("--seed") : nullptr)
      for (const std::string& text : seed->results()) c->seed = rtx::app::bench::parse_seed(text);
    c->json = common.json;
    c->quiet = common.quiet;
    c->db = common.db;
    c->progress = rtx::cli::stderr_is_tty();
    c->argv.assign(argv, argv + argc);
    return rtx::app::tune::run_run(*c, std::cout, std::cerr);
  };
}

}  // namespace rtx_tune
