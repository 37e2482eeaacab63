#!/usr/bin/env bash
# The one-sided kill storm: runs the conformance scenario kill/rma_atomic N times (4 ranks put,
# get and fetch-add into each other; one, drawn at random, is SIGKILLed mid-traffic; the
# survivors must see errors for it within 2 s and stay exact among themselves). Prints the runs
# that failed with the seed that replays them (RSHM_KILL_SEED=...), and the times from posting an
# operation towards the dead rank to its error completion.
#
#   scripts/rma-kill-storm.sh [N (default 200)] [provider (default rshm)]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200} PROV=${2:-rshm}
[ -f target/rshm/librshm-fi.so ] || bash scripts/build-provider.sh >/dev/null
cargo build --release --locked -q -p fabtests-adapter
log=$(mktemp)
trap 'rm -f "$log"' EXIT
pass=0 fail=0 start=$(date +%s)
for i in $(seq 1 "$N"); do
    if timeout -k 5 120 target/release/fabtests-adapter suite --providers "$PROV" \
        --provider-path "$PWD/target/rshm" --filter kill/rma_atomic -v >"$log.run" 2>&1; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "run $i FAILED: $(grep -m1 -o 'RSHM_KILL_SEED=[0-9]*' "$log.run")"
        grep -E "FAIL" "$log.run" | head -3
    fi
    grep -o 'error [0-9]* after [0-9.]*[mµn]*s' "$log.run" >>"$log" || true
done
rm -f "$log.run"
echo "kill/rma_atomic x $N over $PROV: $pass passed, $fail failed in $(($(date +%s) - start)) s"
python3 - "$log" <<'EOF'
import re, statistics, sys
unit = {"s": 1e3, "ms": 1.0, "µs": 1e-3, "us": 1e-3, "ns": 1e-6}
ms = []
for line in open(sys.argv[1]):
    m = re.search(r"after ([0-9.]+)(ms|µs|us|ns|s)", line)
    if m:
        ms.append(float(m.group(1)) * unit[m.group(2)])
if ms:
    print(f"operations towards the dead rank that failed: {len(ms)}; post to error completion: "
          f"median {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms")
EOF
[ "$fail" = 0 ]
