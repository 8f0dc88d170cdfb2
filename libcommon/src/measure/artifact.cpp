// The rtx.bench.v1 artifact: writing results, reading them back with field-named errors,
// and the human table printed by `run` and `show`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "rtx/measure/measure.hpp"
#include "rtx/core/build_info.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/io/artifact.hpp"

namespace rtx::measure {
namespace {

using nlohmann::json;

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

/// Pad/truncate helpers for the aligned table.
std::string pad(const std::string& s, size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

}  // namespace

std::string format_seconds(double s) {
  if (!(s > 0)) return s == 0 ? "0 s" : "-";
  // The unit is picked after rounding to 3 digits in it: 999.7 us is "1 ms", not "1e+03 us".
  static const char* const units[] = {"ns", "us", "ms", "s"};
  static const double scales[] = {1e9, 1e6, 1e3, 1};
  size_t k = s >= 1 ? 3 : s >= 1e-3 ? 2 : s >= 1e-6 ? 1 : 0;
  // strtod, not stod: stod throws out_of_range on a subnormal ("1e-309 ns" from a hand-edited
  // 1e-318 s), which made show and compare exit 4.
  while (k < 3 && std::strtod(fmt("%.3g", s * scales[k]).c_str(), nullptr) >= 1000) ++k;
  return fmt("%.3g", s * scales[k]) + " " + units[k];
}

json to_json(const RunResult& r, const ArtifactMeta& m) {
  json doc;
  doc["schema"] = kBenchSchema;
  doc["rtx"] = {{"version", rtx::version()}, {"git_sha", rtx::git_sha()}, {"build_type", rtx::build_type()},
                {"compiler", rtx::compiler_id()}};
  doc["hardware"] = m.hardware;
  doc["seed"] = m.seed;
  doc["pack"] = {{"name", m.pack_name}, {"source", m.pack_source}};
  doc["options"] = {{"backend", kernels::backend_name(m.backend)},
                    {"filter", m.filter},
                    {"max_rel_ci", m.runner.max_rel_ci},
                    {"max_time_s", m.runner.max_time},
                    {"min_samples", m.runner.min_samples},
                    {"max_samples", m.runner.max_samples},
                    {"warmup", m.runner.warmup},
                    {"cold", m.runner.cold},
                    {"interleave", m.runner.interleave},
                    {"threads", m.threads},
                    {"pinned", m.pinned}};
  if (m.rounds > 1) doc["options"]["rounds"] = m.rounds;
  json peaks = {{"source", m.peaks.source}};
  if (m.peaks.flops > 0) peaks["flops_per_s"] = m.peaks.flops;
  if (m.peaks.bytes_per_s > 0) peaks["bytes_per_s"] = m.peaks.bytes_per_s;
  doc["peaks"] = peaks;
  size_t ok = 0, failed = 0, skipped = 0, noisy = 0, contended = 0, unjudged = 0;
  json cases = json::array();
  for (const CaseResult& c : r.cases) {
    json j;
    j["id"] = c.c.id;
    j["name"] = c.c.name;
    j["op"] = c.c.op;
    j["variant"] = c.c.variant;
    j["backend"] = kernels::backend_name(c.c.backend);
    j["shape"] = c.c.shape;
    j["dtype"] = dtype_name(c.c.dtype);
    j["params"] = c.c.params;
    j["status"] = c.status;
    j["stop_reason"] = c.stop_reason;
    j["n"] = c.samples.size();
    j["samples_s"] = c.samples;
    if (!c.round_medians.empty()) j["round_medians_s"] = c.round_medians;
    if (!c.round_ids.empty()) j["round_ids"] = c.round_ids;
    if (c.status == "skipped") {
      ++skipped;
      j["skip_reason"] = c.c.skip_reason;
      cases.push_back(j);
      continue;
    }
    j["check"] = {{"ok", c.check.ok},
                  {"max_rel_err", c.check.max_rel_err},
                  {"tolerance", c.check.tolerance},
                  {"unwritten", c.check.unwritten},
                  {"nonfinite", c.check.nonfinite},
                  {"detail", c.check.detail}};
    j["checksum"] = hex64(c.checksum);
    j["footprint_bytes"] = c.footprint_bytes;
    j["work"] = {{"flops", c.work.flops}, {"bytes", c.work.bytes}};
    if (c.status == "failed") {
      ++failed;
      cases.push_back(j);
      continue;
    }
    ++ok;
    noisy += c.noisy;
    j["noisy"] = c.noisy;
    if (!c.sm_clock_mhz.empty())
      j["gpu_clock"] = {{"sm_mhz", c.sm_clock_mhz}, {"throttled_samples", c.throttled_samples}};
    j["throttled"] = c.throttled_samples > 0;
    j["sampling_s"] = c.sampling_s;
    if (c.host.measured) {
      j["host"] = to_json(c.host);
      contended += c.host.contended;
      unjudged += c.host.judged_on.empty();
    }
    j["time"] = {{"median_s", c.median},
                 {"p10_s", c.p10},
                 {"p90_s", c.p90},
                 {"mad_s", c.mad},
                 {"ci", {{"lo_s", c.ci.lo}, {"hi_s", c.ci.hi}, {"rel", c.rel_ci}, {"coverage", c.ci.coverage}}}};
    j["throughput"] = {{"flops_per_s", c.flops_per_s}, {"bytes_per_s", c.bytes_per_s}};
    if (c.peak_fraction) {
      j["roofline"] = {{"bound", c.bound}, {"peak_fraction", *c.peak_fraction}};
    } else {
      j["roofline"] = {{"note", "no measured peaks (" + m.peaks.source + ")"}};
    }
    cases.push_back(j);
  }
  doc["cases"] = cases;
  doc["summary"] = {{"cases", r.cases.size()}, {"ok", ok}, {"failed", failed}, {"skipped", skipped}, {"noisy", noisy},
                    {"contended", contended}};
  // The rule the per-case host.contended flags were judged by (contention.cpp).
  json host = {{"thresholds",
                {{"psi_cpu_some_share_max", kMaxPsiStallShare},
                 {"cpu_share_min", kMinCpuShare},
                 {"involuntary_per_s_max", kMaxInvoluntaryPerS},
                 {"min_window_s", kMinJudgedWindow},
                 {"other_cpu_share_max", telemetry::kMaxOtherCpuShare}}},
               {"contended_cases", contended},
               {"unjudged_cases", unjudged}};
  if (r.host.measured) host["run"] = to_json(r.host);
  if (m.load1_start >= 0) host["load1_start"] = m.load1_start;
  if (m.load1_end >= 0) host["load1_end"] = m.load1_end;
  doc["host"] = host;
  return doc;
}

json check_bench_artifact(const json& doc, const std::string& source) {
  io::check_artifact_schema(doc, source, "bench", {1});
  using io::JsonType;
  io::validate(doc, source,
               {{"/cases", JsonType::Array},
                {"/cases/*/id", JsonType::String},
                {"/cases/*/status", JsonType::String},
                {"/cases/*/samples_s", JsonType::Array},
                {"/cases/*/time", JsonType::Object, false},
                {"/cases/*/time/median_s", JsonType::Number, false},
                {"/seed", JsonType::Integer, false},
                {"/hardware", JsonType::Object, false},
                {"/host", JsonType::Object, false},
                {"/host/run", JsonType::Object, false},
                {"/host/thresholds", JsonType::Object, false},
                {"/summary", JsonType::Object, false},
                {"/ab", JsonType::Object, false},
                {"/ab/pair_id", JsonType::String, false},
                {"/ab/role", JsonType::String, false},
                {"/cases/*/host", JsonType::Object, false},
                // What show's table reads (format_table): a hand-edited type there is a field-named
                // error, not an internal JSON error.
                {"/pack", JsonType::Object, false},
                {"/pack/name", JsonType::String, false},
                {"/pack/source", JsonType::String, false},
                {"/options", JsonType::Object, false},
                {"/options/backend", JsonType::String, false},
                {"/peaks", JsonType::Object, false},
                {"/peaks/source", JsonType::String, false},
                {"/cases/*/skip_reason", JsonType::String, false},
                {"/cases/*/noisy", JsonType::Boolean, false},
                {"/cases/*/throttled", JsonType::Boolean, false},
                {"/cases/*/time/p10_s", JsonType::Number, false},
                {"/cases/*/time/p90_s", JsonType::Number, false},
                {"/cases/*/time/ci", JsonType::Object, false},
                {"/cases/*/time/ci/rel", JsonType::Number, false},
                {"/cases/*/throughput", JsonType::Object, false},
                {"/cases/*/throughput/flops_per_s", JsonType::Number, false},
                {"/cases/*/throughput/bytes_per_s", JsonType::Number, false},
                {"/cases/*/roofline", JsonType::Object, false},
                {"/cases/*/roofline/bound", JsonType::String, false},
                {"/cases/*/roofline/peak_fraction", JsonType::Number, false}});
  if (doc.contains("seed") && !doc["seed"].is_number_unsigned() && doc["seed"].get<int64_t>() < 0)
    throw_input("expected an integer >= 0, got " + doc["seed"].dump(), source + ": field '/seed'", "was the file edited by hand?");
  if (doc.contains("host") && doc["host"].contains("run")) (void)host_evidence_from_json(doc["host"]["run"], source, "/host/run");
  const json& cases = doc["cases"];
  auto bad = [&](const std::string& field, const std::string& what) {
    throw_input(what, source + ": field '" + field + "'", "was the file edited by hand?");
  };
  // Counts that show and compare print: non-negative integers (a string made `show` fail
  // with an internal JSON error, 2.5 printed as 2, -3 printed nothing).
  auto counts = [&](const char* object, std::initializer_list<const char*> keys) {
    if (!doc.contains(object)) return;
    for (const char* k : keys) {
      const json& o = doc[object];
      if (!o.contains(k)) continue;
      const json& v = o[k];
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
        bad(std::string("/") + object + "/" + k, "expected an integer >= 0, got " + v.dump(-1, ' ', false, json::error_handler_t::replace));
    }
  };
  counts("summary", {"cases", "ok", "failed", "skipped", "noisy", "contended"});
  counts("host", {"contended_cases", "unjudged_cases"});
  if (doc.contains("host"))
    for (const char* k : {"load1_start", "load1_end"}) {
      const json& h = doc["host"];
      if (h.contains(k) && (!h[k].is_number() || !std::isfinite(h[k].get<double>()) || h[k].get<double>() < 0))
        bad(std::string("/host/") + k, "expected a finite number >= 0, got " + h[k].dump(-1, ' ', false, json::error_handler_t::replace));
    }
  std::map<std::string, size_t> ids;  // id -> index of the case that has it
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const std::string at = "/cases/" + std::to_string(i);
    const std::string id = c["id"].get<std::string>();
    const auto [prev, fresh] = ids.emplace(id, i);
    if (!fresh)
      bad(at + "/id", "duplicate case id " + c["id"].dump(-1, ' ', false, json::error_handler_t::replace) + " (also /cases/" +
                          std::to_string(prev->second) + ")");
    const std::string status = c["status"].get<std::string>();
    if (status != "ok" && status != "failed" && status != "skipped")
      bad(at + "/status", "expected 'ok', 'failed' or 'skipped', got " + c["status"].dump(-1, ' ', false, json::error_handler_t::replace));
    // A timing is a number of seconds in [1e-12, 1e7]: below a picosecond or above 115 days it is
    // no measurement, and a subnormal one (1e-320) overflowed compare's ratio CI to inf.
    auto timing = [](const json& v) {
      return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 1e-12 && v.get<double>() <= 1e7;
    };
    const json& s = c["samples_s"];
    for (size_t k = 0; k < s.size(); ++k)
      if (!timing(s[k]))
        bad(at + "/samples_s/" + std::to_string(k), "expected a number of seconds in [1e-12, 1e7], got " + s[k].dump());
    if (c.contains("n") && (!c["n"].is_number_unsigned() || c["n"].get<uint64_t>() != s.size()))
      bad(at + "/n", "expected the sample count " + std::to_string(s.size()) + ", got " + c["n"].dump());
    if (c.contains("round_medians_s")) {
      const json& rm = c["round_medians_s"];
      if (!rm.is_array()) bad(at + "/round_medians_s", "expected array, got " + std::string(rm.type_name()));
      for (size_t k = 0; k < rm.size(); ++k)
        if (!timing(rm[k]))
          bad(at + "/round_medians_s/" + std::to_string(k), "expected a number of seconds in [1e-12, 1e7], got " + rm[k].dump());
    }
    // Contention evidence (absent in artifacts written before it existed): types checked here
    // so compare's undecided rule cannot trip over a malformed field.
    if (c.contains("host")) {
      const HostEvidence h = host_evidence_from_json(c["host"], source, at + "/host");
      // A case merged from its quiet rounds has one round median per judged round.
      if (!h.rounds_left_out.empty() && c.contains("round_medians_s") && c["round_medians_s"].size() != h.judged_rounds)
        bad(at + "/round_medians_s", "has " + std::to_string(c["round_medians_s"].size()) + " round medians, expected judged_rounds (" +
                                         std::to_string(h.judged_rounds) + ")");
      // At most one round median per judged round (a round that ran no sample has none).
      if (h.rounds > 0 && c.contains("round_medians_s") && c["round_medians_s"].size() > h.judged_rounds)
        bad(at + "/round_medians_s", "has " + std::to_string(c["round_medians_s"].size()) +
                                         " round medians, more than the judged rounds (" + std::to_string(h.judged_rounds) + ")");
      // A paired left-out round exists only in the two artifacts of one --baseline-exe run.
      for (size_t k = 0; k < h.rounds_left_out.size(); ++k)
        if (h.rounds_left_out[k].paired && !doc.contains("ab"))
          bad(at + "/host/rounds_left_out/" + std::to_string(k) + "/paired",
              "a round left out with its pair needs the document's 'ab' object (a --baseline-exe run), and there is none");
    }
    if (c.contains("round_ids")) {
      // The process (round, 1-based) of each round median: same count, strictly increasing.
      const json& ri = c["round_ids"];
      if (!ri.is_array()) bad(at + "/round_ids", "expected array, got " + std::string(ri.type_name()));
      if (!c.contains("round_medians_s") || ri.size() != c["round_medians_s"].size())
        bad(at + "/round_ids", "has " + std::to_string(ri.size()) + " entries but round_medians_s has " +
                                   std::to_string(c.contains("round_medians_s") ? c["round_medians_s"].size() : 0) +
                                   ": one round id per round median");
      // A round id names one of the run's processes: at most options.rounds.
      const uint64_t run_rounds = doc.contains("options") && doc["options"].is_object() && doc["options"].contains("rounds") &&
                                          doc["options"]["rounds"].is_number_unsigned()
                                      ? doc["options"]["rounds"].get<uint64_t>()
                                      : kMaxRounds;
      for (size_t k = 0; k < ri.size(); ++k)
        if (!ri[k].is_number_unsigned() || ri[k].get<uint64_t>() < 1 || ri[k].get<uint64_t>() > run_rounds ||
            (k > 0 && ri[k].get<uint64_t>() <= ri[k - 1].get<uint64_t>()))
          bad(at + "/round_ids/" + std::to_string(k),
              "expected a round number in [1, " + std::to_string(run_rounds) + "] (options.rounds) above the previous one, got " +
                  ri[k].dump());
    }
    if (status != "ok") continue;
    if (s.empty()) bad(at + "/samples_s", "an ok case has no samples");
    // Displays use time.median_s: it must be the samples' median (up to rounding).
    if (c.contains("time") && c["time"].contains("median_s")) {
      const double m = stats::median(s.get<std::vector<double>>()), t = c["time"]["median_s"].get<double>();
      if (!(std::fabs(t - m) <= 1e-6 * m))
        bad(at + "/time/median_s", "is " + fmt("%.17g", t) + " but the median of samples_s is " + fmt("%.17g", m));
    }
  }
  return doc;
}

namespace {

/// A case of a (checked) round artifact back as a CaseResult (statistics left to the merge).
CaseResult case_from_json(const json& j) {
  CaseResult r;
  r.c.id = j["id"].get<std::string>();
  r.c.name = j.value("name", std::string());
  r.c.op = j.value("op", std::string());
  r.c.variant = j.value("variant", std::string());
  r.c.backend = kernels::parse_backend(j.value("backend", std::string("cpu")));
  if (j.contains("shape")) r.c.shape = j["shape"].get<Shape>();
  r.c.dtype = parse_dtype(j.value("dtype", std::string("f32")));
  if (j.contains("params")) r.c.params = j["params"].get<Params>();
  r.c.skip_reason = j.value("skip_reason", std::string());
  r.status = j["status"].get<std::string>();
  r.stop_reason = j.value("stop_reason", std::string());
  r.samples = j["samples_s"].get<std::vector<double>>();
  r.noisy = j.value("noisy", false);
  r.sampling_s = j.value("sampling_s", 0.0);
  if (j.contains("work")) {
    r.work.flops = j["work"].value("flops", 0.0);
    r.work.bytes = j["work"].value("bytes", 0.0);
  }
  if (j.contains("checksum")) r.checksum = std::stoull(j["checksum"].get<std::string>(), nullptr, 16);
  r.footprint_bytes = j.value("footprint_bytes", size_t{0});
  if (j.contains("check")) {
    const json& k = j["check"];
    r.check.ok = k.value("ok", false);
    r.check.max_rel_err = k.value("max_rel_err", 0.0);
    r.check.tolerance = k.value("tolerance", 0.0);
    r.check.unwritten = k.value("unwritten", r.check.unwritten);
    r.check.nonfinite = k.value("nonfinite", r.check.nonfinite);
    r.check.detail = k.value("detail", std::string());
  }
  if (j.contains("gpu_clock")) {
    r.sm_clock_mhz = j["gpu_clock"].value("sm_mhz", std::vector<uint32_t>{});
    r.throttled_samples = j["gpu_clock"].value("throttled_samples", size_t{0});
  }
  if (j.contains("host")) r.host = host_evidence_from_json(j["host"], "round artifact", "/cases/" + r.c.id + "/host");
  return r;
}

/// Add round `k` (0-based) of `total`'s evidence `x` to the merged evidence `m`: windows summed,
/// each round judged on its own (by its process) and counted in rounds_contended.
void merge_host(HostEvidence& m, const HostEvidence& x, size_t k, size_t total) {
  if (!x.measured) return;
  if (!m.measured) {
    m = x;
    m.psi_stall_s = std::min(x.psi_stall_s, x.window_s);
    m.rounds = 1;
    m.rounds_contended = 0;
    m.reason.clear();
    m.oversubscribed = false;  // set below with the round named
    m.oversubscription.clear();
  } else {
    m.cpus = std::max(m.cpus, x.cpus);
    m.window_s += x.window_s;
    m.thread_cpu_s += x.thread_cpu_s;
    m.process_cpu_s += x.process_cpu_s;
    m.involuntary_switches += x.involuntary_switches;
    m.psi_valid = m.psi_valid && x.psi_valid;
    m.other_valid = m.other_valid && x.other_valid;
    m.other_cpu_s += x.other_cpu_s;
    m.tick_slack_s += x.tick_slack_s;
    // Sums of readings that were each clamped to their window (add_window); clamp the total
    // too, for rounds written by builds that did not clamp (a merged share read 1.045).
    m.psi_stall_s = std::min(m.psi_stall_s + std::min(x.psi_stall_s, x.window_s), m.window_s);
    m.psi_avg10_max = std::max(m.psi_avg10_max, x.psi_avg10_max);
    m.load1_end = x.load1_end;
    ++m.rounds;
    if (x.judged_on == "case" || m.judged_on.empty()) m.judged_on = x.judged_on.empty() ? m.judged_on : x.judged_on;
  }
  if (x.contended) {
    if (m.rounds_contended == 0) m.reason = "round " + std::to_string(k + 1) + "/" + std::to_string(total) + ": " + x.reason;
    ++m.rounds_contended;
  }
  if (x.oversubscribed && !m.oversubscribed) {
    m.oversubscribed = true;
    m.oversubscription = "round " + std::to_string(k + 1) + "/" + std::to_string(total) + ": " + x.oversubscription;
  }
  m.contended = m.rounds_contended > 0;
  m.judged_rounds = m.rounds;  // every round merged here is judged on (merge_case counts the left-out ones apart)
}

/// Which rounds of one case are left out, decided from the host evidence of its rounds.
struct LeaveOut {
  std::vector<size_t> busy;    ///< rounds busy on this side (0-based), left out or not
  std::vector<size_t> paired;  ///< rounds quiet here, left out with the other side's busy round
  std::vector<std::string> paired_reason;  ///< per `paired` entry: the other side's evidence
  size_t ran = 0, judged_quiet = 0;  ///< rounds run; judged quiet (on both sides when paired)
  bool all_ok = true;
  bool paired_mode = false;    ///< decided on the pairs of an ABBA run
  bool apply = false;          ///< the rule holds: the rounds above leave the case
  bool out(size_t k) const {
    return apply && (std::find(busy.begin(), busy.end(), k) != busy.end() || std::find(paired.begin(), paired.end(), k) != paired.end());
  }
};


/// The leave-out decision for `xs` (round k's result of one case, ids checked); with `other`
/// (the same case's rounds of the other side of an ABBA run, same count), decided on the pairs:
/// a round counts as busy when either side's is and as quiet when both are. `other_side` names
/// that side in a paired round's reason ("the baseline", "the new build").
LeaveOut decide_leave_out(const std::vector<CaseResult>& xs, const std::vector<CaseResult>* other, const std::string& other_side) {
  LeaveOut d;
  d.paired_mode = other != nullptr;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (xs[k].status == "skipped" || (other && (*other)[k].status == "skipped")) continue;
    ++d.ran;
    d.all_ok = d.all_ok && xs[k].status == "ok" && !xs[k].samples.empty();
    if (other) d.all_ok = d.all_ok && (*other)[k].status == "ok" && !(*other)[k].samples.empty();
    const bool busy_here = round_busy(xs[k].host), busy_there = other && round_busy((*other)[k].host);
    if (busy_here) {
      d.busy.push_back(k);
    } else if (busy_there) {
      d.paired.push_back(k);
      d.paired_reason.push_back(other_side + "'s round " + std::to_string(k + 1) + " was busy: " + (*other)[k].host.reason);
    } else if (round_quiet(xs[k].host) && (!other || round_quiet((*other)[k].host))) {
      ++d.judged_quiet;
    }
  }
  // Leaving rounds out changes nothing a failed case shows (it is not compared), so only ok ones.
  d.apply = (!d.busy.empty() || !d.paired.empty()) && d.all_ok && quiet_rounds_suffice(d.judged_quiet, d.ran);
  return d;
}

/// One case over all rounds (`xs[k]`: round k's result, ids checked): merged from every round,
/// or from the rounds `d` leaves out when its rule holds (decide_leave_out).
CaseResult merge_case(const std::vector<CaseResult>& xs, const LeaveOut& d) {
  const size_t total = xs.size();
  const std::vector<size_t>& busy = d.busy;
  const size_t ran = d.ran, judged_quiet = d.judged_quiet;
  const bool leave_out = d.apply;
  auto left_out = [&](size_t k) { return d.out(k); };

  CaseResult r = xs[0];
  r.samples.clear();
  r.round_medians.clear();
  r.round_ids.clear();
  r.sm_clock_mhz.clear();
  r.throttled_samples = 0;
  r.noisy = false;
  r.sampling_s = 0;
  r.host = {};
  bool first = true;  // the first merged round sets stop_reason
  for (size_t k = 0; k < total; ++k) {
    const CaseResult& x = xs[k];
    if (x.status == "failed" && r.status != "failed") {
      r.status = "failed";
      r.check = x.check;
      r.stop_reason = x.stop_reason;
    }
    if (x.status == "skipped" || left_out(k)) continue;
    if (!x.samples.empty()) {
      r.round_medians.push_back(stats::median(x.samples));
      r.round_ids.push_back(k + 1);
    }
    r.samples.insert(r.samples.end(), x.samples.begin(), x.samples.end());
    r.noisy = r.noisy || x.noisy;
    r.sampling_s += x.sampling_s;
    r.throttled_samples += x.throttled_samples;
    r.sm_clock_mhz.insert(r.sm_clock_mhz.end(), x.sm_clock_mhz.begin(), x.sm_clock_mhz.end());
    merge_host(r.host, x.host, k, total);
    if (r.status == "ok") r.stop_reason = first || r.stop_reason == x.stop_reason ? x.stop_reason : "mixed";
    first = false;
  }
  if (leave_out) {
    // The busy rounds are counted (rounds, rounds_contended) and kept for inspection, but
    // neither their samples nor their windows are in the case any more; nor are those of the
    // quiet rounds paired with the other side's busy ones (counted in rounds only).
    r.host.measured = true;
    for (size_t k = 0; k < total; ++k) {
      const CaseResult& x = xs[k];
      const auto b = std::find(busy.begin(), busy.end(), k);
      const auto p = std::find(d.paired.begin(), d.paired.end(), k);
      if (b == busy.end() && p == d.paired.end()) continue;
      LeftOutRound lo{k + 1, b != busy.end() ? x.host.reason : d.paired_reason[p - d.paired.begin()], b == busy.end(), x.samples,
                      stats::median(x.samples)};
      r.host.rounds_left_out.push_back(std::move(lo));
      ++r.host.rounds;
      r.host.rounds_contended += b != busy.end();
    }
    r.host.contended = false;
    r.host.reason.clear();
  } else if (!busy.empty() && ran > 1) {
    const size_t unjudged = ran - busy.size() - d.paired.size() - judged_quiet;
    r.host.reason += "; " + std::to_string(busy.size()) + " of " + std::to_string(ran) + " rounds busy, " +
                     (d.paired.empty() ? std::string() : std::to_string(d.paired.size()) + " more on the other side, ") +
                     std::to_string(judged_quiet) + " judged quiet" + (d.paired_mode ? " on both sides" : "") +
                     (unjudged ? " (" + std::to_string(unjudged) + " too short to judge)" : std::string()) +
                     ": too few to judge on the quiet rounds alone (need " + std::to_string(kMinQuietRounds) +
                     " and at least half)";
  }
  return r;
}

}  // namespace

