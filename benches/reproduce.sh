#!/bin/sh
# Every number in docs/PERFORMANCE.md, in one run: `airlock bench` (with
# the epoch/fuel comparison, and the full catalog when the PVE schema is
# at ../shared/pve-apidata.json or $AIRLOCK_PVE_APIDATA), the criterion
# benches, and the side by side with ProxmoxMCP-Plus (needs Python 3.11+
# and PyPI). Outputs: docs/perf/ and target/criterion/, target/peer/.
#
#   benches/reproduce.sh [PEER_ROUNDS]      # default 50
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
apidata=${AIRLOCK_PVE_APIDATA:-../shared/pve-apidata.json}
set -- "${1:-50}"
extra=""
if [ -f "$apidata" ]; then
    extra="--pve-apidata $apidata"
fi
cargo run --release -p airlock -- bench --fuel $extra \
    --json docs/perf/airlock-bench.json --svg docs/perf/latency.svg | tee docs/perf/airlock-bench.txt
cargo bench -p airlock-benches
benches/peer/run.sh "$1"
