// rtx-evolve history: a bench case's points over time from bench_results, E-divisive change
// points linked to the promotion between the points either side, and validation recording.
#include "rtx/evolve/history.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

#include "rtx/core/build_info.hpp"
#include "rtx/core/names.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"
#include "rtx/kernels/registry.hpp"
#include "rtx/stats/stats.hpp"
#include "rtx/telemetry/hwprofile.hpp"

namespace rtx::evolve {

using nlohmann::json;

namespace {

const std::vector<std::string>& known_metrics() {
  static const std::vector<std::string> m = {"median_s", "p10_s", "p90_s", "mad_s", "ci_lo_s", "ci_hi_s", "gflops", "gbps"};
  return m;
}

/// Where a point comes from: "rtx-bench", "evolve:baseline", "evolve:candidate", or the tool.
struct Origin {
  std::string source;
  std::optional<int64_t> proposal_id;
};

Origin origin(const std::string& tool, const std::string& params_json) {
  Origin o{tool, std::nullopt};
  if (tool != "rtx-evolve") return o;
  const json p = json::parse(params_json, nullptr, false);
  if (p.is_object() && p.contains("rtx_evolve") && p["rtx_evolve"].is_object()) {
    const json& e = p["rtx_evolve"];
    o.source = "evolve:" + e.value("arm", std::string("?"));
    if (e.contains("proposal_id") && e["proposal_id"].is_number_integer()) o.proposal_id = e["proposal_id"].get<int64_t>();
  }
  return o;
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

/// A metric value with its unit: seconds scaled to s/ms/us/ns, GFLOP/s, GB/s.
std::string with_unit(const std::string& metric, double v) {
  if (metric == "gflops") return fmt("%.3f GFLOP/s", v);
  if (metric == "gbps") return fmt("%.3f GB/s", v);
  const double a = std::fabs(v);
  if (a >= 1) return fmt("%.4g s", v);
  if (a >= 1e-3) return fmt("%.4g ms", v * 1e3);
  if (a >= 1e-6) return fmt("%.4g us", v * 1e6);
  return fmt("%.4g ns", v * 1e9);
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible Low-Level
/// Date Algorithms", days_from_civil).
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

/// The inverse (same source, civil_from_days): {year, month, day}.
std::array<int64_t, 3> civil_from_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  return {yoe + era * 400 + (m <= 2), m, d};
}

int64_t days_in_month(int64_t y, int64_t m) {
  static const int n[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : n[m - 1];
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

const char* kSinceHint = "use YYYY-MM-DD, YYYY-MM-DDThh:mm[:ss][Z|+hh:mm] or an age such as 30m, 12h, 7d";

/// "YYYY-MM-DDTHH:MM:SS.mmmZ" of milliseconds since the Unix epoch; Input error outside 0001-9999.
std::string utc_text(int64_t ms, const std::string& since) {
  const int64_t day = floor_div(ms, 86400000), in_day = ms - day * 86400000;
  const auto ymd = civil_from_days(day);
  if (ymd[0] < 1 || ymd[0] > 9999)
    throw_input("'" + since + "' lies outside the years 0001-9999", "--since", kSinceHint);
  char b[64];
  std::snprintf(b, sizeof b, "%04lld-%02lld-%02lldT%02lld:%02lld:%02lld.%03lldZ", static_cast<long long>(ymd[0]),
                static_cast<long long>(ymd[1]), static_cast<long long>(ymd[2]), static_cast<long long>(in_day / 3600000),
                static_cast<long long>(in_day / 60000 % 60), static_cast<long long>(in_day / 1000 % 60),
                static_cast<long long>(in_day % 1000));
  return b;
}

/// The proposal promoted in (after, upto]: the latest 'promote' in evolve_deployments, else in
/// the v1 promotions log; nullopt when none.
std::optional<int64_t> promoted_between(store::Store& st, const std::string& after, const std::string& upto) {
  for (const char* table : {"evolve_deployments", "promotions"}) {
    auto& q = st.prepare(std::string("SELECT proposal_id FROM ") + table +
                         " WHERE action = 'promote' AND proposal_id IS NOT NULL AND created_at > ?1 AND created_at <= ?2 "
                         "ORDER BY created_at DESC, id DESC LIMIT 1");
    q.bind(1, after).bind(2, upto);
    std::optional<int64_t> id;
    if (q.step()) id = q.column_int64(0);
    q.reset();
    if (id) return id;
  }
  return std::nullopt;
}

}  // namespace

std::string normalize_since(const std::string& since, double now_epoch_s) {
  if (since.empty()) return "";
  static const std::regex rel(R"(^([0-9]{1,6})([mhd])$)");
  static const std::regex abs(
      R"(^([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[T ]([0-9]{2})(?::([0-9]{2})(?::([0-9]{2})(?:[.,]([0-9]+))?)?)?)"
      R"((Z|[+-][0-9]{2}(?::?[0-9]{2})?)?)?$)");
  std::smatch m;
  if (std::regex_match(since, m, rel)) {
    const int64_t n = std::stoll(m[1].str());
    const int64_t unit_ms = m[2] == "d" ? 86400000 : m[2] == "h" ? 3600000 : 60000;
    return utc_text(static_cast<int64_t>(std::floor(now_epoch_s * 1000.0)) - n * unit_ms, since);
  }
  if (!std::regex_match(since, m, abs))
    throw_input("cannot read '" + since + "' as a date, a date and time, or an age", "--since", kSinceHint);
  auto num = [&](size_t i) { return m[i].matched ? std::stoll(m[i].str()) : 0LL; };
  const int64_t y = num(1), mo = num(2), d = num(3), hh = num(4), mi = num(5), ss = num(6);
  std::string frac = m[7].matched ? m[7].str().substr(0, 3) : "";
  while (frac.size() < 3) frac += '0';
  const int64_t ms = std::stoll(frac);
  if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo))
    throw_input("no such date '" + since + "'", "--since", kSinceHint);
  if (hh > 23 || mi > 59 || ss > 59)
    throw_input("no such time of day in '" + since + "'", "--since", kSinceHint);
  int64_t offset_min = 0;  // local time = UTC + offset
  if (m[8].matched && m[8].str() != "Z") {
    const std::string z = m[8].str();
    const int64_t oh = std::stoll(z.substr(1, 2));
    const std::string rest = z.size() > 3 ? z.substr(z[3] == ':' ? 4 : 3) : "00";
    const int64_t om = std::stoll(rest);
    if (oh > 23 || om > 59) throw_input("no such UTC offset in '" + since + "'", "--since", kSinceHint);
    offset_min = (z[0] == '-' ? -1 : 1) * (oh * 60 + om);
  }
  const int64_t local_ms = ((days_from_civil(y, mo, d) * 24 + hh) * 60 + mi) * 60000 + ss * 1000 + ms;
  return utc_text(local_ms - offset_min * 60000, since);
}

CaseHistory case_history(store::Store& st, const std::string& case_name, const HistoryOptions& o) {
  const auto& metrics = known_metrics();
  if (std::find(metrics.begin(), metrics.end(), o.metric) == metrics.end()) {
    std::string all;
    for (const auto& m : metrics) all += (all.empty() ? "" : ", ") + m;
    throw_usage("unknown metric '" + o.metric + "'", "--metric", "use one of " + all);
  }
  if (!(o.pvalue > 0 && o.pvalue <= 1))
    throw_usage("--pvalue " + fmt("%g", o.pvalue) + " is not in (0, 1]", "--pvalue", "use e.g. 0.05");
  if (o.permutations == 0) throw_usage("permutations must be >= 1", "--permutations");
  if (o.min_size == 0) throw_usage("min_size must be >= 1", "--min-size");
  const double now_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string since = normalize_since(o.since, now_s);

  CaseHistory h;
  h.case_name = case_name;
  h.metric = o.metric;
  {
    auto& exists = st.prepare("SELECT 1 FROM bench_results WHERE case_name = ?1 LIMIT 1");
    exists.bind(1, case_name);
    const bool found = exists.step();
    exists.reset();
    if (!found) {
      std::vector<std::string> names;
      for (const auto& c : history_cases(st)) names.push_back(c.name);
      const auto near = close_matches(names, case_name);
      std::string hint = names.empty() ? "the store has no bench results yet: run rtx-bench run or rtx-evolve run first"
                                       : "run `rtx-evolve history` to list the " + std::to_string(names.size()) + " cases";
      std::string msg = "no bench results for case '" + printable(case_name) + "' in " + st.path();
      if (!near.empty()) {
        msg += "; close matches:";
        for (const auto& n : near) msg += "\n  " + printable(n);
      }
      throw_input(msg, "CASE", hint);
    }
  }
  auto& q = st.prepare("SELECT br.run_id, br.created_at, br." + o.metric +
                       ", r.tool, br.params_json, br.contended, br.contention_reason "
                       "FROM bench_results br JOIN runs r ON r.id = br.run_id "
                       "WHERE br.case_name = ?1 AND br." + o.metric + " IS NOT NULL "
                       "AND (?2 = '' OR julianday(br.created_at) >= julianday(?2)) "  // instants, not text
                       "ORDER BY julianday(br.created_at), br.created_at, br.id");
  q.bind(1, case_name).bind(2, since);
  while (q.step()) {
    const Origin org = origin(q.column_text(3), q.column_text(4));
    if (org.source == "evolve:candidate" && !o.include_candidates) continue;
    const double v = q.column_double(2);
    if (!std::isfinite(v)) continue;
    const bool busy = q.column_int64(5) != 0;
    h.points.push_back({q.column_int64(0), q.column_text(1), v, org.source, org.proposal_id, busy,
                        busy ? q.column_text(6) : std::string()});
  }
  q.reset();
  if (o.limit > 0 && h.points.size() > o.limit)
    h.points.erase(h.points.begin(), h.points.end() - static_cast<std::ptrdiff_t>(o.limit));

  // The analysed points: all, or (by default) those not measured on a busy host.
  std::vector<size_t> idx;
  std::vector<double> values;
  for (size_t i = 0; i < h.points.size(); ++i) {
    if (h.points[i].contended) ++h.contended_points;
    if (h.points[i].contended && !o.analyze_contended) continue;
    idx.push_back(i);
    values.push_back(h.points[i].value);
  }
  h.busy_left_out = h.points.size() - idx.size();
  h.analysed_points = idx.size();
  stats::EDivisiveOptions eo;
  eo.pvalue = o.pvalue;
  eo.permutations = o.permutations;
  eo.min_size = o.min_size;
  eo.seed = o.seed;
  h.change_points = stats::e_divisive(values, eo);
  for (auto& cp : h.change_points) {  // analysed-series indices -> indices into h.points
    const size_t before = idx[cp.index - 1];
    cp.index = idx[cp.index];
    cp.window_start = cp.window_start < idx.size() ? idx[cp.window_start] : h.points.size();
    cp.window_end = cp.window_end < idx.size() ? idx[cp.window_end] : h.points.size();
    h.caused_by.push_back(promoted_between(st, h.points[before].created_at, h.points[cp.index].created_at));
  }
  return h;
}

std::string analysis_state(const CaseHistory& h) {
  if (h.analysed_points == 0 && h.busy_left_out > 0) return "no_quiet_points";
  if (h.analysed_points < 2) return "too_few_points";
  return "analysed";
}

std::vector<CaseCount> history_cases(store::Store& st) {
  auto& q = st.prepare(
      "SELECT br.case_name, COUNT(*), COALESCE(SUM(br.contended), 0) FROM bench_results br JOIN runs r ON r.id = br.run_id "
      "WHERE br.median_s IS NOT NULL AND NOT (r.tool = 'rtx-evolve' AND "
      "json_extract(br.params_json, '$.rtx_evolve.arm') IS 'candidate') "
      "GROUP BY br.case_name ORDER BY br.case_name");
  std::vector<CaseCount> out;
  while (q.step()) out.push_back({q.column_text(0), q.column_int64(1), q.column_int64(2)});
  q.reset();
  return out;
}

json to_json(const std::vector<CaseCount>& cases) {
  json arr = json::array();
  for (const auto& c : cases) arr.push_back({{"case", c.name}, {"points", c.points}, {"busy", c.busy}});
  return {{"schema", "rtx.history.v1"}, {"cases", arr}};
}

json to_json(const CaseHistory& h) {
  auto opt = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); };
  json pts = json::array();
  for (const auto& p : h.points)
    pts.push_back({{"run_id", p.run_id}, {"created_at", p.created_at}, {"value", p.value}, {"source", p.source},
                   {"proposal_id", opt(p.proposal_id)}, {"contended", p.contended},
                   {"contention_reason", p.contention_reason}});
  json cps = json::array();
  for (size_t i = 0; i < h.change_points.size(); ++i) {
    const auto& c = h.change_points[i];
    const auto& at = h.points[c.index];
    cps.push_back({{"index", c.index},
                   {"run_id", at.run_id},
                   {"created_at", at.created_at},
                   {"q", c.q},
                   {"pvalue", c.pvalue},
                   {"mean_before", c.mean_before},
                   {"mean_after", c.mean_after},
                   {"median_before", c.median_before},
                   {"median_after", c.median_after},
                   {"relative_change", c.relative_change},
                   {"caused_by", i < h.caused_by.size() ? opt(h.caused_by[i]) : json(nullptr)}});
  }
  return {{"schema", "rtx.history.v1"}, {"case", h.case_name}, {"metric", h.metric},
          {"contended_points", h.contended_points}, {"busy_left_out", h.busy_left_out},
          {"analysed_points", h.analysed_points}, {"analysis", analysis_state(h)},
          {"points", pts}, {"change_points", cps}};
}

