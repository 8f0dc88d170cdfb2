// The evolve pipeline: interleaved A/B validation in the sandbox with recorded gates, the
// `run` loop under budgets, status, submit and the report renderers.
#include "rtx/stats/compare.hpp"
#include "rtx/evolve/loop.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <sstream>
#include <tuple>

#include "rtx/measure/measure.hpp"
#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/deploy.hpp"
#include "rtx/evolve/history.hpp"
#include "rtx/evolve/kg.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/stats/abba.hpp"
#include "rtx/stats/stats.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/lookup.hpp"
#include "rtx/tune/records.hpp"

namespace rtx::evolve {

using nlohmann::json;

namespace {

void say(std::ostream* log, const std::string& s) {
  if (log) *log << s << "\n" << std::flush;
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Kernel params of each case under a profile: the current profiles, with `override_key`'s
/// entry replaced by `override_params` (the candidate), resolved as kernels would (exact key,
/// nearest shape, else the variant defaults).
json with_params(const json& cases, const std::vector<tune::ProfileEntry>& entries, const std::string& sku,
                 const kernels::Registry& reg) {
  tune::ProfileLookup lookup(entries, sku, "");
  json out = json::array();
  for (json c : cases) {
    const auto& op = reg.op(c["op"].get<std::string>());
    const auto& v = reg.variant(op.name, c["variant"].get<std::string>());
    const kernels::Shape s = c["shape"].get<kernels::Shape>();
    const DType dt = parse_dtype(c["dtype"].get<std::string>());
    auto a = lookup.find(op.name, &v, s, dt);
    c["params"] = a.params ? *a.params : v.space.defaults();
    out.push_back(c);
  }
  return out;
}

/// Copy a proposal's workload part (submitted proposals write it) into a trial spec part. Keys
/// that choose what the trial runs are the pipeline's alone: a workload that names one is an
/// Input error (else a submitted proposal could turn a serving trial into another kind, or name
/// the program mpirun starts).
void merge_workload(json& spec, const json& part, const char* where) {
  if (!part.is_object()) throw_input(std::string("plan.workload.") + where + " must be an object", std::string("plan.workload.") + where);
  static const char* kReserved[] = {"schema", "kind", "config", "reference_config", "self_exe", "workdir", "dataset"};
  for (const auto& [k, v] : part.items()) {
    for (const char* r : kReserved)
      if (k == r)
        throw_input("plan.workload." + std::string(where) + " may not set '" + k + "' (the validation pipeline sets it)",
                    "plan.workload." + std::string(where) + "." + k);
    spec[k] = v;
  }
}

/// A parallelism proposal about the data-parallel bucket size (workload kind "dp").
bool is_dp(const Proposal& p) {
  return p.domain == "parallelism" && p.plan.contains("workload") && p.plan["workload"].is_object() &&
         p.plan["workload"].value("kind", std::string()) == "dp";
}

/// The trial specs (parts: affected, heldout) of one arm.
json arm_spec(store::Store& st, const Proposal& p, const json& config, const ValidateOptions& o, const kernels::Registry& reg,
              const std::string& sku) {
  json parts = json::array();
  const json& w = p.plan.contains("workload") ? p.plan["workload"] : json::object();
  auto base_part = [&](const char* kind) {
    return json{{"schema", kTrialSpecSchema}, {"kind", kind}, {"seed", o.seed}, {"samples", o.samples}, {"warmup", o.warmup}};
  };
  if (is_dp(p)) {  // data-parallel training steps under mpirun; weights compared with the base config's
    for (const char* part : {"affected", "heldout"}) {
      if (!w.contains(part)) continue;
      json s = base_part("dp");
      s["config"] = config;
      s["reference_config"] = p.changeset.value("base", json::object());
      merge_workload(s, w[part], part);
      s["samples"] = std::max<size_t>(5, o.samples);  // one training step per sample
      parts.push_back(s);
    }
  } else if (p.domain == "tuner" || p.domain == "parallelism") {
    std::vector<tune::ProfileEntry> entries = tune::current_profiles(st);
    if (p.domain == "tuner") {
      entries.erase(std::remove_if(entries.begin(), entries.end(), [&](const auto& e) { return e.key == p.key; }), entries.end());
      tune::ProfileEntry e;
      e.key = p.key;
      e.version = 1;
      e.params = config.get<kernels::Params>();
      e.measured_under = tune::measured_under(sku);
      entries.push_back(e);
    }
    const int threads = p.domain == "parallelism" ? config.value("threads", 0) : 0;
    for (const char* part : {"affected", "heldout"}) {
      if (!w.contains(part) || w[part].empty()) continue;
      json s = base_part("kernels");
      s["threads"] = threads;
      s["cases"] = with_params(w[part], entries, sku, reg);
      parts.push_back(s);
    }
  } else if (p.domain == "scheduler") {
    for (const char* part : {"affected", "heldout"}) {
      if (!w.contains(part)) continue;
      json s = base_part("serve");
      s["model"] = w.value("model", o.model_path);
      s["config"] = config;
      merge_workload(s, w[part], part);
      s["samples"] = std::max<size_t>(5, o.samples / 2 + 2);
      parts.push_back(s);
    }
  } else if (p.domain == "fusion") {  // GPT-2 training steps; outputs compared with the base config's
    for (const char* part : {"affected", "heldout"}) {
      if (!w.contains(part)) continue;
      json s = base_part("fusion");
      s["config"] = config;
      s["reference_config"] = p.changeset.value("base", json::object());
      merge_workload(s, w[part], part);
      s["samples"] = std::max<size_t>(3, o.samples / 3);  // a whole training step per sample
      parts.push_back(s);
    }
  } else {
    for (const char* part : {"affected", "heldout"}) {
      if (!w.contains(part)) continue;
      json s = base_part("alloc");
      s["config"] = config;
      s["steps"] = w[part].value("steps", 20);
      s["seed"] = o.seed + w[part].value("seed_offset", 0);
      parts.push_back(s);
    }
  }
  return {{"schema", kTrialSpecSchema}, {"parts", parts}};
}

struct ArmRun {
  SandboxResult sb;
  json result;  // {"parts": [...]} when clean
  std::vector<measure::HostEvidence> host;  // per part: its host evidence (measured false: none)
  std::string problem;
};

ArmRun run_arm(const json& spec, const ValidateOptions& o) {
  char tmpl[] = "/tmp/rtx-evolve-spec-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) throw_env("cannot create a temporary spec file", "/tmp");
  const std::string text = spec.dump();
  const bool wrote = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  ArmRun r;
  if (!wrote) {
    ::unlink(tmpl);
    throw_env("cannot write the trial spec", tmpl);
  }
  r.sb = run_sandboxed({o.self_exe, "__trial", "--spec", tmpl}, o.sandbox);
  ::unlink(tmpl);
  if (r.sb.cancelled) throw ValidationInterrupted("the trial running was killed after " + fmt("%.1f", r.sb.wall_s) + " s");
  if (!r.sb.clean()) {
    r.problem = r.sb.failure();
    return r;
  }
  try {
    r.result = json::parse(r.sb.out);
    if (!r.result.contains("parts") || !r.result["parts"].is_array()) r.problem = "trial output has no 'parts'";
  } catch (const json::exception& e) {
    r.problem = std::string("trial output is not JSON: ") + e.what();
  }
  // The host evidence of each part, checked here: a malformed one is a failed trial (safety).
  for (size_t i = 0; r.problem.empty() && i < r.result["parts"].size(); ++i) {
    try {
      r.host.push_back(trial_host_evidence(r.result["parts"][i], "trial output", "/parts/" + std::to_string(i))
                           .value_or(measure::HostEvidence{}));
    } catch (const Error& e) {
      r.problem = e.where() + ": " + e.message();
    }
  }
  return r;
}

/// samples[part][case] concatenated over runs; checksums[part][case] per run.
struct Collected {
  std::vector<std::vector<std::vector<double>>> samples;
  std::vector<std::vector<measure::HostEvidence>> host;  // host[part][round]
  std::vector<std::vector<std::vector<std::string>>> checksums;
  std::vector<std::vector<std::string>> ids;
  std::vector<double> peak_rss, peak_reserved, frag;
  bool all_ok = true, repeat_equal = true;
  double max_rel_err = 0, tolerance = 0;
  std::vector<std::string> bad;
  // Parity with the baseline configuration's outputs (kernel domains' candidate arm).
  bool parity_seen = false, parity_ok = true;
  double parity_max = 0, parity_tol = 0;
  std::string parity_worst;
  std::vector<std::string> parity_bad;
};

void collect(Collected& c, const json& res, const std::vector<measure::HostEvidence>& host) {
  const json& parts = res["parts"];
  if (c.samples.empty()) {
    c.samples.resize(parts.size());
    c.checksums.resize(parts.size());
    c.ids.resize(parts.size());
    c.host.resize(parts.size());
  }
  for (size_t i = 0; i < c.host.size(); ++i) c.host[i].push_back(i < host.size() ? host[i] : measure::HostEvidence{});
  for (size_t i = 0; i < parts.size() && i < c.samples.size(); ++i) {
    const json& cases = parts[i]["cases"];
    if (c.samples[i].empty()) {
      c.samples[i].resize(cases.size());
      c.checksums[i].resize(cases.size());
      for (const auto& k : cases) c.ids[i].push_back(k["id"].get<std::string>());
    }
    for (size_t j = 0; j < cases.size() && j < c.samples[i].size(); ++j) {
      const json& k = cases[j];
      for (double x : k["samples"]) c.samples[i][j].push_back(x);
      c.checksums[i][j].push_back(k["checksum"].get<std::string>());
      if (!k.value("ok", false)) {
        c.all_ok = false;
        c.bad.push_back(k["id"].get<std::string>() + ": " + k.value("detail", std::string("reference check failed")));
      }
      if (!k.value("repeat_checksum_equal", true)) c.repeat_equal = false;
      if (k.contains("parity") && k["parity"].value("available", false)) {
        const json& par = k["parity"];
        const double d = par.value("rel_diff", 0.0), tol = par.value("tolerance", 0.0);
        const std::string id = k["id"].get<std::string>();
        if (!c.parity_seen || d >= c.parity_max) c.parity_max = d, c.parity_tol = tol, c.parity_worst = id;
        c.parity_seen = true;
        if (!par.value("ok", false)) {
          c.parity_ok = false;
          if (std::find(c.parity_bad.begin(), c.parity_bad.end(), id) == c.parity_bad.end()) c.parity_bad.push_back(id);
        }
      }
      if (k.value("max_rel_err", 0.0) >= c.max_rel_err) {
        c.max_rel_err = k.value("max_rel_err", 0.0);
        c.tolerance = k.value("tolerance", 0.0);
      }
    }
    if (parts[i].contains("peak_reserved_bytes") && i == 0) {
      c.peak_reserved.push_back(parts[i]["peak_reserved_bytes"].get<double>());
      c.frag.push_back(parts[i]["frag_pct"].get<double>());
    }
  }
  c.peak_rss.push_back(res.value("peak_rss_bytes", 0.0));
}

/// One arm's per-case results for bench_results (record_validation): every sample, and the
/// median of each round (each collect() call adds one round's samples and one peak_rss entry).
/// Host contention per part (`busy[part]`, pair_busy_rounds): rounds left out of both arms are
/// left out of the rows too (listed in rounds_left_out), so the rows are what the gates judged;
/// when busy rounds stayed in, the arm's rows are contended with the first own busy round's
/// evidence and the counts (rtx-bench's merged-case rule, docs/store.md).
void append_arm(std::vector<ArmCaseResult>& out, const json& spec, const Collected& c, const std::vector<BusyRounds>& busy,
                const char* arm) {
  const size_t all_rounds = c.peak_rss.size();
  for (size_t i = 0; i < c.samples.size() && i < spec["parts"].size(); ++i) {
    const json& part = spec["parts"][i];
    const BusyRounds b = i < busy.size() ? busy[i] : BusyRounds{};
    // The arm's own verdict over the rounds kept.
    bool contended = false;
    std::string reason;
    size_t own_busy = 0;
    for (size_t k = 0; i < c.host.size() && k < c.host[i].size(); ++k) {
      const measure::HostEvidence& e = c.host[i][k];
      if (!e.measured || !e.contended || std::find(b.left_out.begin(), b.left_out.end(), k + 1) != b.left_out.end()) continue;
      if (!contended) reason = "round " + std::to_string(k + 1) + ": " + e.reason;
      contended = true;
      ++own_busy;
    }
    if (contended)
      reason += "; " + std::to_string(own_busy) + " of " + std::to_string(all_rounds) + " rounds busy, " +
                std::to_string(b.quiet) + " round pairs judged quiet: too few to leave the busy ones out";
    json left = json::array();
    for (size_t n = 0; n < b.left_out.size(); ++n) left.push_back({{"round", b.left_out[n]}, {"reason", b.left_out_reason[n]}});
    const size_t rounds = all_rounds - b.left_out.size();
    for (size_t j = 0; j < c.samples[i].size(); ++j) {
      ArmCaseResult r;
      r.arm = arm;
      r.part = i == 0 ? "affected" : "heldout";
      r.case_id = c.ids[i][j];
      // A held-out workload is its own series in history even when the trial names it like the
      // affected one (the allocation trace, the serving batch): kernel cases already say "heldout:".
      if (i > 0 && r.case_id.rfind("heldout:", 0) != 0) r.case_id = "heldout:" + r.case_id;
      r.kind = part.value("kind", std::string());
      if (part.contains("cases") && j < part["cases"].size()) r.spec = part["cases"][j];
      r.samples = b.left_out.empty() || all_rounds == 0 || c.samples[i][j].size() % all_rounds != 0
                      ? c.samples[i][j]
                      : without_rounds({c.samples[i][j]}, all_rounds, b.left_out)[0];
      r.contended = contended;
      r.contention_reason = reason;
      r.rounds_left_out = left;
      const size_t per = rounds ? r.samples.size() / rounds : 0;
      if (per > 0 && per * rounds == r.samples.size())
        for (size_t k = 0; k < rounds; ++k)
          r.round_medians.push_back(median_of(std::vector<double>(r.samples.begin() + static_cast<std::ptrdiff_t>(k * per),
                                                                  r.samples.begin() + static_cast<std::ptrdiff_t>((k + 1) * per))));
      out.push_back(std::move(r));
    }
  }
}

/// The serving domain's promotion gate: baseline and candidate scheduler configs behind one
/// server (canary lane, half the requests each), in a sandboxed trial process.
GateResult canary_gate(const Proposal& p, const json& base_cfg, const json& cand_cfg, const ValidateOptions& o) {
  const json& w = p.plan.contains("workload") ? p.plan["workload"] : json::object();
  json part = {{"schema", kTrialSpecSchema}, {"kind", "canary"},       {"seed", o.seed},
               {"model", w.value("model", o.model_path)},               {"threads", 1},
               {"base", base_cfg},  {"candidate", cand_cfg},            {"fraction", 0.5},
               {"duration_s", o.canary_seconds}, {"concurrency", o.canary_concurrency}, {"max_tokens", 16}};
  say(o.log, "    canary: baseline and candidate behind one server for " + fmt("%g", o.canary_seconds) + " s");
  ValidateOptions oc = o;
  oc.sandbox.loopback = true;  // the canary serves on 127.0.0.1 inside the network namespace
  ArmRun ar = run_arm({{"schema", kTrialSpecSchema}, {"parts", json::array({part})}}, oc);
  if (ar.problem.empty() && ar.result["parts"].empty()) ar.problem = "the canary trial returned nothing";
  if (!ar.problem.empty()) {
    GateResult g;
    g.gate = "canary";
    g.metric = "p99_e2e_ms";
    g.detail = {{"reason", "the canary did not run to the end: " + ar.problem}};
    return g;
  }
  return judge_canary(ar.result["parts"][0], o.canary_rule);
}

bool domain_is_exact(const std::string& d) { return d == "scheduler" || d == "memory"; }

std::string actor_default() {
  const char* u = std::getenv("USER");
  return u && *u ? u : "unknown";
}

}  // namespace

namespace {
Validation validate_uncaught(store::Store& st, int64_t id, const KeyPair& key, const ValidateOptions& o, int64_t run_id);
}  // namespace

Validation validate(store::Store& st, int64_t id, const KeyPair& key, const ValidateOptions& o, int64_t run_id) {
  try {
    return validate_uncaught(st, id, key, o, run_id);
  } catch (const ValidationInterrupted&) {
    set_status(st, id, "interrupted");  // no gate was recorded: the A/B was cut short
    throw;
  }
}

namespace {

Validation validate_uncaught(store::Store& st, int64_t id, const KeyPair& key, const ValidateOptions& o, int64_t run_id) {
  Proposal p = load_proposal(st, id);
  set_status(st, id, "validating");
  const auto& reg = measure::registry();
  const std::string sku = p.provenance.value("sku", telemetry::sku_key("cpu"));
  Validation v;
  std::vector<GateResult>& g = v.gates;

  GateResult safety;
  safety.gate = "safety";
  safety.metric = "sandbox_failures";
  const std::vector<std::string> missing = missing_fields(p);
  const std::string sig = verify(p, key);
  safety.detail = {{"missing_fields", missing}, {"signature", sig.empty() ? "verified" : sig}};
  std::vector<ArmCaseResult> measured;  // per-arm, per-case results: bench_results rows
  auto finish = [&](bool passed) {
    v.passed = passed;
    v.summary["gates"] = json::array();
    for (const auto& r : g)
      v.summary["gates"].push_back({{"gate", r.gate}, {"passed", r.passed}, {"metric", r.metric}, {"value", r.value},
                                    {"threshold", r.threshold}, {"detail", r.detail}});
    record_validation(st, id, run_id, o.seed, g, measured);  // gates + bench_results, one transaction
    set_status(st, id, passed ? "passed" : "failed", v.summary);
    return v;
  };
  if (!missing.empty() || !sig.empty()) {
    safety.passed = false;
    safety.detail["reason"] = !sig.empty() ? "signature: " + sig : "incomplete envelope: " + json(missing).dump();
    g.push_back(safety);
    return finish(false);
  }

  const json base_cfg = p.changeset.value("base", json::object()), cand_cfg = p.changeset["candidate"];
  json spec_a, spec_b;
  try {
    spec_a = arm_spec(st, p, base_cfg, o, reg, sku);
    spec_b = arm_spec(st, p, cand_cfg, o, reg, sku);
  } catch (const Error& e) {
    safety.passed = false;
    safety.detail["error"] = "cannot build the trial: " + e.message();
    safety.detail["reason"] = safety.detail["error"];
    g.push_back(safety);
    return finish(false);
  }
  if ((p.domain == "tuner" || p.domain == "parallelism") && !is_dp(p)) {
    // The candidate trial also runs each case once under the baseline's params and threads, on
    // the same seeded inputs: the determinism gate's parity with the baseline's outputs.
    for (size_t i = 0; i < spec_b["parts"].size() && i < spec_a["parts"].size(); ++i) {
      json& pb = spec_b["parts"][i];
      const json& pa = spec_a["parts"][i];
      pb["baseline_threads"] = pa.value("threads", 0);
      for (size_t j = 0; j < pb["cases"].size() && j < pa["cases"].size(); ++j)
        pb["cases"][j]["baseline_params"] = pa["cases"][j].value("params", json::object());
    }
  }
  if (spec_a["parts"].empty()) {
    safety.passed = false;
    safety.detail["error"] = "the proposal's plan.workload names nothing to measure";
    safety.detail["reason"] = safety.detail["error"];
    g.push_back(safety);
    return finish(false);
  }
  Collected ca, cb;
  std::vector<std::string> failures;
  bool net = true, confined = true;
  size_t runs = 0;
  ValidateOptions arm_opts = o;
  if (is_dp(p)) arm_opts.sandbox.loopback = true;  // mpirun's daemons and ranks talk over 127.0.0.1
  auto measure = [&](size_t rounds) {
    for (size_t r = 0; r < rounds && failures.empty(); ++r) {
      for (int k = 0; k < 2 && failures.empty(); ++k) {
        // A B, B A, A B, ... (ABBA, stats::abba_arm; runs % 2 == k here).
        const int arm = stats::abba_arm(runs);
        ArmRun ar = run_arm(arm == 0 ? spec_a : spec_b, arm_opts);
        ++runs;
        net = net && ar.sb.network_isolated;
        confined = confined && ar.sb.writes_confined;
        if (!ar.problem.empty()) {
          failures.push_back(std::string(arm == 0 ? "baseline" : "candidate") + " trial " + std::to_string(r + 1) + ": " +
                             ar.problem);
          break;
        }
        collect(arm == 0 ? ca : cb, ar.result, ar.host);
      }
    }
  };
  say(o.log, "  validating #" + std::to_string(id) + " (" + p.domain + "): " + std::to_string(o.rounds) + " A/B rounds");
  measure(o.rounds);
  safety.value = static_cast<double>(failures.size());
  safety.passed = failures.empty();
  safety.detail["trials"] = runs;
  safety.detail["network_isolated"] = net;
  safety.detail["writes_confined"] = confined;
  safety.detail["limits"] = {{"timeout_s", o.sandbox.timeout_s}, {"cpu_s", o.sandbox.cpu_s},
                             {"address_space_bytes", o.sandbox.address_space_bytes}};
  if (!failures.empty()) {
    safety.detail["failures"] = failures;
    safety.detail["reason"] = failures.front() + (failures.size() > 1 ? " (and " + std::to_string(failures.size() - 1) + " more)" : "");
    g.push_back(safety);
    return finish(false);
  }

  // Performance on the affected workload; a borderline result is measured again once.
  // Busy rounds (host contention, per part) are left out of both arms, or leave the gate undecided.
  PerfRule rule = o.rules.count(p.domain) ? o.rules.at(p.domain) : default_rule(p.domain);
  rule.rounds = static_cast<int>(runs / 2);
  std::vector<BusyRounds> busy(ca.host.size());
  auto judge_host = [&]() {
    for (size_t i = 0; i < busy.size() && i < cb.host.size(); ++i) busy[i] = pair_busy_rounds(ca.host[i], cb.host[i]);
  };
  judge_host();
  PerfJudgement perf = judge_performance(ca.samples[0], cb.samples[0], rule, busy[0]);
  bool remeasured = false;
  if (perf.outcome == PerfOutcome::Borderline) {
    say(o.log, "    borderline (" + perf.reason + "): measuring again");
    measure(o.rounds);
    remeasured = true;
    rule.rounds = static_cast<int>(runs / 2);
    if (failures.empty()) {
      judge_host();
      perf = judge_performance(ca.samples[0], cb.samples[0], rule, busy[0]);
    }
    if (!failures.empty()) {
      safety.passed = false;
      safety.value = static_cast<double>(failures.size());
      safety.detail["failures"] = failures;
    }
  }

  // Determinism: candidate passes the float64 reference check, candidate runs hash alike,
  // and (serving, allocator) produce exactly the baseline's outputs.
  GateResult det;
  det.gate = "determinism";
  det.metric = "max_rel_err";
  det.value = cb.max_rel_err;
  det.threshold = cb.tolerance;
  bool same_runs = cb.repeat_equal, same_as_base = true;
  for (size_t i = 0; i < cb.checksums.size(); ++i)
    for (size_t j = 0; j < cb.checksums[i].size(); ++j) {
      const auto& cs = cb.checksums[i][j];
      if (std::adjacent_find(cs.begin(), cs.end(), std::not_equal_to<>()) != cs.end()) same_runs = false;
      if (domain_is_exact(p.domain) && !ca.checksums[i][j].empty() && !cs.empty() && ca.checksums[i][j][0] != cs[0])
        same_as_base = false;
    }
  det.passed = cb.all_ok && same_runs && same_as_base && cb.parity_ok;
  if (cb.parity_seen) {  // the issue's rule: parity with the baseline's outputs, fp32 <= 1e-6
    det.metric = "parity_rel_diff";
    det.value = cb.parity_max;
    det.threshold = cb.parity_tol;
  }
  // Fusion and data-parallel trials compare with the baseline configuration themselves (their
  // max_rel_err is that parity); kernel trials check the float64 reference and report parity.
  const bool trial_parity = p.domain == "fusion" || is_dp(p);
  const std::string checked = p.domain == "fusion" ? "the first step's loss and gradients" : "the weights after 2 steps";
  det.detail = {{"reference_check", !cb.all_ok ? std::string("failed")
                                    : trial_parity ? checked + " within " + fmt("%.0e", cb.tolerance) +
                                                         " (||c-b||_2/||b||_2 per tensor) of the baseline configuration's"
                                                   : std::string("all candidate outputs within the op's bound of the float64 reference")},
                {"candidate_runs_identical", same_runs},
                {"exact_parity_with_baseline", domain_is_exact(p.domain) ? json(same_as_base) : json("n/a (sums may run in another order)")},
                {"failures", cb.bad}};
  if (trial_parity) det.metric = "parity_rel_diff";
  if (cb.parity_seen)
    det.detail["parity_with_baseline"] = {
        {"metric", "||candidate - baseline||_2 / ||baseline||_2 per output, same seeded inputs"},
        {"max_rel_diff", cb.parity_max},
        {"tolerance", cb.parity_tol},
        {"worst_case", cb.parity_worst},
        {"over_tolerance", cb.parity_bad},
        {"max_rel_err_vs_float64", cb.max_rel_err}};
  if (!det.passed) {
    std::vector<std::string> why;
    if (!cb.all_ok) why.push_back("reference check failed: " + (cb.bad.empty() ? std::string("?") : cb.bad.front()));
    if (!same_runs) why.push_back("candidate runs produced different checksums");
    if (!same_as_base) why.push_back("output differs from the baseline's (this domain must match it exactly)");
    if (!cb.parity_ok)
      why.push_back("output differs from the baseline's by " + fmt("%.3g", cb.parity_max) + " relative (bound " +
                    fmt("%.0e", cb.parity_tol) + ") on " + cb.parity_bad.front());
    std::string r;
    for (const auto& w : why) r += (r.empty() ? "" : "; ") + w;
    det.detail["reason"] = r;
  }
  g.push_back(det);

  GateResult pg = perf.gate();
  pg.threshold = rule.require_improvement ? rule.threshold : -rule.threshold;
  pg.detail["remeasured"] = remeasured;
  pg.detail["cases"] = ca.ids[0];
  if (perf.outcome == PerfOutcome::Borderline) pg.detail["reason"] = perf.reason + " (still borderline after re-measuring)";
  if (!busy[0].left_out.empty() || busy[0].balanced)
    say(o.log, "    host: " + (busy[0].balanced ? busy[0].reason
                                                : std::to_string(busy[0].left_out.size()) + " busy round(s) left out of both arms"));
  // Undecided: the CI straddles the threshold, or there are too few rounds for a CI at all.
  pg.detail["undecided"] = perf.outcome == PerfOutcome::Borderline || perf.too_few;
  pg.detail["ci_halfwidth"] = perf.too_few ? json(nullptr) : json((perf.hi - perf.lo) / 2);
  g.push_back(pg);

  if (ca.samples.size() > 1) {
    // Over the round medians, as the performance gate: the process is the unit of replication.
    // (A re-measurement that failed part-way leaves the host verdict of the first rounds: not applied.)
    const bool host_ok = busy.size() > 1 && busy[1].rounds == static_cast<size_t>(rule.rounds);
    GateResult h = judge_heldout(ca.samples[1], cb.samples[1], 0.05, rule.rounds, host_ok ? busy[1] : BusyRounds{});
    h.detail["cases"] = ca.ids[1];
    g.push_back(h);
  }

  GateResult mem;
  if (p.domain == "memory") {
    mem = judge_memory(median_of(ca.peak_reserved), median_of(cb.peak_reserved), median_of(ca.frag), median_of(cb.frag), 0,
                       "peak_reserved_bytes");
    const bool reduced = median_of(cb.peak_reserved) < median_of(ca.peak_reserved) || median_of(cb.frag) < median_of(ca.frag);
    if (!reduced) {
      mem.passed = false;
      mem.detail["reason"] = mem.detail["reason"].get<std::string>() + "; no reduction of peak or fragmentation (nothing to gain)";
    }
  } else {
    mem = judge_memory(median_of(ca.peak_rss), median_of(cb.peak_rss), 0, 0, 0.05, "peak_rss_bytes", kRssSlackBytes);
    mem.detail["note"] = "process peak RSS (getrusage), slack max(5%, 4 MiB) for page, arena and stack noise";
  }
  g.push_back(mem);
  g.push_back(safety);

  bool all = true;
  for (const auto& r : g) all = all && r.passed;
  if (all && p.domain == "scheduler" && o.canary) {
    g.push_back(canary_gate(p, base_cfg, cand_cfg, o));
    all = g.back().passed;
  }
  append_arm(measured, spec_a, ca, busy, "baseline");
  append_arm(measured, spec_b, cb, busy, "candidate");
  return finish(all);
}

}  // namespace

// ---- the loop -----------------------------------------------------------------------------------

std::string change_text(const Proposal& p) {
  std::string s;
  for (const auto& a : p.actions) {
    if (!s.empty()) s += ", ";
    s += a.value("set", std::string("?")) + " " + a.value("from", json(nullptr)).dump() + " -> " + a.value("to", json(nullptr)).dump();
  }
  return s.empty() ? p.changeset.value("candidate", json::object()).dump() : s;
}

bool gate_undecided(const std::string& gate, bool passed, const json& detail) {
  return !passed && (gate == "performance" || gate == "heldout") && detail.is_object() && detail.value("undecided", false);
}

bool failed_undecided_only(const json& gates) {
  bool any = false;
  for (const auto& g : gates) {
    if (g.value("passed", true) || g.value("gate", std::string()) == "approval") continue;
    if (!gate_undecided(g.value("gate", std::string()), false, g.value("detail", json::object()))) return false;
    any = true;
  }
  return any;
}

std::string gate_verdict(const json& g) {
  if (g.value("passed", false)) return "pass";
  if (g.contains("undecided") && g["undecided"].is_boolean()) return g["undecided"].get<bool>() ? "undecided" : "FAIL";
  const json none = json::object();
  const json& detail = g.contains("detail") ? g["detail"] : none;
  return gate_undecided(g.value("gate", std::string()), false, detail) ? "undecided" : "FAIL";
}

json gates_json(store::Store& st, int64_t id) {
  json gates = json::array();
  for (const auto& r : gate_results(st, id))
    gates.push_back({{"gate", r.gate}, {"passed", r.passed}, {"metric", r.metric}, {"value", r.value}, {"threshold", r.threshold},
                     {"reason", r.detail.value("reason", std::string())}, {"detail", r.detail}});
  return gates;
}

std::string gate_value_text(const json& g) {
  const std::string gate = g.value("gate", std::string());
  const double v = g.value("value", 0.0);
  if ((gate == "performance" || gate == "heldout") && g.value("metric", std::string()) == "improvement_estimate")
    return std::string(stats::kTimeRatioLabel) + " " + stats::format_time_ratio(1 - v) + " estimate, no CI (too few rounds)";
  // v is the saving's CI lo (1 - t_c/t_b): in the common notation, the time ratio's CI hi.
  if (gate == "performance" || gate == "heldout") return std::string(stats::kTimeRatioLabel) + " CI hi " + stats::format_time_ratio(1 - v);
  if (gate == "memory") return fmt("%.3g", v) + " B";
  if (gate == "determinism") return fmt("%.2g", v) + " rel err";
  if (gate == "safety") return fmt("%.0f", v) + " failures";
  if (gate == "canary") return "p99 " + fmt("%.1f", v) + " ms";
  return fmt("%.4g", v);
}

json proposal_row(store::Store& st, const Proposal& p) {
  const json gates = gates_json(st, p.id);
  json deps = json::array();
  auto& q = st.prepare("SELECT action, from_version, to_version, actor, created_at FROM evolve_deployments WHERE proposal_id = ?1 ORDER BY id");
  q.bind(1, p.id);
  while (q.step())
    deps.push_back({{"action", q.column_text(0)},
                    {"from_version", q.column_opt_int64(1) ? json(*q.column_opt_int64(1)) : json(nullptr)},
                    {"to_version", q.column_opt_int64(2) ? json(*q.column_opt_int64(2)) : json(nullptr)},
                    {"actor", q.column_text(3)},
                    {"at", q.column_text(4)}});
  q.reset();
  return {{"id", p.id},
          {"domain", p.domain},
          {"key", p.key},
          {"change", change_text(p)},
          {"why", p.plan.value("why", std::string())},
          {"status", p.status},
          {"gates", gates},
          {"deployments", deps},
          {"rollback", p.status == "promoted" ? "rtx-evolve rollback " + std::to_string(p.id) : ""},
          {"approve", p.status == "passed" ? "rtx-evolve approve " + std::to_string(p.id) : ""}};
}

namespace {

json summarize(const json& rows) {
  size_t passed = 0, failed = 0, promoted = 0, undecided = 0;
  for (const auto& r : rows) {
    const std::string s = r["status"];
    if (s == "failed") ++failed;
    if (s == "failed" && failed_undecided_only(r["gates"])) ++undecided;
    else if (s == "passed" || s == "approved" || s == "promoted" || s == "superseded" || s == "rolled_back") ++passed;
    if (s == "promoted") ++promoted;
  }
  return {{"proposed", rows.size()}, {"passed", passed}, {"failed", failed}, {"undecided", undecided}, {"promoted", promoted}};
}

std::string default_model_path() {
  const char* d = std::getenv("RTX_DATA");
  const std::string rel = "/stories260k/tinyllamas-stories-260k-f32.gguf";
  for (const std::string& base : {std::string(d && *d ? d : ""), std::string("../shared/data"), std::string("/work/shared/data")}) {
    if (base.empty()) continue;
    if (std::ifstream(base + rel).good()) return base + rel;
  }
  return "";
}

}  // namespace

json run_loop(store::Store& st, const RunOptions& o, std::ostream& err) {
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
  const auto& reg = measure::registry();
  const std::string sku = telemetry::sku_key("cpu");
  json report = {{"schema", "rtx.report.v1"}, {"kind", "evolve.run"}, {"sku", sku}, {"git_sha", git_sha()},
                 {"db", st.path()}, {"proposals", json::array()}, {"notes", json::array()}};
  // Input errors (pack, filter) before anything is written.
  std::vector<measure::BenchCase> cases;
  {
    std::error_code ec;
    if (!std::filesystem::exists(o.pack, ec))
      throw_input("no bench pack at '" + o.pack + "' (relative to the working directory)", "--pack",
                  "run from the rtx checkout (its benchpacks/ folder), or pass --pack PATH/benchpacks/core.json");
    const measure::Pack pack = measure::load_pack(o.pack);
    measure::ExpandOptions eo;
    eo.filter = o.filter;
    for (auto& c : measure::expand_pack(pack, reg, eo))
      if (c.skip_reason.empty()) cases.push_back(c);
  }
  const int64_t run_id = st.begin_run("rtx-evolve", "[\"run\"]", o.v.seed, git_sha(), sku,
                                      telemetry::to_json(telemetry::hardware_profile()).dump());
  report["run_id"] = run_id;
  // Proposals left "validating" by a killed run never finished: mark them, never judge them.
  {
    store::Transaction tx(st);
    st.exec("UPDATE proposals SET status = 'interrupted', json = json_set(json, '$.status', 'interrupted') WHERE status = 'validating'");
    const int n = st.changes();
    tx.commit();
    if (n) report["notes"].push_back(std::to_string(n) + " proposal(s) left 'validating' by an interrupted run marked 'interrupted'");
  }
  const std::string key_path = o.key_path.empty() ? default_key_path(st.path()) : o.key_path;
  KeyPair key;
  if (::access(key_path.c_str(), F_OK) != 0) {
    key = generate_key(key_path, false);
    report["notes"].push_back("created the signing key " + key_path + " (mode 0600)");
  } else {
    key = load_key(key_path);
  }

  ProposeContext ctx;
  ctx.st = &st;
  ctx.reg = &reg;
  ctx.sku = sku;
  ctx.pack_path = o.pack;
  ctx.seed = o.v.seed;
  ctx.explore_evals = o.explore_evals;
  ctx.dp_ranks = o.dp_ranks;
  ctx.log = &err;
  ctx.should_stop = o.v.sandbox.cancel;
  ctx.model_path = o.v.model_path.empty() ? default_model_path() : o.v.model_path;
  ctx.cases = cases;
  report["cases"] = json::array();
  for (const auto& c : ctx.cases) report["cases"].push_back(c.id);
  err << "rtx-evolve run: " << ctx.cases.size() << " cases of " << o.pack << " on " << sku << ", budget " << o.budget
      << " proposals (" << o.budget_per_domain << " per domain)\n";
  if (const std::string busy = telemetry::busy_host_warning(telemetry::hardware_profile()); !busy.empty()) {
    err << "rtx-evolve run: warning: " << busy << ": performance gates will be noisy\n";
    report["notes"].push_back("busy host: " + busy);
  }

  ValidateOptions vo = o.v;
  vo.model_path = ctx.model_path;
  vo.log = &err;
  size_t used = 0;
  const std::string actor = o.actor.empty() ? actor_default() : o.actor;
  auto proposers = default_proposers();
  const auto enabled = [&](const std::string& dom) {
    return o.domains.empty() || std::find(o.domains.begin(), o.domains.end(), dom) != o.domains.end();
  };
  size_t domains_left = 0;
  for (const auto& pr : proposers) domains_left += enabled(pr->domain()) ? 1 : 0;
  // Ctrl-C: no new proposal starts; the one validating is killed and marked "interrupted".
  const auto stop = [&] { return o.v.sandbox.cancel && o.v.sandbox.cancel(); };
  bool interrupted = false;
  for (auto& proposer : proposers) {
    if (interrupted) break;
    const std::string dom = proposer->domain();
    if (!enabled(dom)) continue;
    --domains_left;
    if (used >= o.budget) {
      report["notes"].push_back("budget of " + std::to_string(o.budget) + " proposals spent before domain " + dom);
      continue;
    }
    // Keep one proposal for each domain still to come, so a small budget spans every domain.
    const size_t left = o.budget - used;
    ctx.budget = std::min(o.budget_per_domain, left > domains_left ? left - domains_left : size_t{1});
    err << "[" << dom << "] proposing\n";
    if (stop()) {
      interrupted = true;
      break;
    }
    std::vector<Proposal> props = proposer->propose(ctx);
    if (props.empty()) report["notes"].push_back(dom + ": nothing to propose");
    for (Proposal& p : props) {
      if (interrupted || stop()) {
        interrupted = true;
        report["notes"].push_back(dom + ": interrupted; '" + change_text(p) + "' left for a later run");
        continue;
      }
      if (elapsed() > o.time_budget_s) {
        report["notes"].push_back(dom + ": time budget of " + fmt("%.0f", o.time_budget_s) + " s spent; '" + change_text(p) +
                                  "' left for a later run");
        continue;
      }
      const double t_val = elapsed();
      sign(p, key);
      insert_proposal(st, p, run_id);
      ++used;
      err << "  #" << p.id << " " << change_text(p) << "\n";
      Validation val;
      try {
        val = validate(st, p.id, key, vo, run_id);
      } catch (const ValidationInterrupted& e) {
        interrupted = true;
        err << "    INTERRUPTED: " << e.what() << "; marked 'interrupted' (the next run proposes it again)\n";
        report["notes"].push_back("#" + std::to_string(p.id) + " interrupted during validation (" + e.what() +
                                  "): marked 'interrupted', no gate recorded; the next run proposes it again");
        report["proposals"].push_back(proposal_row(st, load_proposal(st, p.id)));
        continue;
      }
      // Failed on undecided gates alone: no verdict (failed_undecided_only), not FAILED.
      bool decided_failure = false, undecided = false;
      for (const auto& gr : val.gates) {
        if (gr.passed || gr.gate == "approval") continue;
        (gate_undecided(gr.gate, gr.passed, gr.detail) ? undecided : decided_failure) = true;
      }
      std::string line = std::string("    ") + (val.passed ? "PASSED" : !decided_failure && undecided ? "UNDECIDED" : "FAILED") +
                         " in " + fmt("%.1f", elapsed() - t_val) + " s:";
      for (const auto& gr : val.gates)
        line += " " + gr.gate + (gr.passed ? "=ok" : gate_undecided(gr.gate, gr.passed, gr.detail) ? "=undecided" : "=FAIL");
      err << line << "\n";
      if (val.passed && o.auto_approve) {
        approve(st, p.id, actor, "auto-policy");
        try {
          const DeployResult d = promote(st, p.id, key, actor);
          err << "    promoted (auto-approved by policy) in " << fmt("%.3f", d.seconds * 1e3) << " ms\n";
        } catch (const Error& e) {
          // Another proposal of this run promoted the same key first: this one was judged
          // against the old baseline, so it stays approved but unpromoted (re-validate it).
          err << "    approved, not promoted: " << e.message() << "\n";
          report["notes"].push_back("#" + std::to_string(p.id) + " approved, not promoted: " + e.message());
        }
      }
      report["proposals"].push_back(proposal_row(st, load_proposal(st, p.id)));
    }
  }
  report["summary"] = summarize(report["proposals"]);
  report["seconds"] = elapsed();
  // Say when the machine, not the proposals, decided: performance gates whose CI straddled the
  // threshold even after re-measuring could not tell a change from this host's noise.
  size_t perf_gates = 0, undecided = 0, too_few = 0, busy_host = 0, busy_left_out = 0;
  size_t min_rounds = 0;
  std::vector<double> halfwidths;
  for (const auto& row : report["proposals"]) {
    if (!row.contains("id")) continue;
    for (const GateResult& gr : gate_results(st, row["id"].get<int64_t>())) {
      if (gr.gate != "performance") continue;
      ++perf_gates;
      if (gr.detail.contains("host") && gr.detail["host"].is_object() && gr.detail["host"].value("rounds_left_out", json::array()).size() > 0)
        ++busy_left_out;
      if (gr.detail.value("busy_host_balanced", false)) ++busy_host;  // judged on all rounds, then as below
      if (gr.detail.value("too_few_rounds", false)) {
        ++too_few;
        min_rounds = std::max<size_t>(min_rounds, gr.detail.value("min_rounds", size_t{0}));
        continue;
      }
      if (gr.detail.value("undecided", false)) ++undecided;
      if (gr.detail.contains("ci_halfwidth") && gr.detail["ci_halfwidth"].is_number())
        halfwidths.push_back(gr.detail["ci_halfwidth"].get<double>());
    }
  }
  if (too_few > 0) {
    // Not the host: the run asked for fewer rounds than a 95% CI needs, so nothing could pass.
    const std::string n = std::to_string(too_few) + " of " + std::to_string(perf_gates) +
                          " performance gates had too few rounds for a 95% CI (--rounds " + std::to_string(o.v.rounds) +
                          "; it needs " + std::to_string(min_rounds) +
                          " per arm): no CI is reported and none of them could pass; use --rounds " +
                          std::to_string(min_rounds) + " or more for decisions";
    report["notes"].push_back(n);
    err << "rtx-evolve run: note: " << n << "\n";
  }
  if (busy_host > 0 || busy_left_out > 0) {
    // The host, not the change: busy rounds (rtx-bench's per-window rule, judged in each trial).
    const std::string n = std::to_string(busy_host) + " of " + std::to_string(perf_gates) +
                          " performance gates were judged on all rounds with busy round pairs in them (too few "
                          "quiet pairs to leave them out; the interleaved ABBA order balances them), and " +
                          std::to_string(busy_left_out) +
                          " with busy rounds left out of both arms (gate detail.host): a quieter machine or more "
                          "--rounds give tighter CIs";
    report["notes"].push_back(n);
    err << "rtx-evolve run: note: " << n << "\n";
  }
  if (undecided > 0) {
    const double med = halfwidths.empty() ? 0 : stats::median(halfwidths);
    const std::string n = std::to_string(undecided) + " of " + std::to_string(perf_gates) +
                          " performance gates were undecided (the 95% CI straddled the threshold after re-measuring; "
                          "median CI half-width " + fmt("%.1f", 100 * med) +
                          "%): this host's run-to-run noise is near the gate thresholds; more --rounds, pinned "
                          "threads or a quieter machine give decisions";
    report["notes"].push_back(n);
    err << "rtx-evolve run: note: " << n << "\n";
  }
  report["notes"].push_back("run took " + fmt("%.1f", elapsed()) + " s");
  report["interrupted"] = interrupted;
  kg_sync(st);  // the knowledge graph follows the tables this run wrote
  st.finish_run(run_id, interrupted ? "interrupted" : "ok");
  return report;
}

json status_report(store::Store& st, size_t limit) {
  json report = {{"schema", "rtx.report.v1"}, {"kind", "evolve.status"}, {"db", st.path()}, {"proposals", json::array()},
                 {"notes", json::array()}};
  for (int64_t id : list_proposals(st, "", limit)) report["proposals"].push_back(proposal_row(st, load_proposal(st, id)));
  report["summary"] = summarize(report["proposals"]);
  return report;
}

/// A proposal's improvement 1 - t_c/t_b as a plain speedup t_b/t_c = 1/(1 - improvement):
/// "1.25x faster [1.18, 1.33]", "2.09x slower [1.82, 2.44]" (the interval in the headline's
/// unit, from the 95% CI of the improvement); "" when `imp` is not a number. The one place a
/// change's number is formatted in the report (a shared stats formatter replaces it).
std::string speedup_text(const json& imp, const json& lo, const json& hi) {
  if (!imp.is_number()) return "";
  auto speedup = [](double i) { return i < 1 ? 1 / (1 - i) : INFINITY; };
  const double x = speedup(imp.get<double>());
  const bool faster = x >= 1;
  std::string t = faster ? fmt("%.2fx faster", x) : fmt("%.2fx slower", 1 / x);
  if (lo.is_number() && hi.is_number()) {
    double a = speedup(lo.get<double>()), b = speedup(hi.get<double>());
    if (!faster) std::tie(a, b) = std::make_pair(1 / b, 1 / a);
    t += " [" + fmt("%.2f", a) + ", " + fmt("%.2f", b) + "]";
  }
  return t;
}


std::string gates_speedup_text(const json& gates) {
  const json* perf = nullptr;
  for (const auto& g : gates)
    if (g["gate"] == "performance") perf = &g;  // the last row is the verdict
  if (!perf || !perf->contains("detail") || !(*perf)["detail"].is_object()) return "";
  const json& d = (*perf)["detail"];
  const json ci = d.value("ci", json());
  const bool two = ci.is_array() && ci.size() == 2;
  return speedup_text(d.value("improvement", json()), two ? ci[0] : json(), two ? ci[1] : json());
}

std::string format_report(const json& r, const std::string& format) {
  if (format == "json") return r.dump(2) + "\n";
  if (format != "md" && format != "text")
    throw_usage("unknown report format '" + format + "'", "--format", "one of md, text, json");
  std::ostringstream s;
  const bool md = format == "md";
  const json sum = r.value("summary", json::object());
  if (md) s << "## rtx-evolve " << (r.value("kind", "") == "evolve.run" ? "run" : "status") << "\n\n";
  s << (md ? "" : "rtx-evolve: ") << sum.value("proposed", 0) << " proposed, " << sum.value("passed", 0) << " passed every gate, "
    << sum.value("failed", 0) << " failed"
    << (sum.value("undecided", 0) > 0 ? " (" + std::to_string(sum.value("undecided", 0)) + " undecided)" : std::string())
    << ", " << sum.value("promoted", 0) << " promoted" << (r.contains("sku") ? " on " + r["sku"].get<std::string>() : "")
    << "\n\n";
  if (md) s << "| # | domain | change | status | gates |\n|---|---|---|---|---|\n";
  for (const auto& p : r["proposals"]) {
    std::string gates;
    for (const auto& g : p["gates"]) {
      if (g["gate"] == "approval") continue;
      if (!gates.empty()) gates += md ? "<br>" : "; ";
      const std::string val = gate_value_text(g);
      gates += gate_verdict(g) + " " + g["gate"].get<std::string>() + " (" + val + ")";
    }
    const std::string change = p["change"].get<std::string>();
    if (md)
      s << "| " << p["id"] << " | " << p["domain"].get<std::string>() << " | `" << change << "` | " << p["status"].get<std::string>()
        << " | " << gates << " |\n";
    else {
      // The verdict and the number that decided it first; the gates (evidence) below.
      const std::string number = gates_speedup_text(p["gates"]);
      s << "#" << p["id"] << " " << p["status"].get<std::string>() << (number.empty() ? "" : ", " + number) << ": ["
        << p["domain"].get<std::string>() << "] " << change << "\n    gates: " << gates << "\n";
    }
  }
  s << "\n";
  std::vector<std::string> promoted, waiting, failed, stuck, undecided;
  for (const auto& p : r["proposals"]) {
    const std::string st = p["status"], id = std::to_string(p["id"].get<int64_t>());
    if (st == "promoted") promoted.push_back(id);
    if (st == "passed") waiting.push_back(id);
    if (st == "approved") stuck.push_back(id);
    if (st == "failed" && failed_undecided_only(p["gates"])) {
      for (const auto& g : p["gates"])
        if (!g["passed"].get<bool>()) {
          undecided.push_back("#" + id + " " + g["gate"].get<std::string>() + ": " + g.value("reason", std::string()));
          break;
        }
    } else if (st == "failed") {
      // The gate that decided: the first failed one that is not an undecided performance gate
      // (a memory or held-out failure next to an undecided performance gate is the reason).
      std::string why;
      for (const auto& g : p["gates"]) {
        if (g["passed"].get<bool>() || g["gate"] == "approval") continue;
        const bool undecided_perf = gate_undecided(g["gate"].get<std::string>(), false, g.value("detail", json::object()));
        if (undecided_perf && !why.empty()) continue;
        why = g["gate"].get<std::string>() + ": " + g.value("reason", std::string());
        if (g["gate"] == "safety" && g.value("reason", std::string()).empty() && g["detail"].contains("failures"))
          why += g["detail"]["failures"].dump();
        if (!undecided_perf) break;
      }
      failed.push_back("#" + id + " " + why);
    }
  }
  const std::string b = md ? "- " : "  ";
  if (!promoted.empty()) {
    s << (md ? "**Promoted** (roll back with one command each):\n\n" : "Promoted; to roll back:\n");
    for (const auto& id : promoted) s << b << (md ? "`" : "") << "rtx-evolve rollback " << id << (md ? "`" : "") << "\n";
    s << "\n";
  }
  if (!waiting.empty()) {
    s << (md ? "**Passed, waiting for approval** (approving promotes):\n\n" : "Passed every gate, waiting for approval:\n");
    for (const auto& id : waiting) s << b << (md ? "`" : "") << "rtx-evolve approve " << id << (md ? "`" : "") << "\n";
    s << "\n";
  }
  if (!stuck.empty()) {
    s << (md ? "**Approved, not promoted**" : "Approved, not promoted")
      << " (the baseline moved after validation; `rtx-evolve approve ID` promotes it once the version it was "
         "validated against is current again, e.g. after a rollback; otherwise submit the change again):\n";
    if (md) s << "\n";
    for (const auto& id : stuck) s << b << "#" << id << "\n";
    s << "\n";
  }
  if (!failed.empty()) {
    s << (md ? "**Failed** (not retried on this SKU):\n\n" : "Failed (not retried on this SKU):\n");
    for (const auto& f : failed) s << b << f << "\n";
    s << "\n";
  }
  if (!undecided.empty()) {
    s << (md ? "**Undecided** (not promoted; this host's noise or too few --rounds hid the effect; a later run proposes "
               "them again):\n\n"
             : "Undecided (not promoted; this host's noise or too few --rounds hid the effect; a later run proposes them "
               "again):\n");
    for (const auto& f : undecided) s << b << f << "\n";
    s << "\n";
  }
  for (const auto& n : r.value("notes", json::array())) s << b << "note: " << n.get<std::string>() << "\n";
  return s.str();
}

int64_t submit(store::Store& st, const json& doc, const std::string& source, const KeyPair& key, const kernels::Registry& reg) {
  Proposal p = from_json(doc, source);
  const std::string sku = telemetry::sku_key("cpu");
  if (p.domain == "tuner") {
    const tune::TuneKey k = tune::TuneKey::parse(p.key);
    if (k.sku != sku) throw_input("profile key is for SKU '" + k.sku + "', this host is '" + sku + "'", source + ": field 'key'");
    const auto& v = reg.variant(k.op, k.variant);
    const kernels::Params cand = p.changeset["candidate"].get<kernels::Params>();
    if (v.validate)
      if (std::string why = v.validate(k.shape, cand); !why.empty())
        throw_input("candidate params are invalid for " + p.key + ": " + why, source + ": field 'changeset.candidate'");
    if (!p.plan.contains("workload")) {
      const json c = {{"id", k.op + "/" + k.variant + "/" + kernels::shape_to_string(k.shape) + "/" + dtype_name(k.dtype)},
                      {"op", k.op}, {"variant", k.variant}, {"shape", k.shape}, {"dtype", dtype_name(k.dtype)}};
      p.plan["workload"] = {{"affected", json::array({c})}, {"heldout", json::array()}};
    }
  } else {
    if (p.key != config_key(p.domain, sku))
      throw_input("config key must be '" + config_key(p.domain, sku) + "' on this host", source + ": field 'key'");
    if (p.domain == "scheduler") serve::SchedulerConfig::from_json(p.changeset["candidate"], source + ": changeset.candidate");
    if (p.domain == "memory") allocator_config_from_json(p.changeset["candidate"], source + ": changeset.candidate");
    if (p.domain == "parallelism") {
      const json& t = p.changeset["candidate"].value("threads", json(nullptr));
      if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 4096)
        throw_input("'threads' must be an integer in [1, 4096]", source + ": field 'changeset.candidate.threads'");
    }
    if (!p.plan.contains("workload"))
      throw_input("a " + p.domain + " proposal needs plan.workload (see docs/evolution.md)", source + ": field 'plan.workload'");
  }
  // The baseline is what runs here now, whatever the submitter assumed.
  const json base = baseline_config(st, p.domain, p.key, reg);
  auto cur = p.domain == "tuner" ? current_profile(st, p.key) : current_config(st, p.key);
  p.changeset["base"] = base;
  p.changeset["base_version"] = cur ? json(cur->version) : json(nullptr);
  // The candidate is the base with the submitted knobs changed (a partial candidate keeps
  // every other knob as it runs here), and the actions are computed from the two, so what an
  // approver reads is exactly what would be promoted.
  json cand = base.is_object() ? base : json::object();
  for (const auto& item : p.changeset["candidate"].items()) cand[item.key()] = item.value();
  json actions = json::array();
  for (const auto& item : cand.items())
    if (!base.contains(item.key()) || base[item.key()] != item.value())
      actions.push_back({{"set", item.key()}, {"from", base.value(item.key(), json(nullptr))}, {"to", item.value()}});
  if (actions.empty())
    throw_input("the candidate changes nothing: it equals what runs here now (" + base.dump() + ")",
                source + ": field 'changeset.candidate'");
  for (const auto& a : p.actions) {
    const std::string knob = a.is_object() ? a.value("set", std::string()) : std::string();
    if (knob.empty() || !cand.contains(knob) || !a.contains("to") || a["to"] != cand[knob])
      throw_input("action " + a.dump() + " does not match the candidate (" + knob + " = " +
                      (cand.contains(knob) ? cand[knob].dump() : std::string("unset")) +
                      "); leave 'actions' empty to have them computed",
                  source + ": field 'actions'");
  }
  p.changeset["candidate"] = cand;
  p.actions = actions;
  if (!p.plan.contains("why")) p.plan["why"] = "submitted from " + source;
  p.plan["submitted_from"] = source;
  p.provenance = make_provenance(sku, {}, 0);
  ProposeContext ctx;
  ctx.sku = sku;
  finish_proposal(p, ctx);
  p.status = "new";
  p.validation = json::object();
  sign(p, key);
  return insert_proposal(st, p, 0);
}

}  // namespace rtx::evolve
