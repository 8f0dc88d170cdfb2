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

void StackTrie::set_frac_digits(int digits) {
  if (digits <= frac_digits_) return;
  if (digits > 6) digits = 6;
  uint64_t f = 1;
  for (int i = frac_digits_; i < digits; ++i) f *= 10;
  for (int c = 0; c < 2; ++c)
    if (added_[c] > kMaxWeight / f)
      throw_input("profile weights sum past 2^62 once scaled to " + std::to_string(digits) + " fractional digits",
                  "stack trie", "the input's counts are not real");
  for (Node& n : nodes_) {
    n.self[0] *= f;
    n.self[1] *= f;
    n.total[0] *= f;
    n.total[1] *= f;
  }
  added_[0] *= f;
  added_[1] *= f;
  frac_digits_ = digits;
}

namespace {

/// A folded count: digits with an optional ".digits" (or ".digits" alone). Sets `int_part`
/// and `frac` (the fractional digits, as written). False when `c` is not such a number.
bool parse_count(std::string_view c, std::string_view& int_part, std::string_view& frac) {
  size_t i = 0;
  while (i < c.size() && std::isdigit(static_cast<unsigned char>(c[i]))) ++i;
  int_part = c.substr(0, i);
  frac = {};
  if (i < c.size() && c[i] == '.') {
    size_t j = i + 1;
    while (j < c.size() && std::isdigit(static_cast<unsigned char>(c[j]))) ++j;
    frac = c.substr(i + 1, j - i - 1);
    i = j;
  }
  return i == c.size() && (!int_part.empty() || !frac.empty());
}

/// The count as a fixed-point weight with `digits` fractional digits (rounded half up past
/// them). False when it passes kMaxWeight.
bool count_weight(std::string_view int_part, std::string_view frac, int digits, uint64_t& w) {
  w = 0;
  for (char ch : int_part) {
    const uint64_t d = static_cast<uint64_t>(ch - '0');
    if (w > (StackTrie::kMaxWeight - d) / 10) return false;  // checked before it could wrap
    w = w * 10 + d;
  }
  for (int k = 0; k < digits; ++k) {
    const uint64_t d = k < static_cast<int>(frac.size()) ? static_cast<uint64_t>(frac[k] - '0') : 0;
    if (w > (StackTrie::kMaxWeight - d) / 10) return false;
    w = w * 10 + d;
  }
  if (static_cast<int>(frac.size()) > digits && frac[digits] >= '5') {
    if (w >= StackTrie::kMaxWeight) return false;
    ++w;
  }
  return true;
}

}  // namespace

