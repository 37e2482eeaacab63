#!/usr/bin/env bash
# Instructions per ping-pong iteration, every shared-memory provider beside rshm: the client of
# `fi_pingpong -m tagged` (libfabric-bin) under valgrind's callgrind, its whole process counted,
# for rshm and the C shm on Debian's libfabric 1.17, and for rshm, the C shm and sm2 on the
# libfabric 2.5.1 inside the PyPI mpich wheel (scripts/setup.sh installs it into
# target/venv-mpich). One iteration is one message sent and one received, with fi_pingpong's
# own loop around them (the same for every provider).
#
# The per-iteration figure is the difference between a run of -I LONG and one of -I SHORT
# iterations, divided by the difference, so that start-up and teardown cancel. Under callgrind the
# client runs tens of times slower than the server beside it, which has answered long before the
# client looks: the client's idle polls, the one part that depends on timing, nearly vanish, and
# the count is the work of a send and a receive. That holds on an otherwise idle machine only:
# beside a busy one the server is slow too, the idle polls come back, and the counts grow by
# half or more, unevenly (run beside the test suite: 2,015-3,640 an iteration).
#
#   scripts/instructions-providers.sh [-S size] [provider dir (default target/rshm)]
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=8 SHORT=5000 LONG=25000
while getopts "S:" opt; do
    case $opt in S) SIZE=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
PROV_DIR=${1:-$PWD/target/rshm}
CORE25=$PWD/target/venv-mpich/lib/mpich
. scripts/pingpong-callgrind.sh
pingpong_callgrind_ready "$PROV_DIR"

# Total instructions of the client of one fi_pingpong pair of provider $1, core $2 (1.17 or
# 2.5), $3 iterations.
client_instructions() {
    local lib=""
    [ "$2" = 2.5 ] && lib=$CORE25
    LIB=$lib pingpong_callgrind cg "$1" "$3"
    awk '/^(summary|totals):/ {print $2; exit}' "$out/cg" 2>/dev/null
    rm -f "$out/cg"
}

printf "instructions per %s B tagged ping-pong iteration (one send, one receive), client of fi_pingpong (callgrind)\n" "$SIZE"
rshm=""
for pc in rshm@1.17 shm@1.17 rshm@2.5 shm@2.5 sm2@2.5; do
    prov=${pc%@*} core=${pc#*@}
    if [ "$core" = 2.5 ] && [ ! -f "$CORE25/libfabric.so.1" ]; then
        printf "  %-10s n/a (no %s: run scripts/setup.sh)\n" "$pc" "$CORE25"
        continue
    fi
    a=$(client_instructions "$prov" "$core" "$SHORT")
    b=$(client_instructions "$prov" "$core" "$LONG")
    if [ -z "$a" ] || [ -z "$b" ]; then
        printf "  %-10s failed\n" "$pc"
        continue
    fi
    per=$(((b - a) / (LONG - SHORT)))
    [ "$prov" = rshm ] && [ -z "$rshm" ] && rshm=$per
    if [ -n "$rshm" ] && [ "$prov" != rshm ]; then
        printf "  %-10s %6d  (rshm@1.17 / this: %.2fx)\n" "$pc" "$per" "$(echo "$rshm / $per" | bc -l)"
    else
        printf "  %-10s %6d\n" "$pc" "$per"
    fi
done
