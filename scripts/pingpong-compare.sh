#!/usr/bin/env bash
# fi_pingpong (libfabric-bin) over rshm and over the C shm provider, in the same run, same
# sizes, same core pinning; prints latency, bandwidth and the rshm/shm ratios.
#
#   scripts/pingpong-compare.sh [-e rdm|dgram] [-m tagged|msg] [-I iters] [-s "8 1024 ..."]
set -euo pipefail
cd "$(dirname "$0")/.."

EP=rdm MODE=tagged ITERS=20000 SIZES="8 1024 65536 1048576" REPEAT=3
while getopts "e:m:I:s:r:" opt; do
    case $opt in
        e) EP=$OPTARG ;; m) MODE=$OPTARG ;; I) ITERS=$OPTARG ;; s) SIZES=$OPTARG ;; r) REPEAT=$OPTARG ;;
        *) echo "usage: $0 [-e rdm|dgram] [-m tagged|msg] [-I iters] [-s sizes] [-r repeats]" >&2; exit 2 ;;
    esac
done
PROV_DIR=${RSHM_PROVIDER_DIR:-$PWD/target/rshm}
[ -f "$PROV_DIR/librshm-fi.so" ] || { echo "no $PROV_DIR/librshm-fi.so: run scripts/build-provider.sh" >&2; exit 1; }
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not found: apt-get install libfabric-bin" >&2; exit 1; }
PIN_SRV="" PIN_CLI=""
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then PIN_SRV="taskset -c 0" PIN_CLI="taskset -c 1"; fi

# One fi_pingpong pair; prints "usec/xfer MB/s" of the client's result line.
pingpong() {
    local prov=$1 size=$2 iters=$3 port=$((20000 + RANDOM % 30000))
    local args=(-p "$prov" -e "$EP" -m "$MODE" -S "$size" -I "$iters")
    FI_PROVIDER_PATH=$PROV_DIR timeout 120 $PIN_SRV fi_pingpong "${args[@]}" -B "$port" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    local out
    out=$(FI_PROVIDER_PATH=$PROV_DIR timeout 120 $PIN_CLI fi_pingpong "${args[@]}" -P "$port" 127.0.0.1 2>/dev/null | awk '$1 ~ /^[0-9]/ {print $7, $6}' | tail -1) || true
    wait "$srv" 2>/dev/null || true
    echo "${out:-FAIL FAIL}"
}

# Best of REPEAT runs: the least disturbed measurement on a shared machine.
best() {
    local prov=$1 size=$2 iters=$3 best_lat="" best_bw="" lat bw
    for _ in $(seq "$REPEAT"); do
        read -r lat bw < <(pingpong "$prov" "$size" "$iters")
        [ "$lat" = FAIL ] && continue
        if [ -z "$best_lat" ] || awk "BEGIN{exit !($lat < $best_lat)}"; then best_lat=$lat best_bw=$bw; fi
    done
    echo "${best_lat:-FAIL} ${best_bw:-FAIL}"
}

printf "fi_pingpong -e %s -m %s, best of %s runs, server/client pinned to cores 0/1\n" "$EP" "$MODE" "$REPEAT"
printf "%10s %14s %14s %9s %12s %12s %9s\n" size "rshm usec" "shm usec" "lat x" "rshm MB/s" "shm MB/s" "bw x"
failed=0
for size in $SIZES; do
    iters=$ITERS
    [ "$size" -ge 65536 ] && iters=$((ITERS / 10))
    [ "$size" -ge 1048576 ] && iters=$((ITERS / 40))
    read -r r_lat r_bw < <(best rshm "$size" "$iters")
    read -r s_lat s_bw < <(best shm "$size" "$iters")
    [ "$r_lat" = FAIL ] && failed=1
    lat_x=$(awk "BEGIN{ if (\"$r_lat\"==\"FAIL\" || \"$s_lat\"==\"FAIL\") print \"-\"; else printf \"%.2f\", $s_lat/$r_lat }")
    bw_x=$(awk "BEGIN{ if (\"$r_bw\"==\"FAIL\" || \"$s_bw\"==\"FAIL\" || $s_bw+0==0) print \"-\"; else printf \"%.2f\", $r_bw/$s_bw }")
    printf "%10s %14s %14s %9s %12s %12s %9s\n" "$size" "$r_lat" "$s_lat" "$lat_x" "$r_bw" "$s_bw" "$bw_x"
done
echo "(lat x = shm latency / rshm latency, bw x = rshm bandwidth / shm bandwidth: above 1 means rshm is faster)"
exit $failed
