"""The host's own speed, for the bench commands (bench.py, bench-one-sided.py).

This project's VMs move between states in which one cache-line handoff between the two CPUs
takes about 0.015, 0.04 or 0.24 us, minutes or seconds apart, and every provider's figures move
with it (docs/perf/where-the-time-goes.md); no CPU-time count shows it. So the benches time that
handoff before every invocation (a few ms) and report its spread.
"""
import os
import statistics
import subprocess

# A run whose handoff moved by more than this mixes the host's states.
SWING_WARN = 1.5


def handoff(root):
    """One-way us of the bare cache-line handoff between two pinned processes, or None."""
    exe = os.path.join(root, "target", "release", "rshm-engine-pingpong")
    try:
        out = subprocess.run(
            [exe, "--sizes", "8", "--iters", "20000", "--batches", "5"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for row in out.splitlines():
        f = row.split()
        # "8 B  bare cache line  40000  0.043  0.039  186.9  1.00x": the median batch's one-way.
        if f[2:5] == ["bare", "cache", "line"] and len(f) > 6:
            try:
                return float(f[6])
            except ValueError:
                return None
    return None


def swung(handoffs):
    """True if the handoff moved by more than SWING_WARN over `handoffs`."""
    return len(handoffs) > 1 and max(handoffs) > SWING_WARN * min(handoffs)


def line(handoffs):
    """The report's host line."""
    if not handoffs:
        return "- host: its speed was not measured (no target/release/rshm-engine-pingpong)"
    return (
        f"- host: a bare cache-line handoff between the two CPUs took {min(handoffs):.3f}-{max(handoffs):.3f} us "
        f"one way (median {statistics.median(handoffs):.3f}) before the {len(handoffs)} invocations"
    )


def warning(handoffs):
    """The warning a report opens with when the host changed speed, or None."""
    if not swung(handoffs):
        return None
    return (
        "> **The host changed speed during this run** (the handoff above moved by more than "
        f"{SWING_WARN}x): every provider's figures moved with it, by up to that much, between and within "
        "invocations, so medians and ratios mix its states. Do not quote them as a record; run again "
        "when the host keeps one speed."
    )
