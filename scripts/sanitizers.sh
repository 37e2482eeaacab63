#!/usr/bin/env bash
# The engine under the nightly sanitizers (not in CI: see docs/reliability.md for runs and times).
#
#   scripts/sanitizers.sh miri   Miri on the heap-backed ring and free stack and the pure decoders
#                                (smr-core unit tests; the ones that need shm, mmap, futex, CMA or
#                                /proc cannot run under Miri and are left out by the filter)
#   scripts/sanitizers.sh asan   AddressSanitizer on smr-core's and the provider's unit tests and
#                                every multi-process test of rshm-tests; the helper binaries
#                                they spawn (rshm-peer, rshm-storm) are built with ASan too, in
#                                the same build
#   scripts/sanitizers.sh        both
#
# The provider itself, loaded by libfabric into real programs, runs under ASan in
# scripts/asan-provider.sh (in scripts/test.sh; stable toolchain).
#
# Needs the nightly toolchain with miri and rust-src: rustup +nightly component add miri rust-src
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
what="${1:-all}"

if [ "$what" = miri ] || [ "$what" = all ]; then
    step "Miri: ring, free stack, command and layout decoding, id map, iov (smr-core --lib)"
    # cargo miri builds under target/miri, apart from the normal build.
    cargo +nightly miri test -p smr-core --lib -- \
        free_stack:: ring:: cmd:: layout:: idmap:: iov::
fi

if [ "$what" = asan ] || [ "$what" = all ]; then
    step "AddressSanitizer: smr-core, the provider's unit tests and rshm-tests (multi-process), helpers built with ASan"
    # --target makes RUSTFLAGS apply to the target crates only (proc macros and build scripts
    # stay uninstrumented); every binary the tests spawn is built in this same ASan build.
    # Leak checking stays on: a test or helper that leaks fails.
    export RUSTFLAGS="-Zsanitizer=address"
    export RUSTDOCFLAGS="-Zsanitizer=address"
    asan=(cargo +nightly test --locked --target x86_64-unknown-linux-gnu --no-fail-fast)
    # Two tests bound the memory of their processes (an endpoint churn and the soak), which
    # ASan's quarantine of freed memory (256 MiB) would blow: they run apart, without it.
    rss_bound=(ten_thousand_endpoints_leak_nothing soak_short)
    skip=()
    for t in "${rss_bound[@]}"; do skip+=(--skip "$t"); done
    ASAN_OPTIONS="detect_leaks=1" CARGO_TARGET_DIR=target/asan \
        "${asan[@]}" -p smr-core -p rshm-tests --lib --bins --tests -- "${skip[@]}"
    # The provider's own tests: among them a hostile peer's one-sided commands against a target
    # (`rma/hostile.rs`), whose copies in and out of registered memory ASan checks too.
    ASAN_OPTIONS="detect_leaks=1" CARGO_TARGET_DIR=target/asan "${asan[@]}" -p rshm-provider --lib
    step "AddressSanitizer, no quarantine: the tests with a memory bound"
    ASAN_OPTIONS="detect_leaks=1:quarantine_size_mb=0" CARGO_TARGET_DIR=target/asan \
        "${asan[@]}" -p rshm-tests --test exhaustion --test soak -- "${rss_bound[@]}"
fi
