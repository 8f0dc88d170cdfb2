// `rtx-bench run PACK`: binds flags into rtx::app::bench::RunCommand.
#include <array>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/app/bench.hpp"

namespace rtx_bench {

Body add_run(CLI::App& s, const rtx::cli::CommonOptions& common, int argc, char** argv) {
  auto c = std::make_shared<rtx::app::bench::RunCommand>();
  auto num = std::make_shared<std::array<double, 6>>();
  s.add_option("pack", c->pack, "Bench pack (rtx.benchpack.v1 JSON, - for stdin)")->required();
  s.add_option("-o,--output", c->out, "Write the artifact to FILE (- for stdout)");
  s.add_option("--backend", c->backend, "cpu or cuda")->capture_default_str();
  s.add_option("--filter", c->filter, "Keep cases whose id matches this regex");
  auto* rel = s.add_option("--max-rel-ci", (*num)[0], "Stop a case when the 95% CI of its median is within this fraction (default 0.02)");
  auto* mt = s.add_option("--max-time", (*num)[1], "Seconds of sampling per case before giving up (marked noisy; default 1)");
  auto* ms = s.add_option("--min-samples", (*num)[2], "Fewest samples per case (default 10)");
  auto* wu = s.add_option("--warmup", (*num)[3], "Untimed runs per case before sampling (default 2)");
  auto* mx = s.add_option("--max-samples", (*num)[4], "Most samples per case (default 1000)");
  auto* rd = s.add_option("--rounds", (*num)[5], "Run the pack in this many fresh processes and merge them (1..200; default 5, or the pack's \"rounds\"; --max-time is split across them)");
  s.add_option("--baseline-exe", c->baseline_exe,
               "Also run this rtx-bench (another build; this one for an A/A) in rounds alternating with ours (ABBA; needs --rounds)");
  s.add_option("--baseline-out", c->baseline_out, "Where the baseline's merged artifact goes (with --baseline-exe)");
  s.add_flag("--cold", c->cold, "Flush caches before every sample (not timed)");
  s.add_flag("--interleave", c->interleave, "Sample cases in seeded random round-robin batches to spread machine drift");
  s.add_option("--threads", c->threads, "OpenMP threads (0: the runtime's default)");
  s.add_flag("--pin", c->pin, "Pin OpenMP threads to CPUs (OMP_PROC_BIND=close)");
  s.add_flag("--strict", c->strict, "Unknown ops in the pack are errors, not skips");
  s.add_flag("--no-store", c->no_store, "Do not record the run in the store (it is only read, for the doctor's peaks)");
  CLI::App* parent = s.get_parent();
  return [c, num, rel, mt, ms, wu, mx, rd, parent, &common, argc, argv]() {
    // Ranges are checked in libcommon (run_run), shared with the pack's defaults.
    if (rel->count()) c->max_rel_ci = (*num)[0];
    if (mt->count()) c->max_time = (*num)[1];
    if (ms->count()) c->min_samples = (*num)[2];
    if (wu->count()) c->warmup = (*num)[3];
    if (mx->count()) c->max_samples = (*num)[4];
    if (rd->count()) c->rounds = (*num)[5];
    // CLI11 reads --seed with strtoull, which wraps "-1" to 2^64-1: re-read the raw text.
    c->seed = common.seed;
    if (const CLI::Option* seed = parent ? parent->get_option_no_throw("--seed") : nullptr)
      for (const std::string& text : seed->results()) c->seed = rtx::app::bench::parse_seed(text);
    c->json = common.json;
    c->quiet = common.quiet;
    c->db = common.db;
    c->events = common.events;
    c->argv.assign(argv, argv + argc);
    return rtx::app::bench::run_run(*c, rtx::app::bench::registry(), std::cout, std::cerr);
  };
}

}  // namespace rtx_bench
