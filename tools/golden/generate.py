#!/usr/bin/env python3
"""Golden-fixture generator: tiny random Gemma 4 models run through HF transformers.

Writes crates/wgemma/tests/data/golden/<fixture>/ (see README.md beside this file):
  config.json, generation_config.json, model.safetensors   exactly as HF save_pretrained writes them
  expected.json                                            metadata, prompts, greedy / assisted tokens
  logits.safetensors                                       float32 logits (targets) / draft logits (assistants)

Deterministic (seeded), CPU only, ~15 s. Not run in CI: its outputs are committed.
Every fixture is reloaded from disk and checked after it is written.

    /work/venv/bin/python tools/golden/generate.py [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (
    Gemma4AssistantConfig,
    Gemma4AssistantForCausalLM,
    Gemma4Config,
    Gemma4ForCausalLM,
    Gemma4ForConditionalGeneration,
    Gemma4TextConfig,
    GenerationConfig,
)
from transformers.generation.candidate_generator import SinglePositionMultiTokenCandidateGenerator

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "gguf"))
import kquant  # noqa: E402  (tools/gguf/kquant.py: llama.cpp's K-quants and Q4_K_M recipe)

DEFAULT_OUT = REPO / "crates" / "wgemma" / "tests" / "data" / "golden"

SEED = 20260401
NOISE_STD = 0.1  # N(0, 0.1) added to EVERY parameter / persistent float buffer
VOCAB = 512
WINDOW = 8
NEW_TOKENS = 32  # greedy continuation length (>= 24 required)
NUM_ASSISTANT_TOKENS = 2  # drafts per speculative round (k = 2 -> verify M = 3)
Q4_GROUP = 32

SLIDING, FULL = "sliding_attention", "full_attention"

# --------------------------------------------------------------------------------------------
# Fixture definitions
# --------------------------------------------------------------------------------------------

COMMON_TEXT = dict(
    vocab_size=VOCAB,
    sliding_window=WINDOW,
    final_logit_softcapping=30.0,  # Gemma4TextConfig defaults to None; the real checkpoints use 30
    rms_norm_eps=1e-6,
    hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=4096,
    pad_token_id=0,
    bos_token_id=2,
    eos_token_id=1,
    tie_word_embeddings=True,
)

TARGETS = {
    # E2B-like: PLE, KV sharing (last 3 of 6 layers), double-wide MLP on the shared layers,
    # sliding + full layers, proportional partial RoPE on full layers, window 8.
    # Saved as the multimodal layout (Gemma4ForConditionalGeneration, text-only: vision/audio
    # None) like the published E2B checkpoint: nested text_config, "model.language_model." prefix.
    "e2b_like": dict(
        layout="multimodal",
        dtype="float32",
        shape=dict(embed_mul=1.2, final_norm_mul=8.0),
        text=dict(
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=6,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            global_head_dim=64,
            layer_types=[SLIDING, SLIDING, FULL, SLIDING, SLIDING, FULL],
            num_kv_shared_layers=3,
            use_double_wide_mlp=True,
            hidden_size_per_layer_input=32,
            vocab_size_per_layer_input=VOCAB,
            attention_k_eq_v=False,
        ),
    ),
    # 31B-like: K = V on full layers (no v_proj there), distinct global KV head count, no PLE.
    # Stored in bfloat16 (the bf16 load path); reference computed in float32 from those weights.
    "dense_kv": dict(
        layout="text",
        dtype="bfloat16",
        shape=dict(embed_mul=0.4, final_norm_mul=8.0),
        text=dict(
            hidden_size=128,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            global_head_dim=64,
            num_global_key_value_heads=1,
            attention_k_eq_v=True,
            layer_types=[SLIDING, SLIDING, SLIDING, FULL],
            num_kv_shared_layers=0,
            hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=VOCAB,
        ),
    ),
    # 26B-A4B-like: dense MLP + MoE block (router + 8 experts, top-2) on every layer, K = V on
    # full layers with a distinct global KV head count, no PLE.
    # Q4_K_M-sized: every matrix row (input dim K) a multiple of 256, so llama.cpp's K-quant
    # superblocks apply; its "q4_k_m" variant is the model on the dequantised weights of the
    # Q4_K_M GGUF that tools/gguf/make_fixtures.py writes (recipe and quantisers:
    # tools/gguf/kquant.py). bf16, vocab 256 and 2 layers keep it under 2 MB.
    "k_quant": dict(
        layout="text",
        dtype="bfloat16",
        # Rows 4x wider than e2b_like's: noise 0.04 (not 0.1) keeps each layer's output near
        # its input's size, as N(0, 0.1) does at width 64; without it greedy repeats one token.
        noise_std=0.04,
        shape=dict(embed_mul=0.55, final_norm_mul=12.0),
        gguf_recipe="Q4_K_M",
        text=dict(
            vocab_size=256,
            hidden_size=256,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=64,
            global_head_dim=64,
            layer_types=[SLIDING, FULL],
            num_kv_shared_layers=0,
            hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=256,
            attention_k_eq_v=False,
        ),
    ),
    "moe": dict(
        layout="text",
        dtype="float32",
        shape=dict(embed_mul=0.3, final_norm_mul=8.0),
        text=dict(
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=4,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=32,
            global_head_dim=64,
            num_global_key_value_heads=1,
            attention_k_eq_v=True,
            layer_types=[SLIDING, SLIDING, SLIDING, FULL],
            num_kv_shared_layers=0,
            hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=VOCAB,
            enable_moe_block=True,
            num_experts=8,
            top_k_experts=2,
            moe_intermediate_size=32,
        ),
    ),
}

ASSISTANTS = {
    # Centroid ("ordered embeddings") head: 32 centroids x 16 tokens, top-4 -> 64 candidate rows.
    "e2b_like_assistant": dict(
        target="e2b_like",
        use_ordered_embeddings=True,
        num_centroids=32,
        centroid_intermediate_top_k=4,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        echo=dict(pre_gain=10.0, head_gain=0.3),
    ),
    # Dense lm_head.
    "dense_kv_assistant": dict(
        target="dense_kv",
        use_ordered_embeddings=False,
        hidden_size=64,
        intermediate_size=64,
        num_attention_heads=4,
        echo=dict(pre_gain=10.0, head_gain=0.3),
    ),
}

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def seed_all(seed: int) -> None:
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def fixture_seed(name: str) -> int:
    return SEED + int(hashlib.sha256(name.encode()).hexdigest()[:6], 16)


def prompts_for(name: str, vocab: int = VOCAB) -> list[list[int]]:
    """Two prompts: a short one (< window) and one longer than 2x the window. BOS first;
    the rest avoids pad/eos/bos (0, 1, 2)."""
    rng = np.random.default_rng(fixture_seed(name + "/prompts"))
    short = [2] + rng.integers(3, vocab, size=5).tolist()
    long = [2] + rng.integers(3, vocab, size=2 * WINDOW + 4).tolist()
    return [short, long]


@torch.no_grad()
def perturb_(model: torch.nn.Module, seed: int, std: float = NOISE_STD) -> list[str]:
    """Add N(0, std) to every float tensor of the state dict (parameters and persistent
    buffers such as layer_scalar), each storage once (tied weights share one)."""
    gen = torch.Generator().manual_seed(seed)
    seen: set[int] = set()
    touched = []
    for name, t in sorted(model.state_dict(keep_vars=True).items()):
        if not t.is_floating_point():
            continue
        ptr = t.data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        noise = torch.randn(t.shape, generator=gen, dtype=torch.float32) * std
        t.data.add_(noise.to(t.dtype))
        touched.append(name)
    return touched


# ---- Q4 (the project's contract) ----------------------------------------------------------


def q4_fake_quant(w: np.ndarray, group: int = Q4_GROUP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantise then dequantise along the LAST axis (the input dim K) in groups of 32.

    scale = float16(max_abs(group) / 7) computed in float32 then rounded to float16;
    q = clamp(round_half_to_even(w / float32(scale)), -8, 7), 0 where scale == 0;
    dequant = q * float32(scale). Returns (dequant f32, q int8, scale f16)."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    k = w.shape[-1]
    if k % group:
        raise ValueError(f"Q4: K={k} is not a multiple of {group}")
    g = w.reshape(-1, k // group, group)
    amax = np.max(np.abs(g), axis=-1)  # float32
    scale16 = (amax / np.float32(7.0)).astype(np.float16)
    s = scale16.astype(np.float32)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.rint(g / s)  # rint = round half to even; float32 / float32 stays float32
    q = np.where(s == 0, np.float32(0), np.clip(r, -8, 7)).astype(np.float32)
    deq = (q * s).astype(np.float32)
    return deq.reshape(w.shape), q.astype(np.int8).reshape(w.shape), scale16.reshape(*w.shape[:-1], k // group)


def _q4_self_test() -> None:
    # scale = 0.875 / 7 = 0.125 exactly (f16-exact), so w / scale hits exact halves
    w = np.zeros((2, 32), np.float32)
    w[0, :6] = [0.875, 0.3125, 0.4375, -0.3125, -0.4375, 0.01]
    deq, q, s = q4_fake_quant(w)
    assert s[0, 0] == np.float16(0.125) and s[1, 0] == 0
    assert q[0, :6].tolist() == [7, 2, 4, -2, -4, 0], q[0, :6]  # 2.5 -> 2, 3.5 -> 4: half to even
    assert not q[1].any() and not deq[1].any()  # all-zero group: scale 0, q 0
    assert deq[0, 1] == np.float32(0.25)
    # scale is rounded to f16 from the f32 quotient
    w2 = np.full((1, 32), 0.1, np.float32)
    _, q2, s2 = q4_fake_quant(w2)
    assert s2[0, 0] == np.float16(np.float32(0.1) / np.float32(7)) and (q2 == 7).all()


def q4_targets(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors the Q4 contract quantises: every nn.Linear weight (2-D), every nn.Embedding
    weight (token embedding, PLE embedding; lm_head is tied to the token embedding), and the
    3-D MoE expert tensors (per expert, along their last = input axis). Norms, scalars,
    router scales and layer_scalar stay float. Keyed by state-dict name, one per storage."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    names: dict[int, str] = {}
    for n, t in model.state_dict(keep_vars=True).items():
        if n != "lm_head.weight":  # tied to the token embedding: use the stored name
            names.setdefault(id(t), n)
    for mod_name, mod in model.named_modules():
        cands = []
        if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
            cands.append(mod.weight)
        if type(mod).__name__ == "Gemma4TextExperts":
            cands += [mod.gate_up_proj, mod.down_proj]
        for t in cands:
            if t.data_ptr() in seen:
                continue
            seen.add(t.data_ptr())
            out[names.get(id(t), mod_name)] = t
    return out


@torch.no_grad()
def q4_apply_(model: torch.nn.Module) -> dict[str, dict]:
    info = {}
    for name, t in sorted(q4_targets(model).items()):
        deq, q, s = q4_fake_quant(t.detach().float().numpy())
        t.data.copy_(torch.from_numpy(deq).to(t.dtype))
        info[name] = {
            "shape": list(t.shape),
            "dequant_f32_sha256": hashlib.sha256(deq.astype("<f4").tobytes()).hexdigest(),
            "q_sum": int(q.astype(np.int64).sum()),
            "q_min": int(q.min()),
            "q_max": int(q.max()),
        }
    return info


# ---- a GGUF recipe (llama-quantize's Q4_K_M) -------------------------------------------------


@torch.no_grad()
def gguf_recipe_apply_(model: torch.nn.Module, recipe: str) -> dict[str, dict]:
    """Replace every tensor a `recipe` GGUF quantises by the values that GGUF holds: the
    tensor in llama.cpp's layout (tools/gguf/kquant.py picks each one's type as
    llama-quantize does), quantised, then dequantised by the `gguf` package (the reference
    dequantiser). Returns per HF name: GGUF name, type, SHA-256 of the raw blocks (what
    make_fixtures.py must write) and of the dequantised f32 values."""
    import gguf

    assert recipe == "Q4_K_M", recipe
    c = tcfg(model)
    arch = gguf.MODEL_ARCH.GEMMA4
    tmap = gguf.get_tensor_name_map(arch, c.num_hidden_layers)
    named = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if name == "lm_head.weight" or not t.is_floating_point():
            continue
        named[kquant.hf_to_gguf_name(gguf, tmap, name)] = (name, t)
    order = kquant.gguf_tensor_order(named)
    types = kquant.q4_k_m_types([(g, list(reversed(named[g][1].shape))) for g in order], c.num_hidden_layers)
    info = {}
    for g in order:
        ty = types[g]
        if ty is None:
            continue
        name, t = named[g]
        w = t.detach().float().numpy()
        blocks = kquant.quantize_any(gguf, w.reshape(-1, w.shape[-1]), ty)
        deq = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[ty]).astype(np.float32).reshape(w.shape)
        t.data.copy_(torch.from_numpy(deq).to(t.dtype))
        info[name] = {
            "gguf_name": g,
            "type": ty,
            "blocks_sha256": hashlib.sha256(blocks.tobytes()).hexdigest(),
            "dequant_f32_sha256": hashlib.sha256(deq.astype("<f4").tobytes()).hexdigest(),
        }
    return info


# ---- model building / running ---------------------------------------------------------------


def text_config(spec: dict) -> Gemma4TextConfig:
    return Gemma4TextConfig(**{**COMMON_TEXT, **spec})


def build_target(name: str, fx: dict) -> torch.nn.Module:
    seed_all(fixture_seed(name))
    tc = text_config(fx["text"])
    if fx["layout"] == "multimodal":
        cfg = Gemma4Config(text_config=tc.to_dict(), vision_config=None, audio_config=None)
        model = Gemma4ForConditionalGeneration(cfg)
    else:
        model = Gemma4ForCausalLM(tc)
    perturb_(model, fixture_seed(name + "/noise"), fx.get("noise_std", NOISE_STD))
    shape_target_(model, **fx["shape"])
    return model.eval()


@torch.no_grad()
def shape_target_(model, embed_mul: float, final_norm_mul: float) -> None:
    """After the noise: scale the token embedding (tied lm_head) and the final norm weight.

    An untrained model with tied embeddings echoes its input token (the embedding, x sqrt(H),
    dominates the residual and dots best with its own row), and its logits are small (std ~0.8:
    top-1 margins of 1e-3). embed_mul sets how often greedy repeats a token (repeats are what the
    echo-shaped assistant can predict, so speculative rounds see 0, 1 and 2 accepted drafts);
    final_norm_mul = 8 gives logits of std ~3 and |max| ~10-20, so margins are wide and the
    30*tanh(x/30) softcap is far from linear."""
    tm = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    tm.embed_tokens.weight.mul_(embed_mul)
    tm.norm.weight.mul_(final_norm_mul)


def load_target(path: Path, layout: str) -> torch.nn.Module:
    cls = Gemma4ForConditionalGeneration if layout == "multimodal" else Gemma4ForCausalLM
    return cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()


def load_assistant(path: Path) -> torch.nn.Module:
    return Gemma4AssistantForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()


def tcfg(model) -> Gemma4TextConfig:
    return model.config.get_text_config()


def gen_config(max_new_tokens: int) -> GenerationConfig:
    # eos_token_id=None: random models emit token 1 (eos) freely; never stop early.
    return GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=2,
        use_cache=True,
    )


@torch.no_grad()
def full_logits(model, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids])
    out = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def greedy(model, ids: list[int], n: int, assistant=None) -> list[int]:
    x = torch.tensor([ids])
    kw = {}
    if assistant is not None:
        kw["assistant_model"] = assistant
    # generate() fills a None eos_token_id from model.generation_config: clear it there too.
    model.generation_config.eos_token_id = None
    out = model.generate(x, attention_mask=torch.ones_like(x), generation_config=gen_config(n), **kw)
    new = out[0, len(ids):].tolist()
    assert len(new) == n, f"generate returned {len(new)} tokens, wanted {n}"
    return new


def margins(logits: torch.Tensor) -> list[float]:
    top2 = torch.topk(logits, 2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]).tolist()


def layer_specs(model) -> list[dict]:
    """HF's own resolution of every layer (what the Rust config parser must reproduce)."""
    c = tcfg(model)
    text_model = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    modes = c.kv_sharing_modes
    out = []
    for i, layer in enumerate(text_model.layers):
        attn = layer.self_attn
        lt = c.layer_types[i]
        src = None
        if modes[i] == "reuse":
            stores = [j for j in range(len(modes)) if modes[j] == "store" and c.layer_types[j] == lt]
            # an assistant stores nothing: every layer reads the TARGET's store layer of its type
            src = max(stores) if stores else f"target:{lt}"
        inv = getattr(text_model.rotary_emb, f"{lt}_inv_freq")
        out.append(
            {
                "index": i,
                "type": lt,
                "head_dim": attn.head_dim,
                "num_kv_heads": c.per_layer_config[i].num_key_value_heads,
                "kv_sharing_mode": modes[i],
                "kv_source_layer": src,
                "k_eq_v": bool(attn.use_alternative_attention),
                "has_v_proj": getattr(attn, "v_proj", None) is not None,
                "mlp_intermediate_size": layer.mlp.intermediate_size,
                "rope_rotated_pairs": int((inv != 0).sum()),
                "layer_scalar": float(layer.layer_scalar.item()),
            }
        )
    return out


