# Sourced by the scripts that count instructions in fi_pingpong runs under valgrind's callgrind
# (scripts/instructions.sh, scripts/instructions-providers.sh), from the repository root.

# Check that valgrind, fi_pingpong and the provider in directory $1 are there, and make a
# temporary folder for the profiles in `out` (removed on exit).
pingpong_callgrind_ready() {
    command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
    command -v fi_pingpong >/dev/null || { echo "fi_pingpong not found: apt-get install libfabric-bin" >&2; exit 1; }
    [ -f "$1/librshm-fi.so" ] || { echo "no $1/librshm-fi.so: run scripts/build-provider.sh" >&2; exit 1; }
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
}

# One fi_pingpong pair of provider $2 (tagged, SIZE bytes, $3 iterations) from this checkout's
# provider in PROV_DIR, the client under callgrind with its profile in $out/$1. Optional, set for
# the call: PIN, a command both processes run under ("taskset -c 0"); LIB, a libfabric core to
# load instead of the system's (its directory, as LD_LIBRARY_PATH); VALGRIND_ARGS.
pingpong_callgrind() {
    local name=$1 prov=$2 iters=$3 port=$((20000 + RANDOM % 30000))
    local args=(-p "$prov" -e rdm -m tagged -S "$SIZE" -I "$iters") run=(env FI_PROVIDER_PATH="$PROV_DIR")
    [ -z "${LIB:-}" ] || run+=(LD_LIBRARY_PATH="$LIB")
    run+=(timeout -k 5 600)
    # shellcheck disable=SC2206 # PIN and VALGRIND_ARGS are words
    local pin=(${PIN:-}) vg=(${VALGRIND_ARGS:-})
    "${run[@]}" "${pin[@]}" fi_pingpong "${args[@]}" -B "$port" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.5
    "${run[@]}" "${pin[@]}" valgrind --tool=callgrind "${vg[@]}" --callgrind-out-file="$out/$name" \
        fi_pingpong "${args[@]}" -P "$port" 127.0.0.1 >/dev/null 2>&1 || true
    wait "$srv" 2>/dev/null || true
}
