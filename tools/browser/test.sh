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
# The native build the browser must agree with. `./dev test` passes the binary its
# `cargo test` has just built (the CLI's own tests use it); alone, build the release one.
cli="${WGEMMA_CLI:-}"
if [ -z "$cli" ]; then
    cargo build --release --locked -p wgemma-cli
    cli=target/release/wgemma
fi
node tools/browser/test.mjs --cli "$cli"