def rope_tables(model) -> dict:
    c = tcfg(model)
    text_model = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    return {lt: getattr(text_model.rotary_emb, f"{lt}_inv_freq").tolist() for lt in sorted(set(c.layer_types))}


def file_sizes(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(d.iterdir())}


def versions() -> dict:
    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1) + "\n")


# --------------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------------


def make_target(name: str, fx: dict, out_root: Path) -> dict:
    d = out_root / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    model = build_target(name, fx)
    model.to(TORCH_DTYPES[fx["dtype"]]).save_pretrained(d)
    del model

    # Everything below comes from the checkpoint as written (reloaded, float32 compute).
    model = load_target(d, fx["layout"])
    qmodel = copy.deepcopy(model)
    q4_info = q4_apply_(qmodel)

    variants = [("f32", model), ("q4", qmodel)]
    recipe_info = None
    if fx.get("gguf_recipe"):
        kmodel = copy.deepcopy(model)
        recipe_info = gguf_recipe_apply_(kmodel, fx["gguf_recipe"])
        variants.append((fx["gguf_recipe"].lower(), kmodel))

    prompts = prompts_for(name, fx["text"].get("vocab_size", VOCAB))
    tensors: dict[str, torch.Tensor] = {}
    runs = []
    for pi, ids in enumerate(prompts):
        run = {"prompt": ids}
        for tag, m in variants:
            toks = greedy(m, ids, NEW_TOKENS)
            seq = ids + toks
            lg = full_logits(m, seq)  # logits at every position of prompt + continuation
            # The KV-cache greedy path must agree with the no-cache full forward.
            am = lg[len(ids) - 1 : -1].argmax(-1).tolist()
            assert am == toks, f"{name} p{pi} {tag}: cached greedy {toks} != full-forward argmax {am}"
            prompt_only = full_logits(m, ids)
            assert torch.allclose(prompt_only, lg[: len(ids)], atol=1e-4, rtol=0), "prefix logits not causal"
            tensors[f"p{pi}.{tag}.logits"] = lg.contiguous()
            mg = margins(lg[len(ids) - 1 : -1])
            run[tag] = {
                "greedy": toks,
                "greedy_min_margin": min(mg),
                "greedy_margins": [round(x, 6) for x in mg],
                "logits_key": f"p{pi}.{tag}.logits",
                "logits_shape": list(lg.shape),
            }
        with torch.no_grad():
            x = torch.tensor([ids])
            hs = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False, output_hidden_states=True)
        tensors[f"p{pi}.f32.hidden_states"] = torch.stack([h[0].float() for h in hs.hidden_states]).contiguous()
        run["hidden_states_key"] = f"p{pi}.f32.hidden_states"
        runs.append(run)
    save_file(tensors, str(d / "logits.safetensors"))

    c = tcfg(model)
    expected = {
        "fixture": name,
        "kind": "target",
        "versions": versions(),
        "generator": "tools/golden/generate.py",
        "seed": fixture_seed(name),
        "noise_std": NOISE_STD,
        "shaping": {"after_noise": fx["shape"], "see": "shape_target_ in tools/golden/generate.py"},
        "hf_class": type(model).__name__,
        "layout": fx["layout"],
        "tensor_prefix": "model.language_model." if fx["layout"] == "multimodal" else "model.",
        "stored_dtype": fx["dtype"],
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "sliding_window": c.sliding_window,
        "final_logit_softcapping": c.final_logit_softcapping,
        "layers": layer_specs(model),
        "rope_inv_freq": rope_tables(model),
        "logits_file": "logits.safetensors",
        "logits_note": "logits[p] = float32 [len(prompt)+new_tokens, vocab], row t = next-token logits after token t "
        "of prompt+greedy; rows len(prompt)-1 .. end-1 are the ones greedy decoding picked argmax from "
        "(the last row is the logits after the final generated token)",
        "hidden_states_note": "p{p}.f32.hidden_states = float32 [num_layers+1, len(prompt), hidden] for the prompt "
        "alone (f32 model): [0] = scaled token embedding (input of layer 0), [i] = output of layer i-1 (after "
        "layer_scalar) for i < num_layers, [num_layers] = output of the final norm (HF replaces the last layer's "
        "raw output by the normed one); logits = softcap(final_norm_out @ embed^T)",
        "new_tokens": NEW_TOKENS,
        "eos_token_id_during_generate": None,
        "prompts": runs,
        "q4": {
            "group_size": Q4_GROUP,
            "axis": "last (input dim K)",
            "rule": "scale=f16(max_abs/7) computed in f32; q=clamp(rint_half_even(w/f32(scale)),-8,7), 0 if scale==0; "
            "w'=q*f32(scale)",
            "quantised_tensors": q4_info,
            "float_tensors": sorted(k for k in model.state_dict() if k not in q4_info and k != "lm_head.weight"),
        },
    }
    if recipe_info is not None:
        expected[fx["gguf_recipe"].lower()] = {
            "recipe": f"llama-quantize {fx['gguf_recipe']} (llama_tensor_get_type, no imatrix): "
            "tools/gguf/kquant.py; values = the gguf package's dequantisation of the blocks",
            "gguf_file": f"crates/wgemma/tests/data/gguf/{name}.{fx['gguf_recipe'].lower()}.gguf",
            "quantised_tensors": recipe_info,
        }
    write_json(d / "expected.json", expected)
    validate_target(d, fx, expected)
    return {"name": name, "dir": d, "expected": expected}


