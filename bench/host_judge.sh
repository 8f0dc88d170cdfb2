#!/usr/bin/env bash
# host_judge.sh: does the busy-host judge blame the tool for its own threads? (issue 36)
# Runs `rtx-tune run --serve stories260k --budget EVALS` once on the host as it is, then once
# beside a CPU hog (HOGS busy-looping shells, default one per CPU), each into a fresh store, and
# prints per run: trials measured, trials judged busy, the first busy reason, and the 1-minute
# load average before. On an idle host the first run should judge 0 trials busy (the search's
# own scheduler and OpenMP threads do not count); beside the hog most trials should be busy.
# Not CI (a benchmark, minutes).
#
#   EVALS=40 bench/host_judge.sh
#
# Environment (defaults in brackets): RTX_TUNE [<repo>/build/bin/rtx-tune], RTX_DATA
# [<repo>/../shared/data], EVALS [40], HOGS [nproc], OUT [a temporary directory].
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
RTX_TUNE=${RTX_TUNE:-$repo/build/bin/rtx-tune}
RTX_DATA=${RTX_DATA:-$repo/../shared/data}
EVALS=${EVALS:-40}
HOGS=${HOGS:-$(nproc)}
OUT=${OUT:-$(mktemp -d)}
model=$RTX_DATA/stories260k/tinyllamas-stories-260k-f32.gguf
[ -f "$model" ] || { echo "host_judge.sh: no model at $model (set RTX_DATA)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "host_judge.sh: needs the sqlite3 command" >&2; exit 2; }

one() {  # $1 label
  local db=$OUT/$1.db
  rm -f "$db"
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local t0; t0=$(date +%s)
  "$RTX_TUNE" run --serve "$model" --budget "${EVALS}evals" --db "$db" --json >"$OUT/$1.json" 2>"$OUT/$1.err" || true
  local t1; t1=$(date +%s)
  local n busy reason
  n=$(sqlite3 "$db" "SELECT COUNT(*) FROM tuning_trials WHERE status = 'ok'")
  busy=$(sqlite3 "$db" "SELECT COUNT(*) FROM tuning_trials WHERE status = 'ok' AND contended = 1")
  reason=$(sqlite3 "$db" "SELECT contention_reason FROM tuning_trials WHERE contended = 1 ORDER BY id LIMIT 1")
  printf '%-6s load1 %-5s  %3s s  trials %3s  busy %3s  first: %s\n' "$1" "$load" $((t1 - t0)) "$n" "$busy" "${reason:--}"
}

one quiet
pids=()
for _ in $(seq "$HOGS"); do
  (while :; do :; done) &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
sleep 1
one hog
