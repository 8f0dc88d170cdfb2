// rtx-evolve history [CASE]: a bench case over time with its E-divisive change points and the
// proposals that caused them; without CASE, the cases with their point counts. Flags only.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "rtx/evolve/history.hpp"

namespace rtx_evolve {

Body add_history(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto name = std::make_shared<std::string>();
  auto o = std::make_shared<rtx::evolve::HistoryOptions>();
  app.add_option("CASE", *name, "Bench case id (omit to list the cases)");
  app.add_option("--metric", o->metric, "bench_results column: median_s, p10_s, p90_s, mad_s, ci_lo_s, ci_hi_s, gflops, gbps")
      ->capture_default_str();
  app.add_option("--since", o->since,
                 "Only points measured since: YYYY-MM-DD, ISO-8601 (2026-01-31T12:00Z, +05:30 offsets) or an age: 30m, 12h, 7d");
  app.add_option("--limit", o->limit, "Only the newest N points (default: all)")->check(CLI::Range(1, 1000000000));
  app.add_option("--pvalue", o->pvalue, "Permutation-test significance of a change point")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  app.add_option("--permutations", o->permutations, "Permutations per candidate change point")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--min-size", o->min_size, "Fewest points between change points")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_flag("--candidates", o->include_candidates, "Also show evolve candidate arms (not a deployed configuration)");
  app.add_flag("--include-busy", o->analyze_contended,
               "Analyse busy-host points (measured while the host was contended; always listed, marked busy) for change "
               "points too; by default they are left out of the analysis");
  return [&common, name, o]() {
    rtx::evolve::normalize_since(o->since, 0);  // a bad --since is refused before the store is opened
    // Only reads: a read-only open neither creates a missing store nor migrates an older one.
    rtx::store::StoreOptions ro;
    ro.read_only = true;
    rtx::store::Store st(rtx::store::resolve_db_path(common.db), ro);
    if (name->empty()) {
      const auto cases = rtx::evolve::history_cases(st);
      if (common.json) {
        std::cout << rtx::evolve::to_json(cases).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      } else {
        std::cout << rtx::evolve::format_cases(cases);
      }
      return 0;
    }
    o->seed = common.seed;
    const rtx::evolve::CaseHistory h = rtx::evolve::case_history(st, *name, *o);
    if (common.json)
      std::cout << rtx::evolve::to_json(h).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else
      std::cout << rtx::evolve::format_history(h);
    return 0;
  };
}

}  // namespace rtx_evolve
