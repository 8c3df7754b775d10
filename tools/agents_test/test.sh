#!/usr/bin/env bash
# The agent-framework suite (tools/agents_test/run_agents.py): five client libraries' day-one
# code against `wgemma serve` over the shipped pair. Installs the libraries from PyPI, every
# package pinned, into two venvs the first time (or when a requirements file changes):
# WGEMMA_AGENTS_VENV (default target/agents-venv: openai, langchain-openai, pydantic-ai-slim,
# openai-agents) and WGEMMA_INSTRUCTOR_VENV (default target/agents-instructor-venv:
# instructor, whose pins conflict with the others'). The servers are stopped by the script,
# also on failure; run_agents.py bounds each script (420 s) and the suite (840 s), and a
# timeout here backs that up.
#   WGEMMA_CLI=target/debug/wgemma tools/agents_test/test.sh [run_agents.py args...]
set -euo pipefail
cd "$(dirname "$0")/../.."
cli="${WGEMMA_CLI:-target/debug/wgemma}"
if [ ! -x "$cli" ]; then
    echo "agent suite: expected the wgemma binary at $cli (cargo build -p wgemma-cli), found none" >&2
    exit 1
fi

# A venv at $1 holding exactly the pins of $2 (a copy of the file marks what it holds).
ensure_venv() {
    local venv="$1" requirements="$2"
    if ! cmp -s "$requirements" "$venv/installed-requirements.txt" 2>/dev/null; then
        echo "agent suite: installing $requirements into $venv" >&2
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
        cp "$requirements" "$venv/installed-requirements.txt"
    fi
}
venv="${WGEMMA_AGENTS_VENV:-target/agents-venv}"
instructor_venv="${WGEMMA_INSTRUCTOR_VENV:-target/agents-instructor-venv}"
ensure_venv "$venv" tools/agents_test/requirements.txt
ensure_venv "$instructor_venv" tools/agents_test/requirements-instructor.txt
exec timeout 900 "$venv/bin/python" tools/agents_test/run_agents.py --wgemma "$cli" \
    --python "$venv/bin/python" --instructor-python "$instructor_venv/bin/python" "$@"
