#!/usr/bin/env python3
"""One bench command: rshm beside every other shared-memory provider, through libfabric's API.

Builds the provider and `rshm-fi-bench` (benches/src/bin/rshm-fi-bench.rs), then runs latency,
bandwidth and message-rate sweeps (tagged and msg ping-pong and windowed streams, RMA write and
read, FI_SUM uint64 atomics) for each provider on each libfabric core:

    rshm and shm on Debian's libfabric 1.17 (/usr/lib/x86_64-linux-gnu/libfabric.so.1)
    rshm, shm and sm2 on libfabric 2.5.1, the core inside the PyPI mpich wheel
        (selected with LD_LIBRARY_PATH; the wheel is installed into target/venv-mpich if missing)

The providers alternate (every run, every family, each provider in turn, the order rotated
from run to run) and the whole sweep repeats --runs times. The report gives the median, min
and max over the runs, and the ratio rshm / best other provider at every size. Other CPU load
is watched twice: `rshm-fi-bench` retries and marks every point during which another task took
either process's CPU, and this script measures, around every invocation, how much CPU went to
processes other than the bench's two. A busy machine is reported in the terminal and in the
report, never silently measured.

    scripts/bench.py [--quick] [--runs N] [--sizes 8,1K,...] [--providers rshm@1.17,shm@2.5,...]
                     [--ops tagged,msg,rma,atomic | lat,bw,write_lat,...] [--time-ms MS]
                     [--out docs/perf] [--no-build] [--no-plots]

Writes OUT/bench.md, OUT/bench.json (medians, spread, n/a and failures, for --replot; every
sample goes to target/bench-raw.json) and OUT/bench-*.png (matplotlib, installed
into target/venv-bench with pip; without it the report has no figures and says so).
"""
import argparse
import datetime
import glob
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time

import hostspeed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "rshm-fi-bench")
PROVIDER_DIR = os.path.join(ROOT, "target", "rshm")
DEBIAN_CORE = "/usr/lib/x86_64-linux-gnu/libfabric.so.1"

ALL_PROVIDERS = ["rshm@1.17", "shm@1.17", "rshm@2.5", "shm@2.5", "sm2@2.5"]
FAMILIES = ["tagged", "msg", "rma", "atomic"]
# The tests each family runs, passed to rshm-fi-bench by name: it measures exactly these, and every
# one of them has a table. The self-test (`cargo test -p rshm-benches`) fails when the binary
# offers a test that is not here (`rshm-fi-bench --list-tests`), so a new test is not left out
# unnoticed, and none is measured without being reported, as bw_data was until 2026-12-03.
TESTS = {
    "tagged": ["lat", "bw", "bw_msg", "bw_more", "bw_data"],
    "msg": ["lat", "bw"],
    "rma": ["write_lat", "write_lat_tc", "write_bw", "read_lat", "read_bw"],
    "atomic": [
        "fetch_lat", "cswap_lat", "atomic_read_lat", "atomic_lat", "atomic_rate", "atomic_rate_more", "atomic_lat_tc",
        "atomic_rate_tc",
    ],
}
# Streams posted with FI_MORE on all but the last of each window: reported as a rate only, at the
# sizes where batching can matter (issue 10: rshm with and without FI_MORE, beside the C shm).
MORE_SIZES_MAX = 4096
DEFAULT_SIZES = "8,64,256,1K,4K,16K,64K,256K,1M,4M"
QUICK_SIZES = "8,1K,4K,64K,1M"

# (family, test) -> (title, metric name, unit, lower is better)
METRICS = {
    ("tagged", "lat"): ("tagged ping-pong, one-way latency", "lat", "us", True),
    ("msg", "lat"): ("msg ping-pong, one-way latency", "lat", "us", True),
    ("tagged", "bw"): ("tagged stream (window 64), bandwidth", "bw", "MB/s", False),
    ("msg", "bw"): ("msg stream (window 64), bandwidth", "bw", "MB/s", False),
    ("tagged", "rate"): ("tagged stream (window 64), message rate", "rate", "Mmsg/s", False),
    ("msg", "rate"): ("msg stream (window 64), message rate", "rate", "Mmsg/s", False),
    ("rma", "write_lat"): (
        "fi_write, post to completion, one at a time (each provider's default completion: rshm's is "
        "delivery complete, the C shm 2.5.1 completes a small write once it is queued)", "lat", "us", True),
    ("rma", "write_lat_tc"): (
        "fi_writemsg(FI_TRANSMIT_COMPLETE), post to completion, one at a time", "lat", "us", True),
    ("rma", "read_lat"): ("fi_read, post to completion, one at a time", "lat", "us", True),
    ("rma", "write_bw"): ("fi_write stream (window 64), bandwidth", "bw", "MB/s", False),
    ("rma", "read_bw"): ("fi_read stream (window 64), bandwidth", "bw", "MB/s", False),
    ("atomic", "fetch_lat"): ("fi_fetch_atomic FI_SUM uint64, one at a time", "lat", "us", True),
    ("atomic", "cswap_lat"): ("fi_compare_atomic FI_CSWAP uint64, one at a time", "lat", "us", True),
    ("atomic", "atomic_read_lat"): (
        "fi_fetch_atomicmsg(FI_INJECT) FI_ATOMIC_READ uint64, one at a time", "lat", "us", True),
    ("atomic", "atomic_lat"): ("fi_atomic FI_SUM uint64, one at a time", "lat", "us", True),
    ("atomic", "atomic_rate"): ("fi_atomic FI_SUM uint64 stream (window 64), rate", "rate", "Mops/s", False),
    ("tagged", "rate_msg"): (
        "tagged stream of fi_tsendmsg without FI_MORE (window 64), message rate", "rate", "Mmsg/s", False),
    ("tagged", "rate_more"): (
        "tagged stream of fi_tsendmsg with FI_MORE (window 64), message rate", "rate", "Mmsg/s", False),
    ("tagged", "rate_data"): (
        "tagged stream of fi_tinjectdata/fi_tsenddata, remote CQ data on every message as MPI's sends "
        "(window 64), message rate", "rate", "Mmsg/s", False),
    ("atomic", "atomic_lat_tc"): (
        "fi_atomicmsg(FI_TRANSMIT_COMPLETE) FI_SUM uint64, one at a time", "lat", "us", True),
    ("atomic", "atomic_rate_tc"): (
        "fi_atomicmsg(FI_TRANSMIT_COMPLETE) FI_SUM uint64 stream (window 64), rate", "rate", "Mops/s", False),
    ("atomic", "atomic_rate_more"): (
        "fi_atomicmsg FI_SUM uint64 stream with FI_MORE (window 64), rate", "rate", "Mops/s", False),
}
# A process of the bench waited for its CPU more than this share of a timed run: busy.
BUSY_SHARE = 0.02
# Other processes' share of all CPUs around an invocation above which the terminal warns.
OTHER_WARN = 0.05


