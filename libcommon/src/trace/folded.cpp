// StackTrie, folded-stack reading/writing and the folding of Chrome traces (CPU nesting with
// self time, GPU kernels under their launching op stack).
#include "rtx/trace/folded.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "rtx/core/error.hpp"
#include "rtx/trace/gzip_io.hpp"
#include "rtx/trace/trace_event.hpp"

namespace rtx::trace {

StackTrie::StackTrie() {
  nodes_.push_back(Node{intern("all"), 0, 0, {0, 0}, {0, 0}});
}

uint32_t StackTrie::intern(std::string_view name) {
  auto it = name_ids_.find(name);
  if (it != name_ids_.end()) return it->second;
  storage_.emplace_back(name);
  const uint32_t id = static_cast<uint32_t>(names_.size());
  names_.push_back(&storage_.back());
  name_ids_.emplace(std::string_view(storage_.back()), id);
  return id;
}

uint32_t StackTrie::child(uint32_t parent, uint32_t name_id) {
  const uint64_t key = (static_cast<uint64_t>(parent) << 32) | name_id;
  auto it = child_ids_.find(key);
  if (it != child_ids_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back(Node{name_id, parent, nodes_[parent].depth + 1, {0, 0}, {0, 0}});
  child_ids_.emplace(key, id);
  return id;
}

void StackTrie::compute_totals() {
  for (Node& n : nodes_) {
    n.total[0] = n.self[0];
    n.total[1] = n.self[1];
  }
  // Children always have larger ids than their parent: one reverse sweep suffices.
  for (size_t i = nodes_.size(); i-- > 1;) {
    Node& n = nodes_[i];
    nodes_[n.parent].total[0] += n.total[0];
    nodes_[n.parent].total[1] += n.total[1];
  }
}

std::vector<std::vector<uint32_t>> StackTrie::sorted_children() const {
  std::vector<std::vector<uint32_t>> ch(nodes_.size());
  for (size_t i = 1; i < nodes_.size(); ++i) ch[nodes_[i].parent].push_back(static_cast<uint32_t>(i));
  for (auto& c : ch)
    std::sort(c.begin(), c.end(), [&](uint32_t a, uint32_t b) { return name(nodes_[a].name) < name(nodes_[b].name); });
  return ch;
}

void StackTrie::add_self(uint32_t node, uint64_t weight, int which) {
  if (weight > kMaxWeight - added_[which])
    throw_input("profile weights sum past 2^62 (" + unit + ")", "stack trie", "the input's counts or times are not real");
  added_[which] += weight;
  nodes_[node].self[which] += weight;
}

uint64_t StackTrie::total_weight(int which) const {
  uint64_t t = 0;
  for (const Node& n : nodes_) t += n.self[which];
  return t;
}

std::string StackTrie::path(uint32_t node) const {
  std::vector<uint32_t> chain;
  for (uint32_t n = node; n != 0; n = nodes_[n].parent) chain.push_back(n);
  std::string s;
  for (size_t i = chain.size(); i-- > 0;) {
    s += name(nodes_[chain[i]].name);
    if (i) s += ';';
  }
  return s;
}

uint64_t read_folded(const std::string& path, StackTrie& trie, int which) {
  ByteReader in(path);
  std::string line;
  uint64_t lineno = 0, stacks = 0;
  while (in.getline(line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t end = line.size();
    while (end > 0 && std::isspace(static_cast<unsigned char>(line[end - 1]))) --end;
    if (end == 0) continue;
    const size_t sp = line.find_last_of(" \t", end - 1);
    const std::string where = path + ":" + std::to_string(lineno);
    if (sp == std::string::npos)
      throw_input("folded line has no count (expected \"frame;frame;frame COUNT\")", where,
                  "each line ends with a space and a non-negative number");
    const std::string_view count(line.data() + sp + 1, end - sp - 1);
    uint64_t w = 0;
    size_t i = 0;
    bool digits = false;
    for (; i < count.size() && std::isdigit(static_cast<unsigned char>(count[i])); ++i) {
      const uint64_t d = static_cast<uint64_t>(count[i] - '0');
      digits = true;
      if (w > (StackTrie::kMaxWeight - d) / 10)  // checked before it could wrap
        throw_input("folded count \"" + std::string(count) + "\" is above 2^62", where, "counts are sample counts or ns");
      w = w * 10 + d;
    }
    if (i < count.size() && count[i] == '.') {
      size_t j = i + 1;
      const size_t frac_start = j;
      while (j < count.size() && std::isdigit(static_cast<unsigned char>(count[j]))) ++j;
      if (j == count.size() && (digits || j > frac_start)) {
        if (frac_start < count.size() && count[frac_start] >= '5') ++w;
        i = j;
        digits = true;
      }
    }
    if (!digits || i != count.size())
      throw_input("folded count \"" + std::string(count) + "\" is not a non-negative number", where,
                  "each line ends with a space and a count, e.g. \"main;work 42\"");
    size_t stack_end = sp;
    while (stack_end > 0 && (line[stack_end - 1] == ' ' || line[stack_end - 1] == '\t')) --stack_end;
    uint32_t node = 0;
    size_t start = 0;
    while (start <= stack_end) {
      size_t semi = line.find(';', start);
      if (semi == std::string::npos || semi > stack_end) semi = stack_end;
      node = trie.child(node, trie.intern(std::string_view(line.data() + start, semi - start)));
      start = semi + 1;
      if (semi == stack_end) break;
    }
    if (w > StackTrie::kMaxWeight - trie.added(which))
      throw_input("folded counts sum past 2^62", where, "counts are sample counts or ns");
    trie.add_self(node, w, which);
    ++stacks;
  }
  return stacks;
}

std::string write_folded(const StackTrie& trie, int which) {
  std::vector<std::pair<std::string, uint64_t>> lines;
  const auto& nodes = trie.nodes();
  for (size_t i = 1; i < nodes.size(); ++i)
    if (nodes[i].self[which] > 0) lines.emplace_back(trie.path(static_cast<uint32_t>(i)), nodes[i].self[which]);
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& [p, w] : lines) {
    out += p;
    out += ' ';
    out += std::to_string(w);
    out += '\n';
  }
  return out;
}

bool looks_like_trace(const std::string& path) {
  ByteReader in(path);
  for (int c = in.get(); c >= 0; c = in.get()) {
    if (std::isspace(c)) continue;
    return c == '{' || c == '[';
  }
  return false;
}

namespace {

enum Kind : uint8_t { kCpu = 0, kGpu = 1, kApi = 2 };

struct Slice {
  int64_t ts;    // ns
  int64_t dur;   // ns
  uint32_t name;
  uint32_t track;
  uint8_t kind;
  uint32_t corr;  // index into launches (+1), 0 = none
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Kind classify(const std::string& cat) {
  if (cat.empty()) return kCpu;
  const std::string c = lower(cat);
  if (c == "kernel" || c == "memcpy" || c == "memset" || c.rfind("gpu", 0) == 0 || c == "cuda_kernel") return kGpu;
  if (c == "cuda_runtime" || c == "cuda_driver" || c == "cuda_api" || c == "runtime" || c == "driver") return kApi;
  return kCpu;
}

std::string clean_frame(const std::string& s) {
  std::string r = s;
  for (char& c : r) {
    if (c == ';') c = ':';
    else if (c == '\n' || c == '\r') c = ' ';
  }
  // Trailing blanks cannot survive folded text (a reader takes them as the count's separator).
  while (!r.empty() && (r.back() == ' ' || r.back() == '\t')) r.pop_back();
  if (r.empty()) r = "[unnamed]";
  return r;
}

/// Microseconds (the format's unit) to integer ns. Refuses a missing (NaN) time and any beyond
/// +-1e15 us (31.7 years), so that sums of a start and a duration stay far inside int64.
int64_t to_ns(double us, const std::string& path, uint64_t index, const char* field) {
  if (!(std::fabs(us) <= 1e15))
    throw_input("event #" + std::to_string(index) + " has " + (std::isnan(us) ? std::string("no ") + field
                                                                 : std::string(field) + " out of range (" + std::to_string(us) + " us)"),
                path, "times and durations are microseconds within +-1e15 (31.7 years)");
  return static_cast<int64_t>(std::llround(us * 1000.0));
}

}  // namespace

FoldResult fold_trace(const std::string& path, StackTrie& trie, int which, FoldMode mode) {
  FoldResult res;
  std::vector<Slice> slices;
  std::map<std::pair<int64_t, int64_t>, uint32_t> tracks;
  std::vector<std::vector<std::pair<uint32_t, int64_t>>> open_b;  // per track: (name, ts)
  std::unordered_map<std::string, std::pair<uint32_t, int64_t>> flow_start;  // id -> (track, ts)
  std::vector<std::pair<uint32_t, int64_t>> flow_end_loc;                     // (track, ts) of f
  std::vector<std::string> flow_end_id;
  std::unordered_map<int64_t, std::pair<uint32_t, int64_t>> corr_api;  // args.correlation of API slices
  std::vector<std::pair<size_t, int64_t>> gpu_corr;                    // (slice idx, correlation)
  bool any_gpu = false;
  auto track_of = [&](int64_t pid, int64_t tid) {
    auto [it, fresh] = tracks.emplace(std::make_pair(pid, tid), static_cast<uint32_t>(tracks.size()));
    if (fresh) open_b.emplace_back();
    return it->second;
  };
  uint64_t index = 0;
  read_trace(path, [&](Event&& e) {
    ++index;
    if (e.ph == 'X' || e.ph == 'B' || e.ph == 'E') {
      const uint32_t tr = track_of(e.pid, e.tid);
      if (e.ph == 'B') {
        open_b[tr].emplace_back(trie.intern(clean_frame(e.name)), to_ns(e.ts, path, index - 1, "ts"));
        return;
      }
      Slice s{};
      s.track = tr;
      if (e.ph == 'E') {
        if (open_b[tr].empty())
          throw_input("unbalanced B/E: event #" + std::to_string(index - 1) + " (E \"" + e.name +
                          "\") closes nothing on pid " + std::to_string(e.pid) + " tid " + std::to_string(e.tid),
                      path, "every E needs an earlier B on the same thread (rtx-trace validate lists all violations)");
        auto [nm, ts] = open_b[tr].back();
        open_b[tr].pop_back();
        s.name = nm;
        s.ts = ts;
        s.dur = std::max<int64_t>(0, to_ns(e.ts, path, index - 1, "ts") - ts);
        s.kind = classify(e.cat);
      } else {
        if (!(e.dur >= 0))
          throw_input("complete event #" + std::to_string(index - 1) + " (\"" + e.name + "\") has no dur", path,
                      "X events need a non-negative dur (us)");
        s.name = trie.intern(clean_frame(e.name));
        s.ts = to_ns(e.ts, path, index - 1, "ts");
        s.dur = to_ns(e.dur, path, index - 1, "dur");
        s.kind = classify(e.cat);
      }
      if (e.args.is_object()) {
        auto it = e.args.find("correlation");
        if (it == e.args.end()) it = e.args.find("correlation_id");
        if (it != e.args.end() && it->is_number_integer()) {
          if (s.kind == kApi) corr_api[it->get<int64_t>()] = {tr, s.ts};
          else if (s.kind == kGpu) gpu_corr.emplace_back(slices.size(), it->get<int64_t>());
        }
      }
      any_gpu = any_gpu || s.kind == kGpu;
      slices.push_back(s);
    } else if (e.ph == 's') {
      flow_start[e.cat + "\x1f" + e.id] = {track_of(e.pid, e.tid), to_ns(e.ts, path, index - 1, "ts")};
    } else if (e.ph == 'f') {
      flow_end_loc.emplace_back(track_of(e.pid, e.tid), to_ns(e.ts, path, index - 1, "ts"));
      flow_end_id.push_back(e.cat + "\x1f" + e.id);
    }
  }, ReadOptions{true});
  res.events = index;
  for (size_t t = 0; t < open_b.size(); ++t)
    if (!open_b[t].empty())
      throw_input("unbalanced B/E: " + std::to_string(open_b[t].size()) + " B event(s) never closed (innermost \"" +
                      trie.name(open_b[t].back().first) + "\")",
                  path, "close every B with an E on the same thread, or record the trace again");
  res.mode = mode == FoldMode::Auto ? (any_gpu ? FoldMode::Gpu : FoldMode::Cpu) : mode;
  const size_t ntracks = tracks.size();
  std::vector<std::vector<uint32_t>> by_track(ntracks);
  for (size_t i = 0; i < slices.size(); ++i) by_track[slices[i].track].push_back(static_cast<uint32_t>(i));
  auto order = [&](uint32_t a, uint32_t b) {
    if (slices[a].ts != slices[b].ts) return slices[a].ts < slices[b].ts;
    return slices[a].dur > slices[b].dur;
  };
  // Stable: a parent and a child with the same ts and dur keep their file order (parent first).
  for (auto& v : by_track) std::stable_sort(v.begin(), v.end(), order);

  if (res.mode == FoldMode::Cpu) {
    std::vector<int64_t> self(1);
    struct Open { int64_t end; uint32_t node; };
    std::vector<Open> st;
    for (auto& v : by_track) {
      st.clear();
      for (uint32_t i : v) {
        const Slice& s = slices[i];
        if (s.kind != kCpu && s.kind != kApi) continue;
        while (!st.empty() && st.back().end <= s.ts) st.pop_back();
        int64_t end = s.ts + s.dur;
        if (!st.empty()) end = std::min(end, st.back().end);  // clamp partial overlap into the parent
        const int64_t dur = end - s.ts;
        const uint32_t parent = st.empty() ? 0 : st.back().node;
        const uint32_t node = trie.child(parent, s.name);
        if (self.size() < trie.nodes().size()) self.resize(trie.nodes().size() * 2, 0);
        // Self times stay within int64 unless the slices of one stack sum past 2^63 ns.
        if (__builtin_add_overflow(self[node], dur, &self[node]) ||
            (parent && __builtin_sub_overflow(self[parent], dur, &self[parent])))
          throw_input("slice durations of one stack sum past 2^63 ns", path, "record a trace with real times");
        st.push_back({end, node});
        ++res.slices;
      }
    }
    for (size_t n = 1; n < self.size() && n < trie.nodes().size(); ++n)
      if (self[n] > 0) {
        trie.add_self(static_cast<uint32_t>(n), static_cast<uint64_t>(self[n]), which);
        res.total_ns += static_cast<uint64_t>(self[n]);
      }
    trie.unit = "ns";
    return res;
  }

  // GPU: find each GPU slice's launch point (track, ts) on the CPU.
  std::vector<std::pair<uint32_t, int64_t>> launch(slices.size(), {UINT32_MAX, 0});
  for (auto [idx, corr] : gpu_corr) {
    auto it = corr_api.find(corr);
    if (it != corr_api.end()) launch[idx] = it->second;
  }
  if (!flow_end_loc.empty()) {
    // A flow end binds to the GPU slice on its track that starts at (or encloses) its ts.
    for (size_t k = 0; k < flow_end_loc.size(); ++k) {
      auto st = flow_start.find(flow_end_id[k]);
      if (st == flow_start.end()) continue;
      const auto [tr, ts] = flow_end_loc[k];
      const auto& v = by_track[tr];
      auto it = std::upper_bound(v.begin(), v.end(), ts, [&](int64_t t, uint32_t i) { return t < slices[i].ts; });
      while (it != v.begin()) {
        --it;
        const Slice& s = slices[*it];
        if (s.kind == kGpu && s.ts <= ts && ts <= s.ts + s.dur) {
          launch[*it] = st->second;
          break;
        }
        if (s.ts + s.dur < ts - 1000000000) break;
      }
    }
  }
  // Per CPU track: queries (launch ts, gpu slice) swept against the sorted CPU slices.
  std::vector<std::vector<std::pair<int64_t, uint32_t>>> queries(ntracks);
  for (size_t i = 0; i < slices.size(); ++i)
    if (slices[i].kind == kGpu && launch[i].first != UINT32_MAX)
      queries[launch[i].first].emplace_back(launch[i].second, static_cast<uint32_t>(i));
  std::vector<uint32_t> gpu_node(slices.size(), 0);
  struct Open { int64_t end; uint32_t node; };
  std::vector<Open> st;
  for (size_t tr = 0; tr < ntracks; ++tr) {
    auto& q = queries[tr];
    if (q.empty()) continue;
    std::sort(q.begin(), q.end());
    st.clear();
    const auto& v = by_track[tr];
    size_t p = 0;
    for (auto [t, gi] : q) {
      for (; p < v.size() && slices[v[p]].ts <= t; ++p) {
        const Slice& s = slices[v[p]];
        if (s.kind != kCpu) continue;  // API and GPU slices are not frames
        while (!st.empty() && st.back().end <= s.ts) st.pop_back();
        const uint32_t parent = st.empty() ? 0 : st.back().node;
        st.push_back({std::min(s.ts + s.dur, st.empty() ? INT64_MAX : st.back().end), trie.child(parent, s.name)});
      }
      while (!st.empty() && st.back().end < t) st.pop_back();
      gpu_node[gi] = st.empty() ? 0 : st.back().node;
      ++res.launches_linked;
    }
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    if (s.kind != kGpu) continue;
    const uint32_t node = trie.child(gpu_node[i], s.name);
    trie.add_self(node, static_cast<uint64_t>(s.dur), which);
    res.total_ns += static_cast<uint64_t>(s.dur);
    ++res.slices;
  }
  trie.unit = "ns";
  return res;
}

}  // namespace rtx::trace
