// The measuring engine: comparison of two rtx.bench.v1 artifacts.
#pragma once
#include <optional>

#include "rtx/measure/artifact.hpp"

namespace rtx::measure {
// ---- compare ---------------------------------------------------------------------------------

/// One row of a comparison.
struct CompareRow {
  std::string id;
  std::string presence;     ///< "both", "base only", "new only", "not judged"
  std::string note;         ///< why not judged (status of either side)
  double base_median = 0, new_median = 0;  ///< s
  /// "rounds": judged on round_medians_s (both sides have >= kMinRoundsForBasis rounds:
  /// between-process variance included); "samples": on the raw samples_s.
  /// "rounds/process": judged on round medians corrected for each round's process speed
  /// (stats::normalize_process_speed; two separate multi-round runs, >= kMinNormalizeCases cases).
  std::string basis = "samples";
  stats::Comparison cmp;
  /// basis "rounds/process": the verdict on the raw round medians, before the correction.
  std::optional<stats::Comparison> raw;    ///< the statistical verdict (kept as `measured_verdict` when undecided)
  /// "" or why the row is undecided: either side's case has host.contended (recorded by the
  /// runner), e.g. "host busy during base: measuring thread ran 43% of the window". Such a
  /// row counts as `undecided`, never as slower/faster/same, so it cannot fail compare.
  std::string busy;
  /// "" or, when both artifacts are the two sides of one interleaved --baseline-exe run
  /// (same ab.pair_id) judged on round medians and a side was busy, the note kept instead of
  /// `busy`: "host busy in k/N rounds; interleaved ABBA rounds balance it". The verdict stands.
  std::string balanced;
  /// "" or, when a side was merged from its quiet rounds (host.rounds_left_out), e.g. "base
  /// judged on 4 of 5 rounds (round 2 busy: PSI cpu stall 38% of the window (> 10%))". The
  /// verdict stands: it rests on the quiet rounds only.
  std::string left_out;
  /// The short form of `left_out` for the verdict cell: "base 4/5 rounds", "base 4/5, new 3/5 rounds".
  std::string judged_rounds;
  /// Sides whose host evidence was recorded but not judged (host.judged_on "none": the case and
  /// its whole run took under kMinJudgedWindow): "", "base", "new" or "both".
  std::string unjudged;
  /// new_median / base_median (the ratio of the medians shown; 0 when base_median is 0).
  double medians_ratio = 0;
  /// "" or, for a single-process (basis "samples") slower/faster verdict, why it is not counted:
  /// one process per side cannot separate a process-wide speed change from the code (the reason
  /// names the common mode when most cases moved together: stats::common_mode_shift). Such a
  /// row counts as `unconfirmed`, never as slower/faster, so it cannot fail compare.
  std::string unconfirmed;
  /// cmp.ratio (the Hodges-Lehmann change) and medians_ratio disagree materially
  /// (change_contradicts_medians): the output explains the two in a footnote.
  bool change_disagrees = false;
};

/// True when the change estimate `change` (Hodges-Lehmann ratio new/base) and the ratio of
/// the medians `medians_ratio` disagree materially at threshold t: they fall in different bands
/// of (below 1-t, within [1-t, 1+t], above 1+t) and differ from each other by more than a
/// factor 1 + max(t, 1%). Both spread or bimodal round medians can do that (change -0.1% beside
/// medians of 8 ms and 5.7 us). Non-positive or non-finite inputs: false (nothing to compare).
bool change_contradicts_medians(double change, double medians_ratio, double threshold);

/// All rows and the counts by verdict.
struct CompareReport {
  std::string base_source, new_source;
  double threshold = 0.05;
  std::vector<CompareRow> rows;
  size_t same = 0, faster = 0, slower = 0, ambiguous = 0, unmatched = 0;
  size_t undecided = 0;     ///< judged on both sides but measured on a busy host (CompareRow::busy)
  size_t balanced = 0;      ///< judged despite a busy host: ABBA pair on round medians (CompareRow::balanced)
  size_t left_out = 0;      ///< judged on quiet rounds, busy rounds left out on a side (CompareRow::left_out)
  size_t unjudged = 0;      ///< host contention not judged on a side (CompareRow::unjudged)
  size_t disagreements = 0; ///< change and medians disagree (CompareRow::change_disagrees)
  size_t unconfirmed = 0;   ///< single-process slower/faster verdicts of a common-mode shift (CompareRow::unconfirmed)
  /// The common-mode test over the rows judged on one process per side (basis "samples", host
  /// not busy); `detected` turned their slower/faster verdicts into `unconfirmed`.
  stats::CommonMode common_mode;
  /// Two separate multi-round runs corrected for process speed: the whole-process shift between
  /// them (round factors of stats::normalize_process_speed), over `process_shift_cases` cases.
  /// Reported, never counted.
  std::optional<stats::Comparison> process_shift;
  size_t process_shift_cases = 0;
  /// process_shift beyond the threshold (its ratio outside [1 - t, 1 + t], or significant):
  /// the machine's state changed between the runs, so the corrected rows' slower/faster
  /// verdicts are `unconfirmed` (cases move by their own amounts in such a state).
  bool machine_shift = false;
};

/// Fewest cases judged on round medians (with round ids, host quiet) for compare to correct two
/// separate runs for process speed (each case's factor is the median of at least 2 others).
inline constexpr size_t kMinNormalizeCases = stats::kMinNormalizeOthers + 1;

/// Compare two checked bench artifacts case by case (matched by id). A case whose two sides
/// both carry round_medians_s with >= kMinRoundsForBasis rounds is judged on the round
/// medians (o.min_samples lowered to kMinRoundsForBasis), otherwise on the raw samples.
/// A case whose base or new side has host.contended = true is reported undecided (CompareRow::busy)
/// whatever the statistics say, except when the two artifacts are the baseline and new sides of
/// one `run --baseline-exe` (the same `ab.pair_id`) and the case is judged on round medians:
/// interleaved ABBA rounds expose both sides to the same contention, so the verdict stands and
/// CompareRow::balanced notes the busy rounds (Kalibera & Jones, "Rigorous benchmarking in
/// reasonable time", ISMM 2013). Artifacts without host evidence (older runs) are judged as before.
/// A side merged from its quiet rounds (host.rounds_left_out, merge_rounds) is not contended and
/// is judged on them, noted in CompareRow::left_out. Rows judged on one process per side (basis
/// "samples") never count as slower/faster: their verdicts become CompareRow::unconfirmed, with
/// the common mode named when most of them moved together (stats::common_mode_shift). Two
/// separate multi-round runs (not one ABBA pair) with >= kMinNormalizeCases round-judged cases
/// carrying round ids are corrected for each round's process speed (basis "rounds/process",
/// stats::normalize_process_speed; the raw verdict kept in CompareRow::raw) and the shift of the
/// whole process goes to CompareReport::process_shift, reported but not counted; when it is
/// beyond the threshold the machine's state changed between the runs and those rows' verdicts
/// are unconfirmed too (CompareReport::machine_shift). Each row also records the sides not judged
/// for contention (CompareRow::unjudged) and whether its change contradicts its medians.
CompareReport compare_artifacts(const nlohmann::json& base, const nlohmann::json& fresh, const stats::CompareOptions& o,
                                const std::string& base_source = "base", const std::string& new_source = "new");
/// Render a report: "table" (aligned text), "md" (GitHub markdown), "csv", "json". The change
/// is written as stats::format_change (time new/base [95% CI]) in table and md, and as
/// time_ratio, time_ratio_ci and change (beside the older ratio, ratio_ci) in json. Table and
/// md keep the verdict cell short ("undecided (busy host)", "unconfirmed (process shift)", "same (busy host, ABBA)", "same
/// (base 4/5 rounds)", "same (host not judged)"), list each distinct host reason (and each
/// left-out-rounds note) once below the table with its cases, mark a change that disagrees with
/// the medians with '*' and explain it in a footnote, and say how many cases were not judged
/// for contention; json carries the same as fields (docs/tools/rtx-bench.md); csv ends each row
/// with `reason` (host notes first) and `measured_verdict`. Throws rtx::Error(Usage) for another
/// format.
std::string format_compare(const CompareReport& r, const std::string& format);

/// Write the error `e` on `out` in the machine format `format`: "json" {"error": {category,
/// message, where, hint, exit_code}} (the object cli::run_tool writes under --json); "csv" the
/// header error,category,message,where,hint,exit_code and one row starting "error"; nothing for
/// another format (table and md are read by people, who read stderr).
void write_compare_error(const Error& e, const std::string& format, std::ostream& out);

/// Parse "5%", "5 %" or "0.05" into 0.05 (in [0, 1)). Throws rtx::Error(Usage) naming `flag`.
double parse_threshold(const std::string& s, const char* flag = "--threshold");

}  // namespace rtx::measure
