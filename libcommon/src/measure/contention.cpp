// Host-contention evidence for rtx-bench: readings (getrusage, /proc/pressure/cpu,
// /proc/loadavg) around each case's sampling window, the thresholds that flag a case as
// measured on a busy host, and the artifact's per-case "host" object. Not a scheduler model:
// it reports what the kernel counted, and compare refuses to judge flagged cases.
#include <sched.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "rtx/measure/measure.hpp"
#include "rtx/core/error.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::measure {
namespace {

using nlohmann::json;

double cpu_seconds(const rusage& u) {
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::string fmt(const char* f, double v) {
  char b[96];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

/// `v` (times `scale`) printed with the fewest decimals (0..6) that still read as beyond
/// `limit` in the direction of the rule (above: > limit, else < limit), so a reason never
/// says "100 involuntary context switches/s (> 100)" for 100.4/s.
std::string beyond(double v, double limit, bool above, double scale = 1) {
  const double x = v * scale, l = limit * scale;
  char b[64];
  for (int d = 0; d <= 6; ++d) {
    std::snprintf(b, sizeof b, "%.*f", d, x);
    const double shown = std::strtod(b, nullptr);
    if (above ? shown > l : shown < l) return b;
  }
  std::snprintf(b, sizeof b, "%.9g", x);
  return b;
}

}  // namespace

HostSample sample_host() {
  HostSample s;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  rusage self{}, thread{};
  if (::getrusage(RUSAGE_SELF, &self) == 0) {
    s.process_cpu_s = cpu_seconds(self);
    s.involuntary_switches = self.ru_nivcsw;
  }
  if (::getrusage(RUSAGE_THREAD, &thread) == 0) s.thread_cpu_s = cpu_seconds(thread);
  const telemetry::CpuPressure p = telemetry::read_cpu_pressure();
  s.psi_valid = p.valid;
  s.psi_some_total_us = p.some_total_us;
  s.psi_some_avg10 = p.some_avg10;
  s.load1 = telemetry::load_average_1m();
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) s.cpus = CPU_COUNT(&allowed);
  s.cpu_busy = telemetry::read_cpu_busy();
  return s;
}

void add_window(HostEvidence& e, const HostSample& before, const HostSample& after) {
  if (!e.measured) {
    e.load1_start = before.load1;
    e.psi_valid = true;    // and-ed with each window below
    e.other_valid = true;  // likewise
  }
  // Other processes' CPU time: the CPUs' busy time minus ours, both over this window.
  const bool other = before.cpu_busy.valid && after.cpu_busy.valid && before.cpu_busy.cpus == after.cpu_busy.cpus &&
                     after.cpu_busy.busy_s >= before.cpu_busy.busy_s && (e.cpus == 0 || e.cpus == after.cpu_busy.cpus);
  e.other_valid = e.other_valid && other;
  if (other) {
    e.other_cpu_s += (after.cpu_busy.busy_s - before.cpu_busy.busy_s) - std::max(0.0, after.process_cpu_s - before.process_cpu_s);
    e.tick_slack_s += 2 * after.cpu_busy.tick_s * after.cpu_busy.cpus;
  }
  e.measured = true;
  e.cpus = std::max({e.cpus, before.cpus, after.cpus, other ? after.cpu_busy.cpus : 0});
  e.window_s += std::max(0.0, after.wall_s - before.wall_s);
  e.thread_cpu_s += std::max(0.0, after.thread_cpu_s - before.thread_cpu_s);
  e.process_cpu_s += std::max(0.0, after.process_cpu_s - before.process_cpu_s);
  e.involuntary_switches += std::max<int64_t>(0, after.involuntary_switches - before.involuntary_switches);
  const bool psi = before.psi_valid && after.psi_valid && after.psi_some_total_us >= before.psi_some_total_us;
  e.psi_valid = e.psi_valid && psi;
  if (psi) {
    // The PSI file is read a few us after the clock, so a window's PSI delta can exceed the
    // window by that skew: clamp, so that the stall share cannot read above 1.
    const double wall = std::max(0.0, after.wall_s - before.wall_s);
    e.psi_stall_s += std::min(wall, 1e-6 * static_cast<double>(after.psi_some_total_us - before.psi_some_total_us));
    e.psi_avg10_max = std::max(e.psi_avg10_max, after.psi_some_avg10);
  }
  e.load1_end = after.load1;
}

void judge_contention(HostEvidence& e, Backend backend) {
  judge_contention(e, backend == Backend::CPU ? CpuShareRule::Apply : CpuShareRule::Off);
}

void judge_contention(HostEvidence& e, CpuShareRule rule) {
  e.contended = false;
  e.reason.clear();
  e.judged_on.clear();
  e.oversubscribed = false;
  e.oversubscription.clear();
  if (!e.measured || e.window_s < kMinJudgedWindow) return;
  e.judged_on = "case";
  // The signals that also count waits behind our own threads: the verdict only where /proc/stat
  // cannot tell other processes' CPU time from ours (artifacts of earlier builds, no procfs).
  std::string why;
  auto add = [&](const std::string& s) { why += (why.empty() ? "" : ", ") + s; };
  if (rule == CpuShareRule::Apply && e.cpu_share() < kMinCpuShare)
    add("measuring thread ran " + beyond(e.cpu_share(), kMinCpuShare, false, 100) + "% of the window (< " +
        fmt("%.0f%%", 100 * kMinCpuShare) + ")");
  if (e.psi_valid && e.psi_share() > kMaxPsiStallShare)
    add("PSI cpu stall " + beyond(e.psi_share(), kMaxPsiStallShare, true, 100) + "% of the window (> " +
        fmt("%.0f%%", 100 * kMaxPsiStallShare) + ")");
  if (e.involuntary_per_s() > kMaxInvoluntaryPerS && e.involuntary_switches >= kMinInvoluntarySwitches)
    add(beyond(e.involuntary_per_s(), kMaxInvoluntaryPerS, true) + " involuntary context switches/s (> " + fmt("%.0f", kMaxInvoluntaryPerS) + ")");
  if (e.other_valid && e.cpus > 0) {
    // The rule (telemetry::judge_host_window): other processes' CPU time in the windows.
    const telemetry::HostVerdict v = telemetry::judge_host_window(e.cpu_window());
    e.contended = v.busy;
    e.reason = v.reason;  // the other readings stay in the artifact's fields, not in the one-line reason
    if (!v.busy && !why.empty()) {
      e.oversubscribed = true;
      e.oversubscription = why + "; other processes took only " + fmt("%.0f%%", 100 * v.other_share) + " of the " +
                           std::to_string(e.cpus) + " CPUs: the waits were behind the process's own threads";
    }
    return;
  }
  if (!why.empty() && e.machine_share() >= kSelfSaturatedShare) {
    // The process had (nearly) every CPU: what crossed was its own threads (kSelfSaturatedShare).
    e.oversubscribed = true;
    e.oversubscription = why + "; the process itself used " + fmt("%.0f%%", 100 * e.machine_share()) + " of its " +
                         std::to_string(e.cpus) + " CPUs (its threads outnumbered them)";
    why.clear();
  }
  e.contended = !why.empty();
  e.reason = why;
}

HostEvidence contention_evidence(const HostSample& before, const HostSample& after, int threads, CpuShareRule rule) {
  HostEvidence e;
  e.threads = threads;
  add_window(e, before, after);
  judge_contention(e, rule);
  return e;
}

HostEvidence contention_evidence(const HostSample& before, const HostSample& after, int threads, Backend backend) {
  return contention_evidence(before, after, threads, backend == Backend::CPU ? CpuShareRule::Apply : CpuShareRule::Off);
}

void inherit_run_contention(HostEvidence& c, const HostEvidence& run) {
  // The whole run too short as well (a pack of a few microsecond kernels on an idle host):
  // nothing measured here covers enough time, so the case stays unjudged. PSI "some avg10"
  // is recorded but is not a verdict: it is mostly the 10 s before the run.
  if (!c.measured || !c.judged_on.empty() || run.judged_on.empty()) return;
  c.judged_on = "run";
  c.contended = run.contended;
  char w[64];
  std::snprintf(w, sizeof w, "%.3g", run.window_s);
  c.reason = run.contended ? "whole run (" + std::string(w) + " s; this case's window is too short to judge alone): " + run.reason : "";
  c.oversubscribed = run.oversubscribed;
  c.oversubscription = run.oversubscribed ? "whole run (" + std::string(w) + " s): " + run.oversubscription : "";
}

json to_json(const HostEvidence& e) {
  json j = {{"window_s", e.window_s},
            {"thread_cpu_s", e.thread_cpu_s},
            {"cpu_share", e.cpu_share()},
            {"process_cpu_s", e.process_cpu_s},
            {"threads", e.threads},
            {"process_cpu_per_thread", e.process_cpu_per_thread()},
            {"involuntary_switches", e.involuntary_switches},
            {"involuntary_per_s", e.involuntary_per_s()},
            {"load1_start", e.load1_start},
            {"load1_end", e.load1_end},
            {"contended", e.contended},
            {"reason", e.reason},
            {"judged_on", e.judged_on.empty() ? "none" : e.judged_on}};
  if (e.psi_valid) {
    j["psi_cpu_some_stall_s"] = e.psi_stall_s;
    j["psi_cpu_some_share"] = e.psi_share();
    j["psi_cpu_some_avg10_pct"] = e.psi_avg10_max;
  }
  if (e.cpus > 0) {
    j["cpus"] = e.cpus;
    j["machine_share"] = e.machine_share();
  }
  if (e.other_valid) {
    j["other_cpu_s"] = e.other_cpu_s;
    j["other_cpu_share"] = e.other_share();
    j["tick_slack_s"] = e.tick_slack_s;
  }
  if (e.oversubscribed) {
    j["oversubscribed"] = true;
    j["oversubscription"] = e.oversubscription;
  }
  if (e.rounds) {
    j["rounds"] = e.rounds;
    j["rounds_contended"] = e.rounds_contended;
    j["judged_rounds"] = e.judged_rounds;
  }
  if (!e.rounds_left_out.empty()) {
    json lo = json::array();
    for (const LeftOutRound& r : e.rounds_left_out) {
      json x = {{"round", r.round}, {"reason", r.reason}, {"median_s", r.median_s}, {"n", r.samples.size()}, {"samples_s", r.samples}};
      if (r.paired) x["paired"] = true;
      lo.push_back(std::move(x));
    }
    j["rounds_left_out"] = lo;
  }
  return j;
}

HostEvidence host_evidence_from_json(const json& j, const std::string& source, const std::string& pointer) {
  auto bad = [&](const std::string& field, const std::string& what) {
    throw_input(what, source + ": field '" + pointer + (field.empty() ? "" : "/" + field) + "'", "was the file edited by hand?");
  };
  if (!j.is_object()) bad("", std::string("expected object, got ") + j.type_name());
  HostEvidence e;
  e.measured = true;
  auto number = [&](const char* key, double& out) {
    if (!j.contains(key)) return;
    const json& v = j[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      bad(key, "expected a finite number >= 0, got " + v.dump());
    out = v.get<double>();
  };
  auto count = [&](const char* key, auto& out) {
    if (!j.contains(key)) return;
    const json& v = j[key];
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      bad(key, "expected an integer >= 0, got " + v.dump());
    out = static_cast<std::remove_reference_t<decltype(out)>>(v.get<uint64_t>());
  };
  number("window_s", e.window_s);
  number("thread_cpu_s", e.thread_cpu_s);
  number("process_cpu_s", e.process_cpu_s);
  if (j.contains("threads") && (!j["threads"].is_number_integer() || (!j["threads"].is_number_unsigned() && j["threads"].get<int64_t>() < 1) ||
                                 j["threads"].get<uint64_t>() < 1 || j["threads"].get<uint64_t>() > 65536))
    bad("threads", "expected an integer in [1, 65536], got " + j["threads"].dump());
  count("threads", e.threads);
  count("involuntary_switches", e.involuntary_switches);
  number("load1_start", e.load1_start);
  number("load1_end", e.load1_end);
  e.psi_valid = j.contains("psi_cpu_some_stall_s");
  number("psi_cpu_some_stall_s", e.psi_stall_s);
  number("psi_cpu_some_avg10_pct", e.psi_avg10_max);
  double share = 0;  // derived (psi_share()); checked for type only
  number("psi_cpu_some_share", share);
  if (j.contains("cpus") && (!j["cpus"].is_number_integer() || (!j["cpus"].is_number_unsigned() && j["cpus"].get<int64_t>() < 1) ||
                             j["cpus"].get<uint64_t>() < 1 || j["cpus"].get<uint64_t>() > 65536))
    bad("cpus", "expected an integer in [1, 65536], got " + j["cpus"].dump());
  count("cpus", e.cpus);
  double machine = 0;  // derived (machine_share()); checked for type only
  number("machine_share", machine);
  // Other processes' CPU time (builds before it: absent, judged on the older signals). Tick
  // rounding can make it slightly negative.
  e.other_valid = j.contains("other_cpu_s");
  if (e.other_valid) {
    const json& v = j["other_cpu_s"];
    if (!v.is_number() || !std::isfinite(v.get<double>())) bad("other_cpu_s", "expected a finite number, got " + v.dump());
    e.other_cpu_s = v.get<double>();
  }
  number("tick_slack_s", e.tick_slack_s);
  double other_share = 0;  // derived (other_share()); checked for type only
  number("other_cpu_share", other_share);
  if (j.contains("oversubscribed")) {
    if (!j["oversubscribed"].is_boolean()) bad("oversubscribed", std::string("expected boolean, got ") + j["oversubscribed"].type_name());
    e.oversubscribed = j["oversubscribed"].get<bool>();
  }
  if (j.contains("oversubscription")) {
    if (!j["oversubscription"].is_string())
      bad("oversubscription", std::string("expected string, got ") + j["oversubscription"].type_name());
    e.oversubscription = j["oversubscription"].get<std::string>();
  }
  count("rounds", e.rounds);
  count("rounds_contended", e.rounds_contended);
  if (e.rounds_contended > e.rounds)
    bad("rounds_contended", "expected at most rounds (" + std::to_string(e.rounds) + "), got " + std::to_string(e.rounds_contended));
  if (j.contains("rounds_left_out")) {
    const json& lo = j["rounds_left_out"];
    if (!lo.is_array()) bad("rounds_left_out", std::string("expected array, got ") + lo.type_name());
    for (size_t i = 0; i < lo.size(); ++i) {
      const std::string at = "rounds_left_out/" + std::to_string(i);
      const json& x = lo[i];
      if (!x.is_object()) bad(at, std::string("expected object, got ") + x.type_name());
      LeftOutRound r;
      const json none;
      const json& round = x.contains("round") ? x["round"] : none;
      // 2^64-1 read as int64_t was -1: only a signed integer is read signed.
      if (!round.is_number_integer() || (!round.is_number_unsigned() && round.get<int64_t>() < 1) || round.get<uint64_t>() < 1 ||
          round.get<uint64_t>() > e.rounds)
        bad(at + "/round", "expected an integer in [1, rounds = " + std::to_string(e.rounds) + "], got " + round.dump());
      r.round = round.get<size_t>();
      if (!e.rounds_left_out.empty() && r.round <= e.rounds_left_out.back().round)
        bad(at + "/round", "expected rounds in increasing order, got " + std::to_string(r.round) + " after " +
                               std::to_string(e.rounds_left_out.back().round));
      if (!x.contains("reason") || !x["reason"].is_string())
        bad(at + "/reason", "expected string, got " + (x.contains("reason") ? std::string(x["reason"].type_name()) : "nothing"));
      r.reason = x["reason"].get<std::string>();
      if (x.contains("paired")) {
        if (!x["paired"].is_boolean()) bad(at + "/paired", std::string("expected boolean, got ") + x["paired"].type_name());
        r.paired = x["paired"].get<bool>();
      }
      if (x.contains("samples_s")) {
        const json& s = x["samples_s"];
        if (!s.is_array()) bad(at + "/samples_s", std::string("expected array, got ") + s.type_name());
        for (size_t k = 0; k < s.size(); ++k) {
          if (!s[k].is_number() || !std::isfinite(s[k].get<double>()) || !(s[k].get<double>() > 0))
            bad(at + "/samples_s/" + std::to_string(k), "expected a finite positive number of seconds, got " + s[k].dump());
          r.samples.push_back(s[k].get<double>());
        }
      }
      if (x.contains("n") && (!x["n"].is_number_integer() || (!x["n"].is_number_unsigned() && x["n"].get<int64_t>() < 0) ||
                              x["n"].get<uint64_t>() != r.samples.size()))
        bad(at + "/n", "expected the sample count " + std::to_string(r.samples.size()) + ", got " + x["n"].dump());
      if (x.contains("median_s")) {
        const json& m = x["median_s"];
        if (!m.is_number() || !std::isfinite(m.get<double>()) || m.get<double>() < 0)
          bad(at + "/median_s", "expected a finite number >= 0, got " + m.dump());
        r.median_s = m.get<double>();
      }
      e.rounds_left_out.push_back(std::move(r));
    }
    // A paired round was quiet on its own (left out with the other side's busy round): only the
    // others count against rounds_contended.
    const size_t own = static_cast<size_t>(std::count_if(e.rounds_left_out.begin(), e.rounds_left_out.end(),
                                                         [](const LeftOutRound& r) { return !r.paired; }));
    if (own > e.rounds_contended)
      bad("rounds_left_out", "lists " + std::to_string(own) + " busy rounds, more than rounds_contended (" +
                                 std::to_string(e.rounds_contended) + ")");
  }
  // Artifacts written before judged_rounds existed judged every round.
  e.judged_rounds = e.rounds - e.rounds_left_out.size();
  if (j.contains("judged_rounds")) {
    size_t judged = 0;
    count("judged_rounds", judged);
    if (judged != e.judged_rounds)
      bad("judged_rounds", "expected rounds minus the left-out rounds (" + std::to_string(e.rounds) + " - " +
                               std::to_string(e.rounds_left_out.size()) + " = " + std::to_string(e.judged_rounds) + "), got " +
                               std::to_string(judged));
  }
  // Rounds are left out only when the quiet ones suffice (merge_rounds): judging on none, or
  // on 2 of 5, is not what an artifact of rtx-bench can say.
  if (!e.rounds_left_out.empty() && !quiet_rounds_suffice(e.judged_rounds, e.rounds))
    bad("rounds_left_out", "leaves " + std::to_string(e.rounds_left_out.size()) + " of " + std::to_string(e.rounds) +
                               " rounds out, but the " + std::to_string(e.judged_rounds) + " quiet ones do not suffice (need " +
                               std::to_string(kMinQuietRounds) + " and at least half)");
  if (!j.contains("contended")) bad("contended", "missing (expected boolean)");
  if (!j["contended"].is_boolean()) bad("contended", std::string("expected boolean, got ") + j["contended"].type_name());
  e.contended = j["contended"].get<bool>();
  // Rounds are left out only so that the case is judged quiet on the rest (merge_rounds).
  if (e.contended && !e.rounds_left_out.empty())
    bad("contended", "true, but rounds_left_out lists " + std::to_string(e.rounds_left_out.size()) +
                         " rounds: a case judged on its quiet rounds is not contended");
  if (j.contains("reason")) {
    if (!j["reason"].is_string()) bad("reason", std::string("expected string, got ") + j["reason"].type_name());
    e.reason = j["reason"].get<std::string>();
  }
  if (j.contains("judged_on")) {
    const json& v = j["judged_on"];
    if (!v.is_string() || (v != "case" && v != "run" && v != "avg10" && v != "none"))
      bad("judged_on", "expected \"case\", \"run\" or \"none\" (\"avg10\" in artifacts of earlier builds), got " + v.dump());
    e.judged_on = v == "none" ? "" : v.get<std::string>();
  } else if (e.window_s >= kMinJudgedWindow) {
    // Builds before judged_on judged every window this long; "" would read back as "none".
    e.judged_on = "case";
  }
  if (e.contended && e.reason.empty()) e.reason = "flagged contended (no evidence recorded)";
  return e;
}

}  // namespace rtx::measure
