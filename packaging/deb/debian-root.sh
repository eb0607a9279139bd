#!/bin/sh
# Makes a clean Debian root for the install test, the way an operator's
# machine starts: debootstrap's minimal base (apt, dpkg, the essential
# packages) with what every Proxmox VE host has and the package uses:
# adduser and procps (its dependencies, so installing needs no network),
# systemd (to check the installed unit with) and man-db. Writes it as a
# tarball, OUT (default target/debian-root/bookworm-base.tar), and
# reuses that tarball when
# it is there: the root is made once per machine (1-3 minutes), and each
# test unpacks a fresh copy. Installs debootstrap with apt-get when
# missing. Needs root (debootstrap makes device nodes and chowns files).
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
suite=bookworm
packages=adduser,procps,systemd,man-db
# The name changes with what the root holds, so a changed list is made anew.
out="${1:-${CARGO_TARGET_DIR:-$root/target}/debian-root/$suite-$(echo "$packages" | cksum | cut -d' ' -f1).tar}"
mirror="${AIRLOCK_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [ -s "$out" ]; then
    echo "$out"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "debian-root.sh: debootstrap needs root" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "debian-root.sh: installing debootstrap (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2 ||
        { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2; }
fi

mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.root.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
echo "debian-root.sh: debootstrap $suite (minbase, $packages) into $work/root" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" >"$work/log" 2>&1 ||
    { tail -n 30 "$work/log" >&2; exit 1; }
# Downloaded packages are not part of a clean machine.
rm -rf "$work/root/var/cache/apt/archives/"*.deb
tar --numeric-owner -C "$work/root" -cf "$work/root.tar" .
mv "$work/root.tar" "$out"
echo "$out"