FoldedRead read_folded(const std::string& path, StackTrie& trie, int which, const FoldedOptions& opt) {
  ByteReader in(path);
  FoldedRead r;
  std::string line;
  uint64_t lineno = 0;
  std::vector<std::string_view> frames;
  for (; in.getline(line);) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t end = line.size();
    while (end > 0 && std::isspace(static_cast<unsigned char>(line[end - 1]))) --end;
    if (end == 0) continue;
    auto where = [&]() { return path + ":" + std::to_string(lineno); };  // built only for errors
    auto bad = [&](const std::string& why, const std::string& hint) {
      if (opt.strict) throw_input(why, where(), hint);
      if (r.bad_lines++ == 0) {
        r.first_bad_line = lineno;
        r.first_bad_reason = why;
      }
    };
    const char* kHint = "each line ends with a space and a count, e.g. \"main;work 42\" (without --strict such "
                        "lines are skipped and counted)";
    size_t sp = line.find_last_of(" \t", end - 1);
    if (sp == std::string::npos) {
      bad("folded line has no count (expected \"frame;frame;frame COUNT\")", kHint);
      continue;
    }
    std::string_view ip[2], fr[2];
    if (!parse_count(std::string_view(line.data() + sp + 1, end - sp - 1), ip[0], fr[0])) {
      bad("folded count \"" + line.substr(sp + 1, end - sp - 1) + "\" is not a non-negative number", kHint);
      continue;
    }
    size_t stack_end = sp;
    while (stack_end > 0 && (line[stack_end - 1] == ' ' || line[stack_end - 1] == '\t')) --stack_end;
    // A second count before it: "stack BASE NEW" (difffolded.pl).
    int ncounts = 1;
    if (stack_end > 0) {
      const size_t sp2 = line.find_last_of(" \t", stack_end - 1);
      if (sp2 != std::string::npos &&
          parse_count(std::string_view(line.data() + sp2 + 1, stack_end - sp2 - 1), ip[1], fr[1])) {
        ncounts = 2;
        stack_end = sp2;
        while (stack_end > 0 && (line[stack_end - 1] == ' ' || line[stack_end - 1] == '\t')) --stack_end;
      }
    }
    // Frames; empty ones dropped.
    frames.clear();
    uint64_t empty = 0;
    for (size_t start = 0;;) {
      size_t semi = line.find(';', start);
      if (semi == std::string::npos || semi > stack_end) semi = stack_end;
      if (semi > start) frames.emplace_back(line.data() + start, semi - start);
      else ++empty;
      if (semi == stack_end) break;
      start = semi + 1;
    }
    // The leaf's trailing blanks belong to the separator before the count: written text puts
    // " COUNT" right after the leaf, so "x\t;" (a trailing ';') must read as its written form
    // "x\t 5" does, as "x". A leaf of blanks only is an empty frame.
    while (!frames.empty()) {
      std::string_view& lf = frames.back();
      while (!lf.empty() && (lf.back() == ' ' || lf.back() == '\t')) lf.remove_suffix(1);
      if (!lf.empty()) break;
      frames.pop_back();
      ++empty;
    }
    if (frames.empty()) {
      bad("folded line has no frame before its count", kHint);
      continue;
    }
    if (empty) {
      if (opt.strict)
        throw_input("folded line has an empty frame name (\"a;;b\" or a leading/trailing ';')", where(),
                    "without --strict empty frames are dropped");
      r.empty_frames += empty;
    }
    // Fractions: the trie's fixed point follows the most digits met (at most 6).
    const int digits = static_cast<int>(std::max(fr[0].size(), ncounts == 2 ? fr[1].size() : size_t(0)));
    if (digits > trie.frac_digits()) trie.set_frac_digits(std::min(digits, 6));
    uint64_t w[2] = {0, 0};
    for (int k = 0; k < ncounts; ++k)
      if (!count_weight(ip[k], fr[k], trie.frac_digits(), w[k]))
        throw_input("folded count \"" + std::string(ip[k]) + (fr[k].empty() ? "" : "." + std::string(fr[k])) +
                        "\" is above 2^62" + (trie.frac_digits() ? " (in units of 10^-" + std::to_string(trie.frac_digits()) + ")" : ""),
                    where(), "counts are sample counts or ns");
    uint32_t node = 0;
    for (size_t k = 0; k + 1 < frames.size(); ++k) node = trie.child(node, trie.intern(frames[k]));
    // A leaf frame ending in a blank and a number ("x 5" from "x 5 3 7") would read back as a
    // count: its blank becomes '_', as fold_trace names frames, so written text reads back the same.
    const std::string_view leaf = frames.back();
    const size_t lsp = leaf.find_last_of(" \t");
    std::string_view lip, lfr;
    if (lsp != std::string_view::npos && parse_count(leaf.substr(lsp + 1), lip, lfr)) {
      std::string named(leaf);
      named[lsp] = '_';
      node = trie.child(node, trie.intern(named));
    } else {
      node = trie.child(node, trie.intern(leaf));
    }
    // Two counts: BASE (the first) into column 1, NEW into column 0, as flamegraph.pl draws them.
    const int cols[2] = {ncounts == 2 ? 1 : which, 0};
    const uint64_t ws[2] = {ncounts == 2 ? w[1] : w[0], w[0]};
    for (int k = 0; k < ncounts; ++k)
      if (ws[k] > StackTrie::kMaxWeight - trie.added(cols[k]))
        throw_input("folded counts sum past 2^62", where(), "counts are sample counts or ns");
    for (int k = 0; k < ncounts; ++k) trie.add_self(node, ws[k], cols[k]);
    r.differential += ncounts == 2;
    ++r.stacks;
  }
  return r;
}

