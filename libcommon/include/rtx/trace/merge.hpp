// Merge several Chrome traces (ranks, processes, runs) onto one timeline, one process track
// per input process: pids remapped, process/thread names kept, flow ids kept apart.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rtx::trace {

struct MergeResult {
  uint64_t events = 0;      ///< events written (metadata included)
  size_t processes = 0;     ///< process tracks in the output
  bool clock_aligned = false;  ///< true: every input carried otherData.start_unix_ns and
                               ///< was shifted onto one wall clock; false: all start at 0
};

/// Merge `inputs` (Chrome traces, gzip transparent) into `output` (.gz = compressed). Input i's
/// pid p becomes a new pid (1, 2, ... in input order); its process_name is kept (or set to
/// "<file basename> pid p"), a process_labels entry names the file, process_sort_index keeps
/// input order. Flow ids are offset per input so they stay paired. Streams each input twice
/// (facts, then events). Errors: read_trace's; rtx::Error(Usage) for fewer than 1 input.
MergeResult merge_traces(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace rtx::trace
