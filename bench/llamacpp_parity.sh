#!/usr/bin/env bash
# llamacpp_parity.sh: development check that a GPT-2 exported by `rtx-train export` runs in llama.cpp
# as it runs in rtx: prepare, train and export a small model, then compare llama.cpp's load log,
# prompt token counts and greedy text (rtx-train sample --temperature 0 vs llama-simple). Prints
# one line per check and PASS or FAIL. Not part of `make test` or CI.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin RTX_BIN=build-x/bin bench/llamacpp_parity.sh \
#       [--tokenizer char|gpt2|both] [--steps N] [--tokens N] [--threads N] [--work DIR]
#
# LLAMA_BIN: folder with llama-simple and llama-tokenize (CMake targets of the same names in
# llama.cpp). RTX_BIN: folder with rtx-train. RTX_DATA (default <repo>/../shared/data) holds
# tinyshakespeare/ and gpt2_tokenizer/. --work keeps the models there (default: a temporary
# folder, removed at exit). Exit status: 0 PASS, 1 FAIL, 2 usage or environment error.
# The models are tiny and briefly trained: the text is not meant to be good, only identical.
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "llamacpp_parity: $*" >&2; exit 2; }

REPO=$(cd "$(dirname "$0")/.." && pwd)
TOKENIZER=both
STEPS=300
NTOK=50
THREADS=2
WORK=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tokenizer) TOKENIZER=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --tokens) NTOK=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    --work) WORK=${2:?}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
case "$TOKENIZER" in char|gpt2|both) ;; *) die "--tokenizer must be char, gpt2 or both (got '$TOKENIZER')" ;; esac
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer (got '$STEPS')"
[[ "$NTOK" =~ ^[1-9][0-9]*$ ]] || die "--tokens must be a positive integer (got '$NTOK')"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer (got '$THREADS')"

[ -n "${LLAMA_BIN:-}" ] || die "set LLAMA_BIN to the folder with llama.cpp's llama-simple and llama-tokenize"
[ -n "${RTX_BIN:-}" ] || die "set RTX_BIN to the folder with rtx-train (e.g. build/bin)"
SIMPLE=$LLAMA_BIN/llama-simple
TOKENIZE=$LLAMA_BIN/llama-tokenize
RTX=$RTX_BIN/rtx-train
for b in "$SIMPLE" "$TOKENIZE" "$RTX"; do [ -x "$b" ] || die "$b: not an executable (check LLAMA_BIN / RTX_BIN)"; done
command -v python3 >/dev/null || die "python3 is needed to read rtx-train's JSON output"
export RTX_DATA=${RTX_DATA:-$REPO/../shared/data}
[ -f "$RTX_DATA/tinyshakespeare/input.txt" ] || die "$RTX_DATA/tinyshakespeare/input.txt missing (set RTX_DATA)"

if [ -z "$WORK" ]; then
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/llamacpp_parity.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"
export RTX_HOME=$WORK/rtx-home  # rtx-train's store stays with the models

FAILS=0
fail() { echo "FAIL  $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok    $*"; }
json_field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# build_model NAME: prepare, train and export $WORK/NAME/model.gguf.
build_model() {
  local name=$1 dir=$WORK/$1
  mkdir -p "$dir"
  echo "== $name: prepare, train ($STEPS steps max), export" >&2
  "$RTX" -q prepare --tokenizer "$name" "$RTX_DATA/tinyshakespeare/input.txt" -o "$dir/data"
  if [ "$name" = char ]; then
    # nanoGPT's CPU shakespeare-char model. After 300 steps (val loss ~2.4) greedy text is mostly
    # " the the ...": identical text then says little about the weights; the load and token checks
    # still apply. More --steps give more telling text.
    "$RTX" -q run --data "$dir/data" --preset shakespeare-char-cpu --batch 12 --steps "$STEPS" \
      --eval-iters 5 --eval-interval "$STEPS" --threads "$THREADS" --out "$dir/run"
  else
    echo '{"model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64, "vocab_size": 50257}}' \
      > "$dir/cfg.json"
    local s=$((STEPS < 80 ? STEPS : 80))
    "$RTX" -q run --data "$dir/data" --config "$dir/cfg.json" --batch 8 --steps "$s" --lr 3e-3 --warmup 5 \
      --eval-iters 2 --eval-interval "$s" --threads "$THREADS" --out "$dir/run"
  fi
  "$RTX" -q export --ckpt "$dir/run/ckpt.safetensors" --format gguf -o "$dir/model.gguf"
}

