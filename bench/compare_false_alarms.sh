#!/usr/bin/env bash
# A/A false-alarm rate and planted-slowdown power of rtx-bench compare on the default path
# (issue 36): each pair is a plain `run PACK -o a.json; run PACK -o b.json; compare a.json b.json`,
# no flags. Prints one line per pair and a summary: % of pairs that exit 1, verdict counts, and
# the seconds each pair took (both runs and the compare).
#
# usage: bench/compare_false_alarms.sh MODE PAIRS PACK [run flags...]
#   MODE aa:    both runs with $RTX_BENCH (same binary): every exit 1 is a false alarm.
#   MODE power: base with $RTX_BENCH, new with $PLANT_BENCH, an rtx-bench built with
#               -DRTX_PLANT_GELU_SLOWDOWN=ON (gelu_forward redoes 10% of its elements): a pair
#               "finds" it when compare exits 1 with the gelu case slower.
#   MODE hog:   as aa, with two busy loops (`yes > /dev/null`) running beside every pair.
# env: RTX_BENCH (default build/bin/rtx-bench), PLANT_BENCH (power), OUT (work dir, default a temp dir).
# example: bench/compare_false_alarms.sh aa 50 benchpacks/smoke.json
#          bench/compare_false_alarms.sh aa 30 benchpacks/core.json --filter _small
#          PLANT_BENCH=/tmp/build-plant/bin/rtx-bench bench/compare_false_alarms.sh power 30 benchpacks/smoke.json
set -euo pipefail
mode=${1:?usage: $0 aa|power|hog PAIRS PACK [run flags...]}
pairs=${2:?pairs}
pack=${3:?pack}
shift 3
bench=${RTX_BENCH:-build/bin/rtx-bench}
plant=${PLANT_BENCH:-}
case "$mode" in
  aa|hog) new_bench=$bench ;;
  power) [ -x "$plant" ] || { echo "power needs PLANT_BENCH=<rtx-bench built with -DRTX_PLANT_GELU_SLOWDOWN=ON>" >&2; exit 2; }
         new_bench=$plant ;;
  *) echo "unknown mode '$mode' (aa, power or hog)" >&2; exit 2 ;;
esac
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
hogs=()
cleanup() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
if [ "$mode" = hog ]; then
  for _ in 1 2; do yes > /dev/null & hogs+=($!); done
fi
exit1=0 found=0 secs_total=0
printf 'pair,exit,seconds,slower,faster,same,ambiguous,undecided,unconfirmed,gelu_verdict\n' > "$out/pairs.csv"
echo "$mode $pairs pairs of $pack $*; $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$pairs"); do
  t0=$(date +%s.%N)
  a=$out/$i-a.json b=$out/$i-b.json c=$out/$i-compare.json  # kept: recompare them with another build
  "$bench" run "$pack" "$@" -o "$a" --no-store -q
  "$new_bench" run "$pack" "$@" -o "$b" --no-store -q
  rc=0
  "$bench" compare "$a" "$b" --format json > "$c" 2>/dev/null || rc=$?
  t1=$(date +%s.%N)
  [ "$rc" -le 1 ] || { echo "pair $i: compare exited $rc" >&2; exit 3; }
  secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
  line=$(python3 - "$c" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]
gelu = [c.get("verdict", c["presence"]) for c in d["cases"] if c["id"].startswith("gelu")]
print(",".join(str(s.get(k, 0)) for k in ("slower", "faster", "same", "ambiguous", "undecided", "unconfirmed"))
      + "," + (gelu[0] if gelu else "-"))
EOF
)
  echo "$i,$rc,$secs,$line" >> "$out/pairs.csv"
  echo "pair $i: exit $rc, ${secs}s, slower,faster,same,ambiguous,undecided,unconfirmed,gelu = $line"
  exit1=$((exit1 + (rc == 1)))
  [ "$mode" = power ] && [ "$rc" = 1 ] && [ "${line##*,}" = slower ] && found=$((found + 1))
  secs_total=$(python3 -c "print($secs_total + $secs)")
done
python3 - "$mode" "$pairs" "$exit1" "$found" "$secs_total" "$pack $*" <<'EOF'
import sys
mode, pairs, exit1, found, secs, what = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
line = f"{mode} {what}: {pairs} pairs, exit 1 in {exit1} ({100 * exit1 / pairs:.1f}%), {secs / pairs:.1f} s per pair"
if mode == "power":
    line += f"; planted gelu slowdown found (exit 1, gelu slower) in {found} ({100 * found / pairs:.1f}%)"
print(line)
EOF
echo "per-pair rows: $out/pairs.csv"