@torch.no_grad()
def validate_target(d: Path, fx: dict, expected: dict) -> None:
    model = load_target(d, fx["layout"])
    st = load_file(str(d / "model.safetensors"))
    for k, v in st.items():
        assert str(v.dtype).endswith(fx["dtype"]), f"{k} stored as {v.dtype}"
    assert not any(k.startswith("lm_head") for k in st), "lm_head must be tied, not stored"
    qmodel = copy.deepcopy(model)
    qinfo = q4_apply_(qmodel)
    assert qinfo == expected["q4"]["quantised_tensors"], "Q4 not reproducible"
    variants = [("f32", model), ("q4", qmodel)]
    if fx.get("gguf_recipe"):
        tag = fx["gguf_recipe"].lower()
        kmodel = copy.deepcopy(model)
        kinfo = gguf_recipe_apply_(kmodel, fx["gguf_recipe"])
        assert kinfo == expected[tag]["quantised_tensors"], f"{tag} not reproducible"
        variants.append((tag, kmodel))
    lg = load_file(str(d / "logits.safetensors"))
    exp = json.loads((d / "expected.json").read_text())
    for run in exp["prompts"]:
        for tag, m in variants:
            seq = run["prompt"] + run[tag]["greedy"]
            got = full_logits(m, seq)
            want = lg[run[tag]["logits_key"]]
            assert want.dtype == torch.float32 and want.shape == got.shape
            assert torch.equal(got, want), f"{d.name}: reload mismatch {(got - want).abs().max()}"
    # Perturbation really moved every weight off its init (norms / layer_scalar are 1 at init).
    for k, v in st.items():
        v = v.float()
        assert not torch.all(v == 1.0) and not torch.all(v == 0.0), f"{k} still at init"
    print(f"  validated {d.name}: reload, logits, Q4{' and ' + fx['gguf_recipe'] if fx.get('gguf_recipe') else ''} hashes")


