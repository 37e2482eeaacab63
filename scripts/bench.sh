#!/usr/bin/env bash
# One bench command: rshm beside the C shm (libfabric 1.17 and 2.5.1) and sm2 (2.5.1), through
# libfabric's public API, alternated and repeated; writes docs/perf/bench.md and its figures.
# Arguments go to scripts/bench.py (--quick, --runs N, --sizes, --providers, --ops, --help).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/bench.py "$@"
