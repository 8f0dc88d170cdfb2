// compute_stats: one streaming pass collecting slices per thread (B/E paired afterwards in ts
// order), then per thread a sweep over the slices by start time with a stack of open slices:
// Welford accumulators of the durations and the self times per row (the definitions: stats.hpp).
#include "rtx/trace/stats.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
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

/// Rows by (group, name or stack path) -> accumulator.
struct Rows {
  std::map<std::pair<int, std::string>, uint32_t> keys;
  std::vector<Acc> acc;
  std::vector<std::string> names;  // per row
  uint32_t key_of(int group, const std::string& name) {
    auto [it, fresh] = keys.emplace(std::make_pair(group, name), static_cast<uint32_t>(acc.size()));
    if (fresh) {
      acc.emplace_back();
      names.push_back(name);
    }
    return it->second;
  }
};

/// Per thread: nest the slices (sorts `v`), add each slice's duration and self time to its row
/// (by name: its slice key; by path: the chain of enclosing names, root first, joined by ';').
/// Returns how many slices overran their parent and were clipped.
uint64_t add_self_times(std::vector<Slice>& v, const std::vector<std::pair<int, std::string>>& slice_keys, bool by_path,
                        Rows& rows, std::map<std::pair<uint32_t, uint32_t>, uint32_t>& path_ids) {
  std::sort(v.begin(), v.end(), [](const Slice& a, const Slice& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    if (a.dur != b.dur) return a.dur > b.dur;  // the longer encloses
    return a.order < b.order;                  // identical: the earlier in the file encloses
  });
  struct Open {
    int64_t end;  // clipped to the enclosing slice's end
    uint32_t row;
  };
  std::vector<Open> st;
  uint64_t clipped = 0;
  for (const Slice& s : v) {
    while (!st.empty() && st.back().end <= s.ts) st.pop_back();  // ended: touching = sibling
    int64_t end = s.ts + s.dur;
    if (!st.empty() && end > st.back().end) {  // clip an overrun to the parent
      end = st.back().end;
      ++clipped;
    }
    const int64_t d = end - s.ts;  // >= 0: s starts inside the parent
    uint32_t row = s.key;
    if (by_path) {
      // Row ids of paths: (parent row + 1 or 0, slice key) -> row named "parent path;name".
      const uint32_t parent = st.empty() ? 0 : st.back().row + 1;
      auto it = path_ids.find({parent, s.key});
      if (it == path_ids.end()) {
        const auto& [group, name] = slice_keys[s.key];
        row = rows.key_of(group, parent ? rows.names[parent - 1] + ";" + name : name);
        path_ids.emplace(std::make_pair(parent, s.key), row);
      } else {
        row = it->second;
      }
    }
    rows.acc[row].add(static_cast<double>(s.dur) / 1e3);  // the ns the self times are computed in
    rows.acc[row].self_ns += static_cast<double>(d);
    if (!st.empty()) rows.acc[st.back().row].self_ns -= static_cast<double>(d);  // the parent's time covered by this child
    st.push_back({end, row});
  }
  return clipped;
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

TraceStats compute_stats(const std::string& path, const StatsOptions& opt) {
  TraceStats st;
  st.file = path;
  st.by_path = opt.by_path;
  // Slice keys: (group, name), interned while streaming; rows are made when nesting.
  std::map<std::pair<int, std::string>, uint32_t> key_ids;
  std::vector<std::pair<int, std::string>> slice_keys;
  auto key_of = [&](const std::string& cat, const std::string& name) {
    auto [it, fresh] = key_ids.emplace(std::make_pair(group_of(cat), name), static_cast<uint32_t>(slice_keys.size()));
    if (fresh) slice_keys.push_back(it->first);
    return it->second;
  };
  /// A B or E event, paired after the stream (B/E may come out of timestamp order).
  struct BE {
    int64_t ts;  // ns
    uint32_t key;
    uint64_t order;
    bool is_b;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<BE>> be;
  std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> slices;  // per (pid, tid)
  // Times beyond +-4e15 us (126.8 years; rtx-flame's bound) or not finite are refused, naming
  // the event, rather than summed into inf/nan totals. Absolute (Unix epoch) times are fine.
  auto bad_time = [&](uint64_t order, bool ts, double us) {
    throw_input("event #" + std::to_string(order) +
                    (std::isnan(us) ? std::string(" has no ") + (ts ? "ts" : "dur")
                                    : std::string(" has a ") + (ts ? "timestamp" : "duration") + " out of range (" +
                                          std::to_string(us) + " us)"),
                path, "times and durations are microseconds within +-4e15 (126.8 years)");
  };
  uint64_t index = 0;
  ReadOptions ro;
  ro.keep_args = false;
  TraceInfo info = read_trace(path, [&](Event&& e) {
    const uint64_t order = index++;
    if (e.ph != 'X' && e.ph != 'B' && e.ph != 'E') return;
    if (e.ph == 'X' && !(e.dur >= 0))  // the reader leaves -1 where an X event has no "dur"
      throw_input("event #" + std::to_string(order) + " (ph X \"" + e.name.substr(0, 60) + "\") has " +
                      (e.dur == -1 ? std::string("no \"dur\" (or dur -1)")
                                   : "a negative \"dur\" (" + std::to_string(e.dur) + " us)"),
                  path, "a complete event (ph X) lasts dur >= 0 microseconds");
    int64_t ts = 0;
    if (!time_ns(e.ts, e.ts_ns, ts)) bad_time(order, true, e.ts);
    if (e.ph == 'X') {
      int64_t dur = 0;
      if (!time_ns(e.dur, e.dur_ns, dur)) bad_time(order, false, e.dur);
      slices[{e.pid, e.tid}].push_back({ts, dur, key_of(e.cat, e.name), order});
    } else {
      be[{e.pid, e.tid}].push_back({ts, e.ph == 'B' ? key_of(e.cat, e.name) : 0, order, e.ph == 'B'});
    }
  }, ro);
  // Pair B/E per thread in timestamp order (stable: equal times keep file order), as
  // speedscope (PR #322) and Perfetto do; the format does not require them sorted.
  for (auto& [tr, v] : be) {
    std::stable_sort(v.begin(), v.end(), [](const BE& a, const BE& b) { return a.ts < b.ts; });
    std::vector<const BE*> open;
    for (const BE& x : v) {
      if (x.is_b) {
        open.push_back(&x);
      } else if (open.empty()) {
        ++st.unmatched;  // an E with no open B
      } else {
        const BE* b = open.back();
        open.pop_back();
        slices[tr].push_back({b->ts, x.ts - b->ts, b->key, b->order});
      }
    }
    st.unclosed_b += open.size();
  }
  st.unmatched += st.unclosed_b;
  Rows rows;
  if (!opt.by_path)
    for (const auto& k : slice_keys) rows.key_of(k.first, k.second);  // row id = slice key
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> path_ids;
  for (auto& [k, v] : slices) st.clipped += add_self_times(v, slice_keys, opt.by_path, rows, path_ids);
  st.events = info.events;
  std::regex match;
  if (!opt.match.empty()) {
    try {
      match = std::regex(opt.match, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw_usage("--match is not a valid regular expression (" + std::string(e.what()) + "): " + opt.match, "--match");
    }
  }
  for (int g = 0; g < 4; ++g) {
    StatGroup grp;
    grp.category = kGroups[g];
    for (auto& [k, i] : rows.keys) {
      if (k.first != g) continue;
      const Acc& a = rows.acc[i];
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
      grp.total_us += r.self_us;  // the busy time counts every row, shown or filtered out
      if (!opt.match.empty() && !std::regex_search(r.name, match)) {
        ++st.filtered_out;
        continue;
      }
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

std::string stats_notes(const TraceStats& s) {
  std::string out;
  if (s.clipped)
    out += "note: " + std::to_string(s.clipped) +
           " slice(s) overran their parent on the same thread and were clipped to its end (rtx-trace validate "
           "names them as x-nesting)\n";
  if (s.filtered_out) out += "note: " + std::to_string(s.filtered_out) + " row(s) not matching --match left out\n";
  return out;
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
  unpaired += stats_notes(s);
  if (s.groups.empty())
    return (s.filtered_out ? "no rows match --match in " : "no complete slices (X or B/E pairs) in ") + s.file + "\n" +
           unpaired;
  for (const auto& g : s.groups) {
    std::snprintf(line, sizeof line, "== %s: %zu %s, busy %s (the sum of self times; share = self / busy)\n",
                  g.category.c_str(), g.rows.size(), s.by_path ? "paths" : "names", fmt_time(g.total_us).c_str());
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
  return {{"schema", "rtx.trace_stats.v2"}, {"file", s.file}, {"by", s.by_path ? "path" : "name"},
          {"events", s.events}, {"unmatched_be", s.unmatched}, {"unclosed_b", s.unclosed_b}, {"clipped", s.clipped},
          {"filtered_out", s.filtered_out},
          {"groups", groups}};
}

}  // namespace rtx::trace
