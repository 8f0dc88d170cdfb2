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

 private:
  std::vector<Node> nodes_;
  std::deque<std::string> storage_;
  std::vector<const std::string*> names_;
  std::unordered_map<std::string_view, uint32_t> name_ids_;
  std::unordered_map<uint64_t, uint32_t> child_ids_;
  uint64_t added_[2] = {0, 0};
};

/// Parse folded stacks from `path` ("-" = stdin, gzip transparent) into column `which`:
/// one "f1;f2;...;fn COUNT" per line, COUNT after the last space (frames may hold spaces),
/// a non-negative integer (a decimal part is rounded). Blank lines are skipped.
/// Errors: rtx::Error(Input) naming the file and line for a missing or non-numeric count.
/// Returns the number of stack lines read.
uint64_t read_folded(const std::string& path, StackTrie& trie, int which = 0);

/// Folded text of column `which`: one line per node with self weight > 0, sorted by path.
std::string write_folded(const StackTrie& trie, int which = 0);

/// How a trace is folded.
enum class FoldMode { Auto, Cpu, Gpu };

/// What fold_trace did.
struct FoldResult {
  FoldMode mode = FoldMode::Cpu;  ///< the mode used (Auto resolved: Gpu when GPU slices exist)
  uint64_t events = 0;            ///< events read
  uint64_t slices = 0;            ///< slices folded (weighted)
  uint64_t total_ns = 0;          ///< sum of weights added (ns)
  uint64_t launches_linked = 0;   ///< GPU slices attributed to a launching CPU stack
};

/// Fold a Chrome trace file into `trie` column `which`, weights in ns.
/// CPU mode: per (pid, tid), X slices and B/E pairs nest by time; a slice's weight is its
/// self time (duration minus its children's), so the total equals the summed duration of
/// top-level slices. GPU mode (auto when the trace has GPU slices: cat kernel, memcpy,
/// memset, gpu_*): each GPU slice's stack is the CPU op/NVTX slices enclosing the API call
/// that launched it (linked by flow events s/f or args.correlation; API slices themselves,
/// cat cuda_runtime/cuda_driver/cuda_api, are left out) then its own name; weight = its
/// duration. Frame names have ';' replaced by ':', newlines by spaces, and trailing spaces and tabs
/// dropped (folded text could not keep them), so the folded text reads back to the same stacks.
/// Errors: read_trace's; rtx::Error(Input) for unbalanced B/E (naming the event).
FoldResult fold_trace(const std::string& path, StackTrie& trie, int which = 0, FoldMode mode = FoldMode::Auto);

/// True when a file looks like a Chrome trace (first non-blank byte '{' or '['), false for
/// folded stacks. Gzip transparent. Errors: read errors as ByteReader.
bool looks_like_trace(const std::string& path);

}  // namespace rtx::trace
