#!/usr/bin/env python3
"""Instructions per update of the histogram with queues, counted by callgrind (exact, whatever
the load on the machine).

    shmem-queues/scripts/per-update-cost.py [--sos /opt/sos-default] [--np 2] [--updates 1000000]
                                            [--table 65536] [--provider-path target/rshm]

Builds libshmem_queues (release) and examples/histogram_queues.c with the SOS's oshcc, runs it
over rshm with every PE under `valgrind --tool=callgrind --separate-threads=yes`, and sums over
all PEs the inclusive instruction counts (Ir) of:

- push side: shmem_queue_comm_push_mem and shmem_queue_local_flush in the application thread,
  minus the batches that thread applied itself (it serves its own inbox while pushing/waiting);
- apply: service::Inbox::apply_batch in every thread (batches received from other PEs);
- the service thread's other work (polling empty inboxes, sleeping): depends on scheduling,
  reported apart.

Per update = divided by the updates pushed by all PEs; apply is also given per update received
from another PE (counted by replaying the program's random stream). The run must print RESULT OK
on every PE. Needs rshm built (scripts/build-provider.sh).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
M64 = (1 << 64) - 1


def splitmix(s):
    s = (s + 0x9E3779B97F4A7C15) & M64
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return s, z ^ (z >> 31)


def remote_updates(np, n, tsize):
    """Updates whose target PE is not the pushing PE (examples/common.h's stream)."""
    remote = 0
    for p in range(np):
        s = 1000 + p
        for _ in range(n):
            s, r = splitmix(s)
            remote += (r % (tsize * np)) // tsize != p
    return remote


def inclusive(path):
    """{function name: inclusive Ir} of one callgrind output file."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([\s\d.]+%\)\s+(\S.*?)(?: \[.*\])?$", line)
        if m:
            name = m.group(2).split(":", 1)[-1]
            costs[name] = max(costs.get(name, 0), int(m.group(1).replace(",", "")))
    return costs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sos", default="/opt/sos-default")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--updates", type=int, default=1_000_000)
    ap.add_argument("--table", type=int, default=65536)
    ap.add_argument("--provider-path", default=os.path.join(ROOT, "target", "rshm"))
    ap.add_argument("--keep", help="directory to keep the callgrind files in")
    a = ap.parse_args()

    subprocess.run(["cargo", "build", "--release", "--locked", "-q", "-p", "shmem-queues"], cwd=ROOT, check=True)
    work = a.keep or tempfile.mkdtemp(prefix="per-update-cost-")
    os.makedirs(work, exist_ok=True)
    for f in glob.glob(os.path.join(work, "cg.*")):
        os.remove(f)
    lib = os.path.join(ROOT, "target", "release")
    src = os.path.join(ROOT, "shmem-queues")
    exe = os.path.join(work, "histogram_queues")
    subprocess.run([os.path.join(a.sos, "bin", "oshcc"), "-O2", "-g", "-I", os.path.join(src, "include"), "-I",
                    os.path.join(src, "examples"), os.path.join(src, "examples", "histogram_queues.c"), "-o", exe,
                    "-L", lib, "-lshmem_queues", "-Wl,-rpath," + lib], check=True)
    env = dict(os.environ, FI_PROVIDER="rshm", SHMEM_OFI_PROVIDER="rshm",
               FI_PROVIDER_PATH=os.path.abspath(a.provider_path))
    cmd = ["timeout", "-k", "5", "900", "mpiexec.hydra", "-np", str(a.np), "valgrind", "--tool=callgrind",
           "--separate-threads=yes", "--callgrind-out-file=" + os.path.join(work, "cg.%p"), exe,
           str(a.updates), str(a.table)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    oks = re.findall(r"^RESULT OK pe=(\d+)", p.stdout, re.M)
    if len(set(oks)) != a.np:
        sys.exit(f"per-update-cost: the run failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")

    push = apply_app = apply_svc = svc_other = 0
    for f in sorted(glob.glob(os.path.join(work, "cg.*-*"))):
        c = inclusive(f)
        apply = c.get("shmem_queues::service::Inbox::apply_batch", 0)
        if "shmem_queues::service::run" in c:
            apply_svc += apply
            svc_other += c["shmem_queues::service::run"] - apply
        elif "shmem_queue_comm_push_mem" in c:
            push += c["shmem_queue_comm_push_mem"] + c.get("shmem_queue_local_flush", 0)
            apply_app += apply
    total = a.updates * a.np
    remote = remote_updates(a.np, a.updates, a.table)
    push_only = push - apply_app
    applied = apply_app + apply_svc
    print(f"histogram_queues over rshm, {a.np} PEs, {a.updates} updates per PE, table {a.table} per PE "
          f"({remote} of {total} updates to another PE)")
    print(f"  push side (push_mem + local_flush, without applying): {push_only / total:8.1f} Ir per update")
    print(f"  apply (apply_batch, all threads):                     {applied / total:8.1f} Ir per update"
          f" ({applied / max(remote, 1):.1f} per remote update; {apply_app * 100 // max(applied, 1)}% by the"
          " application thread)")
    print(f"  library total (push side + apply):                    {(push_only + applied) / total:8.1f} Ir per update")
    print(f"  service thread polling empty inboxes (schedule-dependent): {svc_other / total:.1f} Ir per update")
    if not a.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