# --------------------------------------------------------------------------------------------
# Assistants
# --------------------------------------------------------------------------------------------


def build_assistant(name: str, fx: dict, target) -> torch.nn.Module:
    seed_all(fixture_seed(name))
    t = tcfg(target)
    n_layers = 4
    ttypes = [SLIDING] * (n_layers - 1) + [FULL]
    # Q-only attention over the TARGET's K/V: head dims and KV head counts must match the target's.
    full_idx = t.layer_types.index(FULL)
    slide_idx = t.layer_types.index(SLIDING)
    text = dict(
        COMMON_TEXT,
        hidden_size=fx["hidden_size"],
        intermediate_size=fx["intermediate_size"],
        num_hidden_layers=n_layers,
        num_attention_heads=fx["num_attention_heads"],
        num_key_value_heads=t.per_layer_config[slide_idx].num_key_value_heads,
        head_dim=t.per_layer_config[slide_idx].head_dim,
        global_head_dim=t.per_layer_config[full_idx].head_dim,
        attention_k_eq_v=t.attention_k_eq_v,
        layer_types=ttypes,
        num_kv_shared_layers=n_layers,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        use_double_wide_mlp=False,
        enable_moe_block=False,
        final_logit_softcapping=None,  # the assistant's forward never applies a softcap anyway
    )
    if t.attention_k_eq_v:
        text["num_global_key_value_heads"] = t.per_layer_config[full_idx].num_key_value_heads
    kw = {}
    if fx["use_ordered_embeddings"]:
        kw = dict(num_centroids=fx["num_centroids"], centroid_intermediate_top_k=fx["centroid_intermediate_top_k"])
        assert VOCAB % fx["num_centroids"] == 0
    cfg = Gemma4AssistantConfig(
        text_config=text,
        backbone_hidden_size=t.hidden_size,
        use_ordered_embeddings=fx["use_ordered_embeddings"],
        tie_word_embeddings=True,
        **kw,
    )
    model = Gemma4AssistantForCausalLM(cfg)
    if fx["use_ordered_embeddings"]:
        g = torch.Generator().manual_seed(fixture_seed(name + "/ordering"))
        perm = torch.randperm(VOCAB, generator=g)
        model.masked_embedding.token_ordering.copy_(perm)
    echo_structure_(model, target, fixture_seed(name + "/echo"), **fx["echo"])
    perturb_(model, fixture_seed(name + "/noise"))
    return model.eval()


