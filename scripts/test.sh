#!/usr/bin/env bash
# Every test rshm has: formatting, lints, unit and multi-process tests, loom models, fuzzing, the
# conformance suite (also with the provider under AddressSanitizer), leaked regions, real
# clients, the OpenSHMEM queues library.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every process that loads Debian's libfabric 1.17 reads /proc/kallsyms twice at start (the verbs
# provider's init looks for two kernel symbols, whatever FI_PROVIDER says): 120,000 lines, 0.15-0.3 s
# a process here. The suites start a process or more per scenario, and spent about a third of their time
# there. As root, the run goes on in a mount namespace of its own where /proc/kallsyms reads empty:
# nothing of rshm's reads it, and verbs finds no device on this machine anyway.
if [ "$(id -u)" = 0 ] && [ -z "${RSHM_TEST_KALLSYMS_MASKED:-}" ] && unshare -m true 2>/dev/null; then
    export RSHM_TEST_KALLSYMS_MASKED=1
    exec unshare -m bash -c 'mount --bind /dev/null /proc/kallsyms 2>/dev/null; exec bash "$0" "$@"' "$PWD/scripts/test.sh" "$@"
fi

# Each step says how long the one before it took (CI must stay well under 30 minutes: this shows
# where the time goes); the last line gives the whole run's.
step_started=$SECONDS
step() {
    [ -z "${step_name:-}" ] || printf '   (%s: %d s)\n' "${step_name%%:*}" $((SECONDS - step_started))
    step_name=$1
    step_started=$SECONDS
    printf '\n== %s\n' "$*"
}
trap '[ $? -ne 0 ] || printf "   (%s: %d s)\n\nall tests passed in %d min %d s\n" "${step_name%%:*}" $((SECONDS - step_started)) $((SECONDS / 60)) $((SECONDS % 60))' EXIT

# In CI (which allows CMA) the tests named for CMA must prove CMA carried their data; elsewhere,
# where Yama or seccomp forbid it, they say SKIPPED instead of testing SAR under a CMA name.
if [ "${CI:-}" = true ]; then export RSHM_TEST_REQUIRE_CMA=1; fi

# A process's first endpoint removes the regions dead processes left (FI_RSHM_REAP_DEAD): here it
# would also remove what a test leaked, which the last step must see. Its own step turns it on.
export FI_RSHM_REAP_DEAD=0

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

