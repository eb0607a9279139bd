#!/bin/sh
# Builds an .mcpb bundle (Claude Desktop's one-click install format) of
# Airlock for this machine's platform: the release binary plus
# manifest.json, packed by the MCPB CLI (npm @anthropic-ai/mcpb, run with
# npx; needs Node 18 or newer).
#
#   packaging/mcpb/build.sh [OUT_DIR]      # default: target/mcpb
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-"$root/target"}
out=${1:-"$target/mcpb"}

cargo build --release -p airlock --manifest-path "$root/Cargo.toml"
rm -rf "$out/bundle"
mkdir -p "$out/bundle/server"
cp "$here/manifest.json" "$out/bundle/manifest.json"
cp "$target/release/airlock" "$out/bundle/server/airlock"
npx --yes @anthropic-ai/mcpb@2.1.2 validate "$out/bundle/manifest.json"
npx --yes @anthropic-ai/mcpb@2.1.2 pack "$out/bundle" "$out/airlock.mcpb"
echo "built $out/airlock.mcpb: open it with Claude Desktop (Settings > Extensions) to install"
