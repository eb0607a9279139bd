#!/bin/sh
# Airlock and ProxmoxMCP-Plus side by side over stdio. Needs Python 3.11+
# and PyPI access; builds Airlock, makes a venv in target/peer-venv with
# the pinned packages and writes target/peer/*:
# - same-cluster.json: both against one `airlock sim`, values checked
#   (same_cluster.py);
# - as-shipped.json, no-output-validation.json: dispatch overhead against
#   ProxmoxMCP-Plus's stub tool, with and without the Python SDK's
#   output-schema check (compare.py);
# - result-cost.jsonl: what a result costs an agent (result_cost.py);
# - call-cost.jsonl: CPU and context switches per backend call
#   (call_cost.py);
# - compute.json: data work in the sandbox, Airlock's JavaScript against
#   the same work in ProxmoxMCP-Plus's Monty (compute.py);
# - ts-cost.jsonl: what an output schema costs the TypeScript SDK
#   (ts_cost.cjs; only where npm is on PATH).
#
#   benches/peer/run.sh [ROUNDS]        # default 100
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-"$root/target"}
rounds=${1:-100}
python=${PYTHON:-python3}

"$python" -c 'import sys; assert sys.version_info >= (3, 11), "ProxmoxMCP-Plus needs Python 3.11 or newer"'
cargo build --release -p airlock --manifest-path "$root/Cargo.toml"
venv="$target/peer-venv"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
mkdir -p "$target/peer"
cd "$target/peer"
"$venv/bin/python" "$here/same_cluster.py" --airlock "$target/release/airlock" --python "$venv/bin/python" \
    --rounds "$rounds" --json "$target/peer/same-cluster.json"
"$venv/bin/python" "$here/compare.py" --airlock "$target/release/airlock" --python "$venv/bin/python" \
    --rounds "$rounds" --json "$target/peer/as-shipped.json"
"$venv/bin/python" "$here/compare.py" --airlock "$target/release/airlock" --python "$venv/bin/python" \
    --rounds "$rounds" --skip-output-validation --json "$target/peer/no-output-validation.json"
"$venv/bin/python" "$here/compute.py" --airlock "$target/release/airlock" --python "$venv/bin/python" \
    --json "$target/peer/compute.json"
# What a backend call costs the server (CPU and context switches).
"$venv/bin/python" "$here/call_cost.py" "$target/release/airlock" > "$target/peer/call-cost.jsonl"
# What a result costs an agent (bytes, and `1+1` against a ping).
"$venv/bin/python" "$here/result_cost.py" "$target/release/airlock" > "$target/peer/result-cost.jsonl"
if command -v npm >/dev/null 2>&1; then
    "$root/mcp-clients/install.sh" "$target/mcp-clients"
    AIRLOCK_MCP_CLIENTS="$target/mcp-clients" node "$here/ts_cost.cjs" "$target/release/airlock" > "$target/peer/ts-cost.jsonl"
fi
