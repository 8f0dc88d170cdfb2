#!/usr/bin/env bash
# make_gpt2_models.sh: the GPT-2 124M GGUF files of docs/perf-history.md's serving benchmarks, from the
# data folder alone: the `gpt2` preset trained for one step on tiny-shakespeare (GPT-2 tokenizer),
# exported by `rtx-train export` (f32), then Q8_0 (bench/gguf_quantize_q8_0.py, needs
# `pip install gguf numpy`) and Q4_K_M (llama.cpp's own llama-quantize, when LLAMA_QUANTIZE is
# set). The weights are nearly the random initialization: right for speed, not for text.
# Not used by the build or CI.
#
#   OUT=/work/serve-models LLAMA_QUANTIZE=/path/llama-quantize bench/make_gpt2_models.sh
#
# Environment (defaults in brackets):
#   OUT             folder for gpt2-124m-{f32,q8_0,q4_k_m}.gguf [./serve-models]
#   RTX_DATA        the data folder [../shared/data]
#   RTX_TRAIN       rtx-train binary [<repo>/build/bin/rtx-train]
#   LLAMA_QUANTIZE  llama.cpp's llama-quantize; the Q4_K_M file is skipped when unset
# Exit status: 0 ok, 2 usage or environment error, else the failing step's.
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "make_gpt2_models: $*" >&2; exit 2; }
case "${1:-}" in -h|--help) usage; exit 0 ;; "") ;; *) usage >&2; exit 2 ;; esac

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-serve-models}
RTX_DATA=${RTX_DATA:-$REPO/../shared/data}
RTX_TRAIN=${RTX_TRAIN:-$REPO/build/bin/rtx-train}
[ -x "$RTX_TRAIN" ] || die "no rtx-train at $RTX_TRAIN: build it (make build) or set RTX_TRAIN"
[ -f "$RTX_DATA/tinyshakespeare/input.txt" ] || die "no $RTX_DATA/tinyshakespeare/input.txt: set RTX_DATA"
python3 -c 'import gguf, numpy' 2>/dev/null || die "the Q8_0 step needs gguf-py: pip install gguf numpy"
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$RTX_TRAIN" prepare --tokenizer gpt2 "$RTX_DATA/tinyshakespeare/input.txt" -o "$WORK/data"
"$RTX_TRAIN" run --data "$WORK/data" --preset gpt2 --steps 1 --batch 1 --seq-len 64 --eval-iters 1 \
  --no-promoted --out "$WORK/run"
"$RTX_TRAIN" export --ckpt "$WORK/run/ckpt.safetensors" --format gguf -o "$OUT/gpt2-124m-f32.gguf"
python3 "$REPO/bench/gguf_quantize_q8_0.py" "$OUT/gpt2-124m-f32.gguf" "$OUT/gpt2-124m-q8_0.gguf"
if [ -n "${LLAMA_QUANTIZE:-}" ]; then
  [ -x "$LLAMA_QUANTIZE" ] || die "LLAMA_QUANTIZE=$LLAMA_QUANTIZE is not executable"
  "$LLAMA_QUANTIZE" "$OUT/gpt2-124m-f32.gguf" "$OUT/gpt2-124m-q4_k_m.gguf" Q4_K_M
else
  echo "make_gpt2_models: LLAMA_QUANTIZE unset, no Q4_K_M file" >&2
fi
ls -l "$OUT"/gpt2-124m-*.gguf