def log(msg):
    print(msg, flush=True)


def warn(msg):
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


def parse_size(s):
    s = s.strip()
    mult = {"k": 1 << 10, "m": 1 << 20}.get(s[-1:].lower(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def size_label(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, **kw)


# ------------------------------------------------------------------------------------------
# Setup


def build():
    log("== building librshm-fi.so, rshm-fi-bench and rshm-engine-pingpong (the host's speed)")
    run(["bash", "scripts/build-provider.sh"], check=True, stdout=subprocess.DEVNULL)
    run(
        ["cargo", "build", "--release", "--locked", "-q", "-p", "rshm-benches", "--bin", "rshm-fi-bench"]
        + ["--bin", "rshm-engine-pingpong"],
        check=True,
    )


def wheel_core(venv, install):
    """The directory holding the mpich wheel's libfabric.so.1 (2.5.1), installing it if asked."""

    def find():
        hits = sorted(glob.glob(os.path.join(venv, "lib", "**", "libfabric.so.1"), recursive=True))
        hits.sort(key=lambda p: "mpich" not in p)
        return os.path.dirname(hits[0]) if hits else None

    found = find()
    if found or not install:
        return found, None
    log(f"== installing the PyPI mpich wheel into {os.path.relpath(venv, ROOT)} (its libfabric 2.5.1)")
    logf = os.path.join(ROOT, "target", "pip-mpich-bench.log")
    try:
        with open(logf, "w") as f:
            if not os.path.exists(os.path.join(venv, "bin", "pip")):
                run([sys.executable, "-m", "venv", venv], check=True, stdout=f, stderr=f)
            run([os.path.join(venv, "bin", "pip"), "install", "-q", "mpich"], check=True, stdout=f, stderr=f)
    except (subprocess.CalledProcessError, OSError) as e:
        return None, f"cannot install the mpich wheel ({e}; see {logf})"
    found = find()
    return found, None if found else "the mpich wheel has no libfabric.so.1"


def plot_python(install):
    """A python with matplotlib: this one, or target/venv-bench (created with pip)."""
    try:
        import matplotlib  # noqa: F401

        return sys.executable
    except ImportError:
        pass
    venv = os.path.join(ROOT, "target", "venv-bench")
    py = os.path.join(venv, "bin", "python3")
    ok = os.path.exists(py) and run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0
    if ok or not install:
        return py if ok else None
    log("== installing matplotlib into target/venv-bench (for the figures)")
    try:
        run([sys.executable, "-m", "venv", venv], check=True, capture_output=True)
        run([os.path.join(venv, "bin", "pip"), "install", "-q", "matplotlib"], check=True, capture_output=True)
        return py
    except (subprocess.CalledProcessError, OSError) as e:
        warn(f"no matplotlib ({e}): the report will have no figures")
        return None


# ------------------------------------------------------------------------------------------
# Load


def cpu_times():
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])
    return total - v[3] - v[4], total


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class LoadMeter:
    """Share of all CPUs used by processes other than this script's children (the bench's two
    processes), between start() and stop()."""

    hz = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count() or 1

    def start(self):
        self.t0, self.c0, self.s0 = time.monotonic(), children_cpu(), cpu_times()

    def stop(self):
        wall = time.monotonic() - self.t0
        busy = (cpu_times()[0] - self.s0[0]) / self.hz
        mine = children_cpu() - self.c0
        # Jiffies are coarse: over a short wall time the share is only roughly right.
        return min(1.0, max(0.0, (busy - mine) / (self.ncpu * wall))) if wall > 0 else 0.0


