#!/usr/bin/env bash
# Where the instructions of an atomic go, on both sides: rshm-fi-bench's atomic tests under
# valgrind's callgrind (exact and independent of other load, unlike timings), initiator and
# target (the bench's --peer child, traced too). Prints, per operation, the instructions inside:
#   call        the fi_atomic / fi_fetch_atomic / fi_compare_atomic / fi_*atomicmsg entry point
#               (argument checks, rma::start, the engine's send), inclusive;
#   arrival     the target engine taking the command (decode, the provider's handler: key and
#               range check, apply, counters) and pushing its answer (`on_msg`, and
#               `answer_with` for an answer carrying fetched values, inclusive);
#   completion  the initiator's provider reporting the answer (`on_send_answer` and
#               `on_send_done`, inclusive; 0 when no answer comes back: an operation completed
#               when queued is reported inside the call);
# and the answers per operation (responses the target pushed, `push_resp`/`answer_with`).
# Polling (idle fi_cq_read) is left out: how often a process polls depends on timing.
#
#   [TIME_MS=ms] scripts/instructions-atomic.sh [-t tests] [provider dir (default target/rshm)]
# (TIME_MS, default 1000: the bench's target run time; under valgrind on a loaded machine the
# latency tests may then count only a few hundred operations, where one-time costs show: raise it)
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=atomic_lat,fetch_lat,cswap_lat,atomic_read_lat,atomic_rate,atomic_lat_tc,atomic_rate_tc
while getopts "t:" opt; do
    case $opt in t) TESTS=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
PROV_DIR=${1:-$PWD/target/rshm}
. scripts/fi-bench-callgrind.sh
fi_bench_callgrind_ready "$PROV_DIR"
printf "instructions per operation, rshm-fi-bench --provider rshm --families atomic (callgrind), %s\n" "$PROV_DIR"
printf "  %-12s %8s %8s %11s %8s\n" test call arrival completion answers
for t in ${TESTS//,/ }; do
    fi_bench_callgrind "$PROV_DIR" --families atomic --tests "$t" --sizes 8 --time-ms "${TIME_MS:-1000}"
    entry='rma_ops::atomic_write'
    [ "$t" = fetch_lat ] && entry='rma_ops::atomic_readwrite'
    [ "$t" = cswap_lat ] && entry='rma_ops::atomic_compwrite'
    [ "$t" = atomic_read_lat ] && entry='rma_ops::atomic_readwritemsg'
    case $t in atomic_rate_more | *_tc) entry='rma_ops::atomic_writemsg' ;; esac
    ops=$(sum 1 "$INIT_PROFILE" "rshm_provider::ep::$entry")
    call=$(sum 2 "$INIT_PROFILE" "rshm_provider::ep::$entry")
    arrival=$(sum 2 "$PEER_PROFILE" '<impl smr_core::endpoint::Endpoint>::on_msg' '<impl smr_core::endpoint::Endpoint>::answer_with')
    done_=$(sum 2 "$INIT_PROFILE" 'as smr_core::endpoint::Handler>::on_send_done' 'as smr_core::endpoint::Handler>::on_send_answer')
    answers=$(sum 1 "$PEER_PROFILE" '<impl smr_core::endpoint::Endpoint>::push_resp' '<impl smr_core::endpoint::Endpoint>::answer_with')
    # The run also carries a few messages (ready, run end): a handful per thousands of operations.
    awk -v t="$t" -v n="$ops" -v a="$call" -v b="$arrival" -v c="$done_" -v r="$answers" 'BEGIN {
        printf "  %-12s %8.0f %8.0f %11.0f %8.2f   (%d operations)\n", t, a / n, b / n, c / n, r / n, n }'
    if [ "$arrival" = 0 ] || [ "$done_" = 0 ]; then
        inlined=1
    fi
done
# The arrival and completion columns are inclusive costs of engine and handler functions, which
# the profile-guided build inlines into the progress loop: they read 0 there.
if [ -n "${inlined:-}" ]; then
    echo "  (a 0 above: inlined in this build; for those columns build with RSHM_PGO=0 scripts/build-provider.sh)"
fi
