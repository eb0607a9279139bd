#!/bin/sh
# Makes target/test-venv (or DIR) with the pinned Python packages some
# tests use as independent parsers and clients (requirements-test.txt):
# the Prometheus project's own text-format parser, for the metrics test,
# and the official MCP Python SDK, for the approvals test.
# Does nothing when the venv already holds exactly this package set.
# Needs python3 (3.8 or newer) with its venv module, and PyPI.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-"$here/../target/test-venv"}
python=${PYTHON:-python3}

if ! command -v "$python" >/dev/null 2>&1; then
    echo "test-venv.sh: $python is not on PATH; install Python 3 (Debian: apt-get install python3 python3-venv)" >&2
    exit 127
fi

mkdir -p "$(dirname "$dir")"
stamp=$(sha256sum "$here/requirements-test.txt" | cut -d' ' -f1)

# Two test processes may start this at once: the second waits here.
if command -v flock >/dev/null 2>&1; then
    exec 9<"$0"
    flock 9
fi

if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.installed" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
echo "test-venv.sh: making $dir with the pinned test packages (PyPI, a few seconds)" >&2
rm -rf "$dir"
if ! "$python" -m venv "$dir" >&2; then
    echo "test-venv.sh: python3 -m venv failed; install the venv module (Debian: apt-get install python3-venv)" >&2
    exit 1
fi
"$dir/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements-test.txt" >&2
echo "$stamp" >"$dir/.installed"
