#!/bin/sh
# Builds the Debian package, target/debian/airlock_VERSION-1_ARCH.deb:
# the release binary, its manual pages and shell completions (generated
# from the binary itself), the systemd unit, the commented conffile
# /etc/airlock/airlock.toml and the maintainer scripts. Installs the
# packaging tool, cargo-deb (pinned), into target/tools when missing.
# Extra arguments go to cargo-deb.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
cargo_deb="$root/target/tools/bin/cargo-deb"
if [ ! -x "$cargo_deb" ] || [ "$("$cargo_deb" --version 2>/dev/null)" != "cargo-deb 3.6.0" ]; then
    echo "build.sh: installing cargo-deb 3.6.0 into target/tools (a few minutes, once)" >&2
    cargo install --locked --quiet --force --root "$root/target/tools" cargo-deb --version 3.6.0
fi

airlock="$target/release/airlock"
# AIRLOCK_PREBUILT=1: the release binary is already built (the package
# test, run by cargo itself, whose environment would make a nested build
# start over).
if [ "${AIRLOCK_PREBUILT:-}" != "1" ]; then
    cargo build --release -p airlock
fi
if [ ! -x "$airlock" ]; then
    echo "build.sh: no $airlock; build it first (cargo build --release -p airlock)" >&2
    exit 1
fi

assets="$target/release/deb-assets"
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$airlock" man --dir "$assets/man"
gzip -9n "$assets"/man/*.1
"$airlock" completions bash >"$assets/completions/airlock"
"$airlock" completions zsh >"$assets/completions/_airlock"
"$airlock" completions fish >"$assets/completions/airlock.fish"

# --fast: the package is unpacked and packed again below.
deb=$("$cargo_deb" -p airlock --no-build --fast --output "$target/debian/" "$@" | tail -n 1)

# cargo-deb writes no md5sums; dpkg --verify and debsums check installed
# files against it. Conffiles are left out, as dh_md5sums does (dpkg
# keeps their sums itself).
unpacked=$(mktemp -d "$target/debian/.unpacked.XXXXXX")
trap 'rm -rf "$unpacked"' EXIT INT TERM
# mktemp made it 0700; it is the package's root directory.
chmod 0755 "$unpacked"
dpkg-deb -R "$deb" "$unpacked"
(
    cd "$unpacked"
    find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | LC_ALL=C sort |
        grep -vxF "$(sed 's|^/||' DEBIAN/conffiles)" |
        xargs -d '\n' md5sum >DEBIAN/md5sums
)
chmod 0644 "$unpacked/DEBIAN/md5sums"
dpkg-deb --root-owner-group -Zxz -b "$unpacked" "$deb" >/dev/null
echo "$deb"
