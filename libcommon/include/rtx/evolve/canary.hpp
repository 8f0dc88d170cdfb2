// rtx::evolve serving canary: the promotion gate of the scheduler domain. The baseline and the
// candidate scheduler configurations serve the same load at the same time through rtx-serve's
// canary lane (one HTTP server, two engines, a share of requests routed to the candidate), and
// the candidate's p95/p99 latencies must stay within the SLA.
#pragma once
#include <nlohmann/json.hpp>

#include "rtx/evolve/proposal.hpp"

namespace rtx::evolve {

/// What the canary measures and how it judges. Latencies are end-to-end (request sent -> last
/// token) and TTFT, per engine, with vLLM benchmark_serving's percentile definitions
/// (serve::latency_stats).
struct CanaryRule {
  double p95_slack = 0.15;   ///< candidate p95 <= baseline p95 x (1 + slack)
  double p99_slack = 0.25;   ///< candidate p99 <= baseline p99 x (1 + slack) (fewer samples: wider)
  double sla_p95_ms = 0;     ///< absolute SLA on the candidate's p95 E2E latency, ms (0 = none)
  double sla_p99_ms = 0;     ///< absolute SLA on the candidate's p99 E2E latency, ms (0 = none)
  int min_requests = 8;      ///< completed requests each engine needs for a verdict
};

/// Run one canary (the trial kind "canary", inside the sandbox). `spec`: {"model": path,
/// "threads": N, "base": SchedulerConfig JSON, "candidate": SchedulerConfig JSON, "fraction":
/// share routed to the candidate (default 0.5), "duration_s" (default 4), "concurrency" (default
/// 8), "max_tokens" (default 16), "prompt_tokens" (default 16), "seed"}. Loads the model twice (one
/// per engine: a model's scratch buffers belong to one scheduler), serves on a loopback port
/// chosen by the OS and drives it with serve::run_load. Returns {"schema", "engines": {"main":
/// {...}, "canary": {...}}} with per-engine completed/errors and E2E/TTFT stats in ms.
/// Throws rtx::Error(Input) for a bad spec, (Environment) when no port can be bound.
nlohmann::json run_canary_trial(const nlohmann::json& spec);

/// Judge a canary result: passes when each engine completed >= min_requests, the candidate had
/// no failed request, and its p95 and p99 E2E latencies are within the relative slack of the
/// baseline's and within the absolute SLA when set. Gate name "canary", metric "p99_e2e_ms".
GateResult judge_canary(const nlohmann::json& result, const CanaryRule& rule);

}  // namespace rtx::evolve
