#!/usr/bin/env bash
# Tests libshmem_queues (shmem-queues/) on a real OpenSHMEM: builds the library, compiles
# shmem-queues/tests/queues_check.c and the four examples with that OpenSHMEM's oshcc, runs each
# at 2 and 4 PEs and requires "RESULT OK pe=<i>" from every PE. The line is printed before
# shmem_finalize: Open MPI 4.1's oshmem computes right and then dies with SIGSEGV inside
# shmem_finalize, so the exit status is reported but not judged. Ends with "N passed, M failed".
#
#   scripts/queues-tests.sh                       # Debian's Open MPI oshmem (/usr/bin/oshcc, oshrun): CI
#   scripts/queues-tests.sh --sos /opt/sos-default [--provider rshm|shm] [--np "2 4"]
#
#   --sos PREFIX   Sandia OpenSHMEM installed at PREFIX (PREFIX/bin/oshcc), launched with
#                  mpiexec.hydra; --provider P sets FI_PROVIDER=P SHMEM_OFI_PROVIDER=P (default
#                  rshm, with FI_PROVIDER_PATH=target/rshm, built by scripts/build-provider.sh)
#   --np "LIST"    PE counts (default "2 4")
#   --timeout S    one run (default 120)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2

SOS="" PROVIDER=rshm NPS="2 4" TMO=120
while [ $# -gt 0 ]; do
    case $1 in
    --sos) SOS=$2; shift 2 ;;
    --provider) PROVIDER=$2; shift 2 ;;
    --np) NPS=$2; shift 2 ;;
    --timeout) TMO=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "queues-tests: unknown argument $1" >&2; exit 2 ;;
    esac
done

if [ -n "$SOS" ]; then
    OSHCC=$SOS/bin/oshcc
    FLAVOR=sos-$(basename "$SOS")-$PROVIDER
    export FI_PROVIDER=$PROVIDER SHMEM_OFI_PROVIDER=$PROVIDER
    if [ "$PROVIDER" = rshm ]; then export FI_PROVIDER_PATH=${RSHM_PROVIDER_DIR:-$ROOT/target/rshm}; else unset FI_PROVIDER_PATH; fi
    launch() { mpiexec.hydra -np "$1" "${@:2}"; }
    command -v mpiexec.hydra >/dev/null || { echo "queues-tests: mpiexec.hydra not found (Debian: mpich)" >&2; exit 2; }
else
    # Explicit paths: with both mpich and openmpi-bin installed, mpicc/mpiexec may name either.
    OSHCC=/usr/bin/oshcc
    FLAVOR=openmpi-oshmem
    launch() { /usr/bin/oshrun --allow-run-as-root --oversubscribe -np "$1" "${@:2}"; }
    [ -x /usr/bin/oshrun ] || { echo "queues-tests: /usr/bin/oshrun not found (Debian: openmpi-bin libopenmpi-dev)" >&2; exit 2; }
fi
[ -x "$OSHCC" ] || { echo "queues-tests: no $OSHCC" >&2; exit 2; }

cargo build --release --locked -q -p shmem-queues || exit 1
LIB=$ROOT/target/release
OUT=$ROOT/target/queues-tests/$FLAVOR
mkdir -p "$OUT"
SRC=$ROOT/shmem-queues
CFLAGS=(-O2 -Wall -Werror -pthread -I"$SRC/include" -I"$SRC/examples")
LDFLAGS=(-L"$LIB" -lshmem_queues -Wl,-rpath,"$LIB")
build() { "$OSHCC" "${CFLAGS[@]}" "$1" -o "$OUT/$2" "${LDFLAGS[@]}"; }
build "$SRC/tests/queues_check.c" queues_check || exit 1
for ex in histogram_plain histogram_queues igather_plain igather_queues; do build "$SRC/examples/$ex.c" "$ex" || exit 1; done

echo "queues-tests: $FLAVOR ($OSHCC), PEs: $NPS"
# Each run in its own PID namespace where unshare is allowed (root, or user namespaces): a run
# that times out takes every process of the job with it (launchers detach their proxies from
# timeout's process group, which left ranks spinning after a timeout).
NS=()
if unshare --pid --fork --kill-child --mount-proc true 2>/dev/null; then
    NS=(unshare --pid --fork --kill-child --mount-proc)
elif unshare --user --map-root-user --pid --fork --kill-child --mount-proc true 2>/dev/null; then
    NS=(unshare --user --map-root-user --pid --fork --kill-child --mount-proc)
fi
pass=0 fail=0
run() { # name np args...
    local name=$1 np=$2 log
    log=$OUT/$name-np$np.log
    timeout -k 5 "$TMO" "${NS[@]}" bash -c "$(declare -f launch); launch $np $OUT/${*:3}" >"$log" 2>&1
    local rc=$? missing=""
    for ((pe = 0; pe < np; pe++)); do
        grep -q "^RESULT OK pe=$pe " "$log" || missing="$missing $pe"
    done
    if [ -z "$missing" ] && ! grep -q "^RESULT FAIL" "$log"; then
        pass=$((pass + 1))
        printf '  ok    %-18s np=%s%s\n' "$name" "$np" "$([ $rc = 0 ] || echo " (exit $rc after RESULT OK: not ours if it is the finalize crash)")"
    else
        fail=$((fail + 1))
        printf '  FAIL  %-18s np=%s (exit %s, no RESULT OK from PE%s)\n' "$name" "$np" "$rc" "$missing"
        grep -E "RESULT FAIL" "$log" | head -20
        tail -5 "$log"
    fi
}
for np in $NPS; do
    run queues_check "$np" queues_check
    run histogram_plain "$np" histogram_plain 100000 4096
    run histogram_queues "$np" histogram_queues 100000 4096
    run igather_plain "$np" igather_plain 50000 4096
    run igather_queues "$np" igather_queues 100000 4096
done
echo "$pass passed, $fail failed (logs: $OUT)"
[ "$fail" = 0 ]
