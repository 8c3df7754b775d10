#!/usr/bin/env bash
# The server tests: `wgemma serve` on 127.0.0.1 driven by the official `openai` Python client
# (tools/server_test/test_server.py). Installs the client from PyPI into a venv
# (WGEMMA_SERVER_VENV, default target/server-test-venv) the first time, and Chromium with
# playwright-core (tools/browser) for the chat page's test. The server is
# stopped by the script, also on failure; the whole run is bounded by a timeout. Then the
# agent-framework suite (tools/agents_test/test.sh).
#   WGEMMA_CLI=target/debug/wgemma tools/server_test/test.sh [test_server.py args...]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${WGEMMA_SERVER_VENV:-target/server-test-venv}"
cli="${WGEMMA_CLI:-target/debug/wgemma}"
if [ ! -x "$cli" ]; then
    echo "server tests: expected the wgemma binary at $cli (cargo build -p wgemma-cli), found none" >&2
    exit 1
fi
# The chat page's test drives headless Chromium with tools/browser's playwright-core.
source tools/browser/toolchain.sh
ensure_chromium
ensure_playwright
if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
    echo "server tests: installing the openai client into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r tools/server_test/requirements.txt
fi
timeout 900 "$venv/bin/python" tools/server_test/test_server.py --wgemma "$cli" "$@"
# The agent-framework suite (tools/agents_test) follows, on servers of its own; a run that
# picks server checks (`--only ...`) is that run alone.
if [ $# -eq 0 ]; then
    WGEMMA_CLI="$cli" tools/agents_test/test.sh
fi
