#!/usr/bin/env python3
"""One-sided performance, rshm beside the C shm, in the same run.

Runs Sandia OpenSHMEM's performance programs (an SOS build made outside the repository, the one
both providers can run: --enable-ofi-manual-progress --enable-manual-progress
--enable-hard-polling) and, if given, fabtests' fi_rma_bw, alternating the providers, and prints
a Markdown report with the median of the runs and the rshm/shm ratio at every size:

    scripts/bench-one-sided.py --sos-build /opt/sos-build-manual [--fabtests /opt/fabtests/bin]
                               [--default-build /opt/sos-build-default]
                               [--runs 3] [--provider-path target/rshm] [--out FILE] [--host-tries 3]

With --default-build (an SOS build with no provider-specific configure flags: auto progress,
blocking waits, target counters), rshm also runs the SOS programs on that build, alternated with
the others, in a third column: what a user of a stock OpenSHMEM gets. The C shm cannot run it.

Latency ratios below 1 and bandwidth ratios above 1 mean rshm is faster. The load average is
printed first: figures taken while other work runs on the machine are not comparable. The host's
own speed (`hostspeed`) is timed before and after every program; a program that ran while the
host was in another state than the run's reference (the state most handoffs fell in) is run again, up to
--host-tries times, and the Host section at the end says how many were and whether any stayed
off (then with a warning).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import hostspeed

SOS_PROGRAMS = [
    # (program, [(what a table measures, the column it takes, unit, lower is better)]): the
    # size tables have one figure per row; the atomics table has bandwidth, rate and latency.
    ("shmem_latency_put_perf", [("put", 0, "us", True)]),
    ("shmem_latency_get_perf", [("get", 0, "us", True)]),
    ("shmem_bw_put_perf", [("put bandwidth", 0, "MB/s", False)]),
    ("shmem_bw_get_perf", [("get bandwidth", 0, "MB/s", False)]),
    # Both PEs get from each other at once: a target busy with its own gets.
    ("shmem_bibw_get_perf", [("bidirectional get bandwidth", 0, "MB/s", False)]),
    ("shmem_bw_atomics_perf", [("atomic rate", 1, "Mops/s", False), ("atomic latency", 2, "us", True)]),
]
# rshm on the --default-build SOS build: a provider variant of its own in the tables.
DEFAULT = "rshm-default"
NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"


def sh(cmd, env, timeout):
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        return out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        return -1, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")


def provider_env(prov, provider_path):
    env = dict(os.environ, FI_PROVIDER=prov, SHMEM_OFI_PROVIDER=prov)
    if prov == "rshm":
        env["FI_PROVIDER_PATH"] = provider_path
    else:
        env.pop("FI_PROVIDER_PATH", None)
    return env


def parse_sos(text, column):
    """{(section, key): value}: each table row under the latest 'results' or header line, or
    under the operation named above a '-----' rule (the atomics table, whose rows carry three
    figures: `column` picks one)."""
    rows = {}
    section, filled = "main", False
    lines = [line.strip() for line in text.splitlines()]
    for i, s in enumerate(lines):
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1]) and re.fullmatch(r"\w+", s):
            section, filled = s, False
            continue
        if s.endswith("results:"):
            section, filled = s[: -len(" results:")], False
            continue
        if s.startswith("Message Size") and filled:
            # A second table under the same heading: the streaming (per-size) one.
            section, filled = "streaming", False
            continue
        m = re.fullmatch(rf"(\d+)\s+({NUM})(?:\s+({NUM}))?", s)
        if m:
            rows[(section, int(m.group(1)))] = float(m.group(2))
            filled = True
            continue
        m = re.fullmatch(rf"([A-Za-z_][\w]*)\s+({NUM})\s+({NUM})\s+({NUM})", s)
        if m:  # atomics: datatype, then bandwidth (MB/s), message rate (Mops/s), latency (us)
            rows[(section, m.group(1))] = float(m.group(2 + column))
            filled = True
    return rows


def parse_rma_bw(text):
    rows = {}
    for line in text.splitlines():
        f = line.split()
        # The iterations column reads 200, 2k or 20k.
        if len(f) >= 7 and re.fullmatch(r"\d+[kmg]?", f[1]) and re.fullmatch(NUM, f[4] or ""):
            rows[("", f[0])] = float(f[4])
    return rows


def run_sos(build, prog, prov, provider_path):
    """The program's output, or "" if it failed."""
    path = os.path.join(build, "modules/tests-sos/test/performance/shmem_perf_suite", prog)
    cmd = ["timeout", "-k", "5", "300", "mpiexec.hydra", "-np", "2", path, "-e", "1048576"]
    rc, out = sh(cmd, provider_env(prov, provider_path), 320)
    return out if rc == 0 else ""


