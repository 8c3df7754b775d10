#!/usr/bin/env bash
# The real-browser tests (test.mjs): installs what is missing (Debian's wasm-capable Rust,
# wasm-bindgen-cli, chromium, playwright-core), builds the wasm package and the native CLI
# whose tokens the browser must reproduce, then drives headless Chromium.
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$repo_root"
ensure_chromium
ensure_playwright
tools/browser/build.sh
# The test profile: `cargo test` has built this binary already (the CLI's own tests use it).
cargo build --locked --profile test -p wgemma-cli --bin wgemma
node tools/browser/test.mjs --cli target/debug/wgemma
