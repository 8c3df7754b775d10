#!/usr/bin/env bash
# Builds the browser package: crates/wgemma-web for wasm32-unknown-unknown (release, std
# built from source), then `wasm-bindgen --target web` into web/pkg (ES module + .d.ts).
# Installs the toolchain first when it is missing (see toolchain.sh).
set -euo pipefail
source "$(dirname "$0")/toolchain.sh"
cd "$repo_root"
ensure_wasm_rust
ensure_wasm_bindgen
PATH=/usr/bin:$PATH RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$WASM_TARGET_DIR" \
    "$WASM_CARGO" build --release --locked -Zbuild-std=std,panic_abort \
    --target wasm32-unknown-unknown -p wgemma-web
"$WASM_BINDGEN" --target web --out-dir web/pkg \
    "$WASM_TARGET_DIR/wasm32-unknown-unknown/release/wgemma_web.wasm"
raw=$(stat -c %s web/pkg/wgemma_web_bg.wasm)
gz=$(gzip -9 -c web/pkg/wgemma_web_bg.wasm | wc -c)
echo "browser: web/pkg/wgemma_web_bg.wasm $raw bytes ($gz gzip -9)" >&2