@torch.no_grad()
def echo_structure_(model, target, seed: int, pre_gain: float, head_gain: float) -> None:
    """Give the random assistant something to predict, BEFORE the N(0, 0.1) noise.

    A random drafter almost never matches the target (1/512), so every round would accept 0
    drafts and the partial/full acceptance paths would go untested. This builds an "echo"
    drafter: A = [H_a, H_t] with orthonormal rows; pre_projection[:, :H_t] = pre_gain * A (the
    half that sees target_embed(tok) * sqrt(H_t)); lm_head (= tied assistant embed_tokens) =
    head_gain * E_t A^T / rms, so its top logit tends to be the token it was fed. Centroid
    rows = sum of the lm_head rows of their cluster (so the echoed token's cluster tends to be
    in the top-k). The target repeats a token often enough (see shape_target_) that rounds
    accept 0, 1 or 2 drafts."""
    g = torch.Generator().manual_seed(seed)
    h_a = model.config.get_text_config().hidden_size
    e_t = target.get_input_embeddings().weight.detach().float()  # [V, H_t]
    h_t = e_t.shape[1]
    a = torch.linalg.qr(torch.randn(h_t, h_a, generator=g))[0].T.contiguous()  # [H_a, H_t], orthonormal rows
    model.pre_projection.weight[:, :h_t] = pre_gain * a
    head = e_t @ a.T
    head = head / head.pow(2).mean().sqrt()
    model.lm_head.weight.copy_(head_gain * head)  # tied: this is model.model.embed_tokens.weight
    if model.masked_embedding is not None:
        me = model.masked_embedding
        clusters = me.token_ordering.long().view(me.num_centroids, me.vocab_size_per_centroid)
        me.centroids.weight.copy_(model.lm_head.weight[clusters].sum(1) / me.vocab_size_per_centroid**0.5)


