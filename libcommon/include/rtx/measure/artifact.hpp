// The measuring engine: the rtx.bench.v1 artifact (write, read, merge rounds).
#pragma once
#include "rtx/measure/host.hpp"

namespace rtx::measure {
// ---- artifacts -------------------------------------------------------------------------------

/// Context recorded in an artifact next to the results.
struct ArtifactMeta {
  std::string pack_name, pack_source;
  uint64_t seed = 0;
  Backend backend = Backend::CPU;
  RunnerOptions runner;
  std::string filter;
  int threads = 0;
  bool pinned = false;
  Peaks peaks;
  size_t rounds = 1;        ///< processes merged (written as options.rounds only when > 1)
  /// 1-minute load average (telemetry::load_average_1m) when the run started / ended, written
  /// to the document's "host" object; < 0: not recorded.
  double load1_start = -1, load1_end = -1;
  nlohmann::json hardware = nlohmann::json::object();  ///< hardware profile
};

/// The rtx.bench.v1 document (fields: docs/tools/rtx-bench.md).
nlohmann::json to_json(const RunResult& r, const ArtifactMeta& meta);

/// Parse and validate an rtx.bench.v1 document. Throws rtx::Error(Input) naming `source`
/// and the field ("base.json: field '/cases/3/samples': expected array, got string"): also
/// for a status other than ok/failed/skipped, duplicate case ids, an ok case without
/// samples, a sample that is not a finite positive number, `n` not the sample count, or a
/// `time.median_s` that disagrees with the samples' median (relative 1e-6).
nlohmann::json check_bench_artifact(const nlohmann::json& doc, const std::string& source);
/// Read a file ("-" stdin) and check_bench_artifact it.
nlohmann::json read_bench_artifact(const std::string& path);

/// Human table of an artifact's cases (time with units, CI, GFLOP/s, GB/s, % of peak, flags).
std::string format_table(const nlohmann::json& artifact, bool color = false);

/// "1.23 ms" / "456 us" / "12.3 ns" / "2.5 s".
std::string format_seconds(double s);

/// Merge the artifacts of R rounds of the same pack (one child process each, `run --rounds`)
/// into one result: per case (matched by id, in the first round's order) the concatenated
/// samples, round_medians (the median of each round's samples), summary statistics
/// recomputed on the merged samples, noisy if any round was noisy, status "failed" if any round
/// failed, sampling_s summed. A case of which some rounds were contended (host.contended of
/// that round) while quiet_rounds_suffice(quiet, R) holds is merged from its quiet rounds only:
/// the busy rounds go to host.rounds_left_out (round, reason, samples), host.judged_rounds
/// counts the others and the case is not contended. Otherwise every round is merged and the
/// case is contended, its reason naming the first busy round and why none was left out.
/// Roofline fields are left for annotate_roofline. Throws rtx::Error(Input) naming the round
/// when `rounds` is empty or the rounds' case ids differ.
RunResult merge_rounds(const std::vector<nlohmann::json>& rounds);

/// merge_rounds for the two sides of one `run --baseline-exe` run, whose round k of this
/// program (`fresh[k]`) and of the baseline (`base[k]`) ran next to each other (ABBA order), so
/// that drift and neighbours fall on both alike (Kalibera & Jones 2013). The leave-out rule is
/// applied per case to the pairs: a round busy on either side is left out on both (on the quiet
/// side as LeftOutRound::paired), when the rounds quiet on both sides suffice
/// (quiet_rounds_suffice); else both sides keep every round. So the sides are judged on the same
/// round indices, never on 4 rounds against 5. Returns {fresh merged, base merged}. Throws
/// rtx::Error(Input) as merge_rounds does, and when the sides differ in round count or case ids.
std::pair<RunResult, RunResult> merge_rounds_paired(const std::vector<nlohmann::json>& fresh,
                                                    const std::vector<nlohmann::json>& base);

/// Most rounds `run --rounds` accepts.
inline constexpr size_t kMaxRounds = 200;
/// Rounds (fresh processes) of a `run` without --rounds or a pack "rounds" default. One process
/// per side cannot separate a process-wide speed change from the code (issue 36: idle A/A pairs
/// of smoke.json read six cases +14..+29% slower); five rounds are the fewest whose round
/// medians a Mann-Whitney test can call different at p < 0.05 (two-sided p = 2/252 at 5 vs 5).
/// The per-case time budget (max_time) is split across them.
inline constexpr size_t kDefaultRounds = 5;
/// Fewest rounds on both sides for compare to judge a case on its round medians.
inline constexpr size_t kMinRoundsForBasis = 3;
/// Fewest quiet (not contended) rounds a merged case is judged on after its busy rounds are
/// left out: the rounds basis's minimum, so that compare still judges it on round medians.
inline constexpr size_t kMinQuietRounds = kMinRoundsForBasis;

/// True when a case measured in `rounds` rounds, `quiet` of them judged and not contended (a
/// round too short to judge, judged_on "none", does not count as quiet), may be judged
/// on its quiet rounds alone: quiet >= kMinQuietRounds and quiet >= rounds / 2 (at least half).
/// Below that the busy rounds stay in and the case stays contended. The half rule: when most
/// rounds cross the thresholds the host was busy for most of the run, and the rounds that did
/// not are likely just under the thresholds rather than quiet.
bool quiet_rounds_suffice(size_t quiet, size_t rounds);

/// A round's evidence as the leave-out rule reads it (merge_rounds, merge_rounds_paired, and
/// rtx-evolve's gates): busy when measured and contended; quiet when measured, judged and not
/// contended. A window too short to judge (judged_on "") is neither: on a busy host only the
/// long (busy) windows would be judged at all.
inline bool round_busy(const HostEvidence& e) { return e.measured && e.contended; }
inline bool round_quiet(const HostEvidence& e) { return e.measured && !e.contended && !e.judged_on.empty(); }

}  // namespace rtx::measure
