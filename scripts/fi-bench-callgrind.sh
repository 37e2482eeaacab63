# Sourced by the scripts that count instructions in rshm-fi-bench runs
# (scripts/instructions-atomic.sh, scripts/instructions-stream.sh), from the repository root:
# what such a run needs, the run itself with both processes under valgrind's callgrind, and
# sums over its profiles. Sets FI_BENCH and PROFILES (a temporary folder, removed on exit).

FI_BENCH=$PWD/target/release/rshm-fi-bench

# Check that valgrind, rshm-fi-bench and the provider in directory $1 are there, and make the
# folder for the profiles.
fi_bench_callgrind_ready() {
    command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
    [ -x "$FI_BENCH" ] || { echo "no $FI_BENCH: cargo build --release -p rshm-benches" >&2; exit 1; }
    [ -f "$1/librshm-fi.so" ] || { echo "no $1/librshm-fi.so: run scripts/build-provider.sh" >&2; exit 1; }
    PROFILES=$(mktemp -d)
    trap 'rm -rf "$PROFILES"' EXIT
}

# Run `rshm-fi-bench --provider rshm` with the arguments after $1 (the provider directory) under
# callgrind, both processes traced; sets INIT_PROFILE (the initiator, the bench's own process)
# and PEER_PROFILE (the responder, its --peer child).
fi_bench_callgrind() {
    local prov_dir=$1
    shift
    rm -f "$PROFILES"/cg.*
    FI_PROVIDER_PATH=$prov_dir timeout -k 5 600 valgrind --tool=callgrind --fair-sched=yes --trace-children=yes \
        --callgrind-out-file="$PROFILES/cg.%p" "$FI_BENCH" --provider rshm "$@" --tries 1 --no-pin >/dev/null 2>&1
    INIT_PROFILE=$(grep -L -- '--peer' "$PROFILES"/cg.* | head -1)
    PEER_PROFILE=$(grep -l -- '--peer' "$PROFILES"/cg.* | head -1)
    [ -n "$INIT_PROFILE" ] && [ -n "$PEER_PROFILE" ] || { echo "no callgrind profile of both processes" >&2; exit 1; }
}

# Sum of the calls (column 1) or inclusive instructions (column 2) of the functions whose names
# contain one of the patterns after $2, in profile $2.
sum() {
    local col=$1 f=$2
    shift 2
    python3 scripts/callgrind-calls.py "$f" "$@" | awk -v c="$col" '{s += $c} END {print s + 0}'
}
