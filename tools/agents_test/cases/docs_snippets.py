"""The README's and docs/serving.md's examples run as written: every `curl` command of their
sh blocks, and their python blocks in order in one namespace per file (as a reader pastes
them one after the other), against the server under test: KEY is its API key and
127.0.0.1:8080 its address. A curl must answer JSON without an error; a python block must
run without raising."""
import contextlib
import io
import json
import os
import pathlib
import re
import subprocess
import urllib.parse

from common import API_KEY, BASE_URL

ROOT = pathlib.Path(__file__).resolve().parents[3]
address = urllib.parse.urlparse(BASE_URL).netloc


def commands(sh):
    """The curl command of an sh block (the block without its `wgemma` commands, which
    start the server that runs already), or None when it has none."""
    if "curl " not in sh:
        return None
    kept, skipping = [], False
    for line in sh.splitlines():
        skipping = line.startswith("wgemma ") or (skipping and kept_continues)
        kept_continues = line.rstrip().endswith("\\")
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


os.environ["KEY"] = API_KEY  # the python blocks read it as a reader's shell has it
ran = []
for doc in ["README.md", "docs/serving.md"]:
    text = (ROOT / doc).read_text()
    namespace = {}
    for lang, block in re.findall(r"```(sh|python)\n(.*?)```", text, re.S):
        block = block.replace("127.0.0.1:8080", address)
        if lang == "sh":
            cmd = commands(block)
            if cmd is None:
                continue
            p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=180,
                               env=dict(os.environ, KEY=API_KEY))
            assert p.returncode == 0, (doc, cmd, p.stderr)
            answer = json.loads(p.stdout)
            assert "error" not in answer and answer.get("choices"), (doc, cmd, answer)
            ran.append(f"{doc}: {cmd.strip()[:60]}")
        else:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(block, f"{doc} python block", "exec"), namespace)
            ran.append(f"{doc}: python block {block.splitlines()[0][:50]}")
assert len(ran) >= 4, ran
print("ok:", *ran, sep="\n  ")
