#!/usr/bin/env python3
"""Ping-pong beside a process that is not ours: what each shared-memory provider's latency
becomes when one busy process (a shell loop that never sleeps) competes for the two CPUs the
ping-pong runs on, as OS noise, a daemon or another job on the node would.

    scripts/bench-contended.py [--sizes 8,1K,16K,64K] [--rounds 3] [--time-ms 300]
                               [--providers rshm@1.17,shm@1.17,shm@2.5,sm2@2.5] [--idle]

For every round, one competing process is started, every provider runs `rshm-fi-bench`'s tagged
one-way latency in turn (the order rotated from round to round), and the process is stopped.
Prints the median one-way latency (min-max) per provider and size, and rshm's ratio to the best
other provider. --idle runs the same with no competing process, for comparison.
Needs `cargo build --release -p rshm-benches`, scripts/build-provider.sh (target/rshm) and, for
the 2.5.1 providers, the mpich wheel in target/venv-mpich (scripts/bench.py installs it).
"""
import argparse
import os
import statistics
import subprocess
import sys

# The bench command's way of selecting a provider and a core, and of reading rshm-fi-bench.
from bench import BIN, PROVIDER_DIR, ROOT, parse_line, provider_env


def one_way_us(prov, args):
    """{size: one-way microseconds} of one invocation."""
    cmd = [BIN, "--provider", prov.split("@")[0], "--families", "tagged", "--tests", "lat",
           "--sizes", args.sizes, "--time-ms", str(args.time_ms), "--tries", "1"]
    env = provider_env(prov, os.path.join(args.mpich_venv, "lib", "mpich"), args.provider_dir)
    out = subprocess.run(["timeout", "-k", "5", "300"] + cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    got = {}
    for line in out.stdout.splitlines():
        d = parse_line(line)
        if d["kind"] == "RESULT":
            got[int(d["size"])] = int(d["ns"]) / int(d["ops"]) / 2 / 1000
        elif d["kind"] == "FAIL":
            sys.exit(f"{prov}: {line}")
    if not got:
        sys.exit(f"{prov}: no result (exit {out.returncode}): {out.stderr.strip()[-300:]}")
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,1K,16K,64K")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time-ms", type=int, default=300)
    ap.add_argument("--providers", default="rshm@1.17,shm@1.17,shm@2.5,sm2@2.5")
    ap.add_argument("--provider-dir", default=PROVIDER_DIR)
    ap.add_argument("--mpich-venv", default=os.path.join(ROOT, "target", "venv-mpich"))
    ap.add_argument("--idle", action="store_true", help="no competing process")
    args = ap.parse_args()
    provs = args.providers.split(",")
    samples = {p: {} for p in provs}
    for r in range(args.rounds):
        hog = None if args.idle else subprocess.Popen(["sh", "-c", "while :; do :; done"])
        try:
            for p in provs[r % len(provs):] + provs[:r % len(provs)]:
                for size, us in one_way_us(p, args).items():
                    samples[p].setdefault(size, []).append(us)
        finally:
            if hog:
                hog.kill()
                hog.wait()
    what = "no competing process" if args.idle else "one busy process competing for the CPUs"
    print(f"tagged one-way latency (us), {what}; median (min-max) of {args.rounds} rounds")
    sizes = sorted(next(iter(samples.values())))
    print("| size | " + " | ".join(provs) + " | rshm / best other |")
    print("|---:|" + "---:|" * (len(provs) + 1))
    for s in sizes:
        med = {p: statistics.median(samples[p][s]) for p in provs if s in samples[p]}
        cells = [f"{med[p]:.2f} ({min(samples[p][s]):.2f}-{max(samples[p][s]):.2f})" for p in provs]
        others = [med[p] for p in provs if not p.startswith("rshm")]
        mine = [med[p] for p in provs if p.startswith("rshm")]
        ratio = f"{mine[0] / min(others):.2f}x" if mine and others else "-"
        print(f"| {s} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
