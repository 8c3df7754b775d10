#!/usr/bin/env bash
# The real-browser tests (test.mjs): installs what is missing (Debian's wasm-capable Rust,
# wasm-bindgen-cli, chromium, playwright-core, webgpu), builds the wasm package and the
# native CLI whose tokens the browser must reproduce, then drives headless Chromium; then
# the same package on Dawn under Node (dawn/run.mjs).
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$repo_root"
ensure_chromium
ensure_playwright
tools/browser/build.sh
# The native build the browser must agree with. `./dev test` passes the binary its
# `cargo test` has just built (the CLI's own tests use it); alone, build the release one.
cli="${WGEMMA_CLI:-}"
if [ -z "$cli" ]; then
    cargo build --release --locked -p wgemma-cli
    cli=target/release/wgemma
fi
node tools/browser/test.mjs --cli "$cli"
# The wasm package on Dawn (Chrome's WebGPU under Node, the npm package `webgpu`): where
# Dawn offers an adapter, the shipped pair's demo and a tiny bench must give the native
# CLI's greedy tokens. Where it offers none (Dawn refuses old software Vulkan drivers such
# as Mesa 22's lavapipe), the package must still load under Node and refuse with
# WebGpuUnavailable, and the GPU part is reported as skipped.
status=0
timeout 900 node tools/browser/dawn/run.mjs --cli "$cli" \
    --demo models/kjv-pair.wgemma --demo-tokens 24 --demo-runs 1 \
    --bench-synthetic tiny --bench-options '{"nPrompt":16,"nGen":8,"repetitions":1}' || status=$?
case $status in
    0) echo "dawn: passed (the demo and a tiny bench on Dawn give the native tokens)" ;;
    2) echo "dawn: SKIPPED the GPU part: Dawn offered no adapter on this machine (the line above says why); the wasm package loaded under Node and refused with WebGpuUnavailable" ;;
    *) echo "dawn: FAILED (exit $status)" >&2; exit 1 ;;
esac
