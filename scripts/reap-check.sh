#!/usr/bin/env bash
# Regions left in /dev/shm by SIGKILLed processes are removed before the next process opens its
# first endpoint (FI_RSHM_REAP_DEAD, on by default), a live process's region is left alone, and
# with FI_RSHM_REAP_DEAD=0 nothing is removed; the same for processes of other pid namespaces
# (containers sharing /dev/shm, root only). Through libfabric, with fi_pingpong.
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

killed=$(start_pair $port)
[ "$(echo "$killed" | grep -c .)" = 2 ] || { echo "the pair did not create two regions: $killed"; exit 1; }
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
[ "$(echo "$live" | grep -c .)" = 2 ] || { echo "the live pair did not create two regions: $live"; exit 1; }

short_pair "$log"
for r in $killed; do
    [ ! -e "/dev/shm/$r" ] || { echo "the dead process's region $r was not removed"; exit 1; }
    [ "$(grep -c "removed region $r (.* bytes) left by process [0-9]* that died" "$log")" = 1 ] ||
        { grep rshm "$log" | tail -20; echo "not one log line for the removal of $r"; exit 1; }
done
for r in $live; do
    [ -e "/dev/shm/$r" ] || { echo "the live process's region $r was removed"; exit 1; }
done
echo "  the next pair removed both (log: $(grep -o 'removed region.*' "$log" | head -1 | cut -c1-90)...)"
echo "  and left those of a pair still running: $(echo $live)"
pkill -KILL -f "fi_pingpong -p rshm -[BP] $((port + 1))" || true

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
[ "$(echo "$killed" | grep -c .)" = 2 ] || { echo "the namespaced pair did not create two regions: $killed"; exit 1; }
pkill -KILL -f "fi_pingpong -p rshm -[BP] $((port + 2))" || true
live=$(start_pair $((port + 3)) FI_RSHM_REAP_DEAD=0)
[ "$(echo "$live" | grep -c .)" = 2 ] || { echo "the live namespaced pair did not create two regions: $live"; exit 1; }
sleep 0.3
wrap=
short_pair "$log"
for r in $killed; do
    [ ! -e "/dev/shm/$r" ] || { echo "the region $r of a process killed in another pid namespace was not removed"; exit 1; }
    [ "$(grep -c "removed region $r (.* bytes) left by process 1 of pid namespace [0-9]* that died" "$log")" = 1 ] ||
        { grep rshm "$log" | tail -20; echo "not one log line for the removal of $r"; exit 1; }
done
for r in $live; do
    [ -e "/dev/shm/$r" ] || { echo "the region $r of a live process of another pid namespace was removed"; exit 1; }
done
echo "  a pair killed in pid namespaces of its own: both regions removed by the next pair here ($(echo $killed))"
echo "  and those of such a pair still running kept: $(echo $live)"
pkill -KILL -f "fi_pingpong -p rshm -[BP] $((port + 3))" || true
rm -f "$log"
