#!/usr/bin/env bash
# Where the time goes on the small-message path: instructions per 8-byte message, counted by
# valgrind's callgrind (exact and independent of other load, unlike timings), on the client side
# of a tagged fi_pingpong over rshm. Prints, per message: the send call (fi_tinject), posting a
# receive (fi_trecv), the fi_cq_read that takes an arrived message (the engine popping it from
# the ring, the provider matching, copying and completing it, and the CQ entry), and one idle
# poll of the CQ (fi_cq_read with nothing to do).
#
#   scripts/instructions.sh [-I iterations] [-S size] [-c] [provider dir (default target/rshm)]
#
# -c also simulates the caches (valgrind --cache-sim=yes, the host's cache sizes) and prints the
# data-cache misses per call beside the instructions: first-level (D1, reads + writes) and
# last-level (LL). The simulation runs each process alone, so it counts the misses of the
# process's own working set, not the lines the two processes hand each other through shared
# memory (a ring slot the sender wrote, a stamp the receiver released): those transfers are
# what the engine ping-pong's "bare cache line" row times (docs/perf/where-the-time-goes.md).
#
# The counts are inclusive costs of the libfabric entry points, from call counts over the whole
# run, so they hold however the build inlined the code below them (the profile-guided build
# inlines the engine's `on_msg` into the CQ read). The client's fi_cq_read calls that found
# nothing are taken out at the cost of an idle poll, measured in a second run where the client
# shares one CPU with the server and so mostly finds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=20000 SIZE=8 CACHE=
while getopts "I:S:c" opt; do
    case $opt in I) ITERS=$OPTARG ;; S) SIZE=$OPTARG ;; c) CACHE=--cache-sim=yes ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
PROV_DIR=${1:-$PWD/target/rshm}
. scripts/pingpong-callgrind.sh
pingpong_callgrind_ready "$PROV_DIR"

# A callgrind profile of the client of rshm's `fi_pingpong -S SIZE -I $2` into $out/$1 (with
# `taskset -c 0` before both processes when $3 is given).
profile() {
    PIN=${3:+taskset -c 0} VALGRIND_ARGS=$CACHE pingpong_callgrind "$1" rshm "$2"
}

# "calls inclusive" of the entry point named by $2 in profile $1, of event $EVENT.
EVENT=Ir
calls_and_cost() {
    python3 scripts/callgrind-calls.py --event "$EVENT" "$out/$1" "rshm_provider::$2" | awk -F'\t' 'NR==1 {print $1, $2}'
}

profile busy "$ITERS"
profile idle 300 one-cpu
# fi_pingpong sends one message more than -I (its synchronisation), each way.
msgs=$((ITERS + 1))
# The four figures of event $EVENT per message, to $1 decimals: the send, the receive, the
# arrival's fi_cq_read (its calls that found nothing taken out at the cost of an idle poll), and
# an idle poll.
figures() {
    # fi_pingpong sends with fi_tinject up to the inject size, with fi_tsend above it.
    local send
    send=$(calls_and_cost busy ep::ops::tagged_inject)
    [ -n "$send" ] || send=$(calls_and_cost busy ep::ops::tagged_send)
    python3 - "$1" "$msgs" "$send" "$(calls_and_cost busy ep::ops::tagged_recv)" \
        "$(calls_and_cost busy cq::cq_read)" "$(calls_and_cost idle cq::cq_read)" <<'PY'
import sys
digits, msgs = int(sys.argv[1]), int(sys.argv[2])
(_, send), (_, recv), (cq_calls, cq), (idle_calls, idle_total) = (map(int, a.split()) for a in sys.argv[3:7])
idle = idle_total / idle_calls
arrival = (cq - (cq_calls - msgs) * idle) / msgs
print(" ".join(f"{v:.{digits}f}" for v in (send / msgs, recv / msgs, arrival, idle)))
PY
}
read -r send recv arrival idle < <(figures 0)
if [ -z "$CACHE" ]; then
    printf "instructions per %s B message, client side of fi_pingpong -m tagged -I %s (callgrind)\n" "$SIZE" "$ITERS"
    printf "  %-55s %6s\n" "fi_tinject (fi_tsend above the inject size): the send" "$send"
    printf "  %-55s %6s\n" "fi_trecv: posting the receive" "$recv"
    printf "  %-55s %6s\n" "fi_cq_read taking one arrival (engine, provider, CQ)" "$arrival"
    printf "  %-55s %6s\n" "an idle fi_cq_read" "$idle"
    exit 0
fi
EVENT=D1mr+D1mw
read -r d1_send d1_recv d1_arrival d1_idle < <(figures 2)
EVENT=DLmr+DLmw
read -r ll_send ll_recv ll_arrival ll_idle < <(figures 2)
printf "per %s B message, client side of fi_pingpong -m tagged -I %s (callgrind, simulated caches)\n" "$SIZE" "$ITERS"
printf "  %-55s %12s %10s %10s\n" "" instructions "D1 misses" "LL misses"
printf "  %-55s %12s %10s %10s\n" "fi_tinject (fi_tsend above the inject size): the send" "$send" "$d1_send" "$ll_send"
printf "  %-55s %12s %10s %10s\n" "fi_trecv: posting the receive" "$recv" "$d1_recv" "$ll_recv"
printf "  %-55s %12s %10s %10s\n" "fi_cq_read taking one arrival (engine, provider, CQ)" "$arrival" "$d1_arrival" "$ll_arrival"
printf "  %-55s %12s %10s %10s\n" "an idle fi_cq_read" "$idle" "$d1_idle" "$ll_idle"
