#!/usr/bin/env bash
# Every test rshm has: formatting, lints, unit and multi-process tests, loom models.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "rshm-regions clean: dead regions left by earlier runs are not this run's leaks"
cargo run -q --locked -p smr-core --bin rshm-regions -- clean

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

step "rshm-regions: no region left behind by the tests (each one left is named, and fails)"
cargo run -q --locked -p smr-core --bin rshm-regions -- list --fail-if-any

step "real clients: fi_info, fi_pingpong, Open MPI and MPICH over rshm"
bash scripts/client-checks.sh
