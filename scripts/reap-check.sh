#!/usr/bin/env bash
# Regions left in /dev/shm by SIGKILLed processes are removed before the next process opens its
# first endpoint (FI_RSHM_REAP_DEAD, on by default), a live process's region is left alone, and
# with FI_RSHM_REAP_DEAD=0 nothing is removed; the same for processes of other pid namespaces
# (containers sharing /dev/shm, root only). A process killed by SIGTERM removes its own
# (FI_RSHM_UNLINK_ON_SIGNAL, on by default). Through libfabric, with fi_pingpong.
# usage: scripts/reap-check.sh PROVIDER_DIR   (scripts/test.sh runs it in a private /dev/shm)
set -euo pipefail
dir=${1:?usage: reap-check.sh PROVIDER_DIR}
export FI_PROVIDER_PATH=$dir
port=47611

regions() { ls /dev/shm | grep '^rshm_' | sort || true; }

# Until a server listens on TCP port $1 (state 0A in /proc/net/tcp*), at most 5 s: a client that
# comes too early is refused and gives up.
wait_listen() {
    local hex
    hex=$(printf '%04X' "$1")
    for _ in $(seq 50); do
        grep -q ":$hex [0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on port $1"
    return 1
}

# How start_pair runs each side: as it is, or (below) in a pid namespace of its own.
wrap=

# A fi_pingpong pair on port $1 that runs until killed, with the environment $2...; prints the
# names of the two regions it created.
start_pair() {
    local before after p=$1
    shift
    before=$(regions)
    env "$@" $wrap fi_pingpong -p rshm -B "$p" -I 1000000000 -S 64 >/dev/null 2>&1 &
    wait_listen "$p" >&2
    env "$@" $wrap fi_pingpong -p rshm -P "$p" -I 1000000000 -S 64 localhost >/dev/null 2>&1 &
    for _ in $(seq 100); do
        after=$(regions)
        [ "$(comm -13 <(echo "$before") <(echo "$after") | grep -c .)" -ge 2 ] && break
        sleep 0.1
    done
    comm -13 <(echo "$before") <(echo "$after")
}

# A short fi_pingpong pair that closes its endpoints; the logs of both go to $1 (either may be
# the first to open an endpoint, and so the one that reaps).
short_pair() {
    local log=$1
    shift
    env "$@" FI_LOG_LEVEL=info fi_pingpong -p rshm -B $port -I 100 -S 64 >"$log.srv" 2>&1 &
    local srv=$!
    wait_listen $port
    env "$@" FI_LOG_LEVEL=info fi_pingpong -p rshm -P $port -I 100 -S 64 localhost >"$log.cli" 2>&1
    wait $srv
    cat "$log.srv" "$log.cli" >"$log"
    rm -f "$log.srv" "$log.cli"
}

# The regions $2 that the pair $1 created are two; else the check fails.
two_regions() {
    [ "$(echo "$2" | grep -c .)" = 2 ] || { echo "$1 did not create two regions: $2"; exit 1; }
}

# After the pair whose log is $1: every region of the killed pair's, $2, is removed, with one log
# line saying it was "left by $3 that died", and every region of the running pair's, $4, is
# kept; $5 says whose they are, for the failures.
removed_and_kept() {
    local log=$1 dead=$2 owner=$3 alive=$4 whose=$5 r
    for r in $dead; do
        [ ! -e "/dev/shm/$r" ] || { echo "the region $r of $whose killed was not removed"; exit 1; }
        [ "$(grep -c "removed region $r (.* bytes) left by $owner that died" "$log")" = 1 ] ||
            { grep rshm "$log" | tail -20; echo "not one log line for the removal of $r"; exit 1; }
    done
    for r in $alive; do
        [ -e "/dev/shm/$r" ] || { echo "the region $r of $whose still running was removed"; exit 1; }
    done
}

killed=$(start_pair $port)
two_regions "the pair" "$killed"
pkill -KILL -f "fi_pingpong -p rshm -B $port" || true
pkill -KILL -f "fi_pingpong -p rshm -P $port" || true
sleep 0.3
for r in $killed; do
    [ -e "/dev/shm/$r" ] || { echo "the killed process's region $r is already gone"; exit 1; }
