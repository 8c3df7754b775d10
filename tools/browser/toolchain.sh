# Sourced by build.sh and test.sh: the wasm32 toolchain of docs/browser.md, installed when
# missing (Debian's rustc-web builds std for wasm32 from source; rustup here has no wasm32
# target). Sets WASM_CARGO, WASM_BINDGEN and WASM_TARGET_DIR.

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
    echo "browser: installing $* with apt-get" >&2
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

# Debian's cargo/rustc 1.96 with std's sources, and the linker rust-lld points at.
ensure_wasm_rust() {
    if [ ! -x /usr/bin/cargo ] || [ ! -d /usr/lib/rustlib/src/rust/library ] \
        || [ ! -e "$(readlink -f /usr/bin/rust-lld 2>/dev/null || echo /nonexistent)" ]; then
        apt_install rustc-web cargo-web rust-web-src libstd-rust-web-dev lld-22
    fi
    WASM_CARGO=/usr/bin/cargo
}

# wasm-bindgen-cli must be the exact version of the wasm-bindgen crate in Cargo.lock.
ensure_wasm_bindgen() {
    local want
    want="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' "$repo_root/Cargo.lock")"
    WASM_BINDGEN="${CARGO_HOME:-$HOME/.cargo}/bin/wasm-bindgen"
    if [ ! -x "$WASM_BINDGEN" ] || [ "$("$WASM_BINDGEN" --version | awk '{print $2}')" != "$want" ]; then
        echo "browser: installing wasm-bindgen-cli $want (cargo install, several minutes)" >&2
        # Not --locked: one of its locked dependencies is not on the reachable crates index.
        cargo install -q wasm-bindgen-cli --version "$want" >&2
    fi
}

ensure_chromium() {
    [ -x /usr/bin/chromium ] || apt_install chromium
}

# tools/browser's npm packages: playwright-core (drives Chromium) and webgpu (dawn.node).
ensure_playwright() {
    if [ ! -d "$repo_root/tools/browser/node_modules/playwright-core" ] \
        || [ ! -d "$repo_root/tools/browser/node_modules/webgpu" ]; then
        (cd "$repo_root/tools/browser" && npm ci --silent --no-audit --no-fund >&2)
    fi
}

# Its own target dir: Debian's cargo 1.96 and rustup's cargo must not share one.
WASM_TARGET_DIR="${WGEMMA_WASM_TARGET_DIR:-$repo_root/target/wasm}"
