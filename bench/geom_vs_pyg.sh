#!/usr/bin/env bash
# Side by side: 200-epoch GCN on Cora, PyTorch Geometric vs rtx-train --model gcn, same
# hyperparameters, same thread count, alternating runs (PyG, ours, PyG, ours, ...) so drifting
# load hits both. Needs torch-geometric on this machine (pip install torch-geometric; never a
# build dependency). Usage: bench/geom_vs_pyg.sh [ROUNDS=3] [THREADS=2]
# Reports each side's median seconds per 200-epoch run and the ratio ours / PyG, plus uptime.
set -euo pipefail
ROUNDS=${1:-3}
THREADS=${2:-2}
cd "$(dirname "$0")/.."
export RTX_DATA=${RTX_DATA:-/work/shared/data}
export OMP_WAIT_POLICY=passive
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); date $(date -u +%F); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
pyg=(); ours=()
for r in $(seq "$ROUNDS"); do
  p=$(THREADS=$THREADS python3 bench/geom_pyg_gcn.py 1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["seconds"])')
  o=$(build/bin/rtx-train run --model gcn --data "$RTX_DATA/cora" --threads "$THREADS" --seed 0 --json -q |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["seconds"])')
  echo "round $r: pyg ${p} s, ours ${o} s"
  pyg+=("$p"); ours+=("$o")
done
python3 - "${pyg[*]}" "${ours[*]}" <<'PY'
import statistics, sys
p = [float(x) for x in sys.argv[1].split()]; o = [float(x) for x in sys.argv[2].split()]
mp, mo = statistics.median(p), statistics.median(o)
print(f"median 200-epoch wall time: pyg {mp:.3f} s, ours {mo:.3f} s, ours/pyg {mo/mp:.3f}x")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
