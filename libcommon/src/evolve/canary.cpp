// The serving canary: baseline and candidate scheduler configs behind one rtx-serve HTTP server
// (canary lane), the same open load on both, per-engine latency percentiles, and the SLA gate.
#include "rtx/evolve/canary.hpp"

#include <cmath>
#include <cstdio>
#include <memory>
#include <chrono>
#include <thread>

#include <httplib.h>

#include "rtx/core/error.hpp"
#include "rtx/serve/loadgen.hpp"
#include "rtx/serve/model.hpp"
#include "rtx/serve/scheduler.hpp"
#include "rtx/serve/server.hpp"

namespace rtx::evolve {

using nlohmann::json;

namespace {

constexpr const char* kCanarySchema = "rtx.evolve.canary.v1";

json stats_json(const serve::LatencyStats& s) {
  return {{"count", s.count}, {"mean_ms", s.mean_ms}, {"median_ms", s.median_ms}, {"p95_ms", s.p95_ms},
          {"p99_ms", s.p99_ms}, {"std_ms", s.std_ms}};
}

template <typename T>
T spec_get(const json& spec, const char* k, T dflt) {
  if (!spec.contains(k)) return dflt;
  try {
    return spec.at(k).get<T>();
  } catch (const json::exception&) {
    throw_input(std::string("canary spec: '") + k + "' has the wrong type (" + spec.at(k).dump() + ")", k);
  }
}

}  // namespace

json run_canary_trial(const json& spec) {
  const std::string path = spec_get<std::string>(spec, "model", "");
  if (path.empty()) throw_input("canary spec: 'model' (a GGUF or checkpoint path) is required", "model");
  const double fraction = spec_get<double>(spec, "fraction", 0.5);
  const double duration = spec_get<double>(spec, "duration_s", 4.0);
  const int concurrency = spec_get<int>(spec, "concurrency", 8);
  const int max_tokens = spec_get<int>(spec, "max_tokens", 16);
  if (!(fraction > 0 && fraction < 1)) throw_input("canary spec: 'fraction' must be in (0, 1)", "fraction");
  if (!(duration > 0 && duration <= 600)) throw_input("canary spec: 'duration_s' must be in (0, 600]", "duration_s");
  if (concurrency < 1 || concurrency > 1024) throw_input("canary spec: 'concurrency' must be in [1, 1024]", "concurrency");
  if (max_tokens < 1) throw_input("canary spec: 'max_tokens' must be >= 1", "max_tokens");
  const serve::SchedulerConfig base = serve::SchedulerConfig::from_json(spec.value("base", json::object()), "canary base");
  const serve::SchedulerConfig cand =
      serve::SchedulerConfig::from_json(spec.value("candidate", json::object()), "canary candidate");

  serve::LoadOptions lo;
  lo.threads = spec_get<int>(spec, "threads", 1);
  auto main_model = serve::load_model(path, lo);
  auto canary_model = serve::load_model(path, lo);
  serve::Scheduler main_sched(*main_model, base);
  serve::Scheduler canary_sched(*canary_model, cand);
  serve::ServerConfig sc;
  sc.host = "127.0.0.1";
  sc.port = 0;
  sc.canary_fraction = fraction;
  sc.shutdown_deadline_s = 5;
  sc.http_threads = concurrency + 8;
  serve::Server server(serve::Engine{main_model.get(), &main_sched, "main"},
                       serve::Engine{canary_model.get(), &canary_sched, "canary"}, sc);
  const int port = server.bind();
  std::thread listener([&server] { server.run(); });
  {
    // One health check first: without a loopback (a network namespace where "lo" is down) every
    // request would fail at once and the load generator would spin on connection errors.
    httplib::Client probe("127.0.0.1", port);
    probe.set_connection_timeout(2, 0);
    auto ok = probe.Get("/health");
    for (int i = 0; i < 20 && !ok; ++i) {  // the listener may still be starting
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ok = probe.Get("/health");
    }
    if (!ok) {
      server.stop();
      listener.join();
      throw_env("canary: cannot reach its own server on 127.0.0.1:" + std::to_string(port) + " (" +
                    httplib::to_string(ok.error()) + "); is the loopback device down in this network namespace?",
                "127.0.0.1:" + std::to_string(port));
    }
  }

  serve::LoadConfig lc;
  lc.port = port;
  lc.concurrency = concurrency;
  lc.duration_s = duration;
  lc.max_tokens = max_tokens;
  lc.prompts = {"Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a bird"};
  if (spec.contains("seed")) lc.seed = spec_get<uint64_t>(spec, "seed", 0);
  lc.timeout_s = std::max(60.0, 4 * duration);
  serve::LoadReport rep;
  try {
    rep = serve::run_load(lc);
  } catch (...) {
    server.stop();
    listener.join();
    throw;
  }
  server.stop();
  listener.join();

  json engines = json::object();
  for (const char* label : {"main", "canary"}) {
    std::vector<double> e2e, ttft;
    int64_t failed = 0, rate_limited = 0;
    json errors = json::array();
    for (const auto& r : rep.requests) {
      if (r.engine != label) continue;
      if (r.status == serve::RequestStatus::Ok) {
        e2e.push_back(r.e2e_s);
        ttft.push_back(r.ttft_s);
      } else if (r.status == serve::RequestStatus::RateLimited) {
        ++rate_limited;
      } else {
        ++failed;
        if (errors.size() < 5) errors.push_back(r.error);
      }
    }
    engines[label] = {{"completed", e2e.size()},
                      {"failed", failed},
                      {"rate_limited", rate_limited},
                      {"errors", errors},
                      {"e2e", stats_json(serve::latency_stats(e2e))},
                      {"ttft", stats_json(serve::latency_stats(ttft))}};
  }
  int64_t unrouted = 0;  // requests that failed before any engine answered (no X-Rtx-Engine)
  json unrouted_errors = json::array();
  for (const auto& r : rep.requests)
    if (r.engine.empty()) {
      ++unrouted;
      if (unrouted_errors.size() < 5) unrouted_errors.push_back(r.error);
    }
  return {{"schema", kCanarySchema},
          {"fraction", fraction},
          {"duration_s", duration},
          {"concurrency", concurrency},
          {"max_tokens", max_tokens},
          {"requests", rep.requests.size()},
          {"unrouted", unrouted},
          {"unrouted_errors", unrouted_errors},
          {"engines", engines}};
}

GateResult judge_canary(const json& result, const CanaryRule& rule) {
  GateResult g;
  g.gate = "canary";
  g.metric = "p99_e2e_ms";
  if (!result.contains("engines") || !result["engines"].contains("main") || !result["engines"].contains("canary"))
    throw_input("canary result: 'engines.main' and 'engines.canary' are required", "engines");
  const json& m = result["engines"]["main"];
  const json& c = result["engines"]["canary"];
  const double m95 = m["e2e"]["p95_ms"].get<double>(), m99 = m["e2e"]["p99_ms"].get<double>();
  const double c95 = c["e2e"]["p95_ms"].get<double>(), c99 = c["e2e"]["p99_ms"].get<double>();
  double lim95 = m95 * (1 + rule.p95_slack), lim99 = m99 * (1 + rule.p99_slack);
  if (rule.sla_p95_ms > 0) lim95 = std::min(lim95, rule.sla_p95_ms);
  if (rule.sla_p99_ms > 0) lim99 = std::min(lim99, rule.sla_p99_ms);
  g.value = c99;
  g.threshold = lim99;
  std::vector<std::string> why;
  const int64_t mc = m["completed"].get<int64_t>(), cc = c["completed"].get<int64_t>();
  if (mc < rule.min_requests || cc < rule.min_requests)
    why.push_back("too few completed requests for a verdict (main " + std::to_string(mc) + ", canary " +
                  std::to_string(cc) + ", need " + std::to_string(rule.min_requests) + " each)");
  if (c["failed"].get<int64_t>() > 0)
    why.push_back(std::to_string(c["failed"].get<int64_t>()) + " canary request(s) failed");
  const int64_t unrouted = result.value("unrouted", int64_t{0});
  if (unrouted > 0) {
    const json& errs = result.value("unrouted_errors", json::array());
    why.push_back(std::to_string(unrouted) + " request(s) reached no engine" +
                  (errs.empty() ? std::string() : " (first: " + errs[0].get<std::string>() + ")"));
  }
  char buf[160];
  if (c95 > lim95) {
    std::snprintf(buf, sizeof buf, "canary p95 %.1f ms > limit %.1f ms (baseline p95 %.1f ms)", c95, lim95, m95);
    why.push_back(buf);
  }
  if (c99 > lim99) {
    std::snprintf(buf, sizeof buf, "canary p99 %.1f ms > limit %.1f ms (baseline p99 %.1f ms)", c99, lim99, m99);
    why.push_back(buf);
  }
  g.passed = why.empty();
  g.detail = {{"baseline", m},
              {"candidate", c},
              {"limit_p95_ms", lim95},
              {"limit_p99_ms", lim99},
              {"rule", {{"p95_slack", rule.p95_slack}, {"p99_slack", rule.p99_slack}, {"sla_p95_ms", rule.sla_p95_ms},
                        {"sla_p99_ms", rule.sla_p99_ms}, {"min_requests", rule.min_requests}}},
              {"unrouted", unrouted},
              {"fraction", result.value("fraction", 0.0)},
              {"requests", result.value("requests", json(0))}};
  if (!why.empty()) {
    std::string r;
    for (const auto& w : why) r += (r.empty() ? "" : "; ") + w;
    g.detail["reason"] = r;
  }
  return g;
}

}  // namespace rtx::evolve
