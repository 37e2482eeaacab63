#!/usr/bin/env bash
# Every test rshm has: formatting, lints, unit and multi-process tests, loom models.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (-D warnings)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "unit and multi-process tests"
cargo test --workspace --locked

step "loom models (LOOM_MAX_PREEMPTIONS=2)"
LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p smr-core --release --locked --test loom_models

step "conformance suite (fabtests-adapter): every scenario against rshm and the C shm"
bash scripts/build-provider.sh
cargo run --release --locked -q -p fabtests-adapter -- suite --providers rshm,shm --provider-path "$PWD/target/rshm"

step "rshm-regions: no stale regions left behind by the tests"
cargo run -q -p smr-core --bin rshm-regions -- list

step "real clients: fi_info, fi_pingpong, Open MPI and MPICH over rshm"
bash scripts/client-checks.sh
