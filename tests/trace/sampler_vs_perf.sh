#!/usr/bin/env bash
# Compare rtx-trace record --cpu-sample with Linux perf on the same program, and measure the
# sampler's overhead. Not a ctest (perf is not a build dependency); run by hand:
#   tests/trace/sampler_vs_perf.sh BUILD_DIR [UNITS] [RUNS]
# Prints the leaf-frame shares of both profilers (perf record -F 99 -g, `perf script` collapsed
# by the small awk below into folded stacks like stackcollapse-perf.pl) and the median wall
# and CPU time of sampler_hot UNITS alone, under rtx-trace --cpu-sample at 99 Hz (frame pointers
# and --call-graph dwarf) and under perf.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [UNITS] [RUNS]}
units=${2:-200}
runs=${3:-5}
hot=$build/tests/sampler_hot
trace=$build/bin/rtx-trace
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# perf script prints per sample a header line "comm pid ... : " then one "addr sym+off (dso)"
# line per frame, leaf first, then a blank line. Folded: comm;outer;...;leaf count.
collapse() {
  awk '
    function flush() { if (n > 0) { s = comm; for (i = n; i >= 1; --i) s = s ";" f[i]; c[s]++ } n = 0 }
    /^[^ \t]/ { flush(); comm = $1; next }
    /^[ \t]+[0-9a-f]+ / { sym = $2; sub(/\+0x[0-9a-f]+$/, "", sym); f[++n] = sym; next }
    /^$/ { flush() }
    END { flush(); for (s in c) print s, c[s] }' | sort
}

leaf_shares() {  # folded text on stdin -> "share leaf" lines, largest first
  awk '{ n = $NF; $NF = ""; sub(/ $/, ""); k = split($0, a, ";"); leaf[a[k]] += n; tot += n }
       END { for (l in leaf) printf "%6.1f%% %s\n", 100 * leaf[l] / tot, l }' | sort -rn | head -5
}

echo "== machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) CPUs), $(uname -r)"
perf record -q -F 99 -g -o "$tmp/perf.data" -- "$hot" "$units" >/dev/null 2>&1
perf script -i "$tmp/perf.data" 2>/dev/null | collapse >"$tmp/perf.folded"
"$trace" record -q --cpu-sample --freq 99 -o "$tmp/t.json" --folded "$tmp/rtx.folded" -- "$hot" "$units"
echo "== perf record -F 99 -g ($(awk '{s += $NF} END {print s}' "$tmp/perf.folded") samples): leaf shares"
leaf_shares <"$tmp/perf.folded"
echo "== rtx-trace record --cpu-sample --freq 99 ($(awk '{s += $NF} END {print s}' "$tmp/rtx.folded") samples): leaf shares"
leaf_shares <"$tmp/rtx.folded"
echo "== hottest stacks: perf"
sort -k2 -t' ' -rn "$tmp/perf.folded" | awk '{print $NF, $1}' | sort -rn | head -3
echo "== hottest stacks: rtx-trace"
awk '{print $NF, $1}' "$tmp/rtx.folded" | sort -rn | head -3

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# One timed run: appends "wall cpu" (cpu = user + sys of the command and its children, the
# profiler's own work included) to file $1.
timed() {
  local out=$1 t
  shift
  t=$({ TIMEFORMAT='%R %U %S'; time "$@" >/dev/null 2>&1; } 2>&1)
  echo "$t" | awk '{print $1, $2 + $3}' >>"$out"
}
: >"$tmp/base"; : >"$tmp/rtx"; : >"$tmp/dwarf"; : >"$tmp/perf"
for ((i = 0; i < runs; ++i)); do  # interleaved, so drift of the host hits all alike
  timed "$tmp/base" "$hot" "$units"
  timed "$tmp/rtx" "$trace" record -q --cpu-sample --freq 99 -o "$tmp/o.json" -- "$hot" "$units"
  timed "$tmp/dwarf" "$trace" record -q --cpu-sample --call-graph dwarf --freq 99 -o "$tmp/o.json" -- "$hot" "$units"
  timed "$tmp/perf" perf record -q -F 99 -g -o "$tmp/o.data" -- "$hot" "$units"
done
for col in 1 2; do
  b=$(cut -d' ' -f$col "$tmp/base" | median)
  what=$([ $col = 1 ] && echo "wall time" || echo "CPU time (user+sys)")
  printf '== %s, median of %d runs of sampler_hot %s: alone %.3f s\n' "$what" "$runs" "$units" "$b"
  for v in "rtx:rtx-trace --cpu-sample 99 Hz" "dwarf:rtx-trace --cpu-sample --call-graph dwarf 99 Hz" \
           "perf:perf record -F 99 -g"; do
    x=$(cut -d' ' -f$col "$tmp/${v%%:*}" | median)
    printf '   %-52s %.3f s (%+.1f%%)\n' "${v#*:}" "$x" "$(echo "100 * ($x - $b) / $b" | bc -l)"
  done
done
echo "== load average: $(cut -d' ' -f1-3 /proc/loadavg)"
