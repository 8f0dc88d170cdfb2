#pragma once
// The ABBA order of paired measurements (one home: rtx-bench run --baseline-exe rounds,
// rtx-evolve's baseline/candidate trials, rtx-tune's interleaved samples).
#include <cstddef>

namespace rtx::stats {

/// Which arm runs in slot `slot` (0-based) of an interleaved A/B sequence in ABBA order: slots
/// (0,1) are A B, (2,3) B A, (4,5) A B, ...; returns 0 for A, 1 for B. Whatever running first
/// or second in a pair does to a measurement (cold caches, clock ramps) falls on both arms
/// equally (Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013).
constexpr int abba_arm(size_t slot) { return static_cast<int>((slot % 2) ^ ((slot / 2) % 2)); }

static_assert(abba_arm(0) == 0 && abba_arm(1) == 1 && abba_arm(2) == 1 && abba_arm(3) == 0 && abba_arm(4) == 0);

}  // namespace rtx::stats
