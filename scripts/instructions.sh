#!/usr/bin/env bash
# Where the time goes on the small-message path: instructions per 8-byte message, counted by
# valgrind's callgrind (exact and independent of other load, unlike timings), on the client side
# of a tagged fi_pingpong over rshm. Prints, per message: the send call (fi_tinject), posting a
# receive (fi_trecv), the engine taking one arriving message and the provider completing it
# (on_msg), and one idle poll of the CQ (fi_cq_read with nothing to do).
#
#   scripts/instructions.sh [-I iterations] [-S size] [provider dir (default target/rshm)]
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
# Instructions executed inside FUNCTION (and what it calls) over the whole run, divided by the
# messages: callgrind collects only while inside it (--toggle-collect). fi_pingpong sends one
# message more than -I (its synchronisation), each way.
per_message() {
    local port=$((20000 + RANDOM % 30000)) args=(-p rshm -e rdm -m tagged -S "$SIZE" -I "$ITERS")
    FI_PROVIDER_PATH=$PROV_DIR timeout -k 5 300 fi_pingpong "${args[@]}" -B "$port" >/dev/null 2>&1 &
    sleep 0.3
    FI_PROVIDER_PATH=$PROV_DIR timeout -k 5 300 valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
        --collect-atstart=no "--toggle-collect=$1" fi_pingpong "${args[@]}" -P "$port" 127.0.0.1 >/dev/null 2>&1
    wait || true
    local total
    total=$(awk '/^summary:/ {print $2}' "$out/cg")
    echo $(((total + ITERS / 2) / (ITERS + 1)))
}
printf "instructions per 8 B message (-S %s), client side of fi_pingpong -m tagged -I %s (callgrind)\n" "$SIZE" "$ITERS"
printf "  %-40s %6s\n" "fi_tinject: the send call" "$(per_message '*ep::ops::tagged_inject*')"
printf "  %-40s %6s\n" "fi_trecv: posting the receive" "$(per_message '*ep::ops::tagged_recv*')"
printf "  %-40s %6s\n" "one arrival: engine and provider" "$(per_message '*Endpoint*on_msg*')"