std::string format_history(const CaseHistory& h) {
  std::ostringstream os;
  os << "case " << printable(h.case_name) << " (" << h.metric << ", " << h.points.size() << " points, oldest first)\n";
  std::set<size_t> starts;
  for (const auto& c : h.change_points) starts.insert(c.index);
  char line[256];
  std::snprintf(line, sizeof line, "  %4s  %-24s  %8s  %-18s  %8s  %-4s  %s\n", "#", "created_at", "run", "source",
                "proposal", "host", h.metric.c_str());
  os << line;
  std::vector<std::string> reasons;  // distinct busy-host reasons, listed once below the table
  for (size_t i = 0; i < h.points.size(); ++i) {
    const auto& p = h.points[i];
    std::string note = starts.count(i) ? "   <- change point" : "";
    if (p.contended) {
      auto it = std::find(reasons.begin(), reasons.end(), p.contention_reason);
      if (it == reasons.end()) it = reasons.insert(reasons.end(), p.contention_reason);
      note += "   [busy " + std::to_string(it - reasons.begin() + 1) + "]";
    }
    // Built as a string, not into the fixed buffer: a long stored source or created_at must not
    // cut the value column off. Padding is in bytes, as printf's was.
    const auto pad = [](std::string v, size_t width, bool left) {
      if (v.size() < width) left ? v.append(width - v.size(), ' ') : v.insert(0, width - v.size(), ' ');
      return v;
    };
    os << "  " << pad(std::to_string(i), 4, false) << "  " << pad(printable(p.created_at), 24, true) << "  "
       << pad(std::to_string(p.run_id), 8, false) << "  " << pad(printable(p.source), 18, true) << "  "
       << pad(p.proposal_id ? "#" + std::to_string(*p.proposal_id) : "-", 8, false) << "  "
       << pad(p.contended ? "busy" : "-", 4, true) << "  " << with_unit(h.metric, p.value) << note << "\n";
  }
  if (h.contended_points > 0) {
    os << h.contended_points << " busy-host point" << (h.contended_points == 1 ? "" : "s")
       << " (host contended while measuring; rtx-bench's host.contended)"
       << (h.busy_left_out > 0 ? ", left out of the change-point analysis (--include-busy analyses them)"
                               : ", analysed like the others")
       << ":\n";
    for (size_t i = 0; i < reasons.size(); ++i)
      os << "  [busy " << i + 1 << "] " << (reasons[i].empty() ? "(no reason recorded)" : printable(reasons[i])) << "\n";
  }
  if (h.change_points.empty()) {
    const std::string state = analysis_state(h);
    if (state == "no_quiet_points")
      os << "no change-point analysis: "
         << (h.points.size() == 1 ? std::string("the only point was")
                                  : "all " + std::to_string(h.points.size()) + " points were")
         << " measured on a busy host and left out, so there is no quiet point to analyse (--include-busy analyses them)\n";
    else if (state == "too_few_points")
      os << "no change points (too few points to analyse: " << h.analysed_points
         << (h.busy_left_out > 0 ? " quiet, " + std::to_string(h.busy_left_out) + " busy left out; --include-busy analyses them"
                                 : std::string())
         << ")\n";
    else
      os << "no change points\n";
    return os.str();
  }
  os << "change points (E-divisive means):\n";
  for (size_t i = 0; i < h.change_points.size(); ++i) {
    const auto& c = h.change_points[i];
    os << "  at #" << c.index << " (" << printable(h.points[c.index].created_at) << "): " << with_unit(h.metric, c.mean_before) << " -> "
       << with_unit(h.metric, c.mean_after) << " mean (" << fmt("%+.1f%%", 100 * c.relative_change) << "), median "
       << with_unit(h.metric, c.median_before) << " -> " << with_unit(h.metric, c.median_after) << ", q "
       << fmt("%.4g", c.q) << ", p " << fmt("%.3f", c.pvalue) << "; ";
    if (i < h.caused_by.size() && h.caused_by[i])
      os << "caused by proposal #" << *h.caused_by[i] << " (promoted in between)\n";
    else
      os << "no promotion between the points either side\n";
  }
  return os.str();
}