class Recorder:
    """Wraps SinglePositionMultiTokenCandidateGenerator to log every round."""

    def __init__(self, assistant):
        self.rounds: list[dict] = []
        self._orig_get = SinglePositionMultiTokenCandidateGenerator.get_candidates
        self._orig_upd = SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy
        self.assistant = assistant

    def __enter__(self):
        rec = self

        def get_candidates(gen_self, input_ids, model_kwargs, model_outputs, is_first_iteration, n_last_matches, **kw):
            rec._cur_calls = []
            shapes = None
            if model_outputs is not None and getattr(model_outputs, "shared_kv_states", None) is not None:
                shapes = {k: list(v[0].shape) for k, v in model_outputs.shared_kv_states.items()}
            cand, logits = rec._orig_get(
                gen_self, input_ids, model_kwargs, model_outputs, is_first_iteration, n_last_matches, **kw
            )
            drafts = cand[0, input_ids.shape[1]:].tolist()
            rec.rounds.append(
                {
                    "input_len": int(input_ids.shape[1]),
                    "is_first_iteration": bool(is_first_iteration),
                    "drafts": drafts,
                    "target_shared_kv_shapes": shapes,
                    "assistant_calls": rec._cur_calls,
                }
            )
            return cand, logits

        def update(gen_self, input_ids, scores, num_matches):
            rec.rounds[-1]["accepted"] = int(num_matches)
            rec.rounds[-1]["output_len"] = int(input_ids.shape[1])
            return rec._orig_upd(gen_self, input_ids, scores, num_matches)

        orig_fwd = self.assistant.forward

        def fwd(*a, **kw):
            out = orig_fwd(*a, **kw)
            skv = kw.get("shared_kv_states")
            rec._cur_calls.append(
                {
                    "position_ids": kw["position_ids"].tolist(),
                    "shared_kv_lens": {k: int(v[0].shape[2]) for k, v in skv.items()},
                    "logits": out.logits[0, -1].detach().float().clone(),
                    "h_out": out.last_hidden_state[0, -1].detach().float().clone(),
                    "inputs_embeds": kw["inputs_embeds"][0, -1].detach().float().clone(),
                }
            )
            return out

        self.assistant.forward = fwd
        SinglePositionMultiTokenCandidateGenerator.get_candidates = get_candidates
        SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy = update
        return self

    def __exit__(self, *exc):
        SinglePositionMultiTokenCandidateGenerator.get_candidates = self._orig_get
        SinglePositionMultiTokenCandidateGenerator.update_candidate_strategy = self._orig_upd
        del self.assistant.forward
        return False


def visible_rows(mode: str, w: int, r_last: int, m: int, big_p: int) -> tuple[slice, slice]:
    """Which target K/V rows (positions) the assistant's full / sliding layers attend to when it
    drafts at position big_p, given the previous target forward wrote rows 0..r_last and had m rows.

    "hf" (transformers 5.24, derived from the code and checked against it by reference_spec_decode):
      full    : rows 0..min(r_last, big_p). When the previous verify rejected a draft, row big_p is
                the K/V of the REJECTED draft that sat at big_p (the bonus token has no K/V yet).
      sliding : the store layer hands over T = rows max(0, r_last+1-(w-1+m))..r_last (what
                DynamicSlidingWindowLayer.update returns while past recording is on); if T starts
                at row 0 the candidate generator's [:input_len] cut makes it rows 0..min(r_last, big_p).
                With E = its last row, the assistant's bidirectional window (|q-kv| <= w, flipped)
                keeps rows max(0, E-w)..E: w+1 rows, possibly rejected ones, possibly > big_p.
    "textbook": full rows 0..big_p-1; sliding rows max(0, big_p-w+1)..big_p-1 (the target's own
                window q-w < k <= q, minus the not-yet-computed row big_p).
    """
    if mode == "hf":
        full_end = min(r_last, big_p)
        t0 = max(0, r_last + 1 - (w - 1 + m))
        e = r_last if t0 > 0 else full_end
        return slice(0, full_end + 1), slice(max(0, e - w), e + 1)
    assert mode == "textbook"
    return slice(0, big_p), slice(max(0, big_p - w + 1), big_p)


