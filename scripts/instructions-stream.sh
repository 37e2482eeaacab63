#!/usr/bin/env bash
# What the message-rate target (issue 8: 8 B rate >= 2x the best other provider) depends on,
# counted instead of timed: rshm-fi-bench's tagged stream (`--tests bw`: a window of 64
# fi_tinject, then an acknowledgement once the receiver has posted the next window's
# receives) under valgrind's callgrind, both processes. Exact and independent of the host's
# state, which moves the timed rate by a third from one run to the next here.
#
# Prints per message:
#   receiver  fi_trecv (posting the receive); the provider's handling of an arrived small
#             message (`Handler::on_inline`: matching, copying, the completion), exact per
#             message; and the whole fi_cq_read (the engine's pop and the handling above, plus
#             the call's own fixed cost), with the calls it took per message. That last figure
#             moves by +-40 instructions between runs, as the receiver takes more or fewer
#             messages per call (and finds some calls empty) depending on timing; compare the
#             first two across builds. The receiver bounds the stream
#             (docs/perf/where-the-time-goes.md, forty-second and fifty-ninth sessions): the
#             window's posts are a phase the sender waits through, and its arrivals are the
#             slower side of the pipeline.
#   sender    fi_tinject.
#
#   [TIME_MS=ms] scripts/instructions-stream.sh [-S size] [provider dir (default target/rshm)]
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=8
while getopts "S:" opt; do
    case $opt in S) SIZE=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
PROV_DIR=${1:-$PWD/target/rshm}
BIN=$PWD/target/release/rshm-fi-bench
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p rshm-benches" >&2; exit 1; }
[ -f "$PROV_DIR/librshm-fi.so" ] || { echo "no $PROV_DIR/librshm-fi.so: run scripts/build-provider.sh" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
FI_PROVIDER_PATH=$PROV_DIR timeout -k 5 600 valgrind --tool=callgrind --trace-children=yes \
    --callgrind-out-file="$out/cg.%p" "$BIN" --provider rshm --families tagged --tests bw --sizes "$SIZE" \
    --time-ms "${TIME_MS:-300}" --tries 1 --no-pin >/dev/null 2>&1
sender=$(grep -L -- '--peer' "$out"/cg.* | head -1)
receiver=$(grep -l -- '--peer' "$out"/cg.* | head -1)
[ -n "$sender" ] && [ -n "$receiver" ] || { echo "instructions-stream: no profile of both processes" >&2; exit 1; }
# `calls <TAB> inclusive` of the provider's entry point $2 in profile $1 (0 0 if never called).
entry() {
    python3 scripts/callgrind-calls.py "$1" "rshm_provider::$2" | awk -F'\t' 'NR == 1 {c = $1; i = $2} END {print c + 0, i + 0}'
}
read -r posts post_instr < <(entry "$receiver" ep::ops::tagged_recv)
read -r handled handle_instr < <(entry "$receiver" 'state::ep::rx::Handler as smr_core::endpoint::Handler>::on_inline')
read -r reads read_instr < <(entry "$receiver" cq::cq_read)
read -r sends send_instr < <(entry "$sender" ep::ops::tagged_inject)
if [ "$sends" = 0 ]; then
    # Above the inject size the bench sends with fi_tsend.
    read -r sends send_instr < <(entry "$sender" ep::ops::tagged_send)
fi
# The receiver posts one receive per message (and a handful for the run's own messages).
awk -v n="$posts" -v p="$post_instr" -v h="$handled" -v hi="$handle_instr" -v c="$reads" -v r="$read_instr" \
    -v s="$sends" -v t="$send_instr" -v size="$SIZE" -v dir="$PROV_DIR" 'BEGIN {
    if (n == 0 || s == 0) { print "instructions-stream: no receives or sends counted" > "/dev/stderr"; exit 1 }
    printf "instructions per %s B message, rshm-fi-bench --tests bw (callgrind), %s, %d messages\n", size, dir, n
    printf "  receiver: fi_trecv %.0f\n", p / n
    if (h > 0) printf "            the arrival handled (Handler::on_inline) %.0f\n", hi / h
    else printf "            the arrival handled: no Handler::on_inline (inlined, or no inline messages at this size)\n"
    printf "            fi_cq_read %.0f (%.2f calls a message)\n", r / n, c / n
    printf "  sender:   fi_tinject (fi_tsend above the inject size) %.0f\n", t / s
}'
