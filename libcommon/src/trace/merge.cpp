// merge_traces: two streaming passes per input (facts, then remapped events).
#include "rtx/trace/merge.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"
#include "rtx/trace/trace_event.hpp"

namespace rtx::trace {

MergeResult merge_traces(const std::vector<std::string>& inputs, const std::string& output) {
  if (inputs.empty()) throw_usage("merge needs at least one input trace", "inputs", "pass A B ... -o OUT");
  io::require_output_dir(output, "-o");  // before reading the inputs twice
  // -o naming an input would replace it with the merge (the atomic write succeeds): refuse.
  struct stat so {};
  if (output != "-" && ::stat(output.c_str(), &so) == 0)
    for (const std::string& in : inputs) {
      struct stat si {};
      if (in != "-" && ::stat(in.c_str(), &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        throw_usage(output + " is the input " + in + ": the merge would overwrite it", "-o", "write the merge to another file");
    }
  struct Facts {
    std::vector<int64_t> pids;  // first-seen order
    std::map<int64_t, bool> named;
    uint64_t start_unix_ns = 0;
  };
  std::vector<Facts> facts(inputs.size());
  bool all_clock = true;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Facts& f = facts[i];
    std::set<int64_t> seen;
    ReadOptions ro;
    ro.keep_args = false;
    TraceInfo info = read_trace(inputs[i], [&](Event&& e) {
      if (seen.insert(e.pid).second) f.pids.push_back(e.pid);
      if (e.ph == 'M' && e.name == "process_name") f.named[e.pid] = true;
    }, ro);
    if (info.other_data.is_object() && info.other_data.contains("start_unix_ns") &&
        info.other_data["start_unix_ns"].is_number_unsigned())
      f.start_unix_ns = info.other_data["start_unix_ns"].get<uint64_t>();
    else
      all_clock = false;
  }
  uint64_t t0 = UINT64_MAX;
  for (const Facts& f : facts) t0 = std::min(t0, f.start_unix_ns);
  MergeResult res;
  res.clock_aligned = all_clock && inputs.size() > 0;
  TraceWriter::Options wo;
  nlohmann::json srcs = nlohmann::json::array();
  for (const auto& p : inputs) srcs.push_back(p);
  wo.other_data = {{"merged_from", srcs}, {"clock_aligned", res.clock_aligned}};
  if (res.clock_aligned) wo.other_data["start_unix_ns"] = t0;
  TraceWriter w(output, wo);
  int64_t next_pid = 1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Facts& f = facts[i];
    std::map<int64_t, int64_t> remap;
    const std::string base = inputs[i].substr(inputs[i].find_last_of('/') + 1);
    for (int64_t p : f.pids) {
      const int64_t np = next_pid++;
      remap[p] = np;
      if (!f.named.count(p)) w.process_name(np, base + " pid " + std::to_string(p));
      Event lab;
      lab.ph = 'M';
      lab.name = "process_labels";
      lab.pid = np;
      lab.args = {{"labels", base}};
      w.add(lab);
      w.process_sort_index(np, np);
      ++res.processes;
    }
    const double shift_us = res.clock_aligned ? static_cast<double>(f.start_unix_ns - t0) / 1e3 : 0.0;
    const uint64_t id_offset = static_cast<uint64_t>(i) * 1000000000000ull;
    read_trace(inputs[i], [&](Event&& e) {
      e.pid = remap[e.pid];
      if (!std::isnan(e.ts) && e.ph != 'M') {
        e.ts += shift_us;
        // Keep the exact ns (epoch timestamps) when the shift leaves it inside int64.
        const int64_t shift_ns = res.clock_aligned ? static_cast<int64_t>(f.start_unix_ns - t0) : 0;
        if (e.ts_ns != kNoNs && __builtin_add_overflow(e.ts_ns, shift_ns, &e.ts_ns)) e.ts_ns = kNoNs;
      }
      if (!e.id.empty()) {
        const bool numeric = e.id.find_first_not_of("0123456789") == std::string::npos && e.id.size() <= 12;
        e.id = numeric ? std::to_string(std::stoull(e.id) + id_offset)
                       : std::to_string(id_offset + (std::hash<std::string>{}(e.id) % 1000000000000ull));
      }
      w.add(e);
    });
  }
  w.commit();
  res.events = w.events_written();
  return res;
}

}  // namespace rtx::trace
