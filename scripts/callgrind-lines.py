#!/usr/bin/env python3
"""Instructions per source line of one library, from a callgrind profile taken with
--dump-instr=yes, divided by a count (messages, calls) you give: where a path's instructions go
when the build inlines everything into a few entry points (the provider is one LTO unit, so
callgrind's own per-function and per-line views put most of it under `cq_read` with no line).

    valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=OUT <program>
    scripts/callgrind-lines.py OUT librshm-fi.so DIVISOR [TOP]

Each executed instruction's address is resolved with `addr2line -i` and charged to the
innermost inlined frame that is in this repository's source (provider/, smr-core/): a line of
std's VecDeque used by rx.rs counts for the rx.rs line that called it. Prints the total per
DIVISOR, then the files and the TOP lines (default 40) by instructions per DIVISOR. Self cost
only: a call's callee is charged to the callee's own lines (so every call is counted once).
The divisor is yours: the calls of an entry point (`grep calls=` counts, or
scripts/callgrind-calls.py on a profile without --dump-instr) or the messages a run moved.
"""
import collections
import re
import subprocess
import sys


def position(token, prev):
    if token.startswith("0x"):
        return int(token, 16)
    if token.startswith("+"):
        return prev + int(token[1:])
    if token.startswith("-"):
        return prev - int(token[1:])
    if token == "*":
        return prev
    return int(token)


def self_costs(path, obj_part):
    """{address: instructions} of the object whose path contains `obj_part`, and its path."""
    names, cur, costs, prev, skip = {}, None, collections.Counter(), 0, False
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^(c?)ob=\((\d+)\)(?: (.*))?$", line)
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if not m.group(1):
                    cur = names.get(m.group(2))
                continue
            if line.startswith("calls="):
                skip = True  # the next cost line is the call's inclusive cost
                continue
            if not line or line[0] not in "0123456789+-*":
                continue
            fields = line.split()
            prev = position(fields[0], prev)
            if skip:
                skip = False
                continue
            if cur and obj_part in cur and len(fields) >= 3:
                costs[prev] += int(fields[2])
    objs = [o for o in names.values() if obj_part in o]
    if not objs:
        sys.exit(f"no object containing {obj_part!r} in {path}")
    return costs, objs[0]


def ours(location):
    return "/work/" in location or location.startswith(("provider/", "smr-core/"))


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    path, obj_part, div = sys.argv[1], sys.argv[2], float(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    costs, obj = self_costs(path, obj_part)
    addrs = sorted(costs)
    out = subprocess.run(
        ["addr2line", "-a", "-i", "-f", "-C", "-e", obj] + [hex(a) for a in addrs], capture_output=True, text=True
    ).stdout.split("\n")
    per_line = collections.Counter()
    addr, frames, pending = None, [], None

    def flush():
        if addr is None or not frames:
            return
        loc = next((loc for _, loc in frames if ours(loc)), frames[0][1])
        loc = re.sub(r" \(discriminator \d+\)", "", loc)
        loc = re.sub(r"^.*?/(provider|smr-core)/", r"\1/", loc)
        per_line[loc] += costs[addr]

    for row in out:
        if row.startswith("0x"):
            flush()
            addr, frames, pending = int(row, 16), [], None
        elif row:
            if pending is None:
                pending = row
            else:
                frames.append((pending, row))
                pending = None
    flush()
    per_file = collections.Counter()
    for loc, c in per_line.items():
        per_file[loc.rsplit(":", 1)[0]] += c
    print(f"{sum(costs.values()) / div:.0f} instructions per unit in {obj}")
    for loc, c in per_file.most_common(20):
        print(f"{c / div:8.1f}  {loc}")
    print()
    for loc, c in per_line.most_common(top):
        print(f"{c / div:8.1f}  {loc}")


if __name__ == "__main__":
    main()
