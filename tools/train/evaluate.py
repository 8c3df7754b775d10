#!/usr/bin/env python3
"""Acceptance of the trained drafter in HF transformers (the reference), on held-out text.

    python tools/train/evaluate.py --pair DIR --data DIR [--q4] [--prompts 16] [--new 64]

DIR (--pair) holds target/ and assistant/ (train.py's output); --data is prepare.py's output
(held_out.txt, tokenizer.json). Prompts: the first 24 tokens (after <bos>) of held-out
chapters, spread over the held-out set. For k = 1..4 drafts per round, greedy and at
temperature 0.8 (seeded), runs HF's assisted generation (SinglePositionMultiTokenCandidateGenerator,
constant k) and records every round's accepted count. --q4 first applies the project's Q4
contract (tools/golden: group 32, f16 scales) to both models, i.e. evaluates the weights the
shipped artifact holds. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM, GenerationConfig
from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
from generate import q4_apply_  # noqa: E402  (the Q4 contract the fixtures use)

PROMPT_TOKENS = 24


def prompts(data: Path, n: int) -> list[list[int]]:
    tok = Tokenizer.from_file(str(data / "tokenizer.json"))
    chapters = (data / "held_out.txt").read_text().split("\n\n")
    picks = np.linspace(0, len(chapters) - 1, n).round().astype(int)
    bos = tok.token_to_id("<bos>")
    return [[bos] + tok.encode(chapters[i]).ids[:PROMPT_TOKENS] for i in picks]


class Rounds:
    """Records (drafts, accepted) of every verify round of HF's assisted decoding; rounds
    without drafts (the prefill, the last token) are left out."""

    def __init__(self):
        self.rounds: list[tuple[int, int]] = []
        self._drafts = 0
        G = SinglePositionMultiTokenCandidateGenerator
        self._orig = (G.get_candidates, G.update_candidate_strategy)

    def __enter__(self):
        rec = self
        get, upd = self._orig

        def get_candidates(gen_self, input_ids, *a, **kw):
            cand, logits = get(gen_self, input_ids, *a, **kw)
            rec._drafts = cand.shape[1] - input_ids.shape[1]
            return cand, logits

        def update(gen_self, input_ids, scores, num_matches):
            if rec._drafts:
                rec.rounds.append((rec._drafts, int(num_matches)))
            return upd(gen_self, input_ids, scores, num_matches)

        G = SinglePositionMultiTokenCandidateGenerator
        G.get_candidates, G.update_candidate_strategy = get_candidates, update
        return self

    def __exit__(self, *exc):
        G = SinglePositionMultiTokenCandidateGenerator
        G.get_candidates, G.update_candidate_strategy = self._orig
        return False


@torch.no_grad()
def run(target, assistant, prompt: list[int], new: int, k: int | None, temperature: float, seed: int):
    x = torch.tensor([prompt])
    cfg = GenerationConfig(
        do_sample=temperature > 0,
        temperature=temperature if temperature > 0 else None,
        top_k=0 if temperature > 0 else None,
        top_p=1.0 if temperature > 0 else None,
        max_new_tokens=new,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=2,
        use_cache=True,
    )
    target.generation_config.eos_token_id = None
    kw = {}
    if k is not None:
        assistant.generation_config.num_assistant_tokens = k
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        kw["assistant_model"] = assistant
    torch.manual_seed(seed)
    out = target.generate(x, attention_mask=torch.ones_like(x), generation_config=cfg, **kw)
    return out[0, len(prompt) :].tolist()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--q4", action="store_true")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--temperatures", default="0,0.8")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a shared 2-core machine: more threads only spin
    target = Gemma4ForCausalLM.from_pretrained(args.pair / "target", dtype=torch.float32, attn_implementation="eager").eval()
    assistant = Gemma4AssistantForCausalLM.from_pretrained(args.pair / "assistant", dtype=torch.float32, attn_implementation="eager").eval()
    if args.q4:
        q4_apply_(target)
        q4_apply_(assistant)
    ps = prompts(args.data, args.prompts)
    result = dict(weights="q4 (group 32)" if args.q4 else "bf16", prompts=len(ps), prompt_tokens=PROMPT_TOKENS, new_tokens=args.new, runs=[])
    for temp in [float(t) for t in args.temperatures.split(",")]:
        plain = [run(target, assistant, p, args.new, None, temp, 1000 + i) for i, p in enumerate(ps)]
        for k in (1, 2, 3, 4):
            with Rounds() as r:
                spec = [run(target, assistant, p, args.new, k, temp, 1000 + i) for i, p in enumerate(ps)]
            drafts, acc = np.asarray(r.rounds).T
            row = dict(
                temperature=temp,
                k=k,
                rounds=int(acc.size),
                acceptance=round(float(acc.sum() / drafts.sum()), 4),
                tokens_per_round=round(float((acc + 1).mean()), 3),
            )
            if temp == 0:
                row["identical_to_plain"] = spec == plain
            result["runs"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
