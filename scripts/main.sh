#!/usr/bin/env bash
# The main job: rshm under a real libfabric client (fi_pingpong from libfabric-bin) beside the
# C shm provider, same run, same sizes; then the engine alone (cross-process ping-pong beside a
# bare cache-line handoff; messages above 4 KiB by SAR, the provider's default for messages).
# Arguments go to pingpong-compare.sh (-e, -m, -I, -s, -r).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build-provider.sh
echo
echo "== fi_pingpong: rshm vs the C shm provider"
bash scripts/pingpong-compare.sh "$@"
echo
echo "== the engine alone (smr-core), two processes"
cargo build --release --locked -q -p rshm-benches --bin rshm-engine-pingpong
target/release/rshm-engine-pingpong --iters 20000 --sar
