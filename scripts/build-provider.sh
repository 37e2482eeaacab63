#!/usr/bin/env bash
# Build librshm-fi.so (profile `provider`: release with LTO, see Cargo.toml) into target/rshm/,
# the directory to give FI_PROVIDER_PATH.
# (cargo names the library librshm_provider.so; libfabric loads files ending in "fi.so".)
#
# Profile-guided: the library is first built instrumented and run through rshm-fi-bench's
# ping-pongs and streams (tagged, msg, RMA and atomics, at sizes that take every protocol). It is
# then built again with the counts that run left, so that LLVM lays out and inlines the paths
# the run took as the hot ones. In docs/perf/where-the-time-goes.md ("Profile-guided build"):
# 8 B tagged latency -8%, fi_read -12%, fi_fetch_atomic -13%. The profile is reused while the
# sources and the compiler stay the same (target/pgo/); a build without it is printed as such.
#
#   RSHM_PGO=0 bash scripts/build-provider.sh    # plain build (faster, for quick iterations)
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/rshm
pgo=$PWD/target/pgo
mkdir -p "$out"

install_lib() {
    # An unchanged library is left in place: rewriting it moves its page cache, which moves the
    # small-message latency by up to 7% (docs/perf/where-the-time-goes.md).
    cmp -s "$1" "$out/librshm-fi.so" || install -m 0755 "$1" "$out/librshm-fi.so"
    echo "built $PWD/$out/librshm-fi.so$2 (use FI_PROVIDER_PATH=$PWD/$out)"
}

plain() {
    echo "build-provider: $1: building without a profile" >&2
    cargo build --profile provider --locked -p rshm-provider
    install_lib target/provider/librshm_provider.so ""
}

# The provider's own cargo runs take these flags; keep the caller's.
flags=${RUSTFLAGS:-}

# Everything the library is built from, the compiler and this script: a profile of other sources
# is stale.
fingerprint() {
    {
        rustc -vV
        find ffi smr-core provider -type f \( -name '*.rs' -o -name Cargo.toml \) | sort | xargs cat
        cat Cargo.toml Cargo.lock
        # The training itself (`train`, below): a profile of another workload is stale too.
        cat scripts/build-provider.sh
    } | sha1sum | cut -d' ' -f1
}

# Build the instrumented library, run the training workload against it, merge what it wrote.
# (Called from an `if`, where `set -e` does not apply: each step checks for itself.)
train() {
    local profdata=$1 raw=$pgo/raw lib=$pgo/instrumented
    # The two builds at once (separate target directories): the library's whole-program link
    # runs on one CPU, which leaves the other to the bench's build.
    RUSTFLAGS="$flags -Cprofile-generate=$raw" CARGO_TARGET_DIR=$pgo/gen \
        cargo build --profile provider --locked -q -p rshm-provider &
    local gen=$! bench=0
    cargo build --release --locked -q -p rshm-benches --bin rshm-fi-bench || bench=1
    wait "$gen" && [ "$bench" = 0 ] || return 1
    mkdir -p "$lib" || return 1
    install -m 0755 "$pgo/gen/provider/librshm_provider.so" "$lib/librshm-fi.so" || return 1
    # Build scripts ran instrumented too: only the training's counts go into the profile.
    rm -rf "$raw"
    FI_PROVIDER_PATH=$lib LLVM_PROFILE_FILE="$raw/rshm-%p.profraw" target/release/rshm-fi-bench \
        --provider rshm --sizes 8,64,256,1K,4K,64K,1M --time-ms 50 --tries 1 >"$pgo/training.log" || return 1
    "$profdata" merge -o "$pgo/merged.profdata" "$raw"
}

if [ "${RSHM_PGO:-1}" = 0 ]; then
    plain "RSHM_PGO=0"
    exit 0
fi
profdata="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    plain "no llvm-profdata in the toolchain (rustup component add llvm-tools)"
    exit 0
fi
mkdir -p "$pgo"
sum=$(fingerprint)
if [ ! -f "$pgo/merged.profdata" ] || [ "$(cat "$pgo/fingerprint" 2>/dev/null)" != "$sum" ]; then
    rm -f "$pgo/fingerprint"
    echo "build-provider: training a profile (instrumented build, rshm-fi-bench; about a minute)" >&2
    if ! train "$profdata"; then
        plain "the training run failed (see $pgo/training.log)"
        exit 0
    fi
    echo "$sum" >"$pgo/fingerprint"
fi
RUSTFLAGS="$flags -Cprofile-use=$pgo/merged.profdata" CARGO_TARGET_DIR=$pgo/use \
    cargo build --profile provider --locked -p rshm-provider
install_lib "$pgo/use/provider/librshm_provider.so" " (profile-guided)"