done
echo "  two processes SIGKILLed mid-run left $(echo $killed)"

log=$(mktemp)
short_pair "$log" FI_RSHM_REAP_DEAD=0
for r in $killed; do
    [ -e "/dev/shm/$r" ] || { echo "FI_RSHM_REAP_DEAD=0, yet $r was removed"; exit 1; }
done
echo "  with FI_RSHM_REAP_DEAD=0 a new pair left them"

# A live process's regions must survive the next process's reaping. (This pair itself must not
# reap: the removals are to be seen in the next pair's logs.)
live=$(start_pair $((port + 1)) FI_RSHM_REAP_DEAD=0)
two_regions "the live pair" "$live"

short_pair "$log"
removed_and_kept "$log" "$killed" "process [0-9]*" "$live" "a pair"
echo "  the next pair removed both (log: $(grep -o 'removed region.*' "$log" | head -1 | cut -c1-90)...)"
echo "  and left those of a pair still running: $(echo $live)"
pkill -KILL -f "fi_pingpong -p rshm -[BP] $((port + 1))" || true

# SIGTERM: the handler unlinks the pair's names before the signal does what it did before.
for setting in 1 0; do
    p=$((port + 4 + setting))
    termed=$(start_pair $p FI_RSHM_UNLINK_ON_SIGNAL=$setting)
    two_regions "the pair to SIGTERM" "$termed"
    pkill -TERM -f "fi_pingpong -p rshm -[BP] $p" || true
    for _ in $(seq 50); do
        pgrep -f "fi_pingpong -p rshm -[BP] $p" >/dev/null || break
        sleep 0.1
    done
    pkill -KILL -f "fi_pingpong -p rshm -[BP] $p" && { echo "a pair outlived SIGTERM"; exit 1; }
    for r in $termed; do
        if [ $setting = 1 ] && [ -e "/dev/shm/$r" ]; then
            echo "the region $r outlived the SIGTERM that killed its process"
            exit 1
        fi
        if [ $setting = 0 ] && [ ! -e "/dev/shm/$r" ]; then
            echo "FI_RSHM_UNLINK_ON_SIGNAL=0, yet $r went with its SIGTERMed process"
            exit 1
        fi
    done
done
echo "  a pair SIGTERMed mid-run left nothing (with FI_RSHM_UNLINK_ON_SIGNAL=0: $(echo $termed))"
rm -f $(printf '/dev/shm/%s ' $termed)

# Containers that share this /dev/shm but not our pids: each side of a pair in a pid namespace of
# its own, where both are pid 1. Their pids mean nothing here; their regions are judged by the
# owner lock, which the kernel dropped with the killed owner and a live owner still holds.
if [ "$(id -u)" != 0 ] || ! unshare --pid --fork --mount-proc true 2>/dev/null; then
    [ "${CI:-}" = true ] && { echo "unshare --pid does not work here"; exit 1; }
    echo "  SKIPPED the pairs in other pid namespaces: needs root and unshare --pid"
    exit 0
fi
wrap="unshare --pid --fork --mount-proc --kill-child"
killed=$(start_pair $((port + 2)))
two_regions "the namespaced pair" "$killed"
# The live pair starts before the other is killed: a pid namespace's number (in the region's
# name) is reused once the namespace is gone, and a live pair started after the kill could
# take over a name of the killed pair's, which the check would then not see as new.
live=$(start_pair $((port + 3)) FI_RSHM_REAP_DEAD=0)
two_regions "the live namespaced pair" "$live"
pkill -KILL -f "fi_pingpong -p rshm -[BP] $((port + 2))" || true
sleep 0.3
wrap=
short_pair "$log"
removed_and_kept "$log" "$killed" "process 1 of pid namespace [0-9]*" "$live" "a pair in other pid namespaces"
echo "  a pair killed in pid namespaces of its own: both regions removed by the next pair here ($(echo $killed))"
echo "  and those of such a pair still running kept: $(echo $live)"
pkill -KILL -f "fi_pingpong -p rshm -[BP] $((port + 3))" || true
rm -f "$log"
