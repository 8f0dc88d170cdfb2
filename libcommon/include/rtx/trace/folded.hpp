// Folded stacks ("frame;frame;frame count", FlameGraph's collapsed format): an aggregating
// trie of frames, its reader and writer, and the folding of a Chrome trace into stacks
// (CPU: slice nesting per thread, weight = self time; GPU: launching op stack + kernel,
// weight = GPU time).
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rtx::trace {

/// Stacks aggregated into a trie as they are read (memory grows with distinct stacks, not
/// with samples). Node 0 is the root ("all"). Each node has two weight columns: 0 (the
/// profile, or NEW in a diff) and 1 (BASE in a diff).
class StackTrie {
 public:
  struct Node {
    uint32_t name = 0;     ///< interned frame name
    uint32_t parent = 0;
    uint32_t depth = 0;    ///< root 0
    uint64_t self[2] = {0, 0};
    uint64_t total[2] = {0, 0};  ///< filled by compute_totals()
  };
  StackTrie();
  /// Id of a frame name (interned once).
  uint32_t intern(std::string_view name);
  const std::string& name(uint32_t id) const { return *names_[id]; }
  /// Child `name_id` of `parent`, created when absent.
  uint32_t child(uint32_t parent, uint32_t name_id);
  /// Largest total weight of a column: sums of weights and totals never wrap 64 bits.
  static constexpr uint64_t kMaxWeight = uint64_t(1) << 62;
  /// Add weight to a node's self weight in column `which` (0 or 1). Errors: rtx::Error(Input)
  /// when the column's total would pass kMaxWeight.
  void add_self(uint32_t node, uint64_t weight, int which = 0);
  /// Weight added so far to column `which`.
  uint64_t added(int which = 0) const { return added_[which]; }
  /// Fill `total` (self + descendants) of every node.
  void compute_totals();
  const std::vector<Node>& nodes() const { return nodes_; }
  /// Children of every node, sorted by frame name (the layout order of a flame graph).
  std::vector<std::vector<uint32_t>> sorted_children() const;
  /// Sum of all self weights in column `which`.
  uint64_t total_weight(int which = 0) const;
  /// Frame path of `node` from the root's child down, joined by ';'.
  std::string path(uint32_t node) const;
  /// Unit of the weights: "ns" (time from traces); folded text carries none, so its reader
  /// names it (rtx-flame --countname), else the neutral "counts".
  std::string unit = "counts";
  /// Fixed point of the weights: a weight w stands for w / 10^frac_digits (0..6). Folded
  /// counts may be fractional (FlameGraph keeps them); read_folded raises this to the most
  /// fractional digits it meets (at most 6; more are rounded) and scales what it holds.
  int frac_digits() const { return frac_digits_; }
  /// Raise frac_digits to `digits` (<= 6), multiplying every weight by 10^(digits - old).
  /// Errors: rtx::Error(Input) when a column's total would pass kMaxWeight.
  void set_frac_digits(int digits);

 private:
  std::vector<Node> nodes_;
  std::deque<std::string> storage_;
  std::vector<const std::string*> names_;
  std::unordered_map<std::string_view, uint32_t> name_ids_;
  std::unordered_map<uint64_t, uint32_t> child_ids_;
  uint64_t added_[2] = {0, 0};
  int frac_digits_ = 0;
};

/// How read_folded treats bad lines.
struct FoldedOptions {
  /// Refuse the whole file at the first malformed line or empty frame (rtx::Error(Input)
  /// naming the line). Default: skip and count them, as flamegraph.pl and inferno do.
  bool strict = false;
};

/// What read_folded read.
struct FoldedRead {
  uint64_t stacks = 0;            ///< stack lines read
  uint64_t differential = 0;      ///< of those, lines with two counts (BASE NEW)
  uint64_t bad_lines = 0;         ///< malformed lines skipped (no count, non-numeric count, no frame)
  uint64_t first_bad_line = 0;    ///< 1-based line number of the first (0 = none)
  std::string first_bad_reason;   ///< what was wrong with it
  uint64_t empty_frames = 0;      ///< empty frame names dropped ("a;;b", a trailing ';')
};

/// Parse folded stacks from `path` ("-" = stdin, gzip transparent): one "f1;f2;...;fn COUNT"
/// per line, COUNT after the last blank (frames may hold spaces), a non-negative decimal
/// ("12", "2.5", ".5"; fractions kept to 6 digits, see StackTrie::frac_digits). A line with
/// two counts, "f1;...;fn BASE NEW" (FlameGraph's difffolded.pl writes "stack
/// count_from_folded1 count_from_folded2", and flamegraph.pl draws widths from the second and
/// colours by second - first), puts BASE into column 1 and NEW into column 0 whatever `which`
/// is; other lines go to column `which`. A leaf frame that would end in a blank and a number
/// ("x 5 3 7": stack "x 5") gets '_' for that blank, so written text reads back the same. Blank lines are skipped. Empty frame names are
/// dropped; malformed lines are skipped; both are counted in the result (opt.strict: refused).
/// Errors: rtx::Error(Input) naming the file and line for a count above 2^62 or counts summing
/// past it, and in strict mode for a malformed line or an empty frame.
FoldedRead read_folded(const std::string& path, StackTrie& trie, int which = 0, const FoldedOptions& opt = {});

/// Folded text of column `which`: one line per node with self weight > 0, sorted by path;
/// fractional weights (frac_digits > 0) as decimals without trailing zeros.
std::string write_folded(const StackTrie& trie, int which = 0);

/// What collapse_perf read.
struct PerfRead {
  uint64_t samples = 0;            ///< samples folded
  std::string event;               ///< the event kept (the first one met, e.g. "cpu-clock:ppp")
  uint64_t other_event_samples = 0;  ///< samples of other events, left out
  uint64_t unrecognized = 0;       ///< lines that are neither sample headers nor stack frames
  uint64_t first_unrecognized_line = 0;  ///< 1-based (0 = none)
  bool periods = false;            ///< weights are the samples' periods (else 1 per sample)
};

/// Collapse `perf script` text into `trie` column `which`, as FlameGraph's
/// stackcollapse-perf.pl does with its defaults: per sample, the command name (spaces made
/// '_') then the frames root first (perf prints the leaf first); function names without
/// "+0x..." offsets and without their "(args...)" (but "(anonymous namespace)" and Go
/// "pkg.(*T).M" kept), ';' made ':', quotes dropped; "[unknown]" symbols named by their
/// module's file name ("[libc.so.6]") or "[unknown]"; "a->b" inline chains split into
/// frames; kernel frames kept as they are. Weight: the sample's period when perf printed
/// one (then trie.unit is "ns" for cpu-clock/task-clock, else the event's name), else 1
/// ("samples"). Only samples of the first event type are kept (as stackcollapse-perf.pl).
/// '#' comment lines are skipped; other unrecognized lines are counted. Errors:
/// rtx::Error(Input) when weights sum past 2^62; read errors as ByteReader.
PerfRead collapse_perf(const std::string& path, StackTrie& trie, int which = 0);

/// True when a file looks like `perf script` output: its first line that is neither blank
/// nor a '#' comment is a sample header ("comm pid[/tid] ... time: [period] event:") that
/// ends with ':' or is followed by a stack frame line (blank, hex address, symbol).
bool looks_like_perf(const std::string& path);

/// How a trace is folded.
enum class FoldMode { Auto, Cpu, Gpu };

/// What fold_trace did.
struct FoldResult {
  FoldMode mode = FoldMode::Cpu;  ///< the mode used (Auto resolved: Gpu when GPU slices exist)
  uint64_t events = 0;            ///< events read
  uint64_t slices = 0;            ///< slices folded (weighted)
  uint64_t total_ns = 0;          ///< sum of weights added (ns)
  uint64_t launches_linked = 0;   ///< GPU slices attributed to a launching CPU stack
  uint64_t unclosed_b = 0;        ///< B events never closed (left out)
  uint64_t stray_e = 0;           ///< E events with no open B (left out)
  uint64_t clipped = 0;           ///< CPU mode: slices that overran their parent, clipped to its end
};

/// Fold a Chrome trace file into `trie` column `which`, weights in ns.
/// Times are integer ns, exact from the file's decimals, relative or absolute (us since the
/// Unix epoch, as Kineto writes), within +-4e15 us. B/E events are paired per thread in
/// timestamp order (a stable sort, as stats and validate do); a B never closed or an E with
/// no open B (what a killed program leaves) is left out and counted in the result, as
/// rtx-trace stats does (`strict`: refused instead).
/// CPU mode: per (pid, tid), X slices and B/E pairs nest by time; a slice's weight is its
/// self time (duration minus its children's), so the total equals the summed duration of
/// top-level slices. GPU mode (auto when the trace has GPU slices: cat kernel, memcpy,
/// memset, gpu_*): each GPU slice's stack is the CPU op/NVTX slices enclosing the API call
/// that launched it (linked by flow events s/f or args.correlation; API slices themselves,
/// cat cuda_runtime/cuda_driver/cuda_api, are left out) then its own name; weight = its
/// duration. Frame names have ';' replaced by ':', newlines by spaces, trailing spaces and tabs
/// dropped, and the blank before a trailing number made '_' ("layer 3" -> "layer_3": folded
/// text would read it as a second count), so the folded text reads back to the same stacks.
/// Errors: read_trace's; rtx::Error(Input) naming the event for a missing or out-of-range
/// time, an X without dur, and with `strict` for unbalanced B/E.
FoldResult fold_trace(const std::string& path, StackTrie& trie, int which = 0, FoldMode mode = FoldMode::Auto,
                      bool strict = false);

/// True when a file looks like a Chrome trace: its first non-blank bytes are '{' then '"' or
/// '}', or '[' then '{' or ']' (or a lone '['), blanks between; false for folded stacks, whose
/// first frame may start with '[' ("[unknown];main 5"). Gzip transparent. Errors: read errors as ByteReader.
bool looks_like_trace(const std::string& path);

}  // namespace rtx::trace
