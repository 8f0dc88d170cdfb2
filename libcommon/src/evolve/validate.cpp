// rtx-evolve's validation of one proposal (evolve::validate): the trial specs of both arms,
// interleaved A/B trials in the sandbox (ABBA), host contention per round pair, and the gates
// (safety, determinism, performance, held-out, memory, canary) recorded with the measurements.
// Not the loop that chooses proposals (run.cpp) nor status/submit/report (status.cpp).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <tuple>

#include "evolve/pipeline.hpp"
#include "rtx/core/error.hpp"
#include "rtx/evolve/history.hpp"
#include "rtx/evolve/loop.hpp"
#include "rtx/evolve/trial.hpp"
#include "rtx/measure/measure.hpp"
#include "rtx/stats/abba.hpp"
#include "rtx/stats/compare.hpp"
#include "rtx/stats/stats.hpp"
#include "rtx/telemetry/hwprofile.hpp"
#include "rtx/tune/lookup.hpp"
#include "rtx/tune/records.hpp"

namespace rtx::evolve {

using nlohmann::json;
using detail::fmt;

namespace {

void say(std::ostream* log, const std::string& s) {
  if (log) *log << s << "\n" << std::flush;
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

/// One proposal's validation: the state its steps share (the proposal, both arms' specs and
/// collected results, sandbox failures, host verdicts, the gates so far), one method per step.
/// run() is the whole pipeline; every way out goes through finish(), which records the gates and
/// measurements (one transaction) and the final status.
class Validator {
 public:
  Validator(store::Store& st, int64_t id, const KeyPair& key, const ValidateOptions& o, int64_t run_id)
      : st_(st), id_(id), key_(key), o_(o), run_id_(run_id), arm_opts_(o) {}

  Validation run() {
    p_ = load_proposal(st_, id_);
    set_status(st_, id_, "validating");
    const auto& reg = measure::registry();
    const std::string sku = p_.provenance.value("sku", telemetry::sku_key("cpu"));
    safety_.gate = "safety";
    safety_.metric = "sandbox_failures";
    const std::vector<std::string> missing = missing_fields(p_);
    const std::string sig = verify(p_, key_);
    safety_.detail = {{"missing_fields", missing}, {"signature", sig.empty() ? "verified" : sig}};
    if (!missing.empty() || !sig.empty()) {
      safety_.passed = false;
      safety_.detail["reason"] = !sig.empty() ? "signature: " + sig : "incomplete envelope: " + json(missing).dump();
      g().push_back(safety_);
      return finish(false);
    }

    base_cfg_ = p_.changeset.value("base", json::object());
    cand_cfg_ = p_.changeset["candidate"];
    try {
      spec_a_ = arm_spec(st_, p_, base_cfg_, o_, reg, sku);
      spec_b_ = arm_spec(st_, p_, cand_cfg_, o_, reg, sku);
    } catch (const Error& e) {
      return refuse("cannot build the trial: " + e.message());
    }
    if ((p_.domain == "tuner" || p_.domain == "parallelism") && !is_dp(p_)) add_baseline_parity();
    if (spec_a_["parts"].empty()) return refuse("the proposal's plan.workload names nothing to measure");
    if (is_dp(p_)) arm_opts_.sandbox.loopback = true;  // mpirun's daemons and ranks talk over 127.0.0.1
    say(o_.log, "  validating #" + std::to_string(id_) + " (" + p_.domain + "): " + std::to_string(o_.rounds) + " A/B rounds");
    measure(o_.rounds);
    safety_.value = static_cast<double>(failures_.size());
    safety_.passed = failures_.empty();
    safety_.detail["trials"] = runs_;
    safety_.detail["network_isolated"] = net_;
    safety_.detail["writes_confined"] = confined_;
    safety_.detail["limits"] = {{"timeout_s", o_.sandbox.timeout_s}, {"cpu_s", o_.sandbox.cpu_s},
                                {"address_space_bytes", o_.sandbox.address_space_bytes}};
    if (!failures_.empty()) {
      safety_.detail["failures"] = failures_;
      safety_.detail["reason"] =
          failures_.front() + (failures_.size() > 1 ? " (and " + std::to_string(failures_.size() - 1) + " more)" : "");
      g().push_back(safety_);
      return finish(false);
    }

    const PerfJudgement perf = judge_perf_remeasuring();
    g().push_back(determinism_gate());
    g().push_back(performance_gate(perf));
    if (ca_.samples.size() > 1) g().push_back(heldout_gate());
    g().push_back(memory_gate());
    g().push_back(safety_);

    bool all = true;
    for (const auto& r : g()) all = all && r.passed;
    if (all && p_.domain == "scheduler" && o_.canary) {
      g().push_back(canary_gate(p_, base_cfg_, cand_cfg_, o_));
      all = g().back().passed;
    }
    append_arm(measured_, spec_a_, ca_, busy_, "baseline");
    append_arm(measured_, spec_b_, cb_, busy_, "candidate");
    return finish(all);
  }

 private:
  std::vector<GateResult>& g() { return v_.gates; }

  /// Records the gates, the per-arm, per-case results (bench_results) and the final status with
  /// the summary, in one transaction.
  Validation finish(bool passed) {
    v_.passed = passed;
    v_.summary["gates"] = json::array();
    for (const auto& r : g())
      v_.summary["gates"].push_back({{"gate", r.gate}, {"passed", r.passed}, {"metric", r.metric}, {"value", r.value},
                                     {"threshold", r.threshold}, {"detail", r.detail}});
    // Gates, bench_results and the status: one transaction (the validation's one state change).
    record_validation(st_, id_, run_id_, o_.seed, g(), measured_, passed ? "passed" : "failed", v_.summary);
    return v_;
  }

  /// A failed safety gate before any trial ran (`error` says why).
  Validation refuse(const std::string& error) {
    safety_.passed = false;
    safety_.detail["error"] = error;
    safety_.detail["reason"] = safety_.detail["error"];
    g().push_back(safety_);
    return finish(false);
  }

  /// The candidate trial also runs each case once under the baseline's params and threads, on
  /// the same seeded inputs: the determinism gate's parity with the baseline's outputs.
  void add_baseline_parity() {
    for (size_t i = 0; i < spec_b_["parts"].size() && i < spec_a_["parts"].size(); ++i) {
      json& pb = spec_b_["parts"][i];
      const json& pa = spec_a_["parts"][i];
      pb["baseline_threads"] = pa.value("threads", 0);
      for (size_t j = 0; j < pb["cases"].size() && j < pa["cases"].size(); ++j)
        pb["cases"][j]["baseline_params"] = pa["cases"][j].value("params", json::object());
    }
  }

  /// `rounds` more A/B rounds, in ABBA order, until a trial fails (failures_ says which).
  void measure(size_t rounds) {
    for (size_t r = 0; r < rounds && failures_.empty(); ++r) {
      for (int k = 0; k < 2 && failures_.empty(); ++k) {
        // A B, B A, A B, ... (ABBA, stats::abba_arm; runs % 2 == k here).
        const int arm = stats::abba_arm(runs_);
        ArmRun ar = run_arm(arm == 0 ? spec_a_ : spec_b_, arm_opts_);
        ++runs_;
        net_ = net_ && ar.sb.network_isolated;
        confined_ = confined_ && ar.sb.writes_confined;
        if (!ar.problem.empty()) {
          failures_.push_back(std::string(arm == 0 ? "baseline" : "candidate") + " trial " + std::to_string(r + 1) + ": " +
                              ar.problem);
          break;
        }
        collect(arm == 0 ? ca_ : cb_, ar.result, ar.host);
      }
    }
  }

  /// Host contention per part: the busy round pairs of both arms.
  void judge_host() {
    for (size_t i = 0; i < busy_.size() && i < cb_.host.size(); ++i) busy_[i] = pair_busy_rounds(ca_.host[i], cb_.host[i]);
  }

  /// Performance on the affected workload; a borderline result is measured again once (a
  /// trial failing then fails the safety gate). Busy rounds (host contention, per part) are
  /// left out of both arms, or leave the gate undecided.
  PerfJudgement judge_perf_remeasuring() {
    rule_ = o_.rules.count(p_.domain) ? o_.rules.at(p_.domain) : default_rule(p_.domain);
    rule_.rounds = static_cast<int>(runs_ / 2);
    busy_.assign(ca_.host.size(), BusyRounds{});
    judge_host();
    PerfJudgement perf = judge_performance(ca_.samples[0], cb_.samples[0], rule_, busy_[0]);
    remeasured_ = false;
    if (perf.outcome == PerfOutcome::Borderline) {
      say(o_.log, "    borderline (" + perf.reason + "): measuring again");
      measure(o_.rounds);
      remeasured_ = true;
      rule_.rounds = static_cast<int>(runs_ / 2);
      if (failures_.empty()) {
        judge_host();
        perf = judge_performance(ca_.samples[0], cb_.samples[0], rule_, busy_[0]);
      }
      if (!failures_.empty()) {
        safety_.passed = false;
        safety_.value = static_cast<double>(failures_.size());
        safety_.detail["failures"] = failures_;
      }
    }
    return perf;
  }

  /// Determinism: candidate passes the float64 reference check, candidate runs hash alike,
  /// and (serving, allocator) produce exactly the baseline's outputs.
  GateResult determinism_gate() const {
    const Collected& ca = ca_;
    const Collected& cb = cb_;
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
        if (domain_is_exact(p_.domain) && !ca.checksums[i][j].empty() && !cs.empty() && ca.checksums[i][j][0] != cs[0])
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
    const bool trial_parity = p_.domain == "fusion" || is_dp(p_);
    const std::string checked = p_.domain == "fusion" ? "the first step's loss and gradients" : "the weights after 2 steps";
    det.detail = {{"reference_check", !cb.all_ok ? std::string("failed")
                                      : trial_parity ? checked + " within " + fmt("%.0e", cb.tolerance) +
                                                           " (||c-b||_2/||b||_2 per tensor) of the baseline configuration's"
                                                     : std::string("all candidate outputs within the op's bound of the float64 reference")},
                  {"candidate_runs_identical", same_runs},
                  {"exact_parity_with_baseline", domain_is_exact(p_.domain) ? json(same_as_base) : json("n/a (sums may run in another order)")},
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
    return det;
  }

  /// The performance gate from the (final) judgement of the affected workload.
  GateResult performance_gate(const PerfJudgement& perf) {
    GateResult pg = perf.gate();
    pg.threshold = rule_.require_improvement ? rule_.threshold : -rule_.threshold;
    pg.detail["remeasured"] = remeasured_;
    pg.detail["cases"] = ca_.ids[0];
    if (perf.outcome == PerfOutcome::Borderline) pg.detail["reason"] = perf.reason + " (still borderline after re-measuring)";
    if (!busy_[0].left_out.empty() || busy_[0].balanced)
      say(o_.log, "    host: " + (busy_[0].balanced ? busy_[0].reason
                                                    : std::to_string(busy_[0].left_out.size()) + " busy round(s) left out of both arms"));
    // Undecided: the CI straddles the threshold, or there are too few rounds for a CI at all.
    pg.detail["undecided"] = perf.outcome == PerfOutcome::Borderline || perf.too_few;
    pg.detail["ci_halfwidth"] = perf.too_few ? json(nullptr) : json((perf.hi - perf.lo) / 2);
    return pg;
  }

  /// The held-out workload, over the round medians as the performance gate: the process is the
  /// unit of replication. (A re-measurement that failed part-way leaves the host verdict of the
  /// first rounds: not applied.)
  GateResult heldout_gate() const {
    const bool host_ok = busy_.size() > 1 && busy_[1].rounds == static_cast<size_t>(rule_.rounds);
    GateResult h = judge_heldout(ca_.samples[1], cb_.samples[1], 0.05, rule_.rounds, host_ok ? busy_[1] : BusyRounds{});
    h.detail["cases"] = ca_.ids[1];
    return h;
  }

  /// Memory: the allocator domain must reduce peak reserved bytes or fragmentation; every other
  /// domain must not grow the process's peak RSS beyond the slack.
  GateResult memory_gate() const {
    const Collected& ca = ca_;
    const Collected& cb = cb_;
    GateResult mem;
    if (p_.domain == "memory") {
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
    return mem;
  }

  store::Store& st_;
  const int64_t id_;
  const KeyPair& key_;
  const ValidateOptions& o_;
  const int64_t run_id_;
  Proposal p_;
  Validation v_;                         ///< the gates so far (v_.gates) and the summary
  GateResult safety_;                    ///< recorded last among the measured gates
  std::vector<ArmCaseResult> measured_;  ///< per-arm, per-case results: bench_results rows
  json base_cfg_, cand_cfg_;             ///< the changeset's configs
  json spec_a_, spec_b_;                 ///< the trial specs of baseline (A) and candidate (B)
  Collected ca_, cb_;                    ///< what the trials of each arm returned
  std::vector<std::string> failures_;    ///< sandbox failures (crash, timeout, bad output)
  bool net_ = true, confined_ = true;    ///< every trial was network-isolated / write-confined
  size_t runs_ = 0;                      ///< trials run, both arms
  ValidateOptions arm_opts_;             ///< o_ with the sandbox the proposal's kind needs
  PerfRule rule_;
  std::vector<BusyRounds> busy_;         ///< host verdict per part (affected, held-out)
  bool remeasured_ = false;
};

}  // namespace

Validation validate(store::Store& st, int64_t id, const KeyPair& key, const ValidateOptions& o, int64_t run_id) {
  try {
    return Validator(st, id, key, o, run_id).run();
  } catch (const ValidationInterrupted&) {
    set_status(st, id, "interrupted");  // no gate was recorded: the A/B was cut short
    throw;
  }
}

}  // namespace rtx::evolve
