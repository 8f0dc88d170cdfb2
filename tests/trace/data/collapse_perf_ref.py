#!/usr/bin/env python3
"""Reference collapse of `perf script` text into folded stacks, written for the rtx tests as
an independent check of rtx::trace::collapse_perf. It follows FlameGraph's
stackcollapse-perf.pl (github.com/brendangregg/FlameGraph) with its default options, using
that script's regular expressions verbatim through Python's re module:
  - '#' lines skipped; a blank line ends a sample;
  - header /^(\\S.+?)\\s+(\\d+)\\/*(\\d+)*\\s+/ gives the comm (spaces -> '_'); the event and
    period from /:\\s*(\\d+)*\\s+(\\S+):\\s*$/; only the first event type is kept; weight =
    period (1 when absent);
  - stack line /^\\s*(\\w+)\\s*(.+) \\((.*)\\)/: strip /\\+0x[\\da-f]+$/, skip names starting
    with '(', split on '->', [unknown] -> [module basename] or [unknown], tidy_generic
    (';' -> ':', cut at the first '(' not opening "(anonymous namespace)" unless a Go
    method, drop quotes), tidy_java; frames root first (perf prints the leaf first).
Usage: collapse_perf_ref.py perf.txt > out.folded
"""
import re
import sys
from collections import defaultdict


def collapse(lines):
    collapsed = defaultdict(int)
    stack, pname, period = [], None, 1
    event_filter = ""
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith("#"):
            continue
        if line == "":
            if not pname:
                stack = []
                continue
            stack.insert(0, pname)
            if stack:
                collapsed[";".join(stack)] += period
            stack, pname = [], None
            continue
        m = re.match(r"^(\S.+?)\s+(\d+)\/*(\d+)*\s+", line)
        if m:
            comm = m.group(1)
            p = ""
            em = re.search(r":\s*(\d+)*\s+(\S+):\s*$", line)
            if em:
                p = em.group(1) or ""
                event = em.group(2)
                if event_filter == "":
                    event_filter = event
                elif event != event_filter:
                    pname = None  # filtered: its stack lines are ignored
                    continue
            period = int(p) if p else 1
            pname = comm.replace(" ", "_")
            continue
        m = re.match(r"^\s*(\w+)\s*(.+) \((.*)\)", line)
        if m:
            if not pname:
                continue
            rawfunc, mod = m.group(2), m.group(3)
            rawfunc = re.sub(r"\+0x[\da-f]+$", "", rawfunc)
            if rawfunc.startswith("("):
                continue
            inline = []
            for func in rawfunc.split("->"):
                if func == "[unknown]":
                    if mod != "[unknown]":
                        func = "[" + re.sub(r".*/", "", mod) + "]"
                    else:
                        func = "[unknown]"
                func = func.replace(";", ":")
                if not re.search(r"\.\(.*\)\.", func):
                    func = re.sub(r"\((?!anonymous namespace\)).*", "", func)
                func = func.replace('"', "").replace("'", "")
                if pname.startswith("java") and "/" in func:
                    func = re.sub(r"^L", "", func)
                inline.append(func)
            stack[0:0] = inline
            continue
        print("Unrecognized line: " + line, file=sys.stderr)
    return collapsed


def main():
    with open(sys.argv[1], encoding="utf-8", errors="surrogateescape") as f:
        collapsed = collapse(f)
    for k in sorted(collapsed):
        sys.stdout.write("%s %d\n" % (k, collapsed[k]))


if __name__ == "__main__":
    main()