// "at least half" without 2 * quiet, which overflowed for a hand-edited rounds near 2^64.
bool quiet_rounds_suffice(size_t quiet, size_t rounds) {
  return quiet >= kMinQuietRounds && (quiet >= rounds || quiet >= rounds - quiet);
}

namespace {

/// The rounds' cases as per[case][round], matched by id in round 1's order. `side`: "" or
/// "baseline " (named in errors). Throws rtx::Error(Input) when there is no round or the
/// rounds' cases differ.
std::vector<std::vector<CaseResult>> cases_by_round(const std::vector<json>& rounds, const std::string& side) {
  if (rounds.empty()) throw_input("no " + side + "round artifacts to merge", "run --rounds", "report this: the run produced no rounds");
  std::vector<std::vector<CaseResult>> per;
  for (const auto& c : rounds[0]["cases"]) per.push_back({case_from_json(c)});
  for (size_t k = 1; k < rounds.size(); ++k) {
    const json& cases = rounds[k]["cases"];
    const std::string where = "run --rounds: " + side + "round " + std::to_string(k + 1);
    if (cases.size() != per.size())
      throw_input("has " + std::to_string(cases.size()) + " cases, round 1 has " + std::to_string(per.size()), where,
                  "do not edit the pack while a multi-round run is in progress");
    for (size_t i = 0; i < cases.size(); ++i) {
      CaseResult x = case_from_json(cases[i]);
      if (x.c.id != per[i][0].c.id)
        throw_input("case " + std::to_string(i) + " is '" + x.c.id + "', round 1 has '" + per[i][0].c.id + "'", where,
                    "do not edit the pack while a multi-round run is in progress");
      per[i].push_back(std::move(x));
    }
  }
  return per;
}

/// The merged run of `per` (cases_by_round) with each case's leave-out decision `d[i]`: the
/// rounds' whole-run windows merged into host.run and each ok case's statistics recomputed.
RunResult merge_decided(const std::vector<json>& rounds, const std::vector<std::vector<CaseResult>>& per,
                        const std::vector<LeaveOut>& d) {
  RunResult out;
  for (size_t i = 0; i < per.size(); ++i) out.cases.push_back(merge_case(per[i], d[i]));
  // The rounds' whole-run windows, merged like a case's (each round judged by its process).
  for (size_t k = 0; k < rounds.size(); ++k) {
    const json& doc = rounds[k];
    if (!doc.contains("host") || !doc["host"].is_object() || !doc["host"].contains("run")) continue;
    merge_host(out.host, host_evidence_from_json(doc["host"]["run"], "round artifact " + std::to_string(k + 1), "/host/run"), k,
               rounds.size());
  }
  for (CaseResult& r : out.cases) {
    if (r.status != "ok" || r.samples.empty()) continue;
    // The same statistics as the runner's (runner.cpp summarize), over the merged rounds' samples.
    r.median = stats::median(r.samples);
    r.p10 = stats::percentile(r.samples, 0.10);
    r.p90 = stats::percentile(r.samples, 0.90);
    r.mad = stats::mad(r.samples);
    r.ci = stats::median_ci(r.samples);
    r.rel_ci = r.median > 0 ? std::max(r.median - r.ci.lo, r.ci.hi - r.median) / r.median : 0;
    if (r.median > 0) {
      r.flops_per_s = r.work.flops / r.median;
      r.bytes_per_s = r.work.bytes / r.median;
    }
  }
  return out;
}

}  // namespace

