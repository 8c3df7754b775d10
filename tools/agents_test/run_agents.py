#!/usr/bin/env python3
"""The agent-framework suite: day-one code of five client libraries (openai, langchain-openai,
instructor, pydantic-ai-slim, openai-agents) run unchanged against `wgemma serve`.

Starts `wgemma serve` over the shipped pair (`models/kjv-pair.wgemma`, a byte-level BPE
vocabulary, which constrained decoding needs) on a free 127.0.0.1 port: one server batching
4 sequences for the cases, and one with a single sequence and a queue of one for the
overload case. Then runs every `cases/*.py` script (one framework behaviour each) a few at a
time (the server batches them), each under its venv's Python (`instructor_*.py`: the
instructor venv, whose pins conflict with the others') and a time limit (420 s a script, 840 s
the whole suite: a script still running then is stopped, one not started is reported not
run), and reports each as
ok or FAIL with its output. The pair is a tiny model trained on the King James Bible: the
cases check protocol behaviour (schemas honoured, calls parsed, errors, retries), which
forced calls and schemas make certain, never the quality of the text.

Each script gets the server in WGEMMA_BASE_URL (ending /v1), WGEMMA_API_KEY and WGEMMA_MODEL,
and the overload server in WGEMMA_BUSY_BASE_URL; it exits 0 when its checks pass.

    run_agents.py --wgemma target/debug/wgemma --python VENV/bin/python
                  --instructor-python VENV2/bin/python [--only NAME,...] [--jobs 3]
"""
import argparse
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tools/server_test"))
from test_server import KEY, Server  # noqa: E402  (the server tests' launcher)

CASE_TIMEOUT = 420  # seconds, any one script (a loaded 2-core machine)
SUITE_TIMEOUT = 840  # seconds, the whole suite: a script still running then is stopped
MODEL = "kjv"


def run_case(script, python, env, deadline):
    t = time.time()
    limit = min(CASE_TIMEOUT, deadline - t)
    if limit <= 0:
        return script.stem, False, 0.0, f"not run: the suite's {SUITE_TIMEOUT} s were spent"
    try:
        p = subprocess.run([python, str(script)], env=env, capture_output=True, text=True,
                           timeout=limit, cwd=ROOT)
        ok, out = p.returncode == 0, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        ok, out = False, f"timed out after {limit:.0f} s\n{e.stdout or ''}{e.stderr or ''}"
    return script.stem, ok, time.time() - t, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wgemma", required=True)
    ap.add_argument("--python", required=True, help="the agents venv's python")
    ap.add_argument("--instructor-python", required=True, help="the instructor venv's python")
    ap.add_argument("--only", default="", help="comma-separated parts of script names to run")
    ap.add_argument("--jobs", type=int, default=3, help="scripts run at once")
    args = ap.parse_args()
    only = [o for o in args.only.split(",") if o]
    scripts = sorted(s for s in (HERE / "cases").glob("*.py")
                     if s.name != "common.py" and (not only or any(o in s.stem for o in only)))
    if not scripts:
        sys.exit(f"agent suite: no case matches {args.only!r}")
    pair = ROOT / "models/kjv-pair.wgemma"
    t0 = time.time()
    # The alias is the name docs/serving.md's examples give (its serve command's model).
    servers = [Server(args.wgemma, pair, ["--parallel", "4", "--alias", "gemma-4-e2b-it"], context=2048,
                      name=MODEL)]
    try:
        servers.append(Server(args.wgemma, pair, ["--parallel", "1", "--queue", "1"], context=512, name=MODEL))
        print(f"agent suite: servers up at {servers[0].base} and {servers[1].base} (busy) in "
              f"{time.time() - t0:.1f} s", flush=True)
        env = dict(os.environ, WGEMMA_BASE_URL=servers[0].base + "/v1", WGEMMA_API_KEY=KEY,
                   WGEMMA_MODEL=MODEL, WGEMMA_BUSY_BASE_URL=servers[1].base + "/v1",
                   PYTHONPATH=str(HERE / "cases"), PYTHONDONTWRITEBYTECODE="1")
        python_of = lambda s: args.instructor_python if s.stem.startswith("instructor") else args.python
        failed = []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            deadline = t0 + SUITE_TIMEOUT
            runs = pool.map(lambda s: run_case(s, python_of(s), env, deadline), scripts)
            for name, ok, seconds, out in runs:
                print(f"{'ok  ' if ok else 'FAIL'} {name} ({seconds:.1f} s)", flush=True)
                if not ok:
                    failed.append(name)
                    print("    " + out.strip().replace("\n", "\n    ")[-6000:], flush=True)
    finally:
        for server in servers:
            rc = server.stop()
            if rc not in (0, -15):
                print(f"server {server.base} exited {rc}; its last log lines:\n"
                      + "".join(server.stderr[-20:]), flush=True)
    print(f"agent suite: {len(scripts) - len(failed)} passed, {len(failed)} failed "
          f"in {time.time() - t0:.1f} s")
    if failed:
        print("failed: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
