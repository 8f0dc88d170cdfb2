#!/usr/bin/env bash
# serve_vs_llamacpp.sh: serving benchmark of rtx-serve beside llama.cpp's llama-server on the same
# GGUF weights and threads: TTFT, TPOT, ITL (p50/p95/p99) and output tokens/s at several
# concurrencies, measured by the same load generator (`rtx-serve bench`).
# Servers run one after the other (never at once, so they do not share the cores). Not CI.
#
#   MODEL=model.gguf THREADS=2 LLAMA_SERVER=/path/llama-server RTX_SERVE=build/bin/rtx-serve \
#       bench/serve_vs_llamacpp.sh
#
# Environment (defaults in brackets):
#   MODEL         GGUF file both servers load (required)
#   THREADS       threads of each server [2]
#   RTX_SERVE     rtx-serve binary [first of <repo>/build*/bin/rtx-serve]; it also runs the load
#                 generator (`rtx-serve bench`), so it is required
#   RTX_SERVE_ARGS  its arguments; {MODEL} {THREADS} {PORT} {SLOTS} {CTX} are substituted
#                 ["run --model {MODEL} --threads {THREADS} --host 127.0.0.1 --port {PORT} --max-batch {SLOTS}"]
#   SKIP_RTX      1 = measure llama-server only [0]
#   LLAMA_SERVER  llama-server binary; skipped when unset or not executable. Started as
#                 -m MODEL -t THREADS --port P -c CTX*SLOTS -np SLOTS (CTX tokens per slot)
#   CONCURRENCY   concurrency levels ["1 8 32"]; SLOTS = the largest level
#   NUM_REQUESTS  requests per level; 0 = max(8, 2 x concurrency) [0]
#   MAX_TOKENS    max_tokens per request, sent with ignore_eos [64]
#   CTX           context per slot, tokens [256]
#   PROMPTS_FILE  one prompt per line, sent round-robin, instead of the six short story openings
#                 (long prompts make each decode step's attention read a long KV cache; raise
#                 CTX to hold prompt + MAX_TOKENS) [none]
#   PORT          first port; rtx-serve gets PORT, llama-server PORT+1 [18080]
#   EXTRA_BODY    JSON object merged into every request, e.g. '{"cache_prompt": false}' to turn
#                 prompt (prefix) caching off on both servers [none]
#   OUT           folder for the JSON results and server logs [a new temporary folder]
# Exit status: 0 ok, 1 a run had no successful request, 2 usage or environment error.
set -euo pipefail

usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "serve_vs_llamacpp: $*" >&2; exit 2; }
case "${1:-}" in -h|--help) usage; exit 0 ;; "") ;; *) usage >&2; exit 2 ;; esac

REPO=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${MODEL:-}
THREADS=${THREADS:-2}
CONCURRENCY=${CONCURRENCY:-"1 8 32"}
NUM_REQUESTS=${NUM_REQUESTS:-0}
MAX_TOKENS=${MAX_TOKENS:-64}
CTX=${CTX:-256}
PROMPTS_FILE=${PROMPTS_FILE:-}
PORT=${PORT:-18080}
RTX_SERVE_ARGS=${RTX_SERVE_ARGS:-"run --model {MODEL} --threads {THREADS} --host 127.0.0.1 --port {PORT} --max-batch {SLOTS}"}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-300}
EXTRA_BODY=${EXTRA_BODY:-}

[ -n "$MODEL" ] || die "set MODEL to a GGUF file (see --help)"
[ -f "$MODEL" ] || die "MODEL=$MODEL: no such file"
if [ -z "${RTX_SERVE:-}" ]; then
  for f in "$REPO"/build*/bin/rtx-serve; do
    if [ -x "$f" ]; then RTX_SERVE=$f; break; fi
  done
fi
[ -x "${RTX_SERVE:-}" ] || die "no rtx-serve: build it (make build) or set RTX_SERVE"
LOADGEN=("$RTX_SERVE" bench)
command -v curl >/dev/null || die "curl is needed to poll /health"
command -v python3 >/dev/null || die "python3 is needed to print the table"
SLOTS=0
for c in $CONCURRENCY; do [ "$c" -gt "$SLOTS" ] && SLOTS=$c; done
[ "$SLOTS" -gt 0 ] || die "CONCURRENCY='$CONCURRENCY' has no level > 0"
OUT=${OUT:-$(mktemp -d /tmp/serve_vs_llamacpp.XXXXXX)}
mkdir -p "$OUT"

# Fixed prompts (short story openings), sent round-robin; or the user's PROMPTS_FILE.
PROMPTS="$OUT/prompts.txt"
if [ -n "$PROMPTS_FILE" ]; then
  [ -f "$PROMPTS_FILE" ] && grep -q . "$PROMPTS_FILE" || die "PROMPTS_FILE=$PROMPTS_FILE is not a file with a non-empty line"
  cp "$PROMPTS_FILE" "$PROMPTS"
