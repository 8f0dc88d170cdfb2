// rtx-evolve run / status: bind flags into RunOptions and print the report.
#include <cmath>
#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "rtx/cli/interrupt.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/stats/compare.hpp"
#include "rtx/app/bench.hpp"

namespace rtx_evolve {

namespace {

/// "domain=10%" -> rule threshold for that domain (keeps the domain's default mode).
void apply_threshold(rtx::evolve::RunOptions& o, const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) rtx::throw_usage("expected DOMAIN=PERCENT, e.g. tuner=10%", "--threshold " + spec);
  const std::string dom = spec.substr(0, eq);
  rtx::evolve::target_of(dom);
  rtx::evolve::PerfRule r = rtx::evolve::default_rule(dom);
  r.threshold = rtx::app::bench::parse_threshold(spec.substr(eq + 1));
  o.v.rules[dom] = r;
}

void write_report(const nlohmann::json& rep, const std::string& format, const std::string& out, bool json) {
  const std::string text = rtx::evolve::format_report(rep, json ? "json" : format);
  if (out.empty() || out == "-") {
    std::cout << text;
  } else {
    rtx::io::AtomicFileWriter w(out);
    w.write(text);
    w.commit();
  }
}

}  // namespace

Body add_run(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto o = std::make_shared<rtx::evolve::RunOptions>();
  auto thresholds = std::make_shared<std::vector<std::string>>();
  auto format = std::make_shared<std::string>("text");
  auto out = std::make_shared<std::string>();
  auto strict = std::make_shared<bool>(false);
  app.add_flag("--strict", *strict, "Exit 1 when any proposal failed a gate");
  app.add_option("--pack", o->pack, "Bench pack (rtx.benchpack.v1)")->capture_default_str();
  app.add_option("--filter", o->filter, "Case-id regex of the subset to work on (default: small f32 ops)");
  app.add_option("--domain", o->domains, "Domains to propose in (tuner, parallelism, scheduler, memory, fusion; repeatable; default all)");
  app.add_option("--budget", o->budget, "Most proposals validated in this run")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--budget-per-domain", o->budget_per_domain, "Most proposals per domain")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--explore", o->explore_evals, "Tuner: configurations measured per key when the store has fewer trials")
      ->capture_default_str()->check(CLI::Range(1, 200));
  app.add_option("--dp-ranks", o->dp_ranks,
                 "Parallelism: also propose data-parallel gradient bucket sizes (rtx-train --bucket-mb), measured as "
                 "training steps over this many ranks (mpirun on this host); 0: off")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              const int n = std::stoi(v);
              if (std::to_string(n) == v && (n == 0 || (n >= 2 && n <= 64))) return "";
            } catch (const std::exception&) {
            }
            return "must be 0 (off) or a rank count in [2, 64], not '" + v + "'";
          },
          "0 or 2..64"));
  app.add_option("--time-budget", o->time_budget_s, "Seconds after which no new proposal is validated")
      ->capture_default_str()->check(CLI::Range(1.0, 86400.0));
  app.add_option("--rounds", o->v.rounds, "A/B pairs per validation (each arm a fresh sandboxed process)")
      ->capture_default_str()->check(CLI::Range(2, 50));
  app.add_option("--samples", o->v.samples, "Samples per case per process")->capture_default_str()->check(CLI::Range(3, 1000));
  app.add_option("--threshold", *thresholds, "Performance threshold per domain, e.g. tuner=10% (repeatable)");
  app.add_option("--timeout", o->v.sandbox.timeout_s, "Wall-clock limit of one sandboxed trial, s")
      ->capture_default_str()->check(CLI::Range(1.0, 3600.0));
  app.add_option("--model", o->v.model_path, "Serving model for the scheduler domain (default $RTX_DATA/stories260k/...f32.gguf)");
  auto* no_canary = app.add_flag("--no-canary", "Scheduler domain: skip the serving canary gate");
  app.add_option("--canary-seconds", o->v.canary_seconds, "Scheduler domain: seconds the canary serves load")
      ->capture_default_str()->check(CLI::Range(0.5, 600.0));
  app.add_option("--canary-sla-p95-ms", o->v.canary_rule.sla_p95_ms, "Absolute SLA on the canary's p95 latency, ms (0 = relative only)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--canary-sla-p99-ms", o->v.canary_rule.sla_p99_ms, "Absolute SLA on the canary's p99 latency, ms (0 = relative only)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--auto-approve-if-gates-pass", o->auto_approve, "Approve (recorded as policy) and promote what passes every gate");
  app.add_option("--actor", o->actor, "Name recorded with approvals and promotions (default $USER)");
  app.add_option("--key", o->key_path, "Signing key (default: evolve_ed25519.key next to the store; created if missing)");
  app.add_option("--format", *format, "Report format: text, md, json")->capture_default_str();
  app.add_option("-o,--out", *out, "Write the report to FILE (default stdout)");
  return [&common, o, thresholds, format, out, strict, no_canary]() {
    o->v.canary = no_canary->count() == 0;
    // CLI11's range checks let NaN through (every comparison with NaN is false).
    for (const auto& [flag, x] : {std::pair<const char*, double>{"--canary-seconds", o->v.canary_seconds},
                                  {"--canary-sla-p95-ms", o->v.canary_rule.sla_p95_ms},
                                  {"--canary-sla-p99-ms", o->v.canary_rule.sla_p99_ms},
                                  {"--timeout", o->v.sandbox.timeout_s},
                                  {"--time-budget", o->time_budget_s}})
      if (!std::isfinite(x)) rtx::throw_usage(std::string(flag) + " must be a finite number", flag);
    for (const auto& t : *thresholds) apply_threshold(*o, t);
    for (const auto& d : o->domains) rtx::evolve::target_of(d);
    rtx::evolve::format_report(nlohmann::json{{"proposals", nlohmann::json::array()}}, *format);  // validate --format early
    o->v.seed = common.seed;
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    std::ostringstream sink;
    std::ostream& err = common.quiet ? static_cast<std::ostream&>(sink) : std::cerr;
    // Ctrl-C / SIGTERM: the sandboxed trial running is killed, its proposal marked 'interrupted',
    // no new one starts; the report is still written, exit 130. A second signal exits at once.
    const rtx::cli::InterruptGuard interrupt(
        common.quiet ? "" : "rtx-evolve run: interrupted: stopping the current trial (Ctrl-C again quits at once)\n");
    o->v.sandbox.cancel = [] { return rtx::cli::InterruptGuard::requested(); };
    const nlohmann::json rep = rtx::evolve::run_loop(st, *o, err);
    write_report(rep, *format, *out, common.json);
    if (rep.value("interrupted", false)) return rtx::cli::kInterruptedExit;
    // Rejected proposals are the loop working as intended; --strict makes them exit 1 (CI).
    return *strict && rep["summary"].value("failed", 0) > 0 ? 1 : 0;
  };
}

Body add_status(CLI::App& app, const rtx::cli::CommonOptions& common) {
  auto limit = std::make_shared<size_t>(20);
  auto format = std::make_shared<std::string>("text");
  app.add_option("-n,--limit", *limit, "Newest N proposals")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--format", *format, "text, md, json")->capture_default_str();
  return [&common, limit, format]() {
    rtx::store::Store st(rtx::store::resolve_db_path(common.db));
    write_report(rtx::evolve::status_report(st, *limit), *format, "", common.json);
    return 0;
  };
}

}  // namespace rtx_evolve
