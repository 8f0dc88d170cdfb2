#!/usr/bin/env python3
"""Re-judge the pairs that bench/compare_false_alarms.sh kept (DIR/<i>-a.json, DIR/<i>-b.json)
with the host-contention evidence removed, so that the statistics alone decide, as on a host
the contention judge sees as quiet (issue 36's idle VM). Runs each given rtx-bench's compare on
every pair and prints, per binary, how many pairs exit 1 and how many verdicts are slower,
faster or unconfirmed: e.g. the build before the common-mode rule against this one.

usage: bench/compare_recompare.py DIR RTX_BENCH [RTX_BENCH...]
"""
import json
import os
import subprocess
import sys
import tempfile


def strip_host(path, out):
    d = json.load(open(path))
    d.pop("host", None)
    for c in d.get("cases", []):
        c.pop("host", None)
    json.dump(d, open(out, "w"))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, benches = sys.argv[1], sys.argv[2:]
    pairs = sorted(int(f.split("-")[0]) for f in os.listdir(src) if f.endswith("-a.json"))
    with tempfile.TemporaryDirectory() as tmp:
        for bench in benches:
            exit1 = slower = faster = unconfirmed = 0
            for i in pairs:
                a, b = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
                strip_host(os.path.join(src, f"{i}-a.json"), a)
                strip_host(os.path.join(src, f"{i}-b.json"), b)
                r = subprocess.run([bench, "compare", a, b, "--format", "json"], capture_output=True, text=True)
                if r.returncode > 1:
                    sys.exit(f"{bench} compare exited {r.returncode}: {r.stderr}")
                exit1 += r.returncode == 1
                s = json.loads(r.stdout)["summary"]
                slower += s["slower"]
                faster += s["faster"]
                unconfirmed += s.get("unconfirmed", 0)
            n = len(pairs)
            print(f"{bench}: {n} pairs of {src} without host evidence: exit 1 in {exit1} ({100 * exit1 / max(n, 1):.1f}%); "
                  f"verdicts slower {slower}, faster {faster}, unconfirmed {unconfirmed}")


if __name__ == "__main__":
    main()
