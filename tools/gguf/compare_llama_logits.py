#!/usr/bin/env python3
"""llama.cpp's logits on the `k_quant` GGUF files against HF's, beside wgemma's, with the
metric of docs/models.md's quality table 2 (crates/wgemma/tests/integration/gguf_native.rs).

For each file and each of the golden fixture's prompts (its token ids followed by HF's greedy
continuation, as the test feeds them), the logits at every position from
`llama_logits` (tools/gguf/llama_logits: llama.cpp on the CPU, one batch) and, when --wgemma
is given, from `wgemma logits --all-positions` (the file's default load; also
`--dtype f32`, the file's own values dequantised exactly), against HF transformers' float32
logits on the unquantised weights (the fixture's variant `f32`). Per pair: the worst over
the prompts of max |diff| / logit scale (per position: max |a - b| over the vocabulary
divided by max(1, max |HF|), the largest over positions) and, in brackets, the worst
relative RMS (sqrt(sum (a - b)^2 / sum HF^2) over all logits of a prompt).

Printed per file (and written with --json): llama_vs_hf, wgemma_vs_hf (the table's
"default load vs HF"; --wgemma-activations f32 by default, as the test's lavapipe context
runs it), file_f32_vs_hf, llama_vs_file_f32 (llama.cpp's own arithmetic error: 8-bit
activations, f16 cache) and wgemma_vs_file_f32.

Not part of `./dev test`: it needs a llama.cpp build (tools/gguf/llama_logits/README.md).

Usage: python3 tools/gguf/compare_llama_logits.py --llama-logits BIN [--wgemma BIN]
       [--files k_quant.q6_k.gguf ...] [--kv f16|f32] [--flash-attn on|off|auto]
       [--threads N] [--json OUT]
Needs numpy and safetensors.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "crates/wgemma/tests/data")
FILES = ["k_quant.q8_0.gguf", "k_quant.q6_k.gguf", "k_quant.q5_k_m.gguf", "k_quant.q4_k_m.gguf"]


def prompts(np):
    """[(token ids, HF f32 logits [positions, vocab])] of the k_quant fixture's prompts."""
    from safetensors.numpy import load_file

    fixture = os.path.join(DATA, "golden/k_quant")
    with open(os.path.join(fixture, "expected.json")) as f:
        expected = json.load(f)
    logits = load_file(os.path.join(fixture, "logits.safetensors"))
    out = []
    for p in expected["prompts"]:
        tokens = p["prompt"] + p["f32"]["greedy"]
        hf = logits[p["f32"]["logits_key"]].astype(np.float32)
        if hf.shape[0] != len(tokens):
            sys.exit(f"{p['f32']['logits_key']}: {hf.shape[0]} rows of logits for {len(tokens)} tokens")
        out.append((tokens, hf))
    return out


def max_rel_diff(np, got, want):
    """Max |got - want| per position over the row's scale (max |want|, at least 1), worst row."""
    scale = np.maximum(np.abs(want).max(axis=1), 1.0)
    return float((np.abs(got - want).max(axis=1) / scale).max())


def rel_rms(np, got, want):
    return float(np.sqrt(((got - want) ** 2).sum() / (want**2).sum()))


def run_or_exit(cmd):
    """`cmd`'s stdout; on failure, exits with the command and the end of its stderr."""
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return run.stdout


def llama_logits(np, args, gguf, tokens, vocab):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        cmd = [args.llama_logits, gguf, out, ",".join(map(str, tokens)),
               "--threads", str(args.threads), "--kv", args.kv, "--flash-attn", args.flash_attn]
        run_or_exit(cmd)
        got = np.fromfile(out, dtype="<f4")
    if got.size != len(tokens) * vocab:
        sys.exit(f"llama_logits on {gguf}: {got.size} values, expected {len(tokens)} x {vocab}")
    return got.reshape(len(tokens), vocab)


def wgemma_logits(np, args, gguf, tokens, dtype):
    cmd = [args.wgemma, "logits", "-m", gguf, "--prompt-ids", ",".join(map(str, tokens)),
           "--all-positions", "-c", "256", "--activations", args.wgemma_activations]
    if dtype:
        cmd += ["--dtype", dtype]
    return np.asarray(json.loads(run_or_exit(cmd))["logits"], dtype=np.float32)


def worst(np, pairs):
    """(worst max |diff| / scale, worst relative RMS) over (got, want) pairs."""
    pairs = list(pairs)
    return (max(max_rel_diff(np, g, w) for g, w in pairs), max(rel_rms(np, g, w) for g, w in pairs))


def measure(np, args, name, cases):
    gguf = os.path.join(DATA, "gguf", name)
    runs = {"llama": [llama_logits(np, args, gguf, t, hf.shape[1]) for t, hf in cases]}
    if args.wgemma:
        runs["wgemma"] = [wgemma_logits(np, args, gguf, t, None) for t, _ in cases]
        runs["file_f32"] = [wgemma_logits(np, args, gguf, t, "f32") for t, _ in cases]
    hf = [h for _, h in cases]
    row = {f"{k}_vs_hf": worst(np, zip(v, hf)) for k, v in runs.items()}
    if args.wgemma:
        row["llama_vs_file_f32"] = worst(np, zip(runs["llama"], runs["file_f32"]))
        row["wgemma_vs_file_f32"] = worst(np, zip(runs["wgemma"], runs["file_f32"]))
    return row


def check_inputs(args):
    """Exit naming what is missing before any run: the binaries and the GGUF files."""
    for flag, path in (("--llama-logits", args.llama_logits), ("--wgemma", args.wgemma)):
        if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            sys.exit(f"{flag}: expected an executable file, found nothing runnable at {path}")
    for name in args.files:
        if not os.path.isfile(os.path.join(DATA, "gguf", name)):
            sys.exit(f"--files: expected a GGUF file under {os.path.join(DATA, 'gguf')} (or a path), found no {name}")
    if args.threads < 1:
        sys.exit(f"--threads: expected at least 1, found {args.threads}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-logits", required=True, help="the built tools/gguf/llama_logits binary")
    ap.add_argument("--wgemma", help="a wgemma binary: also measure its default load and the file at f32")
    ap.add_argument("--wgemma-activations", default="f32", choices=["auto", "f32", "int8"])
    ap.add_argument("--files", nargs="*", default=FILES, help="under crates/wgemma/tests/data/gguf, or paths")
    ap.add_argument("--kv", default="f16", choices=["f16", "f32"], help="llama.cpp's KV cache type")
    ap.add_argument("--flash-attn", default="auto", choices=["on", "off", "auto"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    check_inputs(args)
    import numpy as np

    cases = prompts(np)
    table = {}
    for name in args.files:
        table[name] = row = measure(np, args, name, cases)
        cells = "; ".join(f"{k} {m:.3f} ({r:.3f})" for k, (m, r) in row.items())
        print(f"{name}: {cells}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": {"kv": args.kv, "flash_attn": args.flash_attn,
                                    "wgemma_activations": args.wgemma_activations},
                       "files": table}, f, indent=1)


if __name__ == "__main__":
    main()
