#!/usr/bin/env bash
# The main job: cross-process ping-pong over the engine, beside the bare cache-line handoff.
# (Once the provider lands, this runs fi_pingpong with rshm beside the C shm provider.)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p rshm-benches --bin rshm-engine-pingpong
echo "== engine ping-pong, CMA for large messages"
target/release/rshm-engine-pingpong "$@"
echo "== engine ping-pong, SAR (bounce buffers) for large messages"
target/release/rshm-engine-pingpong --sar "$@"
