#!/usr/bin/env python3
"""The shipped pair's acceptance and speedup in wgemma itself, on held-out text.

    python tools/train/bench_pair.py --data DIR [--cli target/release/wgemma] [--prompts 8] [--new 48]

For each held-out prompt (evaluate.py's: the first 24 tokens of held-out chapters, as text),
k = 1..4 drafts per round and temperature 0 and 0.8, runs `wgemma demo --prompt TEXT
--draft-tokens k --temperature T --json` (one process: load, warm-up of both paths, then
plain and speculative decoding of --new tokens) and sums drafted / accepted / rounds and the
decode times. Temperature 0.8 uses wgemma's lossless speculative sampling (drafts sampled from
the assistant's distribution), unlike HF's MTP generator (see speculative.rs). Prints one
JSON object and a markdown table; speedup = total plain decode time / total speculative
decode time over the same prompts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import prompts  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--cli", default="target/release/wgemma")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--temperatures", default="0,0.8")
    args = ap.parse_args()
    tok = Tokenizer.from_file(str(args.data / "tokenizer.json"))
    texts = [tok.decode(p[1:]) for p in prompts(args.data, args.prompts)]
    rows, adapter = [], None
    for temp in [float(t) for t in args.temperatures.split(",")]:
        for k in (1, 2, 3, 4):
            acc = dict(drafted=0, accepted=0, rounds=0, spec_tokens=0, plain_s=0.0, spec_s=0.0, identical=0)
            for i, text in enumerate(texts):
                cmd = [args.cli, "demo", "--prompt", text, "--draft-tokens", str(k), "--temperature", str(temp),
                       "--seed", str(1000 + i), "--max-new-tokens", str(args.new), "--json"]
                d = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
                adapter = d["adapter"]
                p, s = d["plain"]["stats"], d["speculative"]["stats"]
                acc["drafted"] += s["drafted"]
                acc["accepted"] += s["accepted"]
                acc["rounds"] += s["rounds"]
                acc["spec_tokens"] += s["generated_tokens"] - 1
                # decode time = the tokens after the first over their rate
                acc["plain_s"] += (p["generated_tokens"] - 1) / p["decode_tokens_per_s"]
                acc["spec_s"] += (s["generated_tokens"] - 1) / s["decode_tokens_per_s"]
                acc["identical"] += int(d["identical"])
            row = dict(
                temperature=temp,
                k=k,
                rounds=acc["rounds"],
                acceptance=round(acc["accepted"] / acc["drafted"], 4),
                tokens_per_round=round(acc["spec_tokens"] / acc["rounds"], 3),
                speedup=round(acc["plain_s"] / acc["spec_s"], 3),
                identical_runs=f"{acc['identical']}/{len(texts)}",
            )
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(dict(adapter=adapter, prompts=len(texts), new_tokens=args.new, runs=rows), indent=1))
    print("| temperature | k | acceptance | tokens/round | speedup (decode) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['temperature']} | {r['k']} | {r['acceptance']:.3f} | {r['tokens_per_round']:.2f} | x{r['speedup']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
