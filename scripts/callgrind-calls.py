#!/usr/bin/env python3
"""Inclusive instructions and call counts per function, from callgrind output files.

    scripts/callgrind-calls.py [--event NAME] FILE [PATTERN...]

For every function whose name contains one of the PATTERNs (all functions without any): how
often it was called and the instructions executed inside it and everything it called, summed
over its callers' call edges (so a function inlined away has no row). Prints
`calls <TAB> inclusive <TAB> per-call <TAB> name`.

--event NAME counts another of the profile's events instead of instructions (Ir): with
`--cache-sim=yes`, D1mr/D1mw (first-level data cache read/write misses) or DLmr/DLmw
(last-level misses), summed when NAME lists several with '+' (D1mr+D1mw).
"""
import re
import sys


def parse(path, event="Ir"):
    names = {"fn": {}, "cfn": {}}
    calls, incl = {}, {}
    cur_cfn, pending = None, None
    # A cost line is its positions (one, the line; two with --dump-instr=yes), then one column
    # per event in the header's order, trailing zeros left out. The header (`positions:`, then
    # `events:`) comes before any cost line and says which columns to sum.
    positions, columns = 1, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("positions:"):
                positions = len(line.split()[1:])
                continue
            if line.startswith("events:"):
                events = line.split()[1:]
                wanted = event.split("+")
                missing = [e for e in wanted if e not in events]
                if missing:
                    sys.exit(f"{path}: no event {', '.join(missing)} (events: {' '.join(events)})")
                columns = [positions + events.index(e) for e in wanted]
                continue
            if pending is not None:
                parts = line.split()
                cost = sum(int(parts[c]) for c in columns if c < len(parts))
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
    args, event = sys.argv[1:], "Ir"
    if args[:1] == ["--event"] and len(args) > 1:
        event, args = args[1], args[2:]
    if not args:
        sys.exit(__doc__)
    path, pats = args[0], args[1:]
    calls, incl = parse(path, event)
    for name in sorted(calls, key=lambda n: -incl.get(n, 0)):
        if pats and not any(p in name for p in pats):
            continue
        n, c = calls[name], incl.get(name, 0)
        print(f"{n}\t{c}\t{c / n if n else 0:.0f}\t{name}")


if __name__ == "__main__":
    main()