RunResult merge_rounds(const std::vector<json>& rounds) {
  const auto per = cases_by_round(rounds, "");
  std::vector<LeaveOut> d;
  for (const auto& xs : per) d.push_back(decide_leave_out(xs, nullptr, ""));
  return merge_decided(rounds, per, d);
}

std::pair<RunResult, RunResult> merge_rounds_paired(const std::vector<json>& fresh, const std::vector<json>& base) {
  const auto pn = cases_by_round(fresh, ""), pb = cases_by_round(base, "baseline ");
  if (fresh.size() != base.size())
    throw_input(std::to_string(base.size()) + " baseline rounds against " + std::to_string(fresh.size()) + " of this build",
                "run --baseline-exe", "report this: the ABBA run must give both sides the same rounds");
  if (pn.size() != pb.size())
    throw_input("the baseline measured " + std::to_string(pb.size()) + " cases, this build " + std::to_string(pn.size()),
                "run --baseline-exe", "the baseline must expand the pack to the same cases (same pack, same flags)");
  std::vector<LeaveOut> dn, db;
  for (size_t i = 0; i < pn.size(); ++i) {
    if (pn[i][0].c.id != pb[i][0].c.id)
      throw_input("case " + std::to_string(i) + " is '" + pn[i][0].c.id + "' here and '" + pb[i][0].c.id + "' in the baseline",
                  "run --baseline-exe", "the baseline must expand the pack to the same cases (same pack, same flags)");
    dn.push_back(decide_leave_out(pn[i], &pb[i], "the baseline"));
    db.push_back(decide_leave_out(pb[i], &pn[i], "the new build"));
  }
  return {merge_decided(fresh, pn, dn), merge_decided(base, pb, db)};
}

