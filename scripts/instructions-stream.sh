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
. scripts/fi-bench-callgrind.sh
fi_bench_callgrind_ready "$PROV_DIR"
fi_bench_callgrind "$PROV_DIR" --families tagged --tests bw --sizes "$SIZE" --time-ms "${TIME_MS:-300}"
# Calls and inclusive instructions of the provider's entry points named.
entry() { local f=$1; shift; echo "$(sum 1 "$f" "$@") $(sum 2 "$f" "$@")"; }
read -r posts post_instr < <(entry "$PEER_PROFILE" rshm_provider::ep::ops::tagged_recv)
read -r handled handle_instr < <(entry "$PEER_PROFILE" 'rshm_provider::state::ep::rx::Handler as smr_core::endpoint::Handler>::on_inline')
read -r reads read_instr < <(entry "$PEER_PROFILE" rshm_provider::cq::cq_read)
read -r sends send_instr < <(entry "$INIT_PROFILE" rshm_provider::ep::ops::tagged_inject)
if [ "$sends" = 0 ]; then
    # Above the inject size the bench sends with fi_tsend.
    read -r sends send_instr < <(entry "$INIT_PROFILE" rshm_provider::ep::ops::tagged_send)
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