def run_rma_bw(bindir, op, prov, provider_path, port):
    env = provider_env(prov, provider_path)
    # fabtests' own iteration counts (20,000 a size below 64 KiB, fewer above): with a fixed
    # -I 100 the small sizes lasted a millisecond and jumped by 2-3x between runs.
    args = [os.path.join(bindir, "fi_rma_bw"), "-p", prov, "-e", "rdm", "-o", op, "-S", "all"]
    # Both sides name the loopback interface (-s), as runfabtests.sh does: without it the C shm's
    # client takes the server's host name for its shared-memory address and hangs.
    srv = subprocess.Popen(args + ["-B", str(port), "-s", "127.0.0.1"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    rc, out = sh(["timeout", "-k", "5", "240"] + args + ["-P", str(port), "-s", "127.0.0.1", "127.0.0.1"], env, 250)
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
    return out if rc == 0 else ""


def median_table(samples):
    keys = []
    for s in samples:
        for k in s:
            if k not in keys:
                keys.append(k)
    return {k: statistics.median([s[k] for s in samples if k in s]) for k in keys if any(k in s for s in samples)}


def report(title, unit, lower_better, per_prov):
    r, c = per_prov.get("rshm", {}), per_prov.get("shm", {})
    d = per_prov.get(DEFAULT)
    head = "| section | size / op | rshm | C shm | rshm/shm |"
    rule = "|---|---:|---:|---:|---:|"
    if d is not None:
        head += " rshm, default build | its ratio to C shm |"
        rule += "---:|---:|"
    lines = [f"### {title} ({unit}, median)", "", head, rule]
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    for k in list(dict.fromkeys(list(r) + list(c) + list(d or {}))):
        rv, cv = r.get(k), c.get(k)
        row = f"| {k[0] or '-'} | {k[1]} | {fmt(rv)} | {fmt(cv)} | {ratio(rv, cv)} |"
        if d is not None:
            row += f" {fmt(d.get(k))} | {ratio(d.get(k), cv)} |"
        lines.append(row)
    better = "lower" if lower_better else "higher"
    lines += ["", f"({better} is better)", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sos-build", required=True)
    ap.add_argument("--fabtests")
    ap.add_argument("--default-build", help="an SOS build with default configure flags, run with rshm only")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--provider-path", default=os.path.join(os.path.dirname(__file__), "..", "target", "rshm"))
    ap.add_argument("--out")
    ap.add_argument("--host-tries", type=int, default=3,
                    help="times a program run while the host was in another state is run again (default 3)")
    a = ap.parse_args()
    a.provider_path = os.path.abspath(a.provider_path)
    load = os.getloadavg()
    parts = [
        "## One-sided, rshm vs the C shm (libfabric 1.17), same run",
        "",
        f"Load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs; "
        f"{a.runs} runs each, providers alternated; SOS build {a.sos_build}"
        + (f"; rshm also on the default build {a.default_build}." if a.default_build else "."),
        "",
    ]
    def done(section):
        # Each table is written as soon as it is measured, so a cut-short run keeps what it has.
        parts.append(section)
        print(section, file=sys.stderr, flush=True)
        if a.out:
            with open(a.out, "w") as f:
                f.write("\n".join(parts) + "\n")

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def measure(job):
        """Run one program for one provider, the host's handoff timed before and after it."""
        before = hostspeed.handoff(root)
        kind, what, prov = job["kind"], job["what"], job["prov"]
        if kind == "sos":
            build = a.default_build if prov == DEFAULT else a.sos_build
            out = run_sos(build, what, "rshm" if prov == DEFAULT else prov, a.provider_path)
        else:
            job["port"] += 1000
            out = run_rma_bw(a.fabtests, what, prov, a.provider_path, job["port"])
        after = hostspeed.handoff(root)
        return dict(job, out=out, handoffs=[h for h in (before, after) if h is not None])

    # Every program for both providers, alternated, `runs` times; then the ones that ran while
    # the host was in another state than the run's reference are run again (bench.py does the
    # same; docs/perf/bench-reading.md).
    jobs, port = [], 23000
    sos_provs = ("rshm", "shm") + ((DEFAULT,) if a.default_build else ())
    for prog, _ in SOS_PROGRAMS:
        for r in range(a.runs):
            for p in sos_provs:
                jobs.append({"kind": "sos", "what": prog, "prov": p, "run": r, "port": 0})
    if a.fabtests:
        for op in ("write", "read"):
            for r in range(a.runs):
                for p in ("rshm", "shm"):
                    port += 1
                    jobs.append({"kind": "rma_bw", "what": op, "prov": p, "run": r, "port": port})
    done_jobs = []
    for i, job in enumerate(jobs):
        done_jobs.append(measure(job))
        print(f"[{i + 1}/{len(jobs)}] {job['what']} {job['prov']} handoff "
              f"{'/'.join(f'{h:.3f}' for h in done_jobs[-1]['handoffs'])} us", file=sys.stderr, flush=True)
    ref = hostspeed.reference([h for j in done_jobs for h in j["handoffs"]])
    reruns = 0
    for attempt in range(a.host_tries if ref else 0):
        off = [i for i, j in enumerate(done_jobs) if not hostspeed.in_state(j["handoffs"], ref)]
        if not off:
            break
        print(f"== host: {len(off)} programs ran in another state than the reference (handoff {ref:.3f} us): "
              f"running them again ({attempt + 1} of {a.host_tries})", file=sys.stderr, flush=True)
        for i in off:
            again = measure(done_jobs[i])
            reruns += 1
            if hostspeed.off_by(again["handoffs"], ref) < hostspeed.off_by(done_jobs[i]["handoffs"], ref):
                done_jobs[i] = again
    host_off = sum(1 for j in done_jobs if ref and not hostspeed.in_state(j["handoffs"], ref))

    def outputs(kind, what):
        """Each provider's outputs of a program: those in the reference state, or, if none is,
        all of them."""
        per = {}
        for p in ("rshm", "shm", DEFAULT):
            mine = [j for j in done_jobs if j["kind"] == kind and j["what"] == what and j["prov"] == p]
            if not mine:
                continue
            steady = [j for j in mine if hostspeed.in_state(j["handoffs"], ref)] if ref else mine
            per[p] = [j["out"] for j in (steady or mine)]
        return per

    for prog, tables in SOS_PROGRAMS:
        outs = outputs("sos", prog)
        for what, column, unit, lower in tables:
            per = {p: median_table([parse_sos(o, column) for o in v if o]) for p, v in outs.items()}
            done(report(f"SOS {prog} ({what})", unit, lower, per))
    if a.fabtests:
        for op in ("write", "read"):
            per = {p: median_table([parse_rma_bw(o) for o in v if o]) for p, v in outputs("rma_bw", op).items()}
            done(report(f"fi_rma_bw -o {op}", "MB/s", False, per))
    handoffs = [h for j in done_jobs for h in j["handoffs"]]
    meta = {"host_ref": ref, "host_reruns": reruns, "host_off": host_off, "invocations": len(done_jobs)}
    swing = hostspeed.warning(handoffs, meta)
    done("\n".join(["## Host", "", hostspeed.line(handoffs, meta)] + (["", swing] if swing else [])) + "\n")
    if swing:
        print("WARNING: the host changed speed during this run: see the Host section", file=sys.stderr)

if __name__ == "__main__":
    main()