else
cat > "$PROMPTS" <<'EOF'
Once upon a time
One day, a little girl named Lily went to the park
The sun was shining and the birds were singing
Tom had a big red ball
There was a small dog who lived in a house
Mia and her mom went to the store
EOF
fi

SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT INT TERM

wait_health() {  # name port
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$HEALTH_TIMEOUT" ]; do
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "serve_vs_llamacpp: $1 exited; log: $OUT/$1.log" >&2; tail -20 "$OUT/$1.log" >&2; return 1; }
    if curl -sf -o /dev/null "http://127.0.0.1:$2/health"; then return 0; fi
    sleep 0.5
  done
  echo "serve_vs_llamacpp: $1 not healthy after ${HEALTH_TIMEOUT} s; log: $OUT/$1.log" >&2
  return 1
}

STATUS=0
run_levels() {  # name port
  local name=$1 port=$2 c n first=1
  for c in $CONCURRENCY; do
    n=$NUM_REQUESTS
    [ "$n" -gt 0 ] || { n=$((2 * c)); [ "$n" -ge 8 ] || n=8; }
    local warm=0
    [ $first -eq 1 ] && warm=2 && first=0
    echo "== $name: concurrency $c, $n requests, max_tokens $MAX_TOKENS" >&2
    if ! "${LOADGEN[@]}" --port "$port" --prompts-file "$PROMPTS" --max-tokens "$MAX_TOKENS" \
        -c "$c" -n "$n" --warmup "$warm" --timeout 600 --requests --json -q \
        ${EXTRA_BODY:+--extra-body "$EXTRA_BODY"} \
        > "$OUT/$name-c$c.json"; then
      echo "serve_vs_llamacpp: $name at concurrency $c: no successful request (see $OUT/$name-c$c.json)" >&2
      STATUS=1
    fi
  done
}

RESULTS=()
if [ "${SKIP_RTX:-0}" != 1 ]; then
  args=${RTX_SERVE_ARGS//\{MODEL\}/$MODEL}
  args=${args//\{THREADS\}/$THREADS}
  args=${args//\{PORT\}/$PORT}
  args=${args//\{SLOTS\}/$SLOTS}
  args=${args//\{CTX\}/$CTX}
  echo "== rtx-serve: $RTX_SERVE $args" >&2
  # shellcheck disable=SC2086
  "$RTX_SERVE" $args > "$OUT/rtx-serve.log" 2>&1 &
  SERVER_PID=$!
  if wait_health rtx-serve "$PORT"; then run_levels rtx-serve "$PORT"; RESULTS+=(rtx-serve); else STATUS=1; fi
  stop_server
else
  echo "== rtx-serve: skipped (SKIP_RTX=1)" >&2
fi

if [ -n "${LLAMA_SERVER:-}" ] && [ -x "${LLAMA_SERVER:-}" ]; then
  LPORT=$((PORT + 1))
  largs=(-m "$MODEL" -t "$THREADS" --host 127.0.0.1 --port "$LPORT" -c $((CTX * SLOTS)) -np "$SLOTS")
  echo "== llama-server: $LLAMA_SERVER ${largs[*]}" >&2
  "$LLAMA_SERVER" "${largs[@]}" > "$OUT/llama-server.log" 2>&1 &
  SERVER_PID=$!
  if wait_health llama-server "$LPORT"; then run_levels llama-server "$LPORT"; RESULTS+=(llama-server); else STATUS=1; fi
  stop_server
else
  echo "== llama-server: skipped (LLAMA_SERVER='${LLAMA_SERVER:-}' is not an executable)" >&2
fi

[ ${#RESULTS[@]} -gt 0 ] || die "no server ran (set RTX_SERVE and/or LLAMA_SERVER)"

echo "model $(basename "$MODEL"), threads $THREADS, slots $SLOTS, ctx/slot $CTX, max_tokens $MAX_TOKENS (ignore_eos), results in $OUT"
python3 - "$OUT" "$CONCURRENCY" "${RESULTS[@]}" <<'EOF'
import json, os, sys
out, levels, servers = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
cols = ["server", "conc", "ok/sent", "out tok/s", "req/s", "TTFT p50", "TTFT p99", "TPOT p50",
        "TPOT p99", "ITL p50", "ITL p95", "ITL p99"]
print("  ".join(f"{c:>12}" for c in cols) + "   (latencies in ms)")
for c in levels:
    for s in servers:
        p = os.path.join(out, f"{s}-c{c}.json")
        try:
            d = json.load(open(p))
        except (OSError, ValueError) as e:
            print(f"{s:>12}  {c:>12}  missing or unreadable result {p}: {e}")
            continue
        row = [s, c, f"{d['completed']}/{d['num_prompts']}", f"{d['output_throughput']:.1f}",
               f"{d['request_throughput']:.2f}"]
        row += [f"{d[k]:.2f}" for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                                         "median_itl_ms", "p95_itl_ms", "p99_itl_ms")]
        print("  ".join(f"{x:>12}" for x in row))
EOF
exit $STATUS
