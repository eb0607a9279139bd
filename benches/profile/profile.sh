#!/bin/sh
# Profiles a script's run in the JavaScript guest with `perf` and prints
# where the guest's time went, by area of the engine (guest_profile.py).
# Needs `perf` (Debian: linux-perf) and a built `airlock`.
#
#   benches/profile/profile.sh benches/compute/sort_20k_comparator.js
#
# Samples the whole `airlock exec` process at 10 kHz; only samples whose
# stack passes through the guest count, so startup is left out.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
airlock=${AIRLOCK:-"${CARGO_TARGET_DIR:-$root/target}/release/airlock"}
script=$1
data=$(mktemp "${TMPDIR:-/tmp}/airlock-perf.XXXXXX")
trap 'rm -f "$data"' EXIT INT TERM
AIRLOCK_LOG=error perf record -q -F 10000 -g -o "$data" -- "$airlock" exec "$script" > /dev/null
perf script -i "$data" 2> /dev/null | python3 "$here/guest_profile.py"
