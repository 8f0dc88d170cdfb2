// Trace statistics like `nsys stats`: per category (GPU kernels, GPU memory ops, CUDA API,
// ops/ranges), per name: count, total, mean, min, max, stddev, share; table, CSV or JSON.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rtx::trace {

struct StatRow {
  std::string name;
  uint64_t count = 0;
  double total_us = 0, mean_us = 0, min_us = 0, max_us = 0, stddev_us = 0;  ///< stddev: population
  double share = 0;  ///< total / the group's total (0..1)
};
struct StatGroup {
  std::string category;  ///< "gpu_kernels" | "gpu_memory" | "cuda_api" | "ops"
  double total_us = 0;
  std::vector<StatRow> rows;  ///< by total, descending (ties: name)
};
struct TraceStats {
  std::string file;
  uint64_t events = 0;
  uint64_t unmatched = 0;  ///< B/E events without a partner (ignored)
  std::vector<StatGroup> groups;  ///< non-empty groups only, in the order above
};

/// Duration statistics of the X slices and B/E pairs of a trace file (streamed; memory grows
/// with distinct names). Errors: read_trace's.
TraceStats compute_stats(const std::string& path);

/// Fixed-width table with units (top `top` rows per group; 0 = all).
std::string stats_table(const TraceStats& s, size_t top);
/// CSV: category,name,count,total_ns,mean_ns,min_ns,max_ns,stddev_ns,share (all rows).
std::string stats_csv(const TraceStats& s);
/// {"schema":"rtx.trace_stats.v1","file","events","groups":[{"category","total_ns","rows":[...]}]}.
nlohmann::json stats_json(const TraceStats& s, size_t top);

}  // namespace rtx::trace