def idle_check(seconds=0.3):
    """Share of all CPUs busy while nothing of ours runs."""
    b0, t0 = cpu_times()
    time.sleep(seconds)
    b1, t1 = cpu_times()
    return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


# ------------------------------------------------------------------------------------------
# Running


def provider_env(prov, core_dir, provider_dir=PROVIDER_DIR):
    name, core = prov.split("@")
    env = dict(os.environ, FI_PROVIDER=name)
    env.pop("FI_PROVIDER_PATH", None)
    env.pop("LD_LIBRARY_PATH", None)
    if name == "rshm":
        env["FI_PROVIDER_PATH"] = provider_dir
    if core != "1.17":
        env["LD_LIBRARY_PATH"] = core_dir
    return env


def parse_line(line):
    kind, *fields = line.rstrip("\n").split("\t")
    d = dict(f.split("=", 1) for f in fields if "=" in f)
    d["kind"] = kind
    return d


def invoke(prov, core_dir, family, tests, sizes, time_ms, tries, timeout):
    args = [BIN, "--provider", prov.split("@")[0], "--families", family, "--sizes", sizes]
    args += ["--time-ms", str(time_ms), "--tries", str(tries)]
    if tests:
        args += ["--tests", ",".join(tests)]
    meter = LoadMeter()
    meter.start()
    try:
        # Its own session, so that if this script is stopped the whole bench goes too.
        p = subprocess.Popen(
            ["timeout", "-k", "5", str(timeout)] + args,
            cwd=ROOT,
            env=provider_env(prov, core_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = p.communicate()
        except BaseException:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()
            raise
        rc = p.returncode
    except OSError as e:
        out, err, rc = "", str(e), -1
    other = meter.stop()
    rows = [parse_line(line) for line in out.splitlines() if line.split("\t", 1)[0] in ("RESULT", "NA", "FAIL", "INFO")]
    if rc != 0:
        reason = "timed out" if rc == 124 else f"exit status {rc}"
        tail = " | ".join(err.strip().splitlines()[-3:])
        rows.append({"kind": "ERROR", "prov": prov, "family": family, "reason": f"{reason}: {tail}"})
    for r in rows:
        r["label"] = prov
        r["other"] = other
    return rows, other


# The stream tests whose message rate has a table of its own, and that table's name.
RATE_OF = {"bw": "rate", "bw_more": "rate_more", "bw_msg": "rate_msg", "bw_data": "rate_data"}


def value(r):
    """(metric, value) pairs of one RESULT row."""
    ns, ops, size = float(r["ns"]), float(r["ops"]), int(r["size"])
    test = r["test"]
    if test == "lat":
        return [("lat", ns / ops / 2 / 1e3)]
    if test == "bw":
        return [("bw", size * ops / ns * 1e3), ("rate", ops / ns * 1e3)]
    if test in ("write_bw", "read_bw"):
        return [("bw", size * ops / ns * 1e3)]
    if test in ("atomic_rate", "atomic_rate_more", "atomic_rate_tc", "bw_more", "bw_msg", "bw_data"):
        return [("rate", ops / ns * 1e3)]
    return [("lat", ns / ops / 1e3)]


def aggregate(rows):
    """{(family, test_or_metric, size, label): {median, min, max, n, busy}}."""
    samples = {}
    for r in rows:
        if r["kind"] != "RESULT":
            continue
        for metric, v in value(r):
            key_test = RATE_OF.get(r["test"], r["test"]) \
                if metric == "rate" else r["test"]
            k = (r["family"], key_test, int(r["size"]), r["label"])
            samples.setdefault(k, []).append((v, r["busy"] == "1", r.get("host") == "1"))
    agg = {}
    for k, s in samples.items():
        clean = [v for v, busy, host in s if not busy and not host]
        use = clean or [v for v, _, _ in s]
        agg[k] = {
            "median": statistics.median(use),
            "min": min(use),
            "max": max(use),
            "n": len(use),
            # Samples left out (or, with no other, the only ones): the CPU was taken, or the host
            # was in another state than the run's reference (`hostspeed.in_state`).
            "busy": len(s) - len(clean),
            "all_busy": not clean,
            "why": "busy" if any(busy for _, busy, _ in s) else "host",
        }
    return agg


# ------------------------------------------------------------------------------------------
# Report


def fmt(v, unit):
    if v is None:
        return "n/a"
    if unit == "us":
        return f"{v:.3f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"
    if unit == "MB/s":
        return f"{v:.0f}" if v >= 100 else f"{v:.1f}"
    return f"{v:.2f}"


def table(agg, family, test, labels, sizes):
    title, _, unit, lower = METRICS[(family, test)]
    rshms = [lb for lb in labels if lb.startswith("rshm@")]
    others = [lb for lb in labels if not lb.startswith("rshm@")]
    small = [s for s in sizes if s <= MORE_SIZES_MAX]
    test_sizes = [8] if family == "atomic" else small if test in RATE_OF.values() else sizes
    head = ["size"] + [f"{lb} {unit}" for lb in labels] + ["best other"] + [f"{lb} / best" for lb in rshms]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    ratios = {}
    any_row = False
    for size in test_sizes:
        cells = [size_label(size)]
        for lb in labels:
            a = agg.get((family, test, size, lb))
            if a is None:
                cells.append("n/a")
                continue
            any_row = True
            spread = f" [{fmt(a['min'], unit)}-{fmt(a['max'], unit)}]" if a["n"] > 1 else ""
            why = a.get("why", "busy")
            mark = f" ({why})" if a["all_busy"] else (f" ({a['busy']} {why})" if a["busy"] else "")
            cells.append(f"{fmt(a['median'], unit)}{spread}{mark}")
        best = None
        for lb in others:
            a = agg.get((family, test, size, lb))
            if a and (best is None or (a["median"] < best[1] if lower else a["median"] > best[1])):
                best = (lb, a["median"])
        cells.append(f"{fmt(best[1], unit)} ({best[0]})" if best else "n/a")
        for lb in rshms:
            a = agg.get((family, test, size, lb))
            if a and best and best[1] > 0:
                ratio = a["median"] / best[1]
                shaky = a["all_busy"] or agg[(family, test, size, best[0])]["all_busy"]
                ratios[(lb, size)] = (ratio, shaky)
                text = f"**{ratio:.2f}x**" if (ratio < 1 if lower else ratio > 1) else f"{ratio:.2f}x"
                cells.append(text + (" (busy)" if shaky else ""))
            else:
                cells.append("n/a")
        lines.append("| " + " | ".join(cells) + " |")
    if not any_row:
        return [], {}
    direction = "below 1 means rshm is faster" if lower else "above 1 means rshm is faster"
    lines += ["", f"Median of the runs [min-max]; `rshm / best` {direction}.", ""]
    return lines, ratios


TARGETS = [
    # (description, family, test, sizes, bound, lower is better)
    ("one-way latency 8 B .. 1 KiB <= 0.6x", "tagged", "lat", (8, 1024), 0.6, True),
    ("one-way latency 4 KiB <= 0.7x", "tagged", "lat", (4096, 4096), 0.7, True),
    ("bandwidth 64 KiB .. 4 MiB >= 1.5x", "tagged", "bw", (65536, 4 << 20), 1.5, False),
    ("8 B message rate >= 2x", "tagged", "rate", (8, 8), 2.0, False),
]


def targets_table(all_ratios, rshms):
    lines = ["## Against issue 8's targets (tagged, ratio to the best other provider)", ""]
    lines += ["| target | " + " | ".join(rshms) + " |", "|---|" + "---|" * len(rshms)]
    for desc, fam, test, (lo, hi), bound, lower in TARGETS:
        cells = [desc]
        for lb in rshms:
            got = [v for (l2, s), v in all_ratios.get((fam, test), {}).items() if l2 == lb and lo <= s <= hi]
            rs = [r for r, _ in got]
            if not rs:
                cells.append("not measured")
                continue
            met = all(r <= bound for r in rs) if lower else all(r >= bound for r in rs)
            span = f"{min(rs):.2f}x" if len(rs) == 1 else f"{min(rs):.2f}-{max(rs):.2f}x"
            shaky = " (busy data)" if any(b for _, b in got) else ""
            cells.append(f"{span}: {'met' if met else 'not met'}{shaky}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, Linux {platform.release()}"


def commit():
    try:
        return run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def write_report(path, meta, agg, rows, labels, sizes, figures):
    rshms = [lb for lb in labels if lb.startswith("rshm@")]
    busy_points, points = meta["busy_points"], meta["points"]
    out = ["# rshm-fi-bench: rshm beside the other shared-memory providers", ""]
    out += [
        "Written by `" + meta["command"] + "` (do not edit by hand: run it again).",
        "",
        f"- date: {meta['date']} (took {meta['minutes']:.1f} min)",
        f"- commit: {meta['commit']}",
        f"- machine: {meta['machine']}",
        f"- libfabric cores: 1.17 = Debian's {DEBIAN_CORE}; "
        + (f"2.5 = `{meta['core25']}` (PyPI mpich wheel)" if meta["core25"] else f"2.5: not run ({meta['core25_why']})"),
        f"- runs: {meta['runs']}, providers alternated within every run; sizes {', '.join(size_label(s) for s in sizes)}; "
        f"{meta['time_ms']} ms per timed run",
        f"- load: {busy_points} of {points} points stayed busy after retries (a bench process waited for "
        f"its CPU more than {BUSY_SHARE:.0%} of the run); other processes used "
        f"{meta['other_median']:.1%} of the CPUs (median over invocations, max {meta['other_max']:.1%}); "
        f"load average at the end {meta['loadavg']} (the bench's own two processes included)",
        hostspeed.line(meta.get("handoffs", []), meta),
        "",
    ]
    swing = hostspeed.warning(meta.get("handoffs", []), meta)
    if swing:
        out += [swing, ""]
    if busy_points or meta["other_max"] > OTHER_WARN:
        out += [
            "> **Measured on a busy machine**: other processes competed for the CPUs, so these figures "
            "are inflated and noisy. Points marked (busy) are medians over busy samples only. Do not "
            "quote them as rshm's performance; run again on an idle machine.",
            "",
        ]
    out += [
        "How to read this: [bench-reading.md](bench-reading.md). Latency ratios below 1 and "
        "bandwidth/rate ratios above 1 mean rshm is faster than the best other provider at that size.",
        "",
    ]
    for name, caption in figures:
        out += [f"![{caption}]({name})", ""]
    if not figures:
        out += ["(no figures: matplotlib was not available)", ""]
    all_ratios, sections = {}, []
    for fam in FAMILIES:
        # A stream reported as a rate only is listed under its rate's name; "bw" has both.
        tests = [t for t in TESTS[fam] if t not in RATE_OF or t == "bw"]
        tests += [RATE_OF[t] for t in TESTS[fam] if t in RATE_OF]
        for test in tests:
            lines, ratios = table(agg, fam, test, labels, sizes)
            all_ratios[(fam, test)] = ratios
            sections += lines
    out += targets_table(all_ratios, rshms)
    out += ["## Tables", ""] + sections
    info = sorted({(r["label"], r.get("version", "?"), r.get("inject_size", "?")) for r in rows if r["kind"] == "INFO"})
    if info:
        out += ["## Providers as getinfo reported them", ""]
        out += [f"- {lb}: {ver}, inject_size {inj} (messages up to it go with fi_inject)" for lb, ver, inj in info]
        out += [""]
    na = sorted({(r["label"], r["family"], r.get("reason", "")) for r in rows if r["kind"] == "NA"})
    bad = [r for r in rows if r["kind"] in ("FAIL", "ERROR")]
    if na:
        out += ["## Not offered (n/a)", ""] + [f"- {lb} {fam}: {why}" for lb, fam, why in na] + [""]
    if bad:
        out += ["## Failures", ""]
        out += [f"- {r['label']} {r.get('family', '')} {r.get('test', '')} {r.get('size', '')}: {r['reason']}" for r in bad]
        out += [""]
    with open(path, "w") as f:
        f.write("\n".join(out))


PLOT_CODE = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter
data = json.load(open(sys.argv[1]))
outdir = sys.argv[2]
agg = {tuple(k.split("|")): v for k, v in data["agg"].items()}
labels = data["labels"]
styles = {lb: dict(marker="o^sDv"[i % 5], linestyle="-" if lb.startswith("rshm") else "--",
                   linewidth=2.2 if lb.startswith("rshm") else 1.3) for i, lb in enumerate(labels)}
def size_label(n, _pos=None):
    n = int(round(n))
    if n >= 1 << 20:
        return f"{n >> 20}M"
    if n >= 1 << 10:
        return f"{n >> 10}K"
    return str(n)
def has(fam, test):
    return any(f == fam and t == test for (f, t, s, l) in agg)
def panel(ax, fam, test, title, ylabel, scale=1.0):
    drawn = [False]
    for lb in labels:
        pts = sorted((int(s), v) for (f, t, s, l), v in agg.items() if f == fam and t == test and l == lb)
        if not pts:
            continue
        xs = [s for s, _ in pts]
        med = [v["median"] * scale for _, v in pts]
        lo = [(v["median"] - v["min"]) * scale for _, v in pts]
        hi = [(v["max"] - v["median"]) * scale for _, v in pts]
        line = ax.errorbar(xs, med, yerr=[lo, hi], label=lb, capsize=2, **styles[lb])
        busy = [(s, v["median"] * scale) for s, v in pts if v["all_busy"]]
        if busy:
            ax.scatter([b[0] for b in busy], [b[1] for b in busy], s=90, facecolors="white",
                       edgecolors=line[0].get_color(), zorder=5, marker=styles[lb]["marker"])
        drawn[0] = True
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
def figure(name, panels, cols):
    panels = [p for p in panels if has(p[0], p[1])]
    if not panels:
        return
    cols = min(cols, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.6 * rows), squeeze=False)
    for ax, p in zip(axes.flat, panels):
        panel(ax, *p)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(data["subtitle"] + ("\nhollow markers: measured while other load took the CPUs (not trustworthy)"
                                     if any(v["all_busy"] for v in data["agg"].values()) else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(f"{outdir}/{name}", dpi=90)
figure("bench-latency.png", [("tagged", "lat", "tagged ping-pong: one-way latency", "us (lower is better)"),
                              ("msg", "lat", "msg ping-pong: one-way latency", "us (lower is better)")], 2)
figure("bench-bandwidth.png", [("tagged", "bw", "tagged stream (window 64): bandwidth", "GB/s (higher is better)", 1e-3),
                                ("msg", "bw", "msg stream (window 64): bandwidth", "GB/s (higher is better)", 1e-3)], 2)
figure("bench-rma.png", [("rma", "write_lat", "fi_write: post to completion", "us"),
                          ("rma", "read_lat", "fi_read: post to completion", "us"),
                          ("rma", "write_bw", "fi_write stream (window 64)", "GB/s", 1e-3),
                          ("rma", "read_bw", "fi_read stream (window 64)", "GB/s", 1e-3)], 2)
"""

FIGURES = [
    ("bench-latency.png", "one-way latency against message size, every provider"),
    ("bench-bandwidth.png", "bandwidth against message size, every provider"),
    ("bench-rma.png", "RMA write and read latency and bandwidth against size"),
]


def plot(py, json_path, outdir, agg):
    if not py:
        return []
    fams = {k[0] for k in agg}
    script = os.path.join(ROOT, "target", "bench-plot.py")
    with open(script, "w") as f:
        f.write(PLOT_CODE)
    p = run([py, script, json_path, outdir], capture_output=True, text=True)
    if p.returncode != 0:
        warn(f"plotting failed: {p.stderr.strip().splitlines()[-1:] or p.returncode}")
        return []
    figs = [f for f in FIGURES if os.path.exists(os.path.join(outdir, f[0]))]
    if "rma" not in fams:
        figs = [f for f in figs if f[0] != "bench-rma.png"]
    return figs


def replot(json_path, outdir, py):
    with open(json_path) as f:
        d = json.load(f)
    agg = {}
    for k, v in d["agg"].items():
        fam, test, size, label = k.split("|")
        agg[(fam, test, int(size), label)] = v
    os.makedirs(outdir, exist_ok=True)
    if os.path.abspath(json_path) != os.path.abspath(os.path.join(outdir, "bench.json")):
        shutil.copy(json_path, os.path.join(outdir, "bench.json"))
    figs = plot(py, os.path.join(outdir, "bench.json"), outdir, agg)
    md = os.path.join(outdir, "bench.md")
    write_report(md, d["meta"], agg, d["rows"], d["labels"], d["meta"]["sizes"], figs)
    log(f"== wrote {md}" + "".join(f", {f}" for f, _ in figs))
    return 0


def self_test():
    """The aggregation and the report on made-up samples (run by `cargo test -p rshm-benches`)."""

    def res(label, fam, test, size, ns, ops, busy="0", host="0"):
        return {"kind": "RESULT", "label": label, "family": fam, "test": test, "size": str(size),
                "ns": str(ns), "ops": str(ops), "busy": busy, "host": host}

    rows = [
        # rshm 8 B ping-pong: 1.0, 1.2 us one-way, and a busy 9.0 us sample that must not count.
        res("rshm@1.17", "tagged", "lat", 8, 2000, 1), res("rshm@1.17", "tagged", "lat", 8, 2400, 1),
        res("rshm@1.17", "tagged", "lat", 8, 18000, 1, busy="1"),
        # ... and one taken with the host in another state, which must not count either.
        res("rshm@1.17", "tagged", "lat", 8, 8000, 1, host="1"),
        # An msg point measured only in another state: kept, and marked so.
        res("rshm@1.17", "msg", "lat", 8, 8000, 1, host="1"),
        res("shm@1.17", "tagged", "lat", 8, 4000, 1), res("sm2@2.5", "tagged", "lat", 8, 3000, 1),
        # 64 KiB stream: rshm 2 GB/s, shm 1 GB/s (one busy-only sample: kept, and flagged).
        res("rshm@1.17", "tagged", "bw", 65536, 65536 * 64 // 2, 64),
        res("shm@1.17", "tagged", "bw", 65536, 65536 * 64, 64, busy="1"),
        {"kind": "NA", "label": "sm2@2.5", "family": "rma", "reason": "no FI_RMA"},
    ]
    agg = aggregate(rows)
    lat = agg[("tagged", "lat", 8, "rshm@1.17")]
    assert abs(lat["median"] - 1.1) < 1e-9 and lat["min"] == 1.0 and lat["max"] == 1.2 and lat["busy"] == 2, lat
    only_host = agg[("msg", "lat", 8, "rshm@1.17")]
    assert only_host["all_busy"] and only_host["why"] == "host" and only_host["median"] == 4.0, only_host
    # The host's state: the reference is the state most handoffs were in (not a median, which
    # two states far apart put between them); an invocation counts as in it when both of its
    # ends are within hostspeed.SWING_WARN of it.
    ref = hostspeed.reference([0.033, 0.035, 0.034, 0.16, 0.036, 0.165, 0.17])
    assert ref == 0.033 and hostspeed.in_state([0.033, 0.040], ref), ref
    assert hostspeed.reference([0.16, 0.033, 0.165, 0.17]) == 0.16
    assert not hostspeed.in_state([0.034, 0.16], ref) and not hostspeed.in_state([], ref)
    assert hostspeed.off_by([0.034, 0.16], ref) > hostspeed.off_by([0.07], ref) > 1.9
    assert abs(agg[("tagged", "bw", 65536, "rshm@1.17")]["median"] - 2000) < 1e-6
    assert agg[("tagged", "bw", 65536, "shm@1.17")]["all_busy"]
    labels = ["rshm@1.17", "shm@1.17", "sm2@2.5"]
    lines, ratios = table(agg, "tagged", "lat", labels, [8])
    assert abs(ratios[("rshm@1.17", 8)][0] - 1.1 / 1.5) < 1e-9, ratios  # best other: sm2, 1.5 us
    assert "1.500 (sm2@2.5)" in lines[4] and "**0.73x**" in lines[4], lines
    _, ratios = table(agg, "tagged", "bw", labels, [65536])
    assert ratios[("rshm@1.17", 65536)] == (2.0, True), ratios
    tt = "\n".join(targets_table({("tagged", "lat"): {("rshm@1.17", 8): (0.5, False)}}, ["rshm@1.17"]))
    assert "0.50x: met" in tt and "not measured" in tt, tt
    # Every test rshm-fi-bench offers is run and reported here, and no other (see TESTS).
    bench_bin = os.environ.get("RSHM_FI_BENCH_BIN", BIN)
    if os.path.exists(bench_bin):
        offered = {}
        for line in subprocess.run([bench_bin, "--list-tests"], capture_output=True, text=True, check=True).stdout.splitlines():
            fam, test = line.split()
            offered.setdefault(fam, []).append(test)
        assert offered == TESTS, f"rshm-fi-bench offers {offered}, bench.py runs {TESTS}"
        for fam, tests in TESTS.items():
            for t in tests:
                assert (fam, RATE_OF.get(t, t)) in METRICS, f"no table for {fam} {t}: add it to METRICS"
    else:
        print(f"bench.py self-test: {bench_bin} not built, its test list not compared")
    print("bench.py self-test: ok")
    return 0


# ------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"2 runs, sizes {QUICK_SIZES}, 40 ms per point")
    ap.add_argument("--runs", type=int, help="repetitions of the whole sweep (default 5; --quick 2)")
    ap.add_argument("--sizes", help=f"comma-separated sizes with K/M suffixes (default {DEFAULT_SIZES})")
    ap.add_argument("--providers", default=",".join(ALL_PROVIDERS), help="provider@core list (default all)")
    ap.add_argument("--ops", default="tagged,msg,rma,atomic", help="families and/or test names")
    ap.add_argument("--time-ms", type=int, help="duration of one timed run (default 100; --quick 40)")
    ap.add_argument("--tries", type=int, default=3, help="timed runs per point while busy (default 3)")
    ap.add_argument("--host-tries", type=int, default=3,
                    help="times an invocation made while the host was in another state is run again (default 3)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "perf"), help="where bench.md and the PNGs go")
    ap.add_argument("--mpich-venv", default=os.environ.get("RSHM_MPICH_VENV", os.path.join(ROOT, "target", "venv-mpich")))
    ap.add_argument("--no-build", action="store_true", help="use the already built provider and binary")
    ap.add_argument("--no-install", action="store_true", help="install nothing with pip (no wheel, no matplotlib)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--replot", metavar="JSON", help="measure nothing: rewrite the report and figures from a bench.json")
    ap.add_argument("--self-test", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.replot:
        return replot(a.replot, a.out, None if a.no_plots else plot_python(not a.no_install))
    runs = a.runs or (2 if a.quick else 5)
    sizes_arg = a.sizes or (QUICK_SIZES if a.quick else DEFAULT_SIZES)
    sizes = sorted({parse_size(s) for s in sizes_arg.split(",") if s})
    time_ms = a.time_ms or (40 if a.quick else 100)
    labels = [p for p in a.providers.split(",") if p]
    for lb in labels:
        if "@" not in lb or lb.split("@")[1] not in ("1.17", "2.5"):
            ap.error(f"provider {lb!r}: write name@1.17 or name@2.5")
    ops = [o for o in a.ops.split(",") if o]
    all_tests = {t for ts in TESTS.values() for t in ts}
    for o in ops:
        if o not in FAMILIES and o not in all_tests:
            ap.error(f"unknown op {o!r}: families {FAMILIES} or tests {sorted(all_tests)}")
    plan = []  # (family, tests)
    for fam in FAMILIES:
        if fam in ops:
            plan.append((fam, TESTS[fam]))
        elif any(t in ops for t in TESTS[fam]):
            plan.append((fam, [t for t in TESTS[fam] if t in ops]))

    started = time.time()
    if not a.no_build:
        build()
    core_dir, why = None, None
    if any(lb.endswith("@2.5") for lb in labels):
        core_dir, why = wheel_core(a.mpich_venv, not a.no_install)
        if not core_dir:
            why = why or f"no mpich wheel (libfabric.so.1) under {a.mpich_venv}"
            warn(f"libfabric 2.5.1 unavailable ({why or 'no mpich wheel venv'}): running the 1.17 providers only")
            labels = [lb for lb in labels if not lb.endswith("@2.5")]
    py = None if a.no_plots else plot_python(not a.no_install)

    before = idle_check(0.5)
    log(f"== machine before the run: {before:.0%} of the CPUs busy (load average {open('/proc/loadavg').read().split()[0]})")
    if before > OTHER_WARN:
        warn("other processes are using the CPUs: figures will be inflated (the report will say so)")
    total = runs * len(plan) * len(labels)
    log(f"== {runs} runs x {len(plan)} families x {len(labels)} providers ({total} invocations), sizes {sizes_arg}")
    per_timeout = 120 + len(sizes) * 40

    def measure(r, fam, tests, prov, what):
        """One invocation, with the host's handoff timed before and after it."""
        handoffs = [h for h in [hostspeed.handoff(ROOT)] if h is not None]
        t0 = time.monotonic()
        got, other = invoke(prov, core_dir, fam, tests, ",".join(map(str, sizes)), time_ms, a.tries, per_timeout)
        took = time.monotonic() - t0
        handoffs += [h for h in [hostspeed.handoff(ROOT)] if h is not None]
        for g in got:
            g["run"] = r
            if g["kind"] == "RESULT" and g.get("core") != prov.split("@")[1]:
                g["kind"] = "ERROR"
                g["reason"] = f"expected libfabric {prov.split('@')[1]}, ran on {g.get('core')}"
        res = [g for g in got if g["kind"] == "RESULT"]
        busy = sum(g["busy"] == "1" for g in res)
        status = f"{len(res)} points" + (f", {busy} busy" if busy else "")
        na = [g for g in got if g["kind"] == "NA"]
        if na and not res:
            status = "n/a (" + na[0]["reason"][:60] + ")"
        bad = [g for g in got if g["kind"] in ("FAIL", "ERROR")]
        if bad:
            status += f", FAILED: {bad[0]['reason'][:100]}"
        speed = f", handoff {'/'.join(f'{h:.3f}' for h in handoffs)} us" if handoffs else ""
        log(f"[{what}] run {r + 1} {fam:6} {prov:10} {status}; {took:.0f} s, other processes {other:.0%} of the CPUs{speed}")
        if res and other > OTHER_WARN:
            warn(f"other processes used {other:.0%} of the CPUs during {prov} {fam}")
        # Only invocations that measured something count for the load: one that found nothing
        # to run (n/a) lasts a fraction of a second, over which the jiffy-based share is noise
        # (22-24% seen on an idle machine), and no figure of it could be skewed.
        return {"key": (r, fam, tests, prov), "rows": got, "other": other, "handoffs": handoffs, "measured": bool(res)}

    invs, n = [], 0
    for r in range(runs):
        order = labels[r % len(labels):] + labels[: r % len(labels)]
        for fam, tests in plan:
            for prov in order:
                n += 1
                invs.append(measure(r, fam, tests, prov, f"{n:3}/{total}"))

    # The host moves between states in which every figure differs by up to 4x, seconds or
    # minutes apart: an invocation whose handoffs (before and after it) were in another state than
    # the run's reference is run again, up to --host-tries times, keeping the one closest to it.
    ref = hostspeed.reference([h for inv in invs if inv["measured"] for h in inv["handoffs"]])
    reruns = 0
    for attempt in range(a.host_tries if ref else 0):
        off = [i for i, inv in enumerate(invs) if inv["measured"] and not hostspeed.in_state(inv["handoffs"], ref)]
        if not off:
            break
        log(f"== host: {len(off)} invocations ran in another state than the run's reference (handoff "
            f"{ref:.3f} us): running them again ({attempt + 1} of {a.host_tries})")
        for k, i in enumerate(off):
            again = measure(*invs[i]["key"], f"again {k + 1}/{len(off)}")
            reruns += 1
            if hostspeed.off_by(again["handoffs"], ref) < hostspeed.off_by(invs[i]["handoffs"], ref):
                invs[i] = again
    host_off = 0
    for inv in invs:
        if inv["measured"] and ref and not hostspeed.in_state(inv["handoffs"], ref):
            host_off += 1
            for g in inv["rows"]:
                g["host"] = "1"
    rows = [g for inv in invs for g in inv["rows"]]
    others = [inv["other"] for inv in invs if inv["measured"]]
    handoffs = [h for inv in invs if inv["measured"] for h in inv["handoffs"]]

    agg = aggregate(rows)
    os.makedirs(a.out, exist_ok=True)
    meta = {
        "command": "bash scripts/bench.sh " + " ".join(sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "minutes": (time.time() - started) / 60,
        "commit": commit(),
        "machine": machine(),
        "core25": os.path.relpath(os.path.join(core_dir, "libfabric.so.1"), ROOT) if core_dir else None,
        "core25_why": why or "not asked for (--providers)",
        "runs": runs,
        "sizes": sizes,
        "time_ms": time_ms,
        "other_median": statistics.median(others) if others else 0.0,
        "other_max": max(others) if others else 0.0,
        "loadavg": " ".join(open("/proc/loadavg").read().split()[:3]),
        "points": sum(1 for r in rows if r["kind"] == "RESULT"),
        "busy_points": sum(1 for r in rows if r["kind"] == "RESULT" and r["busy"] == "1"),
        "handoffs": handoffs,
        "host_ref": ref,
        "host_reruns": reruns,
        "host_off": host_off,
        "invocations": sum(1 for inv in invs if inv["measured"]),
    }
    json_path = os.path.join(a.out, "bench.json")
    with open(json_path, "w") as f:
        json.dump(
            {
                "meta": meta,
                "labels": labels,
                "subtitle": f"{meta['date']}, {meta['commit']}, {meta['machine']}",
                "agg": {"|".join(map(str, k)): v for k, v in agg.items()},
                # The samples are in the medians; keep what the report lists (n/a, failures).
                "rows": [r for r in rows if r["kind"] != "RESULT"],
            },
            f,
            indent=None,
        )
    raw = os.path.join(ROOT, "target", "bench-raw.json")
    with open(raw, "w") as f:
        json.dump(rows, f)
    figs = plot(py, json_path, a.out, agg)
    md = os.path.join(a.out, "bench.md")
    write_report(md, meta, agg, rows, labels, sizes, figs)
    log(f"== wrote {os.path.relpath(md, ROOT)}" + "".join(f", {f}" for f, _ in figs))
    with open(md) as f:
        text = f.read()
    start = text.find("## Against")
    print(text[start : text.find("## Tables")] if start >= 0 else "")
    failed = [r for r in rows if r["kind"] in ("FAIL", "ERROR")]
    if failed:
        warn(f"{len(failed)} failures (listed at the end of {os.path.relpath(md, ROOT)})")
    if meta["other_max"] > OTHER_WARN or any(r.get("busy") == "1" for r in rows):
        warn("the machine was busy during this run: see the load line of the report")
    if hostspeed.warning(handoffs, meta):
        warn("the host changed speed during this run: see the host line of the report")
    return 1 if failed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
