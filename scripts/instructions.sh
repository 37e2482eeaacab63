#!/usr/bin/env bash
# Where the time goes on the small-message path: instructions per 8-byte message, counted by
# valgrind's callgrind (exact and independent of other load, unlike timings), on the client side
# of a tagged fi_pingpong over rshm. Prints, per message: the send call (fi_tinject), posting a
# receive (fi_trecv), the fi_cq_read that takes an arrived message (the engine popping it from
# the ring, the provider matching, copying and completing it, and the CQ entry), and one idle
# poll of the CQ (fi_cq_read with nothing to do).
#
#   scripts/instructions.sh [-I iterations] [-S size] [provider dir (default target/rshm)]
#
# The counts are inclusive costs of the libfabric entry points, from call counts over the whole
# run, so they hold however the build inlined the code below them (the profile-guided build
# inlines the engine's `on_msg` into the CQ read). The client's fi_cq_read calls that found
# nothing are taken out at the cost of an idle poll, measured in a second run where the client
# shares one CPU with the server and so mostly finds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=20000 SIZE=8
while getopts "I:S:" opt; do
    case $opt in I) ITERS=$OPTARG ;; S) SIZE=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
PROV_DIR=${1:-$PWD/target/rshm}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not found: apt-get install libfabric-bin" >&2; exit 1; }
[ -f "$PROV_DIR/librshm-fi.so" ] || { echo "no $PROV_DIR/librshm-fi.so: run scripts/build-provider.sh" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# A callgrind profile of the client of `fi_pingpong -S SIZE -I ITERS` into $out/$1 (with
# `taskset -c 0` before both processes when $3 is given).
profile() {
    local port=$((20000 + RANDOM % 30000)) args=(-p rshm -e rdm -m tagged -S "$SIZE" -I "$2")
    local pin=()
    [ -z "${3:-}" ] || pin=(taskset -c 0)
    FI_PROVIDER_PATH=$PROV_DIR timeout -k 5 300 "${pin[@]}" fi_pingpong "${args[@]}" -B "$port" >/dev/null 2>&1 &
    sleep 0.3
    FI_PROVIDER_PATH=$PROV_DIR timeout -k 5 300 "${pin[@]}" valgrind --tool=callgrind \
        --callgrind-out-file="$out/$1" fi_pingpong "${args[@]}" -P "$port" 127.0.0.1 >/dev/null 2>&1
    wait || true
}

# "calls inclusive" of the entry point named by $2 in profile $1.
calls_and_cost() {
    python3 scripts/callgrind-calls.py "$out/$1" "rshm_provider::$2" | awk -F'\t' 'NR==1 {print $1, $2}'
}

profile busy "$ITERS"
profile idle 300 one-cpu
read -r idle_calls idle_total < <(calls_and_cost idle cq::cq_read)
idle=$((idle_total / idle_calls))
# fi_pingpong sends one message more than -I (its synchronisation), each way.
msgs=$((ITERS + 1))
per() { # entry point -> its instructions per message
    local cost
    read -r _ cost < <(calls_and_cost busy "$1")
    echo $(((cost + msgs / 2) / msgs))
}
read -r cq_calls cq_cost < <(calls_and_cost busy cq::cq_read)
arrival=$(((cq_cost - (cq_calls - msgs) * idle) / msgs))
printf "instructions per %s B message, client side of fi_pingpong -m tagged -I %s (callgrind)\n" "$SIZE" "$ITERS"
printf "  %-55s %6s\n" "fi_tinject: the send call" "$(per ep::ops::tagged_inject)"
printf "  %-55s %6s\n" "fi_trecv: posting the receive" "$(per ep::ops::tagged_recv)"
printf "  %-55s %6s\n" "fi_cq_read taking one arrival (engine, provider, CQ)" "$arrival"
printf "  %-55s %6s\n" "an idle fi_cq_read" "$idle"