# check_load NAME WANT_EOG: load the GGUF in llama.cpp, show its warnings, and check the
# end-of-generation ids it chose (WANT_EOG: space-separated ids; empty: none).
check_load() {
  local name=$1 want_eog=$2 gguf=$WORK/$1/model.gguf log=$WORK/$1/load.log
  if ! "$SIMPLE" -m "$gguf" -n 1 "a" > /dev/null 2> "$log"; then
    fail "$name: llama.cpp did not load $gguf (log: $log)"; tail -5 "$log"; return
  fi
  local warns
  warns=$(grep -iE 'warn|missing|bad special' "$log" || true)
  [ -n "$warns" ] && printf '      llama.cpp warning: %s\n' "$warns"
  local eog
  eog=$(awk '/printing all EOG tokens/ {on = 1; next} on && $2 == "-" {printf "%s ", $3; next} {on = 0}' "$log")
  eog=${eog% }
  if [ "$eog" = "$want_eog" ]; then
    ok "$name: loads in llama.cpp; end-of-generation ids [${eog}] as expected"
  else
    fail "$name: llama.cpp's end-of-generation ids are [${eog}], expected [${want_eog}]" \
      "(a real token that ends generation truncates llama.cpp's output)"
  fi
}

# check_prompt NAME PROMPT: same prompt token count and same greedy text in rtx and llama.cpp.
check_prompt() {
  local name=$1 prompt=$2 dir=$WORK/$1 shown
  shown=$(printf '%q' "$prompt")
  local js ptok ctok
  js=$("$RTX" --json sample --ckpt "$dir/run/ckpt.safetensors" --temperature 0 --max-tokens "$NTOK" \
    --prompt "$prompt")
  ptok=$(json_field prompt_tokens <<< "$js")
  ctok=$(json_field completion_tokens <<< "$js")
  local lids lcount
  lids=$("$TOKENIZE" -m "$dir/model.gguf" -p "$prompt" --ids --no-parse-special --log-disable 2> /dev/null | tail -1)
  lcount=$(tr -d '[] ' <<< "$lids" | tr ',' '\n' | grep -c . || true)
  if [ "$lcount" != "$ptok" ]; then
    fail "$name $shown: prompt is $ptok tokens in rtx, $lcount in llama.cpp ($lids)"; return
  fi
  # Both print the prompt, the generated text and one newline. rtx stops at the context's end
  # (ctok < NTOK), so llama.cpp is asked for exactly ctok tokens.
  "$RTX" sample --ckpt "$dir/run/ckpt.safetensors" --temperature 0 --max-tokens "$ctok" --prompt "$prompt" \
    > "$dir/rtx.out" 2> "$dir/rtx.err"
  "$SIMPLE" -m "$dir/model.gguf" -n "$ctok" "$prompt" > "$dir/llama.out" 2> "$dir/llama.err"
  if cmp -s "$dir/rtx.out" "$dir/llama.out"; then
    ok "$name $shown: $ptok prompt tokens, $ctok greedy tokens identical"
  else
    fail "$name $shown: greedy text differs ($(cmp "$dir/rtx.out" "$dir/llama.out" 2>&1 | head -1))"
    printf '      rtx:   %q\n      llama: %q\n' "$(cat "$dir/rtx.out")" "$(cat "$dir/llama.out")"
  fi
  RTX_SPEED=$(sed -n 's/.*decode \([0-9.]*\) tokens\/s.*/\1/p' "$dir/rtx.err")
  LLAMA_SPEED=$(sed -n 's/.*speed: \([0-9.]*\) t\/s.*/\1/p' "$dir/llama.err")
}

run_suite() {
  local name=$1 want_eog=$2; shift 2
  build_model "$name"
  check_load "$name" "$want_eog"
  for p in "$@"; do check_prompt "$name" "$p"; done
  echo "      decode speed on the last prompt (informational; noisy on a shared machine): rtx-train" \
    "${RTX_SPEED:-?} tokens/s, llama-simple ${LLAMA_SPEED:-?} tokens/s"
}

if [ "$TOKENIZER" = char ] || [ "$TOKENIZER" = both ]; then
  # The char tokenizer has no end-of-text token: llama.cpp must not end generation on any id.
  run_suite char "" "ROMEO:" $'\n' $'First Citizen:\nBefore we proceed' "To be; or not; to be"
fi
if [ "$TOKENIZER" = gpt2 ] || [ "$TOKENIZER" = both ]; then
  # The curly quotes in the last prompt are test input (multi-byte UTF-8), not shell quoting.
  # shellcheck disable=SC1111
  run_suite gpt2 "50256" "ROMEO:" "Hello world, it's   me" $'KING RICHARD III:\nNow is the winter' \
    "café naïve — “quotes” 🤖"
fi

if [ "$FAILS" -eq 0 ]; then
  echo "PASS"
else
  echo "FAIL ($FAILS check(s))"
  exit 1
fi
