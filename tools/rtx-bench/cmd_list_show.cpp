// `rtx-bench list PACK` and `rtx-bench show FILE`: bind flags, call libcommon.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/app/bench.hpp"

namespace rtx_bench {

Body add_list(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto c = std::make_shared<rtx::app::bench::ListCommand>();
  s.add_option("pack", c->pack, "Bench pack (rtx.benchpack.v1 JSON, - for stdin)")->required();
  s.add_option("--backend", c->backend, "cpu or cuda")->capture_default_str();
  s.add_option("--filter", c->filter, "Keep cases whose id matches this regex");
  s.add_flag("--strict", c->strict, "Unknown ops in the pack are errors, not skips");
  return [c, &common]() {
    c->json = common.json;
    return rtx::app::bench::run_list(*c, rtx::app::bench::registry(), std::cout);
  };
}

Body add_show(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto c = std::make_shared<rtx::app::bench::ShowCommand>();
  s.add_option("file", c->file, "rtx.bench.v1 artifact (- for stdin)")->required();
  return [c, &common]() {
    c->json = common.json;
    return rtx::app::bench::run_show(*c, std::cout);
  };
}

}  // namespace rtx_bench
