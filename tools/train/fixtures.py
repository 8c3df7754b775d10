#!/usr/bin/env python3
"""Golden fixture of the TRAINED pair: HF transformers on the weights the shipped artifact
(models/kjv-pair.wgemma) holds, for crates/wgemma/tests/integration/trained.rs.

    python tools/train/fixtures.py --pair DIR --data DIR [--out crates/wgemma/tests/data/trained]

DIR (--pair): train.py's output (target/, assistant/, bfloat16). The weights are first given
the artifact's formats: the project's Q4 contract (tools/golden: group 32, f16 scales) on
every target Linear and embedding (the tied lm_head with it) and on every assistant Linear;
the assistant's lm_head (its tied embedding table, which the centroid head gathers rows of)
rounded to float16, as `wgemma convert` stores it. Then, float32 compute, eager attention:

  prompts   p0: `wgemma demo`'s prompt; p1: the first 150 tokens of a held-out chapter (longer
            than the sliding window, 128)
  logits    p0: next-token logits at every position of prompt + greedy continuation
  greedy    NEW_TOKENS tokens per prompt (HF generate, EOS disabled) with top-1 margins
  rounds    per prompt and k = 1..4 drafts per round (constant schedule): HF's assisted greedy
            generation, every round's input_len, drafts, accepted count (output == greedy)

Writes expected.json and logits.safetensors (float32) into --out; checks its own outputs by
recomputing them. Deterministic on one CPU thread.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
from generate import Recorder, greedy, margins, q4_apply_, q4_fake_quant, versions  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "crates" / "wgemma" / "tests" / "data" / "trained"
NEW_TOKENS = 24
DEMO_PROMPT = "And Jesus said unto them,"
LONG_PROMPT_TOKENS = 150


@torch.no_grad()
def artifact_formats_(target, assistant) -> dict:
    """The artifact's weight formats applied in place (quantise -> dequantise)."""
    info = {"target_q4": q4_apply_(target)}
    head = assistant.lm_head.weight  # tied: model.embed_tokens.weight
    a_q4 = {}
    for name, mod in sorted(assistant.named_modules()):
        if isinstance(mod, torch.nn.Linear) and mod.weight.data_ptr() != head.data_ptr():
            deq, q, _ = q4_fake_quant(mod.weight.detach().float().numpy())
            mod.weight.data.copy_(torch.from_numpy(deq))
            a_q4[name + ".weight"] = hashlib.sha256(deq.astype("<f4").tobytes()).hexdigest()
    f16 = head.detach().float().numpy().astype(np.float16).astype(np.float32)
    head.data.copy_(torch.from_numpy(f16))
    info["assistant_q4"] = a_q4
    info["assistant_f16"] = {"lm_head.weight (= model.embed_tokens.weight)": hashlib.sha256(f16.astype("<f4").tobytes()).hexdigest()}
    return info


def load(pair: Path):
    t = Gemma4ForCausalLM.from_pretrained(pair / "target", dtype=torch.float32, attn_implementation="eager").eval()
    a = Gemma4AssistantForCausalLM.from_pretrained(pair / "assistant", dtype=torch.float32, attn_implementation="eager").eval()
    return t, a


def prompts(data: Path) -> list[list[int]]:
    tok = Tokenizer.from_file(str(data / "tokenizer.json"))
    bos = tok.token_to_id("<bos>")
    chapters = (data / "held_out.txt").read_text().split("\n\n")
    long = next(c for c in chapters if len(tok.encode(c).ids) > LONG_PROMPT_TOKENS)
    return [[bos] + tok.encode(DEMO_PROMPT).ids, [bos] + tok.encode(long).ids[:LONG_PROMPT_TOKENS]]


@torch.no_grad()
def assisted_rounds(target, assistant, ids: list[int], k: int) -> tuple[list[int], list[dict]]:
    assistant.generation_config.num_assistant_tokens = k
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    with Recorder(assistant) as rec:
        out = greedy(target, ids, NEW_TOKENS, assistant=assistant)
    rounds = [{key: r[key] for key in ("input_len", "drafts", "accepted", "output_len")} for r in rec.rounds]
    return out, rounds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    target, assistant = load(args.pair)
    formats = artifact_formats_(target, assistant)
    ps = prompts(args.data)
    tensors, runs = {}, []
    for pi, ids in enumerate(ps):
        plain = greedy(target, ids, NEW_TOKENS)
        x = torch.tensor([ids + plain])
        logits = target(input_ids=x, use_cache=False).logits[0].float()
        # The KV-cache greedy path equals the no-cache argmax at every step.
        assert logits[len(ids) - 1 : -1].argmax(-1).tolist() == plain, f"p{pi}: cached vs no-cache greedy"
        m = margins(logits[len(ids) - 1 : -1])
        run = dict(prompt=ids, greedy=plain, greedy_margins=m, greedy_min_margin=min(m), speculative={})
        if pi == 0:
            run["logits_key"] = f"p{pi}.logits"
            tensors[run["logits_key"]] = logits.contiguous()
        for k in (1, 2, 3, 4):
            out, rounds = assisted_rounds(target, assistant, ids, k)
            assert out == plain, f"p{pi} k={k}: assisted {out} != plain {plain}"
            assert rounds[0]["drafts"] == [], "round 0 is the prefill"
            drafted = sum(len(r["drafts"]) for r in rounds)
            accepted = sum(r["accepted"] for r in rounds)
            run["speculative"][str(k)] = dict(rounds=rounds, drafted=drafted, accepted=accepted)
            print(f"  p{pi} k={k}: {len(rounds) - 1} rounds, accepted {accepted}/{drafted}", flush=True)
        runs.append(run)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "logits.safetensors"))
    expected = dict(
        fixture="kjv_pair",
        artifact="models/kjv-pair.wgemma",
        artifact_sha256=hashlib.sha256((REPO / "models" / "kjv-pair.wgemma").read_bytes()).hexdigest(),
        checkpoints={
            f"{part}/{f.name}": hashlib.sha256(f.read_bytes()).hexdigest()
            for part in ("target", "assistant")
            for f in sorted((args.pair / part).iterdir())
        },
        versions=versions(),
        generator="tools/train/fixtures.py",
        compute_dtype="float32",
        attn_implementation="eager",
        weight_formats="target: Q4 on every Linear and embedding; assistant: Q4 on every Linear, lm_head float16 "
        "(the artifact's formats; hashes of the dequantised float32 bytes below)",
        quantised=formats,
        new_tokens=NEW_TOKENS,
        rounds_note="speculative[k]: HF assisted greedy generation with num_assistant_tokens = k (constant). "
        "Round 0 is the target prefill (no drafts); in round r the drafts sit after input_len tokens, accepted = "
        "HF's n_matches, output_len = input_len + accepted + 1.",
        prompts=runs,
    )
    (args.out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    # Reload and recompute: the stored logits and tokens are reproducible.
    t2, a2 = load(args.pair)
    artifact_formats_(t2, a2)
    stored = load_file(str(args.out / "logits.safetensors"))
    r0 = runs[0]
    again = t2(input_ids=torch.tensor([r0["prompt"] + r0["greedy"]]), use_cache=False).logits[0].float()
    assert torch.equal(again, stored["p0.logits"]), "logits not reproducible"
    out, rounds = assisted_rounds(t2, a2, runs[1]["prompt"], 3)
    assert rounds == runs[1]["speculative"]["3"]["rounds"], "rounds not reproducible"
    print(f"wrote {args.out} ({sum(f.stat().st_size for f in args.out.iterdir())} bytes), validated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
