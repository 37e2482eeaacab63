"""The host's own speed, for the bench commands (bench.py, bench-one-sided.py).

This project's VMs move between states in which one cache-line handoff between the two CPUs
takes about 0.015, 0.04 or 0.24 us, minutes or seconds apart, and every provider's figures move
with it (docs/perf/where-the-time-goes.md); no CPU-time count shows it. So the benches time that
handoff before and after every invocation (a few ms), run again the invocations whose ends were
in another state than the run's reference (`in_state`, `reference`: the state it spent most
time in), and report the spread.
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


def in_state(handoffs, ref):
    """True if every handoff in `handoffs` (timed before and after one invocation) is within
    SWING_WARN of `ref` either way: the invocation ran in the reference state throughout, as
    far as its two ends show."""
    return bool(handoffs) and all(ref / SWING_WARN <= h <= ref * SWING_WARN for h in handoffs)


def off_by(handoffs, ref):
    """How far the worst of `handoffs` is from `ref`, as a ratio >= 1 (for keeping the
    invocation closest to the reference state)."""
    return max(max(h / ref, ref / h) for h in handoffs) if handoffs else float("inf")


def reference(handoffs):
    """The state a run measures in: the state it spent most time in. The host's states lie far
    apart (a median of handoffs half in one and half in another falls between them, in neither),
    so this is the handoff with the most others within SWING_WARN of it either way, and of
    those, the fastest."""
    if not handoffs:
        return None
    return min(handoffs, key=lambda v: (-sum(1 for h in handoffs if v / SWING_WARN <= h <= v * SWING_WARN), v))


def swung(handoffs):
    """True if the handoff moved by more than SWING_WARN over `handoffs`."""
    return len(handoffs) > 1 and max(handoffs) > SWING_WARN * min(handoffs)


def line(handoffs, meta=None):
    """The report's host line. `meta` (bench.py's) adds the reference state and the re-runs."""
    if not handoffs:
        return "- host: its speed was not measured (no target/release/rshm-engine-pingpong)"
    text = (
        f"- host: a bare cache-line handoff between the two CPUs took {min(handoffs):.3f}-{max(handoffs):.3f} us "
        f"one way (median {statistics.median(handoffs):.3f})"
    )
    if meta and meta.get("host_ref"):
        return text + (
            f" before and after the {meta['invocations']} invocations kept; reference state {meta['host_ref']:.3f} us, "
            f"{meta['host_reruns']} invocations run again because the host was in another state, "
            f"{meta['host_off']} still in another state (their points marked (host))"
        )
    return text + f" before the {len(handoffs)} invocations"


def warning(handoffs, meta=None):
    """The warning a report opens with when the host changed speed, or None. With `meta`
    (bench.py's re-runs), only when invocations stayed in another state than the reference."""
    if meta and meta.get("host_ref"):
        if not meta["host_off"]:
            return None
        return (
            f"> **The host changed speed during this run**: {meta['host_off']} invocations stayed in another "
            f"state than the reference one (handoff {meta['host_ref']:.3f} us) after {meta['host_reruns']} re-runs. "
            "Their figures are left out of the medians where other samples exist, and are the only ones "
            "where none do (bench.py marks those points (host)). Do not quote those as a record."
        )
    if not swung(handoffs):
        return None
    return (
        "> **The host changed speed during this run** (the handoff above moved by more than "
        f"{SWING_WARN}x): every provider's figures moved with it, by up to that much, between and within "
        "invocations, so medians and ratios mix its states. Do not quote them as a record; run again "
        "when the host keeps one speed."
    )
