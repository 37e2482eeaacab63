#!/usr/bin/env bash
# Runs Sandia OpenSHMEM's test suite (modules/tests-sos in an SOS build directory built outside
# the repository; this script builds nothing) against one libfabric provider, in private PID and
# mount namespaces with their own tmpfs on /dev/shm, so nothing it leaves or kills touches the
# rest of the machine. Counts the automake results and ends with the line "N passed, M failed"
# (failed = FAIL + ERROR + XPASS + tests that never reported, e.g. after the total timeout).
#
#   scripts/sos-tests.sh --build DIR --provider rshm|shm|NAME [--provider-path DIR] [--np N]
#                        [--filter SUBSTRING] [--jobs N] [--timeout SECONDS] [--test-timeout SECONDS]
#                        [--logs DIR] [--list-only] [--one PROGRAM]
#
#   --build DIR          SOS build directory (configured and built, test programs built by
#                        `make check TESTS=`), e.g. /opt/sos-build-default
#   --provider P         FI_PROVIDER=P SHMEM_OFI_PROVIDER=P
#   --provider-path DIR  FI_PROVIDER_PATH=DIR; for rshm it defaults to $RSHM_PROVIDER_DIR or
#                        target/rshm (where librshm-fi.so is); for other providers it is unset
#   --np N               PEs per test (NPROCS; default 2)
#   --filter S           only the tests whose name contains S (run per test directory)
#   --jobs N             make -j N: N tests at a time (default 1)
#   --timeout S          the whole run (default 3600); --test-timeout S: one test (default 180)
#   --logs DIR           where make.log goes (default: a new target/sos-tests/<provider>-np<N>-<time>-<pid>)
#   --list-only          print the tests that would run (after --filter) and exit
#   --one PROGRAM        run one test program (a name such as `hello`, or a path) with
#                        mpiexec.hydra -np N, in the same namespaces and environment
#   --pe-pid-namespaces  every PE in a pid namespace of its own (`unshare --pid` under
#                        mpiexec.hydra), sharing the run's /dev/shm: as PEs in containers that
#                        share /dev/shm but not their pids
#
# Each test's own log stays in the build tree (modules/tests-sos/test/<dir>/<test>.log), so two
# runs on one build directory would overwrite each other's: a run holds a lock on the build
# directory (flock) and a second one waits for it. Needs mpiexec.hydra (Debian: mpich), unshare and
# timeout; as non-root it adds --user --map-root-user to unshare.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }

BUILD="" PROVIDER="" PROV_PATH="" PROV_PATH_SET=0 NP=2 FILTER="" JOBS=1 TOTAL=3600 PER_TEST=180
LIST_ONLY=0 ONE="" LOGS="" PE_NS=""
while [ $# -gt 0 ]; do
    case $1 in
    --build) BUILD=$2; shift 2 ;;
    --provider) PROVIDER=$2; shift 2 ;;
    --provider-path) PROV_PATH=$2; PROV_PATH_SET=1; shift 2 ;;
    --np) NP=$2; shift 2 ;;
    --filter) FILTER=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --timeout) TOTAL=$2; shift 2 ;;
    --test-timeout) PER_TEST=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    --list-only) LIST_ONLY=1; shift ;;
    --one) ONE=$2; shift 2 ;;
    --pe-pid-namespaces) PE_NS="unshare --pid --fork --mount-proc --kill-child "; shift ;;
    -h | --help) usage 0 ;;
    *) echo "sos-tests: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$BUILD" ] || { echo "sos-tests: --build DIR is required" >&2; usage; }
BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || { echo "sos-tests: no directory $BUILD" >&2; exit 2; }
TESTROOT=modules/tests-sos/test
[ -d "$BUILD/$TESTROOT" ] || { echo "sos-tests: $BUILD has no $TESTROOT (not an SOS build directory?)" >&2; exit 2; }

