#!/usr/bin/env python3
"""Trains wgemma's small Gemma 4 pair with HF transformers: a target (Gemma4ForCausalLM) on
the KJV corpus, then its MTP drafter (Gemma4AssistantForCausalLM) with the target frozen.

    python tools/train/train.py --data DIR --out DIR [--target-seconds 200 --assistant-seconds 130]

DIR (from prepare.py) holds tokenizer.json, train.npy, val.npy, prepare.json. Writes
OUT/target/ and OUT/assistant/ (save_pretrained, bfloat16) and OUT/log.json (config, seed,
data hashes, loss curve, held-out losses, the drafter's per-step agreement with the target).

Runs under a wall-clock budget per phase (one device call) unless --target-steps /
--assistant-steps fix the step counts; the learning-rate schedule follows the fraction of
the budget spent, and log.json records the steps taken, so a rerun with those step counts
follows the same schedule.

The drafter is trained the way Gemma 4's MTP drafter runs (transformers'
SinglePositionMultiTokenCandidateGenerator): at a position P it reads the target's final
hidden state of row P-1 and the target embedding of token P, attends to the target's K/V of
the last full and the last sliding layer (rows before P), and drafts token P+1; draft step s
feeds back its own projected hidden state and the next token at the SAME position P. Here all
positions P of a sequence are trained at once (teacher forcing with the corpus tokens), each
step s distilled from the target's distribution for token P+s (soft cross-entropy), and the
centroid head from the target's probability mass per cluster.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import (
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
)

SEED = 20261201
SLIDING, FULL = "sliding_attention", "full_attention"
VOCAB = 8192
WINDOW = 128  # sliding window (E2B: 512); training sequences are twice as long
SEQ = 256

# E2B's features at a small size: sliding + full layers (4:1 pattern, last layer full), full
# layers with wider heads and proportional partial RoPE (the config's defaults), per-layer
# embeddings (PLE), KV sharing in the last 2 layers with the double-wide MLP there, the
# 30 * tanh(x / 30) final softcap, tied embeddings.
TARGET_TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=1024,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=64,
    global_head_dim=128,
    layer_types=[SLIDING, SLIDING, SLIDING, FULL, SLIDING, SLIDING, SLIDING, FULL],
    sliding_window=WINDOW,
    num_kv_shared_layers=2,
    use_double_wide_mlp=True,
    hidden_size_per_layer_input=32,
    vocab_size_per_layer_input=VOCAB,
    attention_k_eq_v=False,
    final_logit_softcapping=30.0,
    rms_norm_eps=1e-6,
    hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=4096,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
    tie_word_embeddings=True,
)

# The drafter: 4 layers (3 sliding + 1 full) of Q-only attention over the target's K/V (head
# dims and KV head counts must match the target's), and the centroid head. E2B's head has
# 2048 centroids of 128 tokens and keeps the top 32 (4096 of 262144 tokens, 1/64); here the
# clusters keep E2B's 128 tokens (64 centroids) and the top 8 (1024 of 8192, 1/8): with 64
# clusters, E2B's 1/64 would keep one.
ASSISTANT_HIDDEN = 128
NUM_CENTROIDS = 64
CENTROID_TOP_K = 8
DRAFT_STEPS = 4  # draft steps trained (the benchmarks run k = 1..4)


def assistant_config() -> Gemma4AssistantConfig:
    t = TARGET_TEXT
    text = dict(
        vocab_size=VOCAB,
        hidden_size=ASSISTANT_HIDDEN,
        intermediate_size=4 * ASSISTANT_HIDDEN,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=t["num_key_value_heads"],
        head_dim=t["head_dim"],
        global_head_dim=t["global_head_dim"],
        attention_k_eq_v=False,
        layer_types=[SLIDING, SLIDING, SLIDING, FULL],
        sliding_window=WINDOW,
        num_kv_shared_layers=4,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        use_double_wide_mlp=False,
        enable_moe_block=False,
        final_logit_softcapping=None,
        rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=4096,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=True,
    )
    return Gemma4AssistantConfig(
        text_config=text,
        backbone_hidden_size=t["hidden_size"],
        use_ordered_embeddings=True,
        num_centroids=NUM_CENTROIDS,
        centroid_intermediate_top_k=CENTROID_TOP_K,
        tie_word_embeddings=True,
    )


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


class Batches:
    """Random windows of the training stream: <bos> then SEQ-1 tokens from a random offset."""

    def __init__(self, ids: np.ndarray, batch: int, seq: int, seed: int, device):
        self.ids = torch.from_numpy(ids.astype(np.int64))
        self.batch, self.seq, self.device = batch, seq, device
        self.gen = torch.Generator().manual_seed(seed)

    def next(self) -> torch.Tensor:
        n = self.ids.numel() - self.seq
        off = torch.randint(0, n, (self.batch,), generator=self.gen)
        rows = self.ids[off[:, None] + torch.arange(self.seq - 1)[None]]
        bos = torch.full((self.batch, 1), TARGET_TEXT["bos_token_id"], dtype=torch.long)
        return torch.cat([bos, rows], 1).to(self.device, non_blocking=True)


def val_windows(ids: np.ndarray, seq: int, limit: int) -> torch.Tensor:
    t = torch.from_numpy(ids.astype(np.int64))
    n = min((t.numel()) // (seq - 1), limit)
    rows = t[: n * (seq - 1)].view(n, seq - 1)
    return torch.cat([torch.full((n, 1), TARGET_TEXT["bos_token_id"]), rows], 1)


def lr_at(progress: float, step: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


class Clock:
    """Progress through a phase: by steps when given, else by wall-clock seconds."""

    def __init__(self, seconds: float, steps: int | None):
        self.seconds, self.steps, self.t0 = seconds, steps, time.time()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def progress(self, step: int) -> float:
        return step / self.steps if self.steps else self.elapsed() / self.seconds

    def done(self, step: int) -> bool:
        return step >= self.steps if self.steps else self.elapsed() >= self.seconds


def autocast(device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


# --------------------------------------------------------------------------------------------
# Target
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def target_val_loss(model, val: torch.Tensor, device, batch: int) -> float:
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, val.shape[0], batch):
        x = val[i : i + batch].to(device)
        with autocast(device):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), x[:, 1:].flatten(), reduction="sum")
        tot += float(loss)
        n += x[:, 1:].numel()
    model.train()
    return tot / n


def train_target(args, data, device, log) -> Gemma4ForCausalLM:
    torch.manual_seed(SEED)
    cfg = Gemma4TextConfig(**TARGET_TEXT)
    model = Gemma4ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    log["target_params"] = n_params
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=device.type == "cuda")
    batches = Batches(data["train"], args.batch, args.seq, SEED + 1, device)
    val = val_windows(data["val"], args.seq, args.val_windows)
    clock = Clock(args.target_seconds, args.target_steps)
    best = (float("inf"), None, 0)
    step, next_eval = 0, 0.0
    curve = log["target_curve"]
    while not clock.done(step):
        lr = lr_at(clock.progress(step), step, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        x = batches.next()
        with autocast(device):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % args.log_every == 0:
            curve.append(dict(step=step, t=round(clock.elapsed(), 1), lr=lr, loss=round(loss.item(), 4)))
        if clock.elapsed() >= next_eval or clock.done(step):
            next_eval = clock.elapsed() + args.eval_seconds
            vl = target_val_loss(model, val, device, args.batch)
            log["target_val"].append(dict(step=step, t=round(clock.elapsed(), 1), val_loss=round(vl, 4)))
            print(f"target step {step} t {clock.elapsed():.0f}s loss {loss.item():.3f} val {vl:.3f}", flush=True)
            if vl < best[0]:
                best = (vl, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
    log["target_steps"] = step
    log["target_best"] = dict(val_loss=round(best[0], 4), step=best[2])
    model.load_state_dict(best[1])
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


# --------------------------------------------------------------------------------------------
# Drafter
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def token_ordering(target, num_centroids: int) -> torch.Tensor:
    """Balanced clusters of the target's (tied) token embeddings by recursive bisection along
    each part's principal direction: num_centroids (a power of two) clusters of equal size,
    neighbouring embeddings together. Returns the token ids cluster after cluster (HF
    `token_ordering`: cluster c is ordering[c*n : (c+1)*n])."""
    e = target.get_input_embeddings().weight.detach().float()
    e = e / e.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    parts = [torch.arange(e.shape[0], device=e.device)]
    while len(parts) < num_centroids:
        nxt = []
        for idx in parts:
            x = e[idx] - e[idx].mean(0)
            v = torch.linalg.svd(x, full_matrices=False).Vh[0]
            order = torch.argsort(x @ v, stable=True)
            half = idx.numel() // 2
            nxt += [idx[order[:half]], idx[order[half:]]]
        parts = nxt
    return torch.cat(parts)


def draft_masks(seq: int, window: int, device) -> dict[str, torch.Tensor]:
    """Which target K/V rows the drafter at position P (query row P) sees: full layers rows
    0..P-1; sliding layers the w+1 rows P-1-w..P-1 (HF's flipped bidirectional window keeps
    w+1 rows ending at the last visible one). Row 0 (P = 0, never trained) sees row 0 so no
    query row is fully masked. True = attend."""
    q = torch.arange(seq, device=device)[:, None]
    k = torch.arange(seq, device=device)[None, :]
    full = (k < q) | ((q == 0) & (k == 0))
    sliding = full & (k >= q - 1 - window)
    return {FULL: full[None, None], SLIDING: sliding[None, None]}


def drafter_losses(assistant, target, x: torch.Tensor, masks, steps: int, ordering: torch.Tensor, device):
    """Soft cross-entropy of every draft step at every position; returns (loss, per-step
    agreement of the drafter's argmax with the target's argmax)."""
    b, n = x.shape
    with torch.no_grad(), autocast(device):
        out = target(input_ids=x, return_shared_kv_states=True, output_hidden_states=True)
        h_t = out.hidden_states[-1]  # the final-normed hidden state HF's candidate generator reads
        kv = {k: (v[0], v[1]) for k, v in out.shared_kv_states.items()}
        emb = target.get_input_embeddings()(x)  # scaled, as the candidate generator embeds
    p_t = out.logits.float().softmax(-1)  # [B, N, V]; row r: the target's distribution of token r+1
    nc = NUM_CENTROIDS
    p_cluster = p_t[..., ordering].view(b, n, nc, VOCAB // nc).sum(-1)
    pos = torch.arange(n, device=device)[None].expand(b, n)
    me = assistant.masked_embedding
    total, agree = 0.0, []
    # Query row P (1..N-1): step 1 input = (emb[x_P], h_t[P-1]); step s input = (emb[x_{P+s-1}],
    # the drafter's projected state from step s-1); step s target = p_t[P+s-1].
    h_prev = torch.cat([h_t[:, :1], h_t[:, :-1]], 1)
    for s in range(1, steps + 1):
        src = torch.arange(n, device=device) + (s - 1)
        valid = (torch.arange(n, device=device) >= 1) & (src <= n - 1)
        src = src.clamp(max=n - 1)
        with autocast(device):
            inp = torch.cat([emb[:, src], h_prev.to(emb.dtype)], -1)
            hs = assistant.model(
                inputs_embeds=assistant.pre_projection(inp),
                attention_mask=masks,
                position_ids=pos,
                shared_kv_states=kv,
                use_cache=False,
                output_hidden_states=True,  # keeps Gemma4TextModel from slicing rows for its KV-shared layers
            ).last_hidden_state
            h_prev = assistant.post_projection(hs)
            logits = assistant.lm_head(hs).float()
            cent = me.centroids(hs).float()
        tgt, tgt_c = p_t[:, src], p_cluster[:, src]
        ce = -(tgt * logits.log_softmax(-1)).sum(-1)
        ce_c = -(tgt_c * cent.log_softmax(-1)).sum(-1)
        m = valid[None].float()
        total = total + ((ce + ce_c) * m).sum() / (m.sum() * b)
        agree.append(float(((logits.argmax(-1) == tgt.argmax(-1)).float() * m).sum() / (m.sum() * b)))
    return total / steps, agree


def train_assistant(args, target, data, device, log) -> Gemma4AssistantForCausalLM:
    torch.manual_seed(SEED + 10)
    assistant = Gemma4AssistantForCausalLM._from_config(assistant_config(), attn_implementation="sdpa", dtype=torch.float32)
    ordering = token_ordering(target, NUM_CENTROIDS)
    assert sorted(ordering.tolist()) == list(range(VOCAB))
    assistant.masked_embedding.token_ordering.copy_(ordering.cpu())
    assistant.to(device).train()
    log["assistant_params"] = sum(p.numel() for p in assistant.parameters())
    opt = torch.optim.AdamW(assistant.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=device.type == "cuda")
    batches = Batches(data["train"], args.batch, args.seq, SEED + 2, device)
    val = val_windows(data["val"], args.seq, args.val_windows)
    masks = draft_masks(args.seq, WINDOW, device)
    ordering = ordering.to(device)
    clock = Clock(args.assistant_seconds, args.assistant_steps)
    best = (float("inf"), None, 0)
    step, next_eval = 0, 0.0
    while not clock.done(step):
        lr = lr_at(clock.progress(step), step, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, agree = drafter_losses(assistant, target, batches.next(), masks, DRAFT_STEPS, ordering, device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(assistant.parameters(), 1.0)
        opt.step()
        step += 1
        if step % args.log_every == 0:
            log["assistant_curve"].append(
                dict(step=step, t=round(clock.elapsed(), 1), lr=lr, loss=round(loss.item(), 4), agree=[round(a, 4) for a in agree])
            )
        if clock.elapsed() >= next_eval or clock.done(step):
            next_eval = clock.elapsed() + args.eval_seconds
            assistant.eval()
            with torch.no_grad():
                vl, va = 0.0, np.zeros(DRAFT_STEPS)
                chunks = list(range(0, val.shape[0], args.batch))
                for i in chunks:
                    l, a = drafter_losses(assistant, target, val[i : i + args.batch].to(device), masks, DRAFT_STEPS, ordering, device)
                    vl += float(l) / len(chunks)
                    va += np.asarray(a) / len(chunks)
            assistant.train()
            log["assistant_val"].append(
                dict(step=step, t=round(clock.elapsed(), 1), val_loss=round(vl, 4), val_agree=[round(float(a), 4) for a in va])
            )
            print(f"assistant step {step} t {clock.elapsed():.0f}s loss {loss.item():.3f} val {vl:.3f} agree {np.round(va, 3)}", flush=True)
            if vl < best[0]:
                best = (vl, {k: v.detach().clone() for k, v in assistant.state_dict().items()}, step)
    log["assistant_steps"] = step
    log["assistant_best"] = dict(val_loss=round(best[0], 4), step=best[2])
    assistant.load_state_dict(best[1])
    return assistant.eval()


def save(model, d: Path) -> None:
    """A bfloat16 copy (the model in use stays float32)."""
    m = copy.deepcopy(model).to(torch.bfloat16)
    m.generation_config.eos_token_id = TARGET_TEXT["eos_token_id"]
    m.generation_config.bos_token_id = TARGET_TEXT["bos_token_id"]
    m.generation_config.pad_token_id = TARGET_TEXT["pad_token_id"]
    m.save_pretrained(d)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--target-seconds", type=float, default=200)
    ap.add_argument("--assistant-seconds", type=float, default=130)
    ap.add_argument("--target-steps", type=int, default=None)
    ap.add_argument("--assistant-steps", type=int, default=None)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--eval-seconds", type=float, default=15)
    ap.add_argument("--val-windows", type=int, default=256)
    ap.add_argument("--log-every", type=int, default=25)
    args = ap.parse_args()
    if args.seq <= WINDOW + 1 and args.device == "cuda":
        raise SystemExit(f"--seq must exceed the sliding window {WINDOW} on the real run")
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    prep = json.loads((args.data / "prepare.json").read_text())
    data = {k: np.load(args.data / f"{k}.npy") for k in ("train", "val")}
    for k in ("train", "val"):
        if sha256(data[k].tobytes()) != prep[f"{k}_ids_sha256"]:
            raise SystemExit(f"{k}.npy: hash differs from prepare.json")
    log = dict(
        seed=SEED,
        args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        data=prep,
        versions=dict(python=platform.python_version(), torch=torch.__version__, transformers=transformers.__version__),
        device=torch.cuda.get_device_name() if device.type == "cuda" else platform.processor(),
        target_config=TARGET_TEXT,
        assistant=dict(hidden=ASSISTANT_HIDDEN, num_centroids=NUM_CENTROIDS, top_k=CENTROID_TOP_K, draft_steps=DRAFT_STEPS),
        target_curve=[],
        target_val=[],
        assistant_curve=[],
        assistant_val=[],
    )
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    target = train_target(args, data, device, log)
    # Written before the drafter's phase, so a failure there keeps the target and the log.
    save(target, args.out / "target")
    try:
        assistant = train_assistant(args, target, data, device, log)
        save(assistant, args.out / "assistant")
    finally:
        log["seconds"] = round(time.time() - t0, 1)
        (args.out / "log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"done in {log['seconds']} s: target {log['target_best']}, assistant {log['assistant_best']}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