step "fuzzing: every cargo-fuzz target in smr-core/fuzz, 20 s each (libFuzzer, ASan, overflow checks)"
# cargo-fuzz passes nightly -Z flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain take them.
# RUSTC names the compiler itself rather than rustup's proxy (cargo-fuzz parses its --version).
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is not installed: run scripts/setup.sh"; exit 1; }
(
    cd smr-core/fuzz
    cargo fmt --check # outside the workspace, so not in the fmt step above
    export RUSTC_BOOTSTRAP=1 RUSTC="$(rustc --print sysroot)/bin/rustc"
    targets=$(cargo fuzz list)
    [ -n "$targets" ] || { echo "no fuzz targets"; exit 1; }
    cargo fuzz build
    mkdir -p target
    # A libFuzzer run keeps one CPU busy: as many targets at once as there are CPUs.
    finish() { # the target, its run's exit code
        local log=target/run-$1.log
        if [ "$2" -ne 0 ]; then
            tail -40 "$log"
            echo "fuzz target $1 failed (log: smr-core/fuzz/$log; the input is under smr-core/fuzz/artifacts/$1)"
            exit 1
        fi
        # Proof that it fuzzed: coverage-guided inputs and a final count of runs.
        grep -q " cov: [1-9]" "$log" && grep -E "^Done [1-9][0-9]* runs" "$log" | sed "s/^/  $1: /" ||
            { tail -20 "$log"; echo "fuzz target $1 did not run"; exit 1; }
    }
    trap 'kill $(jobs -p) 2>/dev/null || true' EXIT # a failure leaves no run behind
    running=()
    for t in $targets; do
        cargo fuzz run "$t" -- -max_total_time=20 >"target/run-$t.log" 2>&1 &
        running+=("$t:$!")
        if [ ${#running[@]} -ge "$(nproc)" ] || [ "$t" = "$(echo "$targets" | tail -1)" ]; then
            for r in "${running[@]}"; do
                rc=0
                wait "${r#*:}" || rc=$?
                finish "${r%%:*}" "$rc"
            done
            running=()
        fi
    done
)

# Against rshm alone: the C shm beside it cannot fail the run (a comparison, not a test), and its
# operations that never complete took 4.5-5 minutes of every run. docs/conformance-shm.md has its
# column and the command that prints it.
step "conformance suite (fabtests-adapter): every scenario against rshm"
# The suite's build beside the provider's, whose whole-program links run on one CPU.
cargo build --release --locked -q -p fabtests-adapter &
adapter_build=$!
bash scripts/build-provider.sh
wait "$adapter_build"
cargo run --release --locked -q -p fabtests-adapter -- suite --providers rshm --provider-path "$PWD/target/rshm"

step "conformance suite again with FI_RSHM_CMA_MIN=0: messages above the inject size by CMA, not SAR"
# unit/process_churn sends nothing above the inject size, and takes 20 s: once above is enough.
FI_RSHM_CMA_MIN=0 cargo run --release --locked -q -p fabtests-adapter -- suite --providers rshm --provider-path "$PWD/target/rshm" \
    --skip unit/process_churn

step "through SAR alone (FI_RSHM_CMA=0): large messages waited for in fi_cntr_wait (no sleep outlasts the transfer); a registration of all memory, the target copying at good and bad addresses"
FI_RSHM_CMA=0 cargo run --release --locked -q -p fabtests-adapter -- suite --providers rshm --provider-path "$PWD/target/rshm" \
    --filter pair/cntr_wait_large --filter pair/msg_pingpong --filter pair/msg_bw --filter all_of_memory

# Every pool a message or an operation can wait for runs dry here, many times per scenario: a
# sender that finds the ring full, no inject buffer or no SAR buffer must get -FI_EAGAIN or wait
# and then finish, never hang, lose or reorder anything. (A queue of 16 is the least with which
# the scenarios that progress only the sender still fit their messages.)
step "every scenario with one inject buffer, one SAR buffer and a 16-entry queue, through SAR alone"
FI_RSHM_CMA=0 FI_RSHM_QUEUE_LEN=16 FI_RSHM_INJECT_COUNT=1 FI_RSHM_SAR_COUNT=1 \
    cargo run --release --locked -q -p fabtests-adapter -- suite --providers rshm --provider-path "$PWD/target/rshm"

step "the provider under AddressSanitizer, loaded by libfabric into uninstrumented programs: the conformance suite as users run it and with every pool dry (any report or leak fails)"
bash scripts/asan-provider.sh

step "misuse through libfabric's API (tests/misuse/misuse.c): a -FI_E* code and a log line, never a crash"
mkdir -p target/misuse
cc -O2 -Wall -o target/misuse/misuse tests/misuse/misuse.c -lfabric
# Each case runs in a child that exits without closing its endpoints (some are left in states no
# close should be tried on): as root, in a private /dev/shm so their regions never reach the
# leak check below; otherwise the dead children's regions are cleaned up after.
if [ "$(id -u)" = 0 ]; then
    timeout -k 5 300 unshare -m sh -c "mount -t tmpfs -o size=512m tmpfs /dev/shm && \
        FI_PROVIDER_PATH='$PWD/target/rshm' exec target/misuse/misuse rshm"
else
    FI_PROVIDER_PATH="$PWD/target/rshm" timeout -k 5 300 target/misuse/misuse rshm
    cargo run -q --locked -p smr-core --bin rshm-regions -- clean
fi

step "no room in /dev/shm: fi_enable fails with -FI_ENOSPC and a log line saying what to change; a pool without room fails the message that needs it"
# A private mount namespace with a 1 MiB tmpfs on /dev/shm (root only; unshare ignores SIGTERM).
if [ "$(id -u)" = 0 ] && timeout -k 5 20 unshare -m sh -c "mount -t tmpfs -o size=1m tmpfs /dev/shm" 2>/dev/null; then
    out=$(timeout -k 5 60 unshare -m sh -c "mount -t tmpfs -o size=1m tmpfs /dev/shm && \
        FI_LOG_LEVEL=warn FI_PROVIDER_PATH='$PWD/target/rshm' target/misuse/misuse rshm send_null_buf" 2>&1 || true)
    # Here-strings, not `echo | grep -q`: grep -q exits at its match, and with pipefail the echo
    # still writing the lines after it (bash writes them one by one) fails the test with SIGPIPE.
    if grep -q "fi_enable(ep) = -28" <<<"$out" && grep -q "no room in /dev/shm.*enlarge /dev/shm" <<<"$out"; then
        echo "  -FI_ENOSPC, and: $(echo "$out" | grep -o "no room in /dev/shm.*" | cut -c1-100)..."
    else
        echo "$out" | tail -5
        echo "expected fi_enable to fail with -FI_ENOSPC and the log line"
        exit 1
    fi
    # Pools are reserved on first use. Room for two endpoints (1.4 MiB each at creation) and an
    # inject pool but not a SAR pool (4 MiB), then for neither (3100 KiB): the message that needs the pool fails with
    # -FI_ENOSPC (no SIGBUS, no hang) and a small one after it still arrives.
    cc -O2 -Wall -o target/misuse/pool_no_room tests/misuse/pool_no_room.c -lfabric
    for room in "4m sar" "3100k inject"; do
        set -- $room
        timeout -k 5 60 unshare -m sh -c "mount -t tmpfs -o size=$1 tmpfs /dev/shm && \
            FI_PROVIDER_PATH='$PWD/target/rshm' exec target/misuse/pool_no_room $2" | sed "s/^/  $2: /"
    done
else
    echo "  SKIPPED: needs root and a mount namespace (unshare -m) for a private /dev/shm"
fi

step "regions left by SIGKILLed processes: removed before the next process's first endpoint, a live one's kept (FI_RSHM_REAP_DEAD)"
# With FI_RSHM_REAP_DEAD unset, as users run: the default is what is checked.
if [ "$(id -u)" = 0 ]; then
    env -u FI_RSHM_REAP_DEAD timeout -k 5 120 unshare -m sh -c "mount -t tmpfs -o size=256m tmpfs /dev/shm && \
        exec bash scripts/reap-check.sh '$PWD/target/rshm'"
else
    env -u FI_RSHM_REAP_DEAD timeout -k 5 120 bash scripts/reap-check.sh "$PWD/target/rshm"
fi

step "processes in different pid namespaces (containers sharing /dev/shm, not pids): every family through libfabric, data checked"
# The responder runs under unshare --pid: neither side may judge the other by its pid or reach
# it with CMA. rshm-fi-bench checks every point's data and exits 1 on any failure.
if [ "$(id -u)" = 0 ]; then
    cargo build --release --locked -q -p rshm-benches --bin rshm-fi-bench
    FI_PROVIDER_PATH="$PWD/target/rshm" timeout -k 5 300 target/release/rshm-fi-bench --provider rshm \
        --peer-pid-namespace --sizes 8,4K,64K,1M --tries 1 --time-ms 20 2>/dev/null >target/pidns-check.out ||
        { grep -v '^RESULT' target/pidns-check.out; echo "a test failed across pid namespaces"; exit 1; }
    # Every test offered (no NA line: the provider loaded and offered each family).
    if grep -q '^NA' target/pidns-check.out || [ "$(grep -c '^RESULT' target/pidns-check.out)" -lt 40 ]; then
        cat target/pidns-check.out
        echo "expected every test of every family to run across pid namespaces"
        exit 1
    fi
    echo "  $(grep -c '^RESULT' target/pidns-check.out) points passed, families: $(grep '^RESULT' target/pidns-check.out | cut -f4 | sort -u | cut -d= -f2 | tr '\n' ' ')"
    # Both sides in namespaces of their own, so both have the same pid (1): the names must still
    # differ (the C shm 1.17 fails fi_enable here with -FI_EBUSY). fi_pingpong -c checks the data.
    for size in 8 1048576; do
        ns=(timeout -k 5 60 unshare --pid --fork --mount-proc --kill-child)
        FI_PROVIDER_PATH="$PWD/target/rshm" "${ns[@]}" fi_pingpong -p rshm -e rdm -m tagged -c -S $size -I 200 -B 47631 >/dev/null 2>&1 &
        # Until the server listens (port 47631 = BA0F in LISTEN state 0A), at most 5 s.
        for _ in $(seq 50); do grep -q ":BA0F [0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && break; sleep 0.1; done
        FI_PROVIDER_PATH="$PWD/target/rshm" "${ns[@]}" fi_pingpong -p rshm -e rdm -m tagged -c -S $size -I 200 -P 47631 127.0.0.1 >/dev/null ||
            { echo "fi_pingpong -S $size with both sides as pid 1 of their own namespaces failed"; exit 1; }
        wait $! || { echo "its server failed"; exit 1; }
    done
    echo "  fi_pingpong -c at 8 B and 1 MiB with both processes as pid 1 of namespaces of their own: pass"
else
    echo "  SKIPPED: needs root for unshare --pid"
fi

step "memory per endpoint through libfabric (tests/perf/ep_memory.c): at most 4 MiB with every pool in use, 2 MiB before its pools are used, nothing left after close"
mkdir -p target/perf
cc -O2 -Wall -o target/perf/ep_memory tests/perf/ep_memory.c -lfabric
# Its /dev/shm figure is the file system's: as root in a private one, so nothing else counts.
if [ "$(id -u)" = 0 ]; then
    timeout -k 5 60 unshare -m sh -c "mount -t tmpfs -o size=256m tmpfs /dev/shm && \
        FI_PROVIDER_PATH='$PWD/target/rshm' exec target/perf/ep_memory rshm 8 4096 2048"
else
    FI_PROVIDER_PATH="$PWD/target/rshm" timeout -k 5 60 target/perf/ep_memory rshm 8 4096 2048
fi

step "messages, writes and reads longer than 4 GiB through libfabric (tests/large/large_messages.c): every byte, with CMA and through SAR"
mkdir -p target/large
cc -O2 -Wall -o target/large/large_messages tests/large/large_messages.c -lfabric
# Twice the length in memory, three times through SAR: past 4 GiB where 14 GB are free, else
# past 1 GiB (the limit until the fiftieth session), said so.
large_mib=4096
if [ "$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)" -lt 14000 ]; then
    large_mib=1100
    echo "  less than 14 GB of memory available: $large_mib MiB, not past 4 GiB"
fi
for cma in 1 0; do
    echo "  FI_RSHM_CMA=$cma:"
    FI_RSHM_CMA=$cma FI_PROVIDER_PATH="$PWD/target/rshm" timeout -k 5 300 target/large/large_messages $large_mib
done

step "rshm-regions: no region left behind by the tests (each one left is named, and fails)"
cargo run -q --locked -p smr-core --bin rshm-regions -- list --fail-if-any

step "real clients: fi_info, fi_pingpong, Open MPI and MPICH over rshm"
bash scripts/client-checks.sh

step "OpenSHMEM queues (shmem-queues): semantics and examples on Debian's Open MPI oshmem, 2 and 4 PEs"
bash scripts/queues-tests.sh
