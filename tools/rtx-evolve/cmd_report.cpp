// rtx-evolve report: bind flags, build the report from the store, write HTML (default), md or json.
#include <iostream>

#include "commands.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/report.hpp"
#include "rtx/io/atomic_file.hpp"

namespace rtx_evolve {

Body add_report(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto o = std::make_shared<rtx::evolve::ReportOptions>();
  auto format = std::make_shared<std::string>("html");
  auto out = std::make_shared<std::string>("-");
  app.add_option("-o,--out", *out, "Write the report to FILE atomically (default - stdout)")->capture_default_str();
  app.add_option("--format", *format, "html (one self-contained page), md (Markdown for CI logs), json")
      ->capture_default_str();
  app.add_option("--since", o->since, "Only what was created since: YYYY-MM-DD, ISO-8601 (2026-01-31T12:00Z, +05:30 offsets) or an age: 30m, 12h, 7d");
  app.add_option("-n,--limit", o->limit, "Newest N proposals listed in the queue")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--cases", o->max_cases, "Performance-over-time charts (the most measured cases)")
      ->capture_default_str()->check(CLI::Range(0, 1000));
  return [&common, o, format, out]() {
    const std::string fmt = common.json ? "json" : *format;
    if (fmt != "html" && fmt != "md" && fmt != "json")
      rtx::throw_input("unknown report format '" + fmt + "'", "--format", "one of html, md, json");
    rtx::evolve::normalize_since(o->since, 0);  // a bad --since is refused before the store is opened
    // Only reads: a read-only open neither creates a missing store nor migrates an older one.
    rtx::store::StoreOptions ro;
    ro.read_only = true;
    rtx::store::Store st(rtx::store::resolve_db_path(common.db), ro);
    const std::string text = rtx::evolve::render_report(rtx::evolve::build_report(st, *o), fmt);
    rtx::io::write_text_output(*out, text);
    if (*out != "-" && !common.quiet) std::cerr << "wrote " << fmt << " report to " << *out << "\n";
    return 0;
  };
}

}  // namespace rtx_evolve
