#!/bin/sh
# Makes perf_sample.txt (real `perf script` output, trimmed) and perf_sample.folded (its
# folded stacks from collapse_perf_ref.py, a Python transcription of FlameGraph's
# stackcollapse-perf.pl), the goldens of rtx-flame's perf input. Needs perf, gcc, python3;
# perf_event_paranoid <= 2 is enough (it profiles its own children).
# Run from anywhere: sh tests/trace/data/make_perf_sample.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O1 -g -fno-omit-frame-pointer -o "$tmp/busy" "$here/perf_busy.c" -lm
# Several commands (the C program, a shell, python3: frames without symbols -> [unknown]).
perf record -q -F 999 -g -o "$tmp/perf.data" -- sh -c "'$tmp/busy' >/dev/null; python3 -c 'print(sum(i*i for i in range(2*10**6)))' >/dev/null"
perf script -i "$tmp/perf.data" 2>/dev/null | sed "s#$tmp/#/tmp/#g" > "$tmp/full.txt"
# Keep at most 40 samples per command (the file stays small), whole samples only.
python3 - "$tmp/full.txt" "$here/perf_sample.txt" <<'PY'
import sys, re, collections
text = open(sys.argv[1], encoding="utf-8", errors="surrogateescape").read()
samples = [s for s in text.split("\n\n") if s.strip()]
kept, per = [], collections.Counter()
for s in samples:
    comm = re.match(r"^(\S.+?)\s+(\d+)", s.lstrip("\n")).group(1)
    per[comm] += 1
    if per[comm] <= 40:
        kept.append(s.strip("\n"))
with open(sys.argv[2], "w", encoding="utf-8", errors="surrogateescape") as f:
    f.write("# perf script output trimmed by make_perf_sample.sh: at most 40 samples per command\n")
    f.write("\n\n".join(kept) + "\n\n")
PY
python3 "$here/collapse_perf_ref.py" "$here/perf_sample.txt" > "$here/perf_sample.folded"
wc -c "$here/perf_sample.txt" "$here/perf_sample.folded"
