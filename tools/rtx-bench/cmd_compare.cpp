// `rtx-bench compare BASE NEW`: binds flags into rtx::app::bench::CompareCommand.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/app/bench.hpp"

namespace rtx_bench {

Body add_compare(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto c = std::make_shared<rtx::app::bench::CompareCommand>();
  s.add_option("base", c->base, "Baseline rtx.bench.v1 artifact")->required();
  s.add_option("new", c->fresh, "New rtx.bench.v1 artifact")->required();
  s.add_option("--threshold", c->threshold, "Change that matters, e.g. 5% or 0.05")->capture_default_str();
  s.add_option("--format", c->format, "table, md, csv or json")->capture_default_str();
  return [c, &common]() {
    c->json = common.json;
    return rtx::app::bench::run_compare(*c, std::cout, std::cerr);
  };
}

}  // namespace rtx_bench
