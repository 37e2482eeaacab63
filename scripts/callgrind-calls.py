#!/usr/bin/env python3
"""Inclusive instructions and call counts per function, from callgrind output files.

    scripts/callgrind-calls.py FILE [PATTERN...]

For every function whose name contains one of the PATTERNs (all functions without any): how
often it was called and the instructions executed inside it and everything it called, summed
over its callers' call edges (so a function inlined away has no row). Prints
`calls <TAB> inclusive <TAB> per-call <TAB> name`.
"""
import re
import sys


def parse(path):
    names = {"fn": {}, "cfn": {}}
    calls, incl = {}, {}
    cur_cfn, pending = None, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if pending is not None:
                parts = line.split()
                # "position(s) cost": one position (line), or two with --dump-instr=yes.
                cost = int(parts[-1]) if len(parts) > 1 else 0
                incl[pending[0]] = incl.get(pending[0], 0) + cost
                calls[pending[0]] = calls.get(pending[0], 0) + pending[1]
                pending = None
                continue
            m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
            if m:
                kind, idx, name = m.groups()
                # fn and cfn share one name table in callgrind's compression.
                if name is not None:
                    names["fn"][idx] = name
                name = names["fn"].get(idx, idx)
                if kind == "cfn":
                    cur_cfn = name
                continue
            m = re.match(r"^(c?fn)=(.*)$", line)
            if m:
                if m.group(1) == "cfn":
                    cur_cfn = m.group(2)
                continue
            if line.startswith("calls="):
                pending = (cur_cfn, int(line.split("=", 1)[1].split()[0]))
    return calls, incl


def main():
    path, pats = sys.argv[1], sys.argv[2:]
    calls, incl = parse(path)
    for name in sorted(calls, key=lambda n: -incl.get(n, 0)):
        if pats and not any(p in name for p in pats):
            continue
        n, c = calls[name], incl.get(name, 0)
        print(f"{n}\t{c}\t{c / n if n else 0:.0f}\t{name}")


if __name__ == "__main__":
    main()