@torch.no_grad()
def reference_spec_decode(target, assistant, ids: list[int], n_new: int, k: int, mode: str) -> dict:
    """Speculative greedy decoding from scratch (no KV cache: every target forward runs over the
    whole sequence), mirroring HF's _assisted_decoding + SinglePositionMultiTokenCandidateGenerator
    round structure. mode picks the assistant's K/V view (visible_rows). Returns rounds + tokens.

    Round 0: target prefill of the prompt -> first token (no drafts). Round r: P = len(seq)-1;
    k' = min(k, max_len - len(seq) - 1) drafts (0 -> a plain target step); the assistant drafts at
    constant position P from (seq[P], h_prev) then (d_i, its own post_projection output);
    target verifies seq + drafts; accept the longest matching prefix + the bonus token (cut to
    the token budget); h_prev for the next round = target final-normed hidden state of row P+n.
    """
    w = tcfg(target).sliding_window
    embed = target.get_input_embeddings()
    max_len = len(ids) + n_new
    seq = list(ids)

    def fwd(toks):
        x = torch.tensor([toks])
        return target(input_ids=x, use_cache=False, return_shared_kv_states=True, output_hidden_states=True)

    o = fwd(seq)
    prev = dict(out=o, r_last=len(seq) - 1, m=len(seq), h_row=len(seq) - 1)
    rounds = [dict(input_len=len(seq), drafts=[], accepted=0, output_len=len(seq) + 1)]
    seq.append(int(o.logits[0, -1].argmax()))
    draft_logits = []
    while len(seq) < max_len:
        big_p = len(seq) - 1
        kk = min(k, max_len - len(seq) - 1)
        drafts = []
        if kk > 0:
            kv = prev["out"].shared_kv_states
            full, sl = visible_rows(mode, w, prev["r_last"], prev["m"], big_p)
            shared = {
                FULL: tuple(t[:, :, full] for t in kv[FULL]),
                SLIDING: tuple(t[:, :, sl] for t in kv[SLIDING]),
            }
            h_prev = prev["out"].hidden_states[-1][:, prev["h_row"] : prev["h_row"] + 1]
            tok = torch.tensor([[seq[big_p]]])
            for _ in range(kk):
                inp = torch.cat([embed(tok), h_prev], dim=-1)
                a = assistant(inputs_embeds=inp, position_ids=torch.tensor([[big_p]]), shared_kv_states=shared)
                tok = a.logits.argmax(-1)
                h_prev = a.last_hidden_state
                drafts.append(int(tok))
                draft_logits.append(a.logits[0, -1].float())
        o = fwd(seq + drafts)
        sel = o.logits[0, big_p : big_p + kk + 1].argmax(-1).tolist() if kk > 0 else [int(o.logits[0, -1].argmax())]
        n = 0
        while n < len(drafts) and drafts[n] == sel[n]:
            n += 1
        valid = sel[: n + 1][: max_len - len(seq)]
        n = len(valid) - 1
        rounds.append(dict(input_len=len(seq), drafts=drafts, accepted=n, output_len=len(seq) + len(valid)))
        prev = dict(out=o, r_last=big_p + len(drafts), m=len(drafts) + 1, h_row=big_p + n)
        seq += valid
    return {"tokens": seq[len(ids):], "rounds": rounds, "draft_logits": draft_logits}


