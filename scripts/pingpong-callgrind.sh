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
