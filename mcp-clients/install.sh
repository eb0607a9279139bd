#!/bin/sh
# Installs the third-party MCP clients the tests drive (see README.md here)
# into DIR (default: target/mcp-clients). Does nothing when DIR already
# holds this exact package set; reinstalls when package.json or
# package-lock.json change. Needs npm (Node 20 or newer on PATH); the
# clients themselves run on the Node 22 the packages bring along.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-"$here/../target/mcp-clients"}

if ! command -v npm >/dev/null 2>&1; then
    echo "install.sh: npm is not on PATH; install Node.js 20 or newer (it brings npm)" >&2
    exit 127
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
stamp=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)

install() {
    if [ -d "$dir/node_modules" ] && [ "$(cat "$dir/.installed" 2>/dev/null)" = "$stamp" ]; then
        return 0
    fi
    echo "install.sh: installing the MCP conformance suite, the Inspector and oidc-provider into $dir (npm, about 10 s)" >&2
    rm -f "$dir/.installed"
    cp "$here/package.json" "$here/package-lock.json" "$dir/"
    # `npm ci` rejects this lock file as out of sync: it was written on
    # Linux and lacks a Windows-only optional package of the Inspector.
    # `install` honours the lock file's pinned versions all the same.
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
    echo "$stamp" >"$dir/.installed"
}

# Two test processes may start this at once; the lock makes the second wait.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$dir/.lock"
    flock 9
fi
install
