// rtx::evolve history: one bench case's measurements over time (rtx-bench runs, evolve
// validations' baseline arms, the current config after promotions) and its change points
// (E-divisive means, rtx/stats/changepoint.hpp) linked to the promotion that caused them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rtx/evolve/proposal.hpp"
#include "rtx/stats/changepoint.hpp"
#include "rtx/store/store.hpp"

namespace rtx::evolve {

/// One point of a case's history: one bench_results row.
struct CasePoint {
  int64_t run_id = 0;                  ///< runs.id of the measuring run
  std::string created_at;              ///< bench_results.created_at, UTC ISO-8601
  double value = 0;                    ///< the metric (seconds for *_s metrics)
  std::string source;                  ///< "rtx-bench" or "evolve:baseline" / "evolve:candidate"
  std::optional<int64_t> proposal_id;  ///< the validated proposal, for evolve points
  /// Measured on a busy host (bench_results.contended: the rtx-bench artifact's host.contended);
  /// false also for rows from before schema 3 and evolve arms (no evidence recorded).
  bool contended = false;
  std::string contention_reason;       ///< bench_results.contention_reason ("" when not contended)
};

/// How the history is read and analysed.
struct HistoryOptions {
  std::string metric = "median_s";     ///< bench_results column: median_s, p10_s, p90_s, mad_s, gflops, gbps
  /// Keep points measured at or after this instant, in any form normalize_since() reads
  /// ("2026-01-31", "2026-01-31T12:00:00+05:00", "7d"); compared as instants; "" all.
  std::string since;
  size_t limit = 0;                    ///< keep the newest `limit` points; 0 all (the CLI asks for >= 1)
  double pvalue = 0.05;                ///< e_divisive significance
  size_t permutations = 199;
  size_t min_size = 3;                 ///< smallest segment between change points
  uint64_t seed = 0;
  bool include_candidates = false;     ///< also evolve candidate arms (not the deployed config)
  /// Busy-host points (CasePoint::contended) are always listed, marked; by default they are left
  /// out of the change-point analysis (a slow run on a loaded host is not a regression). True:
  /// analyse them like any other point (`rtx-evolve history --include-busy`).
  bool analyze_contended = false;
};

/// A case over time with its change points; caused_by[i] is the proposal promoted between the
/// point before change_points[i] and the point at it (nullopt when no promotion lies there).
struct CaseHistory {
  std::string case_name;
  std::string metric;
  std::vector<CasePoint> points;                   ///< oldest first
  /// Index into points (also window_start/window_end); with busy points left out, the segment
  /// statistics are over the analysed points only.
  std::vector<stats::ChangePoint> change_points;
  std::vector<std::optional<int64_t>> caused_by;   ///< same size as change_points
  size_t contended_points = 0;                     ///< points with contended = true
  size_t busy_left_out = 0;                        ///< of those, left out of the change-point analysis
  size_t analysed_points = 0;                      ///< points the change-point analysis read
};

/// Why a history has the change points it has: "analysed" (the analysis ran on >= 2 points),
/// "too_few_points" (fewer than 2 points to analyse, busy ones aside), or "no_quiet_points"
/// (there are points, but every one was measured on a busy host and left out: nothing was
/// analysed; HistoryOptions::analyze_contended / --include-busy analyses them).
std::string analysis_state(const CaseHistory& h);

/// One case of history_cases(): its point count and how many of them were measured on a busy host.
struct CaseCount {
  std::string name;
  int64_t points = 0;  ///< rows case_history lists (rtx-bench runs, evolve baseline arms)
  int64_t busy = 0;    ///< of those, bench_results.contended = 1
};

/// `--since` (history and report) -> the UTC instant "YYYY-MM-DDTHH:MM:SS.mmmZ", the store's own
/// timestamp form. Reads (ISO 8601-1:2019, calendar dates, extended format):
///  - a date "YYYY-MM-DD" (midnight UTC);
///  - a date and time "YYYY-MM-DDThh[:mm[:ss[.f...]]]" (T or one space), with no zone (UTC), "Z",
///    or an offset "+hh:mm" / "-hh:mm" / "+hhmm" / "+hh", converted to UTC (2026-11-30T08:30+05:00
///    -> 2026-11-30T03:30:00.000Z); fractions beyond milliseconds are truncated;
///  - an age before `now_epoch_s` (seconds since the Unix epoch): "<N>m" minutes, "<N>h" hours,
///    "<N>d" days (N up to 6 digits).
/// Dates are checked against the proleptic Gregorian calendar (2026-02-30, 2025-02-29, 24:00 and
/// 12:60 are refused); years 0001-9999. "" stays "". Throws rtx::Error(Input) naming --since for
/// anything else, trailing text included.
std::string normalize_since(const std::string& since, double now_epoch_s);

/// The history of `case_name`. Throws rtx::Error(Input) for an unknown case (listing close
/// matches) or a bad `since` (normalize_since, relative to now), rtx::Error(Usage) for an unknown
/// metric or a bad option. Ids are exact: "heldout:alloc:gpt2-small-step" (a held-out workload)
/// and "alloc:gpt2-small-step" are separate series.
CaseHistory case_history(store::Store& st, const std::string& case_name, const HistoryOptions& o);

/// Every case with bench_results rows, its point count and busy-host count (as case_history
/// counts them, without --since/--limit), sorted by name.
std::vector<CaseCount> history_cases(store::Store& st);

/// JSON form: {"schema": "rtx.history.v1", "case", "metric", "contended_points", "busy_left_out",
/// "analysed_points", "analysis" (analysis_state), "points": [{run_id, created_at, value, source,
/// proposal_id, contended, contention_reason}], "change_points": [{index, run_id, created_at, q,
/// pvalue, mean_before, mean_after, median_before, median_after, relative_change, caused_by}]}.
nlohmann::json to_json(const CaseHistory& h);

/// JSON form of history_cases(): {"schema": "rtx.history.v1", "cases": [{case, points, busy}]}.
nlohmann::json to_json(const std::vector<CaseCount>& cases);

/// Human table of a history (points, busy-host ones marked "busy", then change points with their
/// proposal and a line saying how many busy-host points the analysis left out; when every point
/// was busy, that there was no quiet point to analyse and that --include-busy analyses them).
std::string format_history(const CaseHistory& h);

/// Human table of history_cases(): points, busy (busy-host points), case.
std::string format_cases(const std::vector<CaseCount>& cases);

// ---- recording validations (called by validate() in validate.cpp) ---------------------------------

/// One arm's measurements of one case in a validation.
struct ArmCaseResult {
  std::string arm;                     ///< "baseline" or "candidate"
  std::string part;                    ///< "affected" or "heldout"
  std::string case_id;                 ///< bench case id, e.g. "gelu_fwd_small/cpu.tanh/N=4096/f32"
  /// The trial spec's case when it is a kernel case ({id, op, variant, shape, dtype, params}),
  /// else {} (serve, alloc, fusion parts: op = the part's kind).
  nlohmann::json spec = nlohmann::json::object();
  std::string kind;                    ///< the trial part's kind: "kernels", "serve", "alloc", "fusion"
  std::vector<double> samples;         ///< every sample of every round, seconds
  std::vector<double> round_medians;   ///< one median per sandboxed process (round)
  /// The arm was measured on a busy host in rounds that stayed in (bench_results.contended):
  /// some of its rounds' trial windows were judged contended and too few quiet round pairs
  /// remained to leave them out (evolve::pair_busy_rounds).
  bool contended = false;
  std::string contention_reason;       ///< "" or the first busy round's evidence and the counts
  /// Rounds left out of both arms (and of `samples` and `round_medians`) because either arm's
  /// round was busy: [{"round" (1-based), "reason"}]; stored in params_json.rtx_evolve.
  nlohmann::json rounds_left_out = nlohmann::json::array();
};

/// Record a validation in ONE transaction: its gate_results rows (as record_gates writes them)
/// and one bench_results row per arm and case, under runs row `run_id` (an rtx-evolve run), or,
/// when run_id is 0, under a new runs row (tool "rtx-evolve", args ["validate", "<id>"]).
/// bench_results: median_s = median of the round medians; p10_s/p90_s/mad_s/ci over all samples
/// (stats::percentile, mad, median_ci); n = number of samples; samples_json = the samples;
/// params_json = the kernel params (kernel cases) plus "rtx_evolve": {"proposal_id", "arm",
/// "part", "round_medians"} (and "rounds_left_out" when busy rounds were left out);
/// contended / contention_reason from the arm's host evidence (ArmCaseResult::contended).
/// `status` non-empty: the proposal's status becomes `status` (with `validation` as its
/// validation JSON when given, write_status) in the same transaction, so a validation's outcome
/// is one state change. Returns the run id used. Throws rtx::Error from the store.
int64_t record_validation(store::Store& st, int64_t proposal_id, int64_t run_id, uint64_t seed,
                          const std::vector<GateResult>& gates, const std::vector<ArmCaseResult>& results,
                          const std::string& status = "", const std::optional<nlohmann::json>& validation = std::nullopt);

}  // namespace rtx::evolve
