#!/usr/bin/env python3
"""Makes the PyTorch profiler goldens of the rtx trace tests (pip install torch; CPU only):
  torch_cpu_trace.json        torch.profiler's export_chrome_trace of 2 training steps of a
                              tiny MLP (record_function forward/backward/optimizer), as written
                              (Kineto: baseTimeNanoseconds, deviceProperties, string tids,
                              ph X/i/s/f/M, ts relative to baseTimeNanoseconds)
  torch_cpu_trace_epoch.json  the same events with absolute timestamps, us since the Unix
                              epoch (ts + baseTimeNanoseconds/1000, exact decimal arithmetic),
                              as older Kineto versions and perf converters write them (~1.7e15)
  torch_cpu_trace.expected.json  what rtx must compute, here from the JSON with exact integer
                              ns: per name count / total / self (stats), and the CPU folded
                              stacks (rtx-flame --mode cpu): self time per stack path.
Self time (rtx-trace stats --help): a slice's duration minus its direct children's, slices
nested per (pid, tid) by start (ties: longer first, then file order), a child overrunning
its parent clipped to the parent's end.
Usage: python3 tests/trace/data/make_torch_sample.py
"""
import json
import os
import re
from collections import defaultdict
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))


def record(path):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            with record_function("forward"):
                loss = torch.nn.functional.mse_loss(m(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
    prof.export_chrome_trace(path)


def ns(d):
    """us (Decimal) -> integer ns, half away from zero."""
    v = d * 1000
    return int(v.to_integral_value(rounding="ROUND_HALF_UP"))


def dump_exact(doc):
    """JSON text keeping Decimal numbers exactly as decimals."""
    def conv(o):
        if isinstance(o, Decimal):
            return "@@D@@" + format(o, "f")
        if isinstance(o, dict):
            return {k: conv(v) for k, v in o.items()}
        if isinstance(o, list):
            return [conv(v) for v in o]
        return o
    return re.sub(r'"@@D@@([-0-9.]+)"', r"\1", json.dumps(conv(doc)))


def clean(name):
    """rtx's frame-name rules for folded text (fold_trace's clean_frame)."""
    r = name.replace(";", ":").replace("\n", " ").replace("\r", " ").rstrip(" \t")
    m = re.search(r"[ \t](\d*\.?\d*)$", r)
    if m and m.group(1) not in ("", "."):
        r = r[: m.start()] + "_" + r[m.start() + 1 :]
    return r or "[unnamed]"


def expected(doc):
    per_thread = defaultdict(list)
    for order, e in enumerate(doc["traceEvents"]):
        if e.get("ph") == "X":
            per_thread[(str(e["pid"]), str(e["tid"]))].append((ns(e["ts"]), ns(e["dur"]), order, e["name"]))
    stats = defaultdict(lambda: {"count": 0, "total_ns": 0, "self_ns": 0})
    folded = defaultdict(int)
    clipped = 0
    for sl in per_thread.values():
        sl.sort(key=lambda s: (s[0], -s[1], s[2]))
        stack = []  # (end, name, path)
        for ts, dur, _, name in sl:
            while stack and stack[-1][0] <= ts:
                stack.pop()
            end = ts + dur
            if stack and end > stack[-1][0]:
                end = stack[-1][0]
                clipped += 1
            d = end - ts
            st = stats[name]
            st["count"] += 1
            st["total_ns"] += dur
            st["self_ns"] += d
            path = (stack[-1][2] + ";" if stack else "") + clean(name)
            folded[path] += d
            if stack:
                stats[stack[-1][1]]["self_ns"] -= d
                folded[stack[-1][2]] -= d
            stack.append((end, name, path))
    return {"events": len(doc["traceEvents"]), "clipped": clipped, "stats": dict(sorted(stats.items())),
            "folded_cpu": {k: v for k, v in sorted(folded.items()) if v > 0}}


def main():
    raw = os.path.join(HERE, "torch_cpu_trace.json")
    record(raw)
    with open(raw) as f:
        doc = json.load(f, parse_float=Decimal)
    base_us = Decimal(doc["baseTimeNanoseconds"]) / 1000
    with open(raw) as f:
        epoch = json.load(f, parse_float=Decimal)
    for e in epoch["traceEvents"]:
        if "ts" in e:
            e["ts"] = Decimal(e["ts"]) + base_us
    with open(os.path.join(HERE, "torch_cpu_trace_epoch.json"), "w") as f:
        f.write(dump_exact(epoch) + "\n")
    exp = expected(doc)
    assert exp == expected(epoch), "epoch shift changed the expected values"
    with open(os.path.join(HERE, "torch_cpu_trace.expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
        f.write("\n")
    print(raw, exp["events"], "events,", len(exp["stats"]), "names,", len(exp["folded_cpu"]), "stacks")


if __name__ == "__main__":
    main()