std::string write_folded(const StackTrie& trie, int which) {
  std::vector<std::pair<std::string, uint64_t>> lines;
  const auto& nodes = trie.nodes();
  for (size_t i = 1; i < nodes.size(); ++i)
    if (nodes[i].self[which] > 0) lines.emplace_back(trie.path(static_cast<uint32_t>(i)), nodes[i].self[which]);
  std::sort(lines.begin(), lines.end());
  std::string out;
  uint64_t scale = 1;
  for (int i = 0; i < trie.frac_digits(); ++i) scale *= 10;
  for (const auto& [p, w] : lines) {
    out += p;
    out += ' ';
    out += std::to_string(w / scale);
    if (scale > 1 && w % scale) {
      std::string f = std::to_string(w % scale);
      f.insert(0, static_cast<size_t>(trie.frac_digits()) - f.size(), '0');
      while (f.back() == '0') f.pop_back();
      out += '.';
      out += f;
    }
    out += '\n';
  }
  return out;
}

bool looks_like_trace(const std::string& path) {
  // JSON opens with '{' then '"' or '}', or with '[' then '{' or ']' (blanks between). A folded
  // line may start with '[' too ("[unknown];main 5", perf's unknown frames sort first).
  ByteReader in(path);
  int first = -1;
  for (int c = in.get(); c >= 0; c = in.get()) {
    if (std::isspace(c)) continue;
    if (first < 0) {
      if (c != '{' && c != '[') return false;
      first = c;
      continue;
    }
    return first == '{' ? (c == '"' || c == '}') : (c == '{' || c == ']');
  }
  return first == '[';  // "[" alone: an array-form trace cut short (the format allows no "]")
}

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// stackcollapse-perf.pl's sample header, /^(\S.+?)\s+(\d+)\/*(\d+)*\s+/: the command name
/// (shortest, >= 2 characters, may hold blanks) before a blank, a pid or pid/tid, a blank.
bool perf_header(const std::string& l, std::string& comm) {
  if (l.empty() || is_blank(l[0])) return false;
  for (size_t end = 2; end < l.size(); ++end) {
    if (!is_blank(l[end])) continue;
    size_t j = end;
    while (j < l.size() && is_blank(l[j])) ++j;
    if (j >= l.size() || !std::isdigit(static_cast<unsigned char>(l[j]))) continue;
    while (j < l.size() && std::isdigit(static_cast<unsigned char>(l[j]))) ++j;
    while (j < l.size() && l[j] == '/') ++j;
    while (j < l.size() && std::isdigit(static_cast<unsigned char>(l[j]))) ++j;
    if (j < l.size() && is_blank(l[j])) {
      comm = l.substr(0, end);
      return true;
    }
  }
  return false;
}

/// The header's period and event, /:\s*(\d+)*\s+(\S+):\s*$/ (leftmost ':' that matches).
bool perf_event(const std::string& l, std::string& period, std::string& event) {
  size_t e = l.size();
  while (e > 0 && is_blank(l[e - 1])) --e;
  if (e == 0 || l[e - 1] != ':') return false;
  // (\S+) ends just before that final ':' and starts after a blank.
  const size_t ev_end = e - 1;
  size_t ev_start = ev_end;
  while (ev_start > 0 && !is_blank(l[ev_start - 1])) --ev_start;
  if (ev_start == ev_end || ev_start == 0) return false;
  // Before it: ':' blanks [digits] blanks. The leftmost ':' for which this holds wins; the
  // event token may itself hold ':' ("cpu-clock:ppp"), so it is the last blank-free token.
  size_t k = ev_start;
  while (k > 0 && is_blank(l[k - 1])) --k;
  size_t d = k;
  while (d > 0 && std::isdigit(static_cast<unsigned char>(l[d - 1]))) --d;
  size_t c = d;
  while (c > 0 && is_blank(l[c - 1])) --c;
  if (c > 0 && l[c - 1] == ':' && (d < k ? true : k < ev_start)) {
    period = l.substr(d, k - d);
    event = l.substr(ev_start, ev_end - ev_start);
    return true;
  }
  if (k > 0 && l[k - 1] == ':' && k < ev_start) {  // no period: "time: event:"
    period.clear();
    event = l.substr(ev_start, ev_end - ev_start);
    return true;
  }
  return false;
}

/// A stack line, /^\s*(\w+)\s*(.+) \((.*)\)/: address, symbol, module (the last " (" that a
/// ')' follows, up to the last ')').
bool perf_frame(const std::string& l, std::string& func, std::string& mod) {
  size_t i = 0;
  while (i < l.size() && is_blank(l[i])) ++i;
  const size_t pc = i;
  while (i < l.size() && is_word(l[i])) ++i;
  if (i == pc) return false;
  while (i < l.size() && is_blank(l[i])) ++i;
  const size_t close = l.rfind(')');
  if (close == std::string::npos || close <= i) return false;
  size_t open = l.rfind(" (", close);
  while (open != std::string::npos && open < i + 1) open = std::string::npos;  // (.+) needs a character
  if (open == std::string::npos) return false;
  func = l.substr(i, open - i);
  mod = l.substr(open + 2, close - open - 2);
  return true;
}

