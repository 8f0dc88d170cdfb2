// compute_stats: one streaming pass (Welford accumulators per (category, name) for the
// inclusive durations; slices kept per thread), then per thread a sweep over the slices by
// start time with a stack of open slices for the self times (the definitions: stats.hpp).
#include "rtx/trace/stats.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "rtx/core/error.hpp"
#include "rtx/trace/trace_event.hpp"

namespace rtx::trace {
namespace {

const char* kGroups[] = {"gpu_kernels", "gpu_memory", "cuda_api", "ops"};

int group_of(const std::string& cat_in) {
  std::string c = cat_in;
  for (char& ch : c) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (c == "kernel" || c == "cuda_kernel" || c == "gpu_op") return 0;
  if (c == "memcpy" || c == "memset" || c == "gpu_memcpy" || c == "gpu_memset") return 1;
  if (c == "cuda_runtime" || c == "cuda_driver" || c == "cuda_api" || c == "runtime" || c == "driver") return 2;
  return 3;
}

struct Acc {
  uint64_t n = 0;
  double mean = 0, m2 = 0, min = 0, max = 0, total = 0;
  double self_ns = 0;  // integer-valued: exact below 2^53 ns (104 days)
  void add(double x) {
    ++n;
    total += x;
    const double d = x - mean;
    mean += d / static_cast<double>(n);
    m2 += d * (x - mean);
    min = n == 1 ? x : std::min(min, x);
    max = n == 1 ? x : std::max(max, x);
  }
};

/// One slice to nest: integer ns (exact sums and comparisons), its (category, name) key and
/// its position in the file (the tie-break for equal start and duration).
struct Slice {
  int64_t ts, dur;  // ns
  uint32_t key;
  uint64_t order;
};

/// us -> ns when |us| <= 1e15 (sums of starts and durations stay far inside int64).
bool to_ns(double us, int64_t& ns) {
  if (!(std::fabs(us) <= 1e15)) return false;
  ns = static_cast<int64_t>(std::llround(us * 1000.0));
  return true;
}

/// Self times of one thread's slices into acc[key].self_ns (sorts `v`).
void add_self_times(std::vector<Slice>& v, std::vector<Acc>& acc) {
  std::sort(v.begin(), v.end(), [](const Slice& a, const Slice& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    if (a.dur != b.dur) return a.dur > b.dur;  // the longer encloses
    return a.order < b.order;                  // identical: the earlier in the file encloses
  });
  struct Open {
    int64_t end;  // clipped to the enclosing slice's end
    uint32_t key;
  };
  std::vector<Open> st;
  for (const Slice& s : v) {
    while (!st.empty() && st.back().end <= s.ts) st.pop_back();  // ended: touching = sibling
    int64_t end = s.ts + s.dur;
    if (!st.empty()) end = std::min(end, st.back().end);  // clip an overrun to the parent
    const int64_t d = end - s.ts;                          // >= 0: s starts inside the parent
    acc[s.key].self_ns += static_cast<double>(d);
    if (!st.empty()) acc[st.back().key].self_ns -= static_cast<double>(d);  // the parent's time covered by this child
    st.push_back({end, s.key});
  }
}

std::string fmt_time(double us) {
  char b[32];
  const double a = std::fabs(us);
  if (a >= 1e6) std::snprintf(b, sizeof b, "%.3f s", us / 1e6);
  else if (a >= 1e3) std::snprintf(b, sizeof b, "%.3f ms", us / 1e3);
  else if (a >= 1) std::snprintf(b, sizeof b, "%.3f us", us);
  else std::snprintf(b, sizeof b, "%.0f ns", us * 1e3);
  return b;
}

}  // namespace

TraceStats compute_stats(const std::string& path) {
  TraceStats st;
  st.file = path;
  std::map<std::pair<int, std::string>, uint32_t> keys;  // (group, name) -> index into acc
  std::vector<Acc> acc;
  auto key_of = [&](const std::string& cat, const std::string& name) {
    auto [it, fresh] = keys.emplace(std::make_pair(group_of(cat), name), static_cast<uint32_t>(acc.size()));
    if (fresh) acc.emplace_back();
    return it->second;
  };
  struct OpenB {
    uint32_t key;
    double ts;
    uint64_t order;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<OpenB>> open;
  std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> slices;  // per (pid, tid)
  // Times outside +-1e15 us (31.7 years; rtx-flame's bound) or not finite are refused, naming
  // the event, rather than summed into inf/nan totals.
  auto add_slice = [&](int64_t pid, int64_t tid, uint32_t key, double ts_us, double dur_us, uint64_t order) {
    int64_t ts = 0, dur = 0;
    const bool ts_ok = to_ns(ts_us, ts);
    if (!ts_ok || !to_ns(dur_us, dur)) {
      const double bad = ts_ok ? dur_us : ts_us;
      throw_input("event #" + std::to_string(order) + (std::isnan(bad) ? std::string(" has no ") + (ts_ok ? "dur" : "ts")
                                                                       : std::string(" has a ") + (ts_ok ? "duration" : "timestamp") +
                                                                             " out of range (" + std::to_string(bad) + " us)"),
                  path, "times and durations are microseconds within +-1e15 (31.7 years)");
    }
    acc[key].add(static_cast<double>(dur) / 1e3);  // the ns the self times are computed in
    slices[{pid, tid}].push_back({ts, dur, key, order});
  };
  uint64_t index = 0;
  ReadOptions ro;
  ro.keep_args = false;
  TraceInfo info = read_trace(path, [&](Event&& e) {
    const uint64_t order = index++;
    if (e.ph == 'X') {
      if (!(e.dur >= 0))  // the reader leaves -1 where an X event has no "dur"
        throw_input("event #" + std::to_string(order) + " (ph X \"" + e.name.substr(0, 60) + "\") has " +
                        (e.dur == -1 ? std::string("no \"dur\" (or dur -1)")
                                     : "a negative \"dur\" (" + std::to_string(e.dur) + " us)"),
                    path, "a complete event (ph X) lasts dur >= 0 microseconds");
      add_slice(e.pid, e.tid, key_of(e.cat, e.name), e.ts, e.dur, order);
    } else if (e.ph == 'B') {
      open[{e.pid, e.tid}].push_back({key_of(e.cat, e.name), e.ts, order});
    } else if (e.ph == 'E') {
      auto& v = open[{e.pid, e.tid}];
      if (v.empty()) {
        ++st.unmatched;
        return;
      }
      const OpenB b = v.back();
      v.pop_back();
      if (e.ts < b.ts)
        throw_input("event #" + std::to_string(order) + " (ph E) ends at " + std::to_string(e.ts) +
                        " us, before its B event #" + std::to_string(b.order) + " began (" + std::to_string(b.ts) + " us)",
                    path, "an E event closes the latest open B of its thread and comes after it");
      add_slice(e.pid, e.tid, b.key, b.ts, e.ts - b.ts, b.order);
    }
  }, ro);
  for (auto& [k, v] : open) st.unclosed_b += v.size();
  st.unmatched += st.unclosed_b;
  for (auto& [k, v] : slices) add_self_times(v, acc);
  st.events = info.events;
  for (int g = 0; g < 4; ++g) {
    StatGroup grp;
    grp.category = kGroups[g];
    for (auto& [k, i] : keys) {
      if (k.first != g) continue;
      const Acc& a = acc[i];
      if (a.n == 0) continue;  // a name only on B events never closed (counted in unmatched_be)
      StatRow r;
      r.name = k.second;
      r.count = a.n;
      r.total_us = a.total;
      r.self_us = a.self_ns / 1e3;
      r.mean_us = a.mean;
      r.min_us = a.min;
      r.max_us = a.max;
      r.stddev_us = a.n > 0 ? std::sqrt(a.m2 / static_cast<double>(a.n)) : 0;
      grp.total_us += r.self_us;
      grp.rows.push_back(std::move(r));
    }
    if (grp.rows.empty()) continue;
    for (auto& r : grp.rows) r.share = grp.total_us > 0 ? r.self_us / grp.total_us : 0;
    std::sort(grp.rows.begin(), grp.rows.end(), [](const StatRow& a, const StatRow& b) {
      if (a.self_us != b.self_us) return a.self_us > b.self_us;
      if (a.total_us != b.total_us) return a.total_us > b.total_us;
      return a.name < b.name;
    });
    st.groups.push_back(std::move(grp));
  }
  return st;
}

std::string stats_table(const TraceStats& s, size_t top) {
  std::string out;
  char line[512];
  // B/E events without a partner are ignored (stats summarizes what pairs; validate checks).
  std::string unpaired;
  if (s.unclosed_b)
    unpaired += std::to_string(s.unclosed_b) + " B event(s) never closed (no matching E)";
  if (s.unmatched > s.unclosed_b)
    unpaired += (unpaired.empty() ? "" : " and ") + std::to_string(s.unmatched - s.unclosed_b) +
                " E event(s) without an open B";
  if (!unpaired.empty())
    unpaired = "note: " + unpaired + " were ignored (rtx-trace validate " + s.file + " names them)\n";
  if (s.groups.empty()) return "no complete slices (X or B/E pairs) in " + s.file + "\n" + unpaired;
  for (const auto& g : s.groups) {
    std::snprintf(line, sizeof line, "== %s: %zu names, busy %s (the sum of self times; share = self / busy)\n",
                  g.category.c_str(), g.rows.size(), fmt_time(g.total_us).c_str());
    out += line;
    std::snprintf(line, sizeof line, "%7s %12s %12s %9s %12s %12s %12s %12s  %s\n", "share", "self", "total", "count",
                  "mean", "min", "max", "stddev", "name");
    out += line;
    size_t n = 0;
    for (const auto& r : g.rows) {
      if (top && n++ >= top) break;
      std::snprintf(line, sizeof line, "%6.2f%% %12s %12s %9llu %12s %12s %12s %12s  ", 100 * r.share,
                    fmt_time(r.self_us).c_str(), fmt_time(r.total_us).c_str(), static_cast<unsigned long long>(r.count),
                    fmt_time(r.mean_us).c_str(), fmt_time(r.min_us).c_str(), fmt_time(r.max_us).c_str(),
                    fmt_time(r.stddev_us).c_str());
      out += line;
      out += r.name;
      out += '\n';
    }
    if (top && g.rows.size() > top) out += "  ... " + std::to_string(g.rows.size() - top) + " more (use --top 0)\n";
    out += '\n';
  }
  out += "self: time a slice is the innermost open one on its thread (duration minus direct children);\n"
         "total, mean, min, max, stddev: of the slices' durations (children included)\n";
  out += unpaired;
  return out;
}

std::string stats_csv(const TraceStats& s) {
  std::string out = "category,name,count,total_ns,mean_ns,min_ns,max_ns,stddev_ns,share,self_ns\n";
  char b[256];
  for (const auto& g : s.groups)
    for (const auto& r : g.rows) {
      std::string name = "\"";
      for (char c : r.name) {
        if (c == '"') name += '"';
        name += c;
      }
      name += '"';
      std::snprintf(b, sizeof b, ",%llu,%.0f,%.1f,%.0f,%.0f,%.1f,%.6f,%.0f\n", static_cast<unsigned long long>(r.count),
                    r.total_us * 1e3, r.mean_us * 1e3, r.min_us * 1e3, r.max_us * 1e3, r.stddev_us * 1e3, r.share,
                    r.self_us * 1e3);
      out += g.category + "," + name + b;
    }
  return out;
}

nlohmann::json stats_json(const TraceStats& s, size_t top) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : s.groups) {
    nlohmann::json rows = nlohmann::json::array();
    size_t n = 0;
    for (const auto& r : g.rows) {
      if (top && n++ >= top) break;
      // Whole ns (the sums are float us): total_ns >= self_ns holds exactly as it does in fact.
      rows.push_back({{"name", r.name}, {"count", r.count}, {"total_ns", std::llround(r.total_us * 1e3)},
                      {"self_ns", std::llround(r.self_us * 1e3)},
                      {"mean_ns", r.mean_us * 1e3}, {"min_ns", r.min_us * 1e3}, {"max_ns", r.max_us * 1e3},
                      {"stddev_ns", r.stddev_us * 1e3}, {"share", r.share}});
    }
    groups.push_back(
        {{"category", g.category}, {"total_ns", std::llround(g.total_us * 1e3)}, {"names", g.rows.size()}, {"rows", rows}});
  }
  return {{"schema", "rtx.trace_stats.v2"}, {"file", s.file}, {"events", s.events}, {"unmatched_be", s.unmatched},
          {"unclosed_b", s.unclosed_b},
          {"groups", groups}};
}

}  // namespace rtx::trace
