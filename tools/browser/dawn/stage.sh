#!/usr/bin/env bash
# Stages the Dawn run for a GPU machine that has no Node and no network: builds the wasm
# package (tools/browser/build.sh), installs the `webgpu` npm package (dawn.node) and packs,
# xz-compressed, into .dawn/ at the repository root (ignored; carry it to the machine):
#   node.xz          this machine's node binary (the GPU machine has none)
#   libstdc++.so.6.xz  its C++ runtime, used there only if the machine's own is too old
#   webgpu/          the npm package's index.js and package.json, dawn.node.xz (linux-x64)
#   pkg.tar.xz       web/pkg: the wasm module and JS glue the demo page's worker runs
#   wgemma.xz        with an argument: that wgemma binary, stripped (50 MB -> 5 MB)
# The runner itself (tools/browser/dawn/*.mjs) and the shipped pair travel with the tree.
#   tools/browser/dawn/stage.sh [WGEMMA_BINARY]
# There: `bash tools/browser/dawn/device.sh [WGEMMA_BINARY]` (see docs/browser.md).
set -euo pipefail
source "$(dirname "$0")/../toolchain.sh"
cd "$repo_root"
tools/browser/build.sh
if [ ! -f tools/browser/node_modules/webgpu/dist/linux-x64/dawn.node ]; then
    (cd tools/browser && npm ci --silent --no-audit --no-fund >&2)
fi
out=.dawn
rm -rf "$out"
mkdir -p "$out/webgpu"
echo "dawn stage: compressing node, dawn.node, libstdc++ and web/pkg with xz (about a minute)" >&2
node_bin="$(readlink -f "$(command -v node)")"
libstdcxx="$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ { print $NF; exit }')"
xz -6 -T0 -c "$node_bin" > "$out/node.xz" &
xz -6 -T0 -c "$(readlink -f "$libstdcxx")" > "$out/libstdc++.so.6.xz" &
xz -6 -T0 -c tools/browser/node_modules/webgpu/dist/linux-x64/dawn.node > "$out/webgpu/dawn.node.xz" &
wait
cp tools/browser/node_modules/webgpu/index.js tools/browser/node_modules/webgpu/package.json "$out/webgpu/"
tar -C web -cJf "$out/pkg.tar.xz" pkg
if [ $# -ge 1 ]; then
    [ -x "$1" ] || { echo "dawn stage: $1: expected an executable wgemma binary, found none" >&2; exit 1; }
    strip -o "$out/wgemma" "$1"
    xz -6 -T0 "$out/wgemma"
fi
{
    echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
    echo "node $(node --version), webgpu $(node -p 'require("./tools/browser/node_modules/webgpu/package.json").version')"
    echo "staged $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out/STAGED"
total=$(du -sb "$out" | cut -f1)
du -b "$out"/* "$out"/webgpu/* | sort -n >&2
echo "dawn stage: $out is $((total / 1024 / 1024)) MiB ($total bytes); carry it with .gl" >&2
limit=$((40 * 1024 * 1024))
if [ "$total" -gt "$limit" ]; then
    echo "dawn stage: expected at most 40 MiB (room for the rest of a 64 MiB carry), found $total bytes" >&2
    exit 1
fi
