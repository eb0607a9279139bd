#!/usr/bin/env bash
# Runs every cargo-fuzz target (or the ones named) for SECONDS each, after
# replaying the crash inputs kept in fuzz/regressions/. Installs cargo-fuzz
# into target/tools on first use; builds on the stable toolchain without a
# sanitizer (`-s none`: the code under test is safe Rust, so libFuzzer's
# own checks — panics, timeouts, memory blow-ups — are what can fail).
#
#   fuzz/run.sh 10                    # the short run the test suite does
#   fuzz/run.sh 3600 template abi     # a longer run of two targets
#
# A crash leaves its input in target/fuzz-artifacts/<target>/ and the
# script exits non-zero; copy the input to fuzz/regressions/<target>/ once
# it is fixed so it is replayed forever.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-10}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(abi arguments pve_schema upid template audit_verify json_budget)
fi

cargo_fuzz="$root/target/tools/bin/cargo-fuzz"
if [ ! -x "$cargo_fuzz" ]; then
  echo "fuzz: installing cargo-fuzz 0.13.2 into target/tools" >&2
  cargo install --locked --quiet --root "$root/target/tools" cargo-fuzz --version 0.13.2
fi

cd "$root/fuzz"
build=(-s none -O --target-dir "$root/target/fuzz")
"$cargo_fuzz" build "${build[@]}" >&2

for t in "${targets[@]}"; do
  artifacts="$root/target/fuzz-artifacts/$t"
  corpus="$root/target/fuzz-corpus/$t"
  mkdir -p "$artifacts" "$corpus"
  regressions=("$root/fuzz/regressions/$t"/*)
  if [ -e "${regressions[0]}" ]; then
    echo "fuzz: $t: replaying ${#regressions[@]} regression input(s)" >&2
    "$cargo_fuzz" run "${build[@]}" "$t" "${regressions[@]}" -- \
      -artifact_prefix="$artifacts/" -timeout=10 -rss_limit_mb=2048 >&2
  fi
  echo "fuzz: $t: ${seconds}s" >&2
  log="$artifacts/run-$$.log" # one per run: two runs may share the artifacts
  if ! "$cargo_fuzz" run "${build[@]}" "$t" "$corpus" "$root/fuzz/seeds/$t" -- \
      -max_total_time="$seconds" -dict="$root/fuzz/dicts/json.dict" \
      -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $t FAILED; the input is in $artifacts/" >&2
    exit 1
  fi
  grep -E "^Done|stat::number_of_executed_units|stat::peak_rss_mb" "$log" | sed "s/^/fuzz: $t: /" >&2
  rm -f "$log"
done
echo "fuzz: all ${#targets[@]} target(s) ran ${seconds}s each without a finding" >&2
