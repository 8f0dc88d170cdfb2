// `rtx-tune show | export | import`: bind flags into rtx::app::tune's commands.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/app/tune.hpp"

namespace rtx_tune {

Body add_show(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto c = std::make_shared<rtx::app::tune::ShowCommand>();
  s.add_flag("--stats", c->stats, "Also trial counts per key and the run-time lookup outcome of every tuned key");
  return [c, &common]() {
    c->json = common.json;
    c->db = common.db;
    return rtx::app::tune::run_show(*c, std::cout, std::cerr);
  };
}

Body add_export(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto c = std::make_shared<rtx::app::tune::ExportCommand>();
  s.add_option("-o,--output", c->out, "Write the rtx.profile.v1 artifact to FILE (- for stdout)")->required();
  return [c, &common]() {
    c->json = common.json;
    c->db = common.db;
    return rtx::app::tune::run_export(*c, std::cout, std::cerr);
  };
}

Body add_import(CLI::App& s, const rtx::cli::CommonOptions& common) {
  auto c = std::make_shared<rtx::app::tune::ImportCommand>();
  s.add_option("file", c->file, "rtx.profile.v1 artifact (- for stdin)")->required();
  s.add_flag("--force", c->force, "Import a profile measured on another SKU");
  return [c, &common]() {
    c->json = common.json;
    c->db = common.db;
    return rtx::app::tune::run_import(*c, std::cout, std::cerr);
  };
}

}  // namespace rtx_tune