/// stackcollapse-perf.pl's tidy_generic of one function name.
std::string perf_tidy(std::string f, bool java) {
  for (char& c : f)
    if (c == ';') c = ':';
  // Unless a Go method ("net/http.(*Client).Do": ".(" ... ")."), everything from the first
  // '(' that does not open "(anonymous namespace)" is noise (argument lists).
  const size_t go_open = f.find(".(");
  const bool go = go_open != std::string::npos && f.find(").", go_open + 2) != std::string::npos;
  if (!go) {
    for (size_t p = f.find('('); p != std::string::npos; p = f.find('(', p + 1))
      if (f.compare(p, 21, "(anonymous namespace)") != 0) {
        f.erase(p);
        break;
      }
  }
  f.erase(std::remove_if(f.begin(), f.end(), [](char c) { return c == '"' || c == '\''; }), f.end());
  if (java && f.find('/') != std::string::npos && !f.empty() && f[0] == 'L') f.erase(0, 1);
  return f;
}

}  // namespace

PerfRead collapse_perf(const std::string& path, StackTrie& trie, int which) {
  ByteReader in(path);
  PerfRead r;
  std::string line, comm, period, event, func, mod;
  std::string pname;       // "" = no sample open (or one of another event)
  uint64_t weight = 1;
  std::vector<std::vector<std::string>> groups;  // per stack line, leaf first
  uint64_t lineno = 0;
  bool any_period = false;
  auto flush = [&]() {
    if (!pname.empty()) {
      uint32_t node = trie.child(0, trie.intern(pname));
      for (size_t g = groups.size(); g-- > 0;)
        for (const std::string& f : groups[g])
          if (!f.empty()) node = trie.child(node, trie.intern(f));
      if (weight > StackTrie::kMaxWeight - trie.added(which))
        throw_input("perf sample weights sum past 2^62", path + ":" + std::to_string(lineno), "periods are counts of events");
      trie.add_self(node, weight, which);
      ++r.samples;
    }
    pname.clear();
    groups.clear();
  };
  bool skipping = false;  // inside a sample of another event
  while (in.getline(line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line[0] == '#') continue;
    if (line.find_first_not_of(" \t") == std::string::npos) {
      flush();
      skipping = false;
      continue;
    }
    if (perf_header(line, comm)) {
      flush();
      skipping = false;
      uint64_t p = 1;
      if (perf_event(line, period, event)) {
        if (r.event.empty()) r.event = event;
        if (event != r.event) {
          ++r.other_event_samples;
          skipping = true;
          continue;
        }
        if (!period.empty()) {
          any_period = true;
          p = 0;
          for (char ch : period) {
            if (p > (StackTrie::kMaxWeight - 9) / 10) break;
            p = p * 10 + static_cast<uint64_t>(ch - '0');
          }
        }
      }
      weight = p;
      pname = comm;
      for (char& ch : pname)
        if (ch == ' ') ch = '_';
      continue;
    }
    if (perf_frame(line, func, mod)) {
      if (skipping || pname.empty()) continue;
      // Linux 4.8+ prints symbol offsets ("func+0x1f"): strip them.
      const size_t plus = func.rfind("+0x");
      if (plus != std::string::npos && plus + 3 < func.size() &&
          std::all_of(func.begin() + static_cast<long>(plus) + 3, func.end(),
                      [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'); }))
        func.erase(plus);
      if (!func.empty() && func[0] == '(') continue;  // process names
      std::vector<std::string> frames;
      size_t start = 0;
      for (;;) {  // "a->b": inlined frames
        const size_t arrow = func.find("->", start);
        std::string f = func.substr(start, arrow == std::string::npos ? std::string::npos : arrow - start);
        if (f == "[unknown]") {
          if (mod != "[unknown]") {
            const size_t slash = mod.rfind('/');
            f = "[" + (slash == std::string::npos ? mod : mod.substr(slash + 1)) + "]";
          }
        }
        frames.push_back(perf_tidy(f, pname.rfind("java", 0) == 0));
        if (arrow == std::string::npos) break;
        start = arrow + 2;
      }
      groups.push_back(std::move(frames));
      continue;
    }
    if (r.unrecognized++ == 0) r.first_unrecognized_line = lineno;
  }
  flush();  // a last sample without its closing blank line
  r.periods = any_period;
  const std::string base = r.event.substr(0, r.event.find(':'));
  trie.unit = !any_period ? "samples" : (base == "cpu-clock" || base == "task-clock") ? "ns" : base;
  return r;
}

bool looks_like_perf(const std::string& path) {
  ByteReader in(path);
  std::string line, comm;
  int seen = 0;
  bool header = false;
  while (in.getline(line) && seen < 64) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    ++seen;
    if (!header) {
      if (!perf_header(line, comm)) return false;
      size_t e = line.size();
      while (e > 0 && is_blank(line[e - 1])) --e;
      if (e > 0 && line[e - 1] == ':') return true;
      header = true;
      continue;
    }
    std::string f, m;
    return is_blank(line[0]) && perf_frame(line, f, m);
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
  uint32_t order;  // event index in the file (tie-break; wraps past 2^32 events: ties only)
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
  // Nor a blank before a trailing number ("layer 3"): a reader takes that number as a first
  // count (two counts = a differential line).
  const size_t sp = r.find_last_of(" \t");
  if (sp != std::string::npos && sp + 1 < r.size()) {
    std::string_view ip, fr;
    if (parse_count(std::string_view(r).substr(sp + 1), ip, fr)) r[sp] = '_';
  }
  if (r.empty()) r = "[unnamed]";
  return r;
}

/// An event's time in integer ns (exact from the file's text; see time_ns). Refuses a missing
/// (NaN) time and any beyond +-4e15 us, naming the event.
int64_t to_ns(double us, int64_t exact, const std::string& path, uint64_t index, const char* field) {
  int64_t ns = 0;
  if (!time_ns(us, exact, ns))
    throw_input("event #" + std::to_string(index) + " has " +
                    (std::isnan(us) && exact == kNoNs ? std::string("no ") + field
                                                      : std::string(field) + " out of range (" + std::to_string(us) + " us)"),
                path, "times and durations are microseconds within +-4e15 (126.8 years)");
  return ns;
}

}  // namespace

FoldResult fold_trace(const std::string& path, StackTrie& trie, int which, FoldMode mode, bool strict) {
  FoldResult res;
  std::vector<Slice> slices;
  std::map<std::pair<int64_t, int64_t>, uint32_t> tracks;
  /// A B or E event, paired after the stream in timestamp order.
  struct BE {
    int64_t ts;
    uint64_t order;
    uint32_t name;
    uint8_t kind;
    bool is_b;
    bool has_corr;
    int64_t corr;
  };
  std::vector<std::vector<BE>> be;  // per track
  std::unordered_map<std::string, std::pair<uint32_t, int64_t>> flow_start;  // id -> (track, ts)
  std::vector<std::pair<uint32_t, int64_t>> flow_end_loc;                     // (track, ts) of f
  std::vector<std::string> flow_end_id;
  std::unordered_map<int64_t, std::pair<uint32_t, int64_t>> corr_api;  // args.correlation of API slices
  std::vector<std::pair<size_t, int64_t>> gpu_corr;                    // (slice idx, correlation)
  bool any_gpu = false;
  auto track_of = [&](int64_t pid, int64_t tid) {
    auto [it, fresh] = tracks.emplace(std::make_pair(pid, tid), static_cast<uint32_t>(tracks.size()));
    if (fresh) be.emplace_back();
    return it->second;
  };
  auto correlation = [](const Event& e, int64_t& c) {
    if (!e.args.is_object()) return false;
    auto it = e.args.find("correlation");
    if (it == e.args.end()) it = e.args.find("correlation_id");
    if (it == e.args.end() || !it->is_number_integer()) return false;
    c = it->get<int64_t>();
    return true;
  };
  auto add_slice = [&](Slice s, bool has_corr, int64_t corr) {
    if (has_corr) {
      if (s.kind == kApi) corr_api[corr] = {s.track, s.ts};
      else if (s.kind == kGpu) gpu_corr.emplace_back(slices.size(), corr);
    }
    any_gpu = any_gpu || s.kind == kGpu;
    slices.push_back(s);
  };
  uint64_t index = 0;
  read_trace(path, [&](Event&& e) {
    const uint64_t order = index++;
    if (e.ph == 'X' || e.ph == 'B' || e.ph == 'E') {
      const uint32_t tr = track_of(e.pid, e.tid);
      int64_t corr = 0;
      const bool has_corr = correlation(e, corr);
      if (e.ph != 'X') {
        be[tr].push_back({to_ns(e.ts, e.ts_ns, path, order, "ts"), order,
                          e.ph == 'B' ? trie.intern(clean_frame(e.name)) : 0, classify(e.cat), e.ph == 'B', has_corr,
                          corr});
        return;
      }
      if (!(e.dur >= 0))
        throw_input("complete event #" + std::to_string(order) + " (\"" + e.name + "\") has no dur", path,
                    "X events need a non-negative dur (us)");
      Slice s{};
      s.track = tr;
      s.name = trie.intern(clean_frame(e.name));
      s.ts = to_ns(e.ts, e.ts_ns, path, order, "ts");
      s.dur = to_ns(e.dur, e.dur_ns, path, order, "dur");
      s.kind = classify(e.cat);
      s.order = static_cast<uint32_t>(order);
      add_slice(s, has_corr, corr);
    } else if (e.ph == 's') {
      flow_start[e.cat + "\x1f" + e.id] = {track_of(e.pid, e.tid), to_ns(e.ts, e.ts_ns, path, order, "ts")};
    } else if (e.ph == 'f') {
      flow_end_loc.emplace_back(track_of(e.pid, e.tid), to_ns(e.ts, e.ts_ns, path, order, "ts"));
      flow_end_id.push_back(e.cat + "\x1f" + e.id);
    }
  }, ReadOptions{true});
  res.events = index;
  // B/E per thread in timestamp order (stable: equal times keep file order), then paired; the
  // format lets writers emit them unsorted (speedscope PR #322 pairs them the same way).
  for (uint32_t tr = 0; tr < be.size(); ++tr) {
    auto& v = be[tr];
    std::stable_sort(v.begin(), v.end(), [](const BE& a, const BE& b) { return a.ts < b.ts; });
    std::vector<const BE*> open;
    for (const BE& x : v) {
      if (x.is_b) {
        open.push_back(&x);
        continue;
      }
      if (open.empty()) {
        if (strict)
          throw_input("unbalanced B/E: event #" + std::to_string(x.order) + " (E) closes nothing on its thread", path,
                      "every E needs an earlier B on the same thread (rtx-trace validate lists all violations)");
        ++res.stray_e;
        continue;
      }
      const BE& b = *open.back();
      open.pop_back();
      Slice s{};
      s.track = tr;
      s.name = b.name;
      s.ts = b.ts;
      s.dur = x.ts - b.ts;  // >= 0: sorted
      s.kind = b.kind;      // the B's category (an E usually has none)
      s.order = static_cast<uint32_t>(b.order);
      add_slice(s, b.has_corr || x.has_corr, b.has_corr ? b.corr : x.corr);
    }
    if (!open.empty() && strict)
      throw_input("unbalanced B/E: " + std::to_string(open.size()) + " B event(s) never closed (innermost \"" +
                      trie.name(open.back()->name) + "\")",
                  path, "close every B with an E on the same thread, or record the trace again");
    res.unclosed_b += open.size();
  }
  res.mode = mode == FoldMode::Auto ? (any_gpu ? FoldMode::Gpu : FoldMode::Cpu) : mode;
  const size_t ntracks = tracks.size();
  std::vector<std::vector<uint32_t>> by_track(ntracks);
  for (size_t i = 0; i < slices.size(); ++i) by_track[slices[i].track].push_back(static_cast<uint32_t>(i));
  auto order = [&](uint32_t a, uint32_t b) {
    if (slices[a].ts != slices[b].ts) return slices[a].ts < slices[b].ts;
    if (slices[a].dur != slices[b].dur) return slices[a].dur > slices[b].dur;  // the longer encloses
    return slices[a].order < slices[b].order;  // identical: the earlier in the file encloses (as stats)
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
        if (!st.empty() && end > st.back().end) {  // clamp partial overlap into the parent
          end = st.back().end;
          ++res.clipped;
        }
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
