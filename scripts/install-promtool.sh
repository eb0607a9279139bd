#!/bin/sh
# Prints the path of a promtool binary, for the test that checks
# /metrics with `promtool check metrics` (host/tests/metrics.rs). Uses
# one on PATH when there is one; otherwise takes it out of Debian's
# `prometheus` package, downloaded with `apt-get download` and unpacked
# with `dpkg-deb -x` into the directory given as $1 (kept there for the
# next run). Installs nothing: Debian's package would also install and
# start a Prometheus server, which no test needs.
set -eu

if command -v promtool >/dev/null 2>&1; then
    command -v promtool
    exit 0
fi
dir=${1:?usage: install-promtool.sh DIR}
found="$dir/usr/bin/promtool"
if [ -x "$found" ]; then
    echo "$found"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo "install-promtool.sh: no promtool, and no apt-get and dpkg-deb to take it from Debian's prometheus package; install promtool (Debian: apt-get install prometheus)" >&2
    exit 127
fi
mkdir -p "$dir"
work=$(mktemp -d "$dir/download.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "install-promtool.sh: downloading Debian's prometheus package for its promtool (about 19 MB, once)" >&2
if ! (cd "$work" && apt-get download prometheus >&2); then
    # Package lists may be missing or stale on a fresh machine.
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update >&2
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n apt-get update >&2
    fi
    (cd "$work" && apt-get download prometheus >&2)
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$dir/usr/bin"
mv "$work/root/usr/bin/promtool" "$found"
echo "$found"