# The test directories and their TESTS lists, as the Makefiles define them.
declare -A DIR_TESTS
TEST_DIRS=()
while IFS= read -r mk; do
    dir=${mk%/Makefile}
    tests=$(make -C "$dir" -s --no-print-directory --eval 'sos-tests-print: ; @echo $(TESTS)' sos-tests-print 2>/dev/null)
    [ -n "$tests" ] || continue
    rel=${dir#"$BUILD"/}
    sel=()
    for t in $tests; do
        [ -z "$FILTER" ] || [[ $t == *"$FILTER"* ]] && sel+=("$t")
    done
    [ ${#sel[@]} -gt 0 ] || continue
    TEST_DIRS+=("$rel")
    DIR_TESTS[$rel]="${sel[*]}"
done < <(find "$BUILD/$TESTROOT" -name Makefile | sort)
expected=0
for d in "${TEST_DIRS[@]}"; do
    n=$(wc -w <<<"${DIR_TESTS[$d]}")
    expected=$((expected + n))
done

if [ "$LIST_ONLY" = 1 ]; then
    for d in "${TEST_DIRS[@]}"; do
        for t in ${DIR_TESTS[$d]}; do echo "$d/$t"; done
    done
    echo "$expected tests"
    exit 0
fi

[ -n "$PROVIDER" ] || { echo "sos-tests: --provider NAME is required" >&2; usage; }
if [ "$PROV_PATH_SET" = 0 ] && [ "$PROVIDER" = rshm ]; then PROV_PATH=${RSHM_PROVIDER_DIR:-$ROOT/target/rshm}; fi
if [ -n "$PROV_PATH" ]; then
    PROV_PATH=$(cd "$PROV_PATH" 2>/dev/null && pwd) || { echo "sos-tests: no directory $PROV_PATH" >&2; exit 2; }
    if [ "$PROVIDER" = rshm ] && [ ! -e "$PROV_PATH/librshm-fi.so" ]; then
        echo "sos-tests: warning: no librshm-fi.so in $PROV_PATH (scripts/build-provider.sh builds it)" >&2
    fi
fi
for tool in mpiexec.hydra unshare timeout flock; do
    command -v "$tool" >/dev/null || { echo "sos-tests: $tool not found (Debian: apt-get install mpich util-linux coreutils)" >&2; exit 2; }
done

[ -n "$LOGS" ] || LOGS=$ROOT/target/sos-tests/$PROVIDER-np$NP-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$LOGS" || exit 2
LOGS=$(cd "$LOGS" && pwd)
export FI_PROVIDER=$PROVIDER SHMEM_OFI_PROVIDER=$PROVIDER
if [ -n "$PROV_PATH" ]; then export FI_PROVIDER_PATH=$PROV_PATH; else unset FI_PROVIDER_PATH; fi
RUNNER="mpiexec.hydra -np $NP ${PE_NS}timeout --signal=ABRT $PER_TEST"

# The commands to run inside the namespaces; the private /dev/shm comes first.
INNER=$LOGS/inner.sh
{
    echo 'set -u'
    echo 'mount -t tmpfs -o mode=1777 sos-tests-shm /dev/shm || { echo "sos-tests: cannot mount a private /dev/shm" >&2; exit 97; }'
    printf 'cd %q || exit 97\n' "$BUILD"
    if [ -n "$ONE" ]; then
        prog=$ONE
        if [ ! -x "$prog" ] && [ ! -x "$BUILD/$prog" ]; then
            prog=$(find "$BUILD/$TESTROOT" -type f -perm -u+x -name "$ONE" | sort | head -1)
        elif [ -x "$BUILD/$prog" ]; then
            prog=$BUILD/$prog
        else
            prog=$(cd "$(dirname "$prog")" && pwd)/$(basename "$prog")
        fi
        [ -n "$prog" ] || { echo "sos-tests: no test program named $ONE under $BUILD/$TESTROOT" >&2; exit 2; }
        printf 'cd %q && exec %s %q\n' "$(dirname "$prog")" "$RUNNER" "$prog"
    elif [ -z "$FILTER" ]; then
        printf 'exec make -k -j %q check NPROCS=%q TEST_RUNNER=%q AM_COLOR_TESTS=no\n' "$JOBS" "$NP" "$RUNNER"
    else
        echo 'rc=0'
        for d in "${TEST_DIRS[@]}"; do
            printf 'make -k -j %q -C %q check NPROCS=%q TEST_RUNNER=%q AM_COLOR_TESTS=no TESTS=%q || rc=1\n' \
                "$JOBS" "$d" "$NP" "$RUNNER" "${DIR_TESTS[$d]}"
        done
        echo 'exit $rc'
    fi
} >"$INNER"

NS=(unshare --pid --fork --kill-child --mount-proc --mount --propagation private)
[ "$(id -u)" = 0 ] || NS+=(--user --map-root-user)

START=$(date +%s)
what="$expected tests${FILTER:+ (filter '$FILTER')}"
[ -z "$ONE" ] || what="one program: $ONE"
echo "sos-tests: $BUILD, provider $PROVIDER${PROV_PATH:+ (FI_PROVIDER_PATH=$PROV_PATH)}, $NP PEs, $what"

if [ -n "$ONE" ]; then
    timeout -k 10 "$TOTAL" "${NS[@]}" bash "$INNER"
    rc=$?
    echo "sos-tests: $ONE exited $rc after $(($(date +%s) - START)) s"
    if [ "$rc" = 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
    exit "$rc"
fi

# One suite run per build directory at a time (the automake logs live there).
exec 9<"$BUILD"
if ! flock -n 9; then
    echo "sos-tests: another run holds $BUILD; waiting for it"
    flock 9
fi
START=$(date +%s)
STAMP=$LOGS/.start
touch "$STAMP"
echo "sos-tests: make output in $LOGS/make.log"
# Results appear as they come; PASS lines only in the log.
timeout -k 10 "$TOTAL" "${NS[@]}" bash "$INNER" >"$LOGS/make.log" 2>&1 &
runner=$!
tail -n +1 --pid="$runner" -f "$LOGS/make.log" 2>/dev/null | grep --line-buffered -E '^(FAIL|ERROR|XPASS|XFAIL|SKIP): ' &
tailer=$!
wait "$runner"
rc=$?
wait "$tailer" 2>/dev/null
ELAPSED=$(($(date +%s) - START))
[ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "sos-tests: TIMEOUT: the run was stopped after $TOTAL s"

count() { grep -cE "^$1: " "$LOGS/make.log"; }
pass=$(count PASS) fail=$(count FAIL) error=$(count ERROR) xfail=$(count XFAIL) xpass=$(count XPASS) skip=$(count SKIP)
reported=$((pass + fail + error + xfail + xpass + skip))
notrun=$((expected - reported))
[ "$notrun" -lt 0 ] && notrun=0

# A failed test's log: its first error-looking lines (a backtrace may bury them), then its end.
show_log() {
    local log=$1 n
    n=$(wc -l <"$log")
    if [ "$n" -gt 16 ]; then
        grep -m 6 -iE 'error|fail|assert|abort|timeout|terminated|killed|signal' "$log" | sed 's/^/    /'
        echo "    ..."
    fi
    tail -n 10 "$log" | sed 's/^/    /'
}

# Each failure with its own log, <dir>/<name>.log: the directory is the one make had entered
# when it printed the result (make's Entering/Leaving lines, kept as a stack).
while read -r kind name dir; do
    log=$dir/$name.log
    [ -f "$log" ] && [ "$log" -nt "$STAMP" ] || log=$(find "$BUILD/$TESTROOT" -name "$name.log" -newer "$STAMP" 2>/dev/null | head -1)
    echo "---- $kind $name${log:+ ($log)}"
    [ -n "$log" ] && show_log "$log"
done < <(awk '
    /Entering directory/ { d = $0; sub(/.*Entering directory ./, "", d); sub(/.$/, "", d); stack[++n] = d; next }
    /Leaving directory/ { if (n > 0) n--; next }
    /^(FAIL|ERROR|XPASS): / { k = $1; sub(/:$/, "", k); print k, $2, (n > 0 ? stack[n] : ".") }
' "$LOGS/make.log")
if [ "$notrun" -gt 0 ]; then
    echo "---- $notrun tests reported no result (timeout, or a build error: see $LOGS/make.log)"
    grep -E '(\*\*\*|Error [0-9]+)' "$LOGS/make.log" | grep -v 'check-TESTS\|check-am\|check-recursive\|test-suite.log' | head -5 | sed 's/^/    /'
fi

failed=$((fail + error + xpass + notrun))
echo "sos-tests: PASS $pass, FAIL $fail, ERROR $error, XFAIL $xfail, XPASS $xpass, SKIP $skip, no result $notrun of $expected; make exit $rc; $ELAPSED s"
echo "$pass passed, $failed failed"
[ "$failed" = 0 ]