std::string format_cases(const std::vector<CaseCount>& cases) {
  std::ostringstream os;
  if (cases.empty()) return "no bench results in the store (run rtx-bench run or rtx-evolve run first)\n";
  os << "  points    busy  case\n";
  char line[64];
  int64_t busy = 0;
  for (const auto& c : cases) {
    std::snprintf(line, sizeof line, "  %6lld  %6lld  ", static_cast<long long>(c.points), static_cast<long long>(c.busy));
    os << line << printable(c.name) << "\n";
    busy += c.busy;
  }
  if (busy > 0)
    os << "busy: points measured on a busy host (host contended), listed but left out of change-point analysis "
          "(rtx-evolve history CASE --include-busy analyses them)\n";
  return os.str();
}

int64_t record_validation(store::Store& st, int64_t proposal_id, int64_t run_id, uint64_t seed,
                          const std::vector<GateResult>& gates, const std::vector<ArmCaseResult>& results,
                          const std::string& status, const std::optional<json>& validation) {
  std::string hw_json;
  std::string sku;
  if (run_id == 0 && !results.empty()) {  // probe outside the transaction (cached after the first call)
    hw_json = telemetry::to_json(telemetry::hardware_profile()).dump();
    sku = telemetry::sku_key("cpu");
  }
  store::Transaction tx(st);
  if (run_id == 0 && !results.empty()) {
    auto& r = st.prepare(
        "INSERT INTO runs (tool, args_json, seed, git_sha, hw_sku, hw_json, status, finished_at) "
        "VALUES ('rtx-evolve', ?1, ?2, ?3, ?4, ?5, 'ok', strftime('%Y-%m-%dT%H:%M:%fZ','now'))");
    r.bind(1, json::array({"validate", std::to_string(proposal_id)}).dump())
        .bind(2, static_cast<int64_t>(seed))
        .bind(3, git_sha())
        .bind(4, sku)
        .bind(5, hw_json);
    r.run();
    run_id = st.last_insert_rowid();
  }
  insert_gates(st, proposal_id, run_id, gates);
  auto& row = st.prepare(
      "INSERT INTO bench_results (run_id, case_name, op, variant, backend, shape, dtype, params_json, median_s, p10_s, "
      "p90_s, mad_s, n, ci_lo_s, ci_hi_s, samples_json, contended, contention_reason) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)");
  for (const ArmCaseResult& a : results) {
    if (a.samples.empty()) continue;
    const json& c = a.spec;
    const bool kernel = c.is_object() && c.contains("op");
    json params = kernel && c.contains("params") && c["params"].is_object() ? c["params"] : json::object();
    params["rtx_evolve"] = {{"proposal_id", proposal_id}, {"arm", a.arm}, {"part", a.part}, {"round_medians", a.round_medians}};
    if (a.rounds_left_out.is_array() && !a.rounds_left_out.empty()) params["rtx_evolve"]["rounds_left_out"] = a.rounds_left_out;
    const std::vector<double>& rm = a.round_medians.empty() ? a.samples : a.round_medians;
    const stats::Interval ci = stats::median_ci(a.samples);
    row.bind(1, run_id)
        .bind(2, a.case_id)
        .bind(3, kernel ? c["op"].get<std::string>() : a.kind)
        .bind(4, kernel ? c.value("variant", std::string()) : std::string())
        .bind(5, kernel ? c.value("backend", std::string("cpu")) : std::string("cpu"))
        .bind(6, kernel && c.contains("shape") && c["shape"].is_object() ? kernels::shape_to_string(c["shape"].get<kernels::Shape>())
                                                                        : std::string())
        .bind(7, kernel ? c.value("dtype", std::string()) : std::string())
        .bind(8, params.dump())
        .bind(9, stats::median(rm))
        .bind(10, stats::percentile(a.samples, 0.10))
        .bind(11, stats::percentile(a.samples, 0.90))
        .bind(12, stats::mad(a.samples))
        .bind(13, static_cast<int64_t>(a.samples.size()))
        .bind(14, ci.lo)
        .bind(15, ci.hi)
        .bind(16, json(a.samples).dump())
        .bind(17, static_cast<int64_t>(a.contended ? 1 : 0))
        .bind(18, a.contended ? a.contention_reason : std::string());
    row.run();
  }
  if (!status.empty()) write_status(st, proposal_id, status, validation);
  tx.commit();
  return run_id;
}

}  // namespace rtx::evolve
