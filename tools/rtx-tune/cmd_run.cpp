// `rtx-tune run` and `rtx-tune efficiency`: bind flags into rtx::app::tune's RunCommand and
// EfficiencyCommand.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/app/bench.hpp"
#include "rtx/app/tune.hpp"
#include "rtx/cli/interrupt.hpp"

namespace rtx_tune {

namespace {

/// The flags naming the tuning keys (rtx::app::tune::Target): a bench pack, an op at a shape,
/// or --serve MODEL with a workload.
void add_target(CLI::App& s, rtx::app::tune::Target& t) {
  s.add_option("--pack", t.pack, "Every case of this bench pack (rtx.benchpack.v1) with a tunable variant");
  s.add_option("--op", t.op, "Op (registry name, e.g. matmul_forward), with --shape");
  s.add_option("--shape", t.shape, "Shape, e.g. M=64,N=64,K=64 or 64x64x64 (dims in the op's order)");
  s.add_option("--variant", t.variant, "Variant (default: the backend's first tunable one)");
  s.add_option("--dtype", t.dtype, "f32 or bf16")->capture_default_str();
  s.add_option("--backend", t.backend, "cpu or cuda")->capture_default_str();
  s.add_option("--serve", t.serve, "rtx-serve's scheduler knobs and threads for this model file (GGUF or checkpoint)");
  s.add_option("--workload", t.workload, "With --serve: the batch measured, requests=N,prompt=N,gen=N")
      ->capture_default_str();
}

/// --seed as given to the tool (before or after the subcommand), else the common default.
uint64_t seed_of(const CLI::App* parent, const rtx::cli::CommonOptions& common) {
  uint64_t seed = common.seed;
  if (const CLI::Option* o = parent ? parent->get_option_no_throw("--seed") : nullptr)
    for (const std::string& text : o->results()) seed = rtx::app::bench::parse_seed(text);
  return seed;
}

}  // namespace

Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common, int argc, char** argv) {
  auto c = std::make_shared<rtx::app::tune::RunCommand>();
  add_target(s, *c);
  s.add_option("--strategy", c->strategy, "grid, random, halving or tpe")->capture_default_str();
  s.add_option("--budget", c->budget, "Evaluations (200evals, 200) or wall time (120s, 5m)")->capture_default_str();
  s.add_flag("--replay", c->replay, "Run the strategy against recorded trials only: nothing is timed or written");
  s.add_flag("--include-busy", c->include_busy,
             "Let trials measured on a busy host (PSI stall, preemption) become the best; by default they never do");
  s.add_option("--min-samples", c->min_samples, "Fewest timed samples per configuration")->capture_default_str()->check(CLI::NonNegativeNumber);
  s.add_option("--max-samples", c->max_samples, "Most timed samples per configuration")->capture_default_str()->check(CLI::NonNegativeNumber);
  s.add_option("--max-time", c->max_time, "Seconds of sampling per configuration")->capture_default_str();
  s.add_option("--abort-ratio", c->abort_ratio, "Stop a candidate early above this x the best median (0: never)")
      ->capture_default_str();
  s.add_option("--confirm", c->confirm, "Re-measure the winner and the defaults interleaved, N runs each (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  CLI::App* parent = s.get_parent();
  return [c, parent, &common, argc, argv]() {
    c->seed = seed_of(parent, common);
    c->json = common.json;
    c->quiet = common.quiet;
    c->db = common.db;
    c->progress = rtx::cli::stderr_is_tty();
    c->argv.assign(argv, argv + argc);
    // Ctrl-C / SIGTERM: stop before the next trial (each is in the store already), exit 130;
    // a second signal exits at once.
    const rtx::cli::InterruptGuard interrupt(
        common.quiet ? "" : std::string(c->progress ? "\r\033[K" : "") +
                                "rtx-tune: interrupted: stopping after the current trial (Ctrl-C again quits at once)\n");
    c->should_stop = [] { return rtx::cli::InterruptGuard::requested(); };
    return rtx::app::tune::run_run(*c, std::cout, std::cerr);
  };
}

Body add_efficiency(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto c = std::make_shared<rtx::app::tune::EfficiencyCommand>();
  add_target(s, *c);
  s.add_option("--strategies", c->strategies, "Comma list of strategies to replay")->capture_default_str();
  s.add_option("--seeds", c->seeds, "Replays per strategy (seeds --seed .. --seed + N - 1)")->capture_default_str()->check(CLI::NonNegativeNumber);
  s.add_option("--within", c->within, "Target: within this of the optimum (3% or 0.03)")->capture_default_str();
  s.add_option("--budget", c->budget, "Evaluations per replay (0: as many as the grid has)")->capture_default_str()->check(CLI::NonNegativeNumber);
  s.add_flag("--default-first", c->default_first, "Evaluate the defaults first, as rtx-tune run does");
  s.add_flag("--partial", c->partial, "Accept a grid with unrecorded valid points (the optimum is then the recorded one)");
  s.add_option("--min-samples", c->min_samples, "Samples of halving's lowest rung")->capture_default_str()->check(CLI::NonNegativeNumber);
  s.add_option("--max-samples", c->max_samples, "Most samples a replayed evaluation sees")->capture_default_str()->check(CLI::NonNegativeNumber);
  s.add_option("--abort-ratio", c->abort_ratio, "Early abort above this x the best median (0: never)")->capture_default_str();
  s.add_option("--format", c->format, "table, json or csv (the full curves)")->capture_default_str();
  CLI::App* parent = s.get_parent();
  return [c, parent, &common]() {
    c->seed = seed_of(parent, common);
    if (common.json) c->format = "json";
    c->db = common.db;
    return rtx::app::tune::run_efficiency(*c, std::cout, std::cerr);
  };
}

}  // namespace rtx_tune
