#!/usr/bin/env bash
# span_overhead.sh: the cost of engine spans and kernel.launch records on a training step.
# Runs `rtx-train run` alternately without events and with `--events FILE` (what rtx-trace
# record turns on), PAIRS times each, and prints each run's mean step time (ms, from its
# tokens/s: rtx-train's mean over the timed steps) and the median
# ratio (on / off) with the events written per step. Not CI (a benchmark, minutes).
#
#   PAIRS=5 PRESET=shakespeare-char BATCH=16 SEQ=256 STEPS=6 bench/span_overhead.sh
#
# Environment (defaults in brackets): RTX_TRAIN [<repo>/build/bin/rtx-train], RTX_DATA
# [<repo>/../shared/data], PRESET [shakespeare-char], BATCH [16], SEQ [256], STEPS [6],
# PAIRS [5], THREADS [0 = the runtime's default].
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
RTX_TRAIN=${RTX_TRAIN:-$repo/build/bin/rtx-train}
RTX_DATA=${RTX_DATA:-$repo/../shared/data}
PRESET=${PRESET:-shakespeare-char}
BATCH=${BATCH:-16}
SEQ=${SEQ:-256}
STEPS=${STEPS:-6}
PAIRS=${PAIRS:-5}
THREADS=${THREADS:-0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$RTX_TRAIN" prepare --tokenizer char "$RTX_DATA/tinyshakespeare/input.txt" -o "$work/data" -q
run() {  # $1: extra flags; prints the mean step time in ms (steps after the first)
  "$RTX_TRAIN" run --json -q --data "$work/data" --preset "$PRESET" --batch "$BATCH" --seq-len "$SEQ" \
    --steps "$STEPS" --eval-iters 0 --eval-interval 100000 --threads "$THREADS" --no-promoted $1 |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(f'{1000.0 * $BATCH * $SEQ / d[\"tokens_per_s\"]:.2f}')"
}
echo "preset $PRESET, batch $BATCH x $SEQ, $STEPS steps, $PAIRS pairs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs)"
ratios=()
for i in $(seq "$PAIRS"); do
  off=$(run "")
  rm -f "$work/ev.jsonl"
  on=$(run "--events $work/ev.jsonl")
  lines=$(wc -l < "$work/ev.jsonl")
  r=$(python3 -c "print(f'{$on/$off:.4f}')")
  ratios+=("$r")
  echo "pair $i: off $off  on $on  ratio $r  events $lines ($((lines / STEPS)) per step)"
done
python3 -c "import statistics,sys; r=[float(x) for x in sys.argv[1:]]; print(f'median on/off {statistics.median(r):.4f} over {len(r)} pairs (min {min(r):.4f}, max {max(r):.4f})')" "${ratios[@]}"