json read_bench_artifact(const std::string& path) {
  const std::string src = path == "-" ? "<stdin>" : path;
  json doc;
  try {
    doc = io::read_artifact(path, "bench", {1});
  } catch (const Error& e) {
    // An input file that cannot be read (permission denied, an I/O error) is bad input to
    // compare/show: exit 2 like a missing file (docs/tools/rtx-bench.md).
    if (e.category() != ErrorCategory::Environment) throw;
    throw Error(ErrorCategory::Input, "cannot read the artifact: " + e.message(), e.where().empty() ? src : e.where(),
                "pass a readable rtx.bench.v1 file");
  }
  return check_bench_artifact(doc, src);
}

namespace {
/// `o[key]` when `o` is an object that has it, else an empty object (operator[] on a const json
/// without the key is undefined behaviour).
const json& member(const json& o, const char* key) {
  static const json empty = json::object();
  return o.is_object() && o.contains(key) ? o[key] : empty;
}
}  // namespace

std::string format_table(const json& a, bool color) {
  const char* red = color ? "\033[31m" : "";
  const char* yel = color ? "\033[33m" : "";
  const char* off = color ? "\033[0m" : "";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"case", "n", "median", "ci", "p10..p90", "GFLOP/s", "GB/s", "peak", "status"});
  // A --rounds artifact: compare judges the round medians (their median is what it shows), so
  // the table shows that median and the round count beside the all-samples median.
  bool with_rounds = false;
  for (const auto& c : a["cases"]) with_rounds |= c.contains("round_medians_s") && c["round_medians_s"].size() >= kMinRoundsForBasis;
  if (with_rounds) rows[0].insert(rows[0].begin() + 3, "rounds: median");
  std::vector<std::string> tint{""};
  std::vector<std::string> skipped;
  size_t left_out_cases = 0, oversubscribed_cases = 0;
  for (const auto& c : a["cases"]) {
    const std::string st = c.value("status", std::string("?"));
    if (st == "skipped") {
      skipped.push_back(printable(c.value("id", std::string())) + ": " + printable(c.value("skip_reason", std::string())));
      continue;
    }
    std::vector<std::string> row{printable(c.value("id", std::string())), std::to_string(c.value("n", uint64_t{0}))};
    if (c.contains("time")) {
      const auto& t = c["time"];
      row.push_back(format_seconds(t.value("median_s", 0.0)));
      if (with_rounds) {
        const std::vector<double> rm =
            c.contains("round_medians_s") ? c["round_medians_s"].get<std::vector<double>>() : std::vector<double>{};
        // Below kMinRoundsForBasis round medians compare judges the samples: no rounds figure.
        row.push_back(rm.size() < kMinRoundsForBasis ? "-" : std::to_string(rm.size()) + ": " + format_seconds(stats::median(rm)));
      }
      row.push_back(fmt("+-%.1f%%", 100 * member(t, "ci").value("rel", 0.0)));
      row.push_back(format_seconds(t.value("p10_s", 0.0)) + ".." + format_seconds(t.value("p90_s", 0.0)));
      const auto& th = member(c, "throughput");
      row.push_back(fmt("%.2f", th.value("flops_per_s", 0.0) / 1e9));
      row.push_back(fmt("%.2f", th.value("bytes_per_s", 0.0) / 1e9));
      const auto& rf = c.value("roofline", json::object());
      row.push_back(rf.contains("peak_fraction")
                        ? fmt("%.0f%%", 100 * rf["peak_fraction"].get<double>()) + " " + printable(rf.value("bound", std::string()).substr(0, 3))
                        : "-");
    } else {
      for (int k = 0; k < (with_rounds ? 7 : 6); ++k) row.push_back("-");
    }
    std::string flag = st;
    if (c.value("noisy", false)) flag += " noisy";
    if (c.value("throttled", false)) flag += " throttled";
    if (c.contains("host") && c["host"].value("contended", false)) flag += " busy-host";
    if (c.contains("host") && c["host"].value("oversubscribed", false)) {
      flag += " oversubscribed";
      ++oversubscribed_cases;
    }
    if (c.contains("host") && c["host"].contains("rounds_left_out") && !c["host"]["rounds_left_out"].empty()) {
      // Judged on its quiet rounds (merge_rounds): how many of how many rounds were left out.
      const json& h = c["host"];
      flag += " busy-rounds-left-out:" + std::to_string(h["rounds_left_out"].size()) + "/" + std::to_string(h.value("rounds", size_t{0}));
      ++left_out_cases;
    }
    row.push_back(flag);
    rows.push_back(row);
    tint.push_back(st == "failed" ? red : (c.value("noisy", false) ? yel : ""));
  }
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t k = 0; k < r.size(); ++k) w[k] = std::max(w[k], r[k].size());
  std::ostringstream os;
  for (size_t i = 0; i < rows.size(); ++i) {
    os << tint[i];
    for (size_t k = 0; k < rows[i].size(); ++k)
      os << pad(rows[i][k], w[k], k > 0 && k + 1 < rows[i].size()) << (k + 1 < rows[i].size() ? "  " : "");
    os << (tint[i].empty() ? "" : off) << "\n";
  }
  if (!skipped.empty()) {
    os << "skipped (" << skipped.size() << "):\n";
    for (const auto& s : skipped) os << "  " << s << "\n";
  }
  if (a.contains("summary")) {
    const auto& s = a["summary"];
    // Counts read as uint64_t: a hand-edited 2^64-1 printed as -1 through int.
    const uint64_t zero = 0;
    os << s.value("ok", zero) << " ok, " << s.value("failed", zero) << " failed, " << s.value("skipped", zero) << " skipped, "
       << s.value("noisy", zero) << " noisy";
    if (s.value("contended", zero) > 0) os << ", " << s.value("contended", zero) << " measured on a busy host";
    if (left_out_cases > 0) os << ", " << left_out_cases << " judged on quiet rounds (busy rounds left out)";
    if (oversubscribed_cases > 0)
      os << ", " << oversubscribed_cases << " oversubscribed (the process's own threads outnumbered its CPUs; "
         << "host.oversubscription)";
    if (a.contains("host") && a["host"].value("unjudged_cases", zero) > 0) {
      // The run's span (warm-ups and samples, not start-up or the store) is what was too short,
      // not the process's wall time: say so with its length.
      const json& run = a["host"].contains("run") && a["host"]["run"].is_object() ? a["host"]["run"] : json::object();
      const double span = run.value("window_s", 0.0);
      os << ", " << a["host"].value("unjudged_cases", zero) << " not judged for contention (the measured span, "
         << (span > 0 ? format_seconds(span) + " of warm-ups and samples, is" : std::string("warm-ups and samples, was"))
         << " under " << format_seconds(kMinJudgedWindow) << ": too short to judge; --min-samples measures longer)";
    }
    if (a.contains("peaks")) os << "; peaks: " << printable(a["peaks"].value("source", std::string()));
    os << "\n";
  }
  return os.str();
}

}  // namespace rtx::measure