def make_assistant(name: str, fx: dict, out_root: Path) -> dict:
    d = out_root / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    tfx = TARGETS[fx["target"]]
    tdir = out_root / fx["target"]
    target = load_target(tdir, tfx["layout"])
    build_assistant(name, fx, target).save_pretrained(d)
    assistant = load_assistant(d)
    assistant.generation_config.num_assistant_tokens = NUM_ASSISTANT_TOKENS
    assistant.generation_config.num_assistant_tokens_schedule = "constant"

    prompts = prompts_for(fx["target"])  # the target fixture's prompts
    texp = json.loads((tdir / "expected.json").read_text())
    tensors = {}
    runs = []
    for pi, ids in enumerate(prompts):
        plain = greedy(target, ids, NEW_TOKENS)
        assert plain == texp["prompts"][pi]["f32"]["greedy"], "target fixture greedy not reproducible"
        with Recorder(assistant) as rec:
            assisted = greedy(target, ids, NEW_TOKENS, assistant=assistant)
        assert assisted == plain, f"{name} p{pi}: assisted {assisted} != plain {plain}"
        rounds = []
        dl, dh, de = [], [], []
        for r in rec.rounds:
            rr = {k: r[k] for k in ("input_len", "drafts", "accepted", "output_len")}
            rr["bonus"] = plain[r["output_len"] - len(ids) - 1]
            rr["position"] = r["input_len"] - 1
            rr["target_shared_kv_lens"] = (
                {k: v[2] for k, v in r["target_shared_kv_shapes"].items()} if r["target_shared_kv_shapes"] else None
            )
            rr["assistant_kv_lens"] = [c["shared_kv_lens"] for c in r["assistant_calls"]]
            rounds.append(rr)
            for c in r["assistant_calls"]:
                assert c["position_ids"] == [[r["input_len"] - 1]]
                dl.append(c["logits"])
                dh.append(c["h_out"])
                de.append(c["inputs_embeds"])
        # round 0 is the prefill (no drafts): HF's get_candidates skips drafting on the first iteration
        assert rounds[0]["drafts"] == [] and rounds[0]["accepted"] == 0
        emitted = sum(r["accepted"] + 1 for r in rounds)
        assert emitted == NEW_TOKENS, (emitted, rounds)
        for r in rounds:
            assert r["drafts"][: r["accepted"]] == plain[r["input_len"] - len(ids) : r["input_len"] - len(ids) + r["accepted"]]
        # Independent re-derivation (reference_spec_decode, no KV cache): with the "hf" K/V rule it
        # must reproduce HF's every round; the "textbook" rule gives its own (also lossless) trajectory.
        ref = reference_spec_decode(target, assistant, ids, NEW_TOKENS, NUM_ASSISTANT_TOKENS, "hf")
        key = ("input_len", "drafts", "accepted", "output_len")
        assert [{k: r[k] for k in key} for r in ref["rounds"]] == [{k: r[k] for k in key} for r in rounds], (
            f"{name} p{pi}: reference with the HF K/V rule diverges from HF"
        )
        assert ref["tokens"] == plain
        worst = max((a - b).abs().max().item() for a, b in zip(ref["draft_logits"], dl))
        # the same f32 math batched differently: ~1e-5; a wrong K/V rule gives errors >> 1e-2
        assert worst < 1e-3, f"{name} p{pi}: reference draft logits off by {worst}"
        tb = reference_spec_decode(target, assistant, ids, NEW_TOKENS, NUM_ASSISTANT_TOKENS, "textbook")
        assert tb["tokens"] == plain, f"{name} p{pi}: textbook-rule speculative output != plain greedy"
        textbook_rounds = tb["rounds"]
        n_same = sum(a["drafts"] == b["drafts"] for a, b in zip(textbook_rounds, rounds))
        print(
            f"  p{pi}: HF-rule reference reproduces all {len(rounds)} rounds (draft logits max err {worst:.1e}); "
            f"textbook rule: {len(textbook_rounds)} rounds, {n_same} with the same drafts as HF's"
        )
        draft_margins = margins(torch.stack(dl))
        tensors[f"p{pi}.draft_logits"] = torch.stack(dl).contiguous()
        tensors[f"p{pi}.draft_h_out"] = torch.stack(dh).contiguous()
        tensors[f"p{pi}.draft_inputs_embeds"] = torch.stack(de).contiguous()
        runs.append(
            {
                "prompt": ids,
                "plain_greedy": plain,
                "assisted_greedy": assisted,
                "rounds": rounds,
                "num_draft_calls": len(dl),
                "draft_min_margin": min(draft_margins),
                "textbook_rule_rounds": textbook_rounds,
            }
        )
    save_file(tensors, str(d / "logits.safetensors"))
    a = assistant.config
    expected = {
        "fixture": name,
        "kind": "assistant",
        "target_fixture": fx["target"],
        "versions": versions(),
        "generator": "tools/golden/generate.py",
        "seed": fixture_seed(name),
        "noise_std": NOISE_STD,
        "shaping": {"before_noise": fx["echo"], "see": "echo_structure_ in tools/golden/generate.py"},
        "hf_class": type(assistant).__name__,
        "stored_dtype": "float32",
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "use_ordered_embeddings": a.use_ordered_embeddings,
        "num_centroids": a.num_centroids if a.use_ordered_embeddings else None,
        "centroid_intermediate_top_k": a.centroid_intermediate_top_k if a.use_ordered_embeddings else None,
        "backbone_hidden_size": a.backbone_hidden_size,
        "num_assistant_tokens": NUM_ASSISTANT_TOKENS,
        "num_assistant_tokens_schedule": "constant",
        "new_tokens": NEW_TOKENS,
        "layers": layer_specs(assistant),
        "logits_file": "logits.safetensors",
        "logits_note": "per prompt p, one row per assistant forward, in call order (rounds in order, drafts in order): "
        "p{p}.draft_logits [calls, vocab] (centroid head: non-selected entries = min(selected)-1), "
        "p{p}.draft_h_out [calls, backbone_hidden] (post_projection output = next h_prev), "
        "p{p}.draft_inputs_embeds [calls, 2*backbone_hidden] (concat(target_embed(tok)*sqrt(H_target), h_prev))",
        "rounds_note": "round 0 is the target prefill (no drafts). In round r: position = input_len-1 (held constant "
        "for every draft), drafts = assistant proposals, accepted = n_matches, bonus = the target token appended after "
        "the accepted drafts, output_len = input_len + accepted + 1. target_shared_kv_lens: the seq length of the "
        "target's store-layer K/V that the assistant was handed (before HF slices it to input_len); assistant_kv_lens: "
        "after slicing.",
        "prompts": runs,
    }
    write_json(d / "expected.json", expected)
    # validate: reload and reproduce
    a2 = load_assistant(d)
    a2.generation_config.num_assistant_tokens = NUM_ASSISTANT_TOKENS
    a2.generation_config.num_assistant_tokens_schedule = "constant"
    lg = load_file(str(d / "logits.safetensors"))
    for pi, run in enumerate(runs):
        with Recorder(a2) as rec:
            again = greedy(target, run["prompt"], NEW_TOKENS, assistant=a2)
        assert again == run["assisted_greedy"]
        assert [r["drafts"] for r in rec.rounds] == [r["drafts"] for r in run["rounds"]]
        got = torch.stack([c["logits"] for r in rec.rounds for c in r["assistant_calls"]])
        assert torch.equal(got, lg[f"p{pi}.draft_logits"])
    print(f"  validated {name}: reload, assisted == plain, drafts reproducible")
    return {"name": name, "dir": d, "expected": expected}


# --------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="*", default=None, help="fixture names (assistants need their target written)")
    args = ap.parse_args()

    torch.set_num_threads(1)  # reproducible reductions
    torch.use_deterministic_algorithms(True)
    _q4_self_test()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__} -> {args.out}")

    made = []
    for name, fx in TARGETS.items():
        if args.only is None or name in args.only:
            print(f"[target] {name}")
            made.append(make_target(name, fx, args.out))
    for name, fx in ASSISTANTS.items():
        if args.only is None or name in args.only:
            print(f"[assistant] {name}")
            made.append(make_assistant(name, fx, args.out))

    total = 0
    for m in made:
        sizes = file_sizes(m["dir"])
        s = sum(sizes.values())
        total += s
        print(f"  {m['name']}: {s / 1e6:.2f} MB {sizes}")
        assert s < 2_000_000, f"{m['name']} is over 2 MB"
    print(f"total {total / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
