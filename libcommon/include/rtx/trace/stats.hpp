// Trace statistics like `nsys stats`: per category (GPU kernels, GPU memory ops, CUDA API,
// ops/ranges), per name: count, inclusive total, exclusive (self) time, mean, min, max,
// stddev, share of the category's self time; table, CSV or JSON.
//
// Definitions (Chrome Trace Event Format slices: complete events "X" with ts/dur and B/E
// pairs, times in us; https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
//  - total (inclusive): the sum of a name's slice durations. Nested slices of one name (a
//    recursive op) are each counted, so totals of names can overlap and do not add up.
//  - self (exclusive): a slice's duration minus the time covered by its direct children,
//    i.e. the time during which it is the innermost open slice of its thread. Slices nest
//    only on the same (pid, tid), whatever their category (a cudaLaunchKernel inside an op is
//    the op's child). Per thread, slices are taken by start time (ties: the longer one
//    encloses; equal start and duration: the earlier in the file encloses); a slice that
//    starts at or after the open slice's end is not its child (touching slices are
//    siblings); a child that overruns its parent is clipped to the parent's end (as if it
//    ended with the parent: the overrun is self time of whatever encloses the parent, if
//    anything; TraceStats::clipped counts them and the outputs say so). Zero-duration slices
//    have self 0. B/E events are paired per thread in timestamp order (a stable sort: the
//    format lets writers emit them unsorted; speedscope PR #322 does the same); a B never
//    closed or an E with no open B is left out and counted (a killed program leaves them).
//  - times: integer ns, exact from the file's decimals, relative or absolute (Kineto and
//    perf converters write us since the Unix epoch, ~1.7e15); |ts|, dur <= 4e15 us. This is the self weight of rtx-flame's CPU
//    mode (fold_trace) and of FlameGraph's frames.
//  - the category's total: the sum of its names' self times = the time during which the
//    innermost slice of some thread belongs to the category, summed over threads/streams.
//    No time is counted twice, within or across categories.
//  - share: a name's self / its category's total; a category's shares sum to 1.
//  - mean, min, max, stddev: of the slices' (inclusive) durations.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rtx::trace {

struct StatRow {
  std::string name;
  uint64_t count = 0;
  double total_us = 0;  ///< inclusive: sum of the slices' durations, us
  double self_us = 0;   ///< exclusive: sum of the slices' self times (see the file comment), us
  double mean_us = 0, min_us = 0, max_us = 0, stddev_us = 0;  ///< of durations (inclusive), us; stddev: population
  double share = 0;     ///< self_us / the group's total_us (0..1; 0 when that is 0)
};
struct StatGroup {
  std::string category;  ///< "gpu_kernels" | "gpu_memory" | "cuda_api" | "ops"
  double total_us = 0;   ///< the category's busy time: sum of its rows' self_us, us
  std::vector<StatRow> rows;  ///< by self time, descending (ties: total descending, then name)
};
struct TraceStats {
  std::string file;
  bool by_path = false;    ///< rows are stack paths ("step;forward;matmul"), not names
  uint64_t events = 0;
  uint64_t clipped = 0;    ///< slices that overran their parent, clipped to its end
  uint64_t filtered_out = 0;  ///< rows left out by StatsOptions::match (still in the busy times)
  uint64_t unmatched = 0;  ///< B/E events without a partner (ignored): unclosed_b + E events with no open B
  uint64_t unclosed_b = 0; ///< of those, B events never closed by an E (a truncated or killed recording)
  std::vector<StatGroup> groups;  ///< non-empty groups only, in the order above
};

/// How compute_stats groups and filters rows.
struct StatsOptions {
  /// Rows per stack path instead of per name: the names of the enclosing slices on the
  /// thread, root first, joined by ';' (rtx-flame's folded frames), e.g.
  /// "ProfilerStep#1;aten::linear;aten::addmm": which op, under which layer/phase. A path's
  /// category is its innermost slice's.
  bool by_path = false;
  /// ECMAScript regex: keep only rows whose name (or path) matches (search, not full match).
  /// Busy times and shares stay those of the whole category. "" = all rows.
  std::string match;
};

/// Duration statistics of the X slices (dur >= 0) and B/E pairs of a trace file, with self
/// times as defined in the file comment. The file is streamed; memory grows with distinct
/// names and with slices (about 32 bytes each, kept per thread to nest them). Errors:
/// read_trace's; rtx::Error(Input) naming the event for a missing or out-of-range ts/dur
/// (beyond +-4e15 us) or an X without dur; rtx::Error(Usage) for a bad `match` regex.
TraceStats compute_stats(const std::string& path, const StatsOptions& opt = {});

/// Fixed-width table with units: share (of self), self, total, count, mean, min, max, stddev,
/// name; top `top` rows per group (0 = all). B/E events without a partner are named in a
/// closing note ("N B event(s) never closed"), also when they leave no slice at all.
std::string stats_table(const TraceStats& s, size_t top);
/// Notes on what the rows leave out: slices clipped to their parent, rows filtered by
/// --match ("" when none). stats_table ends with them; csv callers print them on stderr.
std::string stats_notes(const TraceStats& s);
/// CSV: category,name,count,total_ns,mean_ns,min_ns,max_ns,stddev_ns,share,self_ns (all rows;
/// self_ns last so that readers of the older columns keep working).
std::string stats_csv(const TraceStats& s);
/// {"schema":"rtx.trace_stats.v2","file","by" ("name"|"path"),"events","unmatched_be","unclosed_b",
/// "clipped","filtered_out","groups":[{"category",
/// "total_ns" (sum of self_ns), "names","rows":[{"name","count","total_ns","self_ns",
/// "mean_ns","min_ns","max_ns","stddev_ns","share"}]}]}; top `top` rows per group (0 = all).
/// v2 (2026-12): the group's total_ns and each share come from self time; v1 summed the
/// inclusive durations, counting nested spans twice.
nlohmann::json stats_json(const TraceStats& s, size_t top);

}  // namespace rtx::trace
