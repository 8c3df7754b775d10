#!/usr/bin/env python3
"""Write wgemma's GGUF test fixtures with the `gguf` Python package (llama.cpp's gguf-py).

Outputs (committed under crates/wgemma/tests/data/gguf/; not run in CI):

- dequant_reference.gguf: for each of F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q5_K, Q4_1,
  Q5_0, Q5_1, a tensor
  `<TYPE>.blocks` of random blocks stored in that type and `<TYPE>.expected` (F32), the
  values `gguf.quants.dequantize` gives for them. Block scales (f16 `d`, `dmin`) are drawn
  finite; every other byte is random, so every nibble, 6-bit scale and sign pattern occurs.
- e2b_like.f32.gguf: the golden fixture `e2b_like` (HF checkpoint, f32) written as
  llama.cpp's converter writes a gemma4 model (metadata keys, tensor names through
  gguf-py's tensor_mapping, rope_freqs for proportional RoPE), every tensor F32: wgemma
  must give bit-identical logits from it and from the HF directory, at every dtype.
- fuzz/corpus/gguf_reader/mini-f32.gguf: the fuzz corpus's 2-layer checkpoint
  (`fuzz/corpus/checkpoint_config/mini`) as a GGUF seed.
- e2b_like_assistant.f32.gguf: the golden assistant `e2b_like_assistant` as a
  gemma4-assistant file (F32; `embedding_length_out` = the target's hidden size; the
  centroid head's top-k under `gemma4-assistant.centroid_intermediate_top_k`, a key
  llama.cpp does not define: its converter writes none).
- e2b_like.q4_0.gguf: the same model with every matrix whose rows allow it in Q4_0 and the
  embedding tables in Q8_0 (llama.cpp's quantised files keep token_embd at 6-8 bits), norms
  F32. The fixture's rows (64, 128, 192 wide) are not multiples of 256, so no K-quant
  applies to them (llama-quantize falls back the same way); Q4_K / Q6_K are covered by the
  bit-exact dequantisation fixture and by the load tests' synthetic tensors.

- k_quant.q4_k_m.gguf: the golden fixture `k_quant` (rows of 256, bf16) as llama-quantize's
  Q4_K_M writes it: the tensor types of `llama_tensor_get_type` (Q6_K for the tied
  token_embd and for attn_v / ffn_down where `use_more_bits` says so, Q4_K for every other
  matrix, norms F32), blocks from tools/gguf/kquant.py (a numpy port of ggml's reference
  K-quant quantisers: the `gguf` package dequantises K-quants but cannot quantise them).
  The blocks must hash to what tools/golden/generate.py recorded in that fixture's
  expected.json, where the HF logits of the model on their dequantised values are the
  reference (variant `q4_k_m`). It carries a 256-token gemma4 tokenizer and a chat template
  (`tokenizer.chat_template`: tests/data/chat_templates/merged_system.jinja), as
  published files do.
- k_quant.q5_k_m.gguf, k_quant.q6_k.gguf, k_quant.q8_0.gguf: the same model as Q5_K_M
  (the Q4_K_M mix with Q5_K for Q4_K), every matrix in Q6_K, every matrix in Q8_0 (blocks
  from kquant.py and the `gguf` package): the per-type accuracy of tests/integration/gguf.rs against
  the fixture's HF logits on its unquantised weights (variant `f32`).

Usage: python3 tools/gguf/make_fixtures.py [--gguf-py DIR] [--out DIR] [--only FILE ...]
  DIR: gguf-py of a llama.cpp checkout (or `pip install gguf numpy`: PyPI's gguf 0.19.0
  writes everything but the assistant, whose gemma4-assistant architecture it lacks);
  default $GGUF_PY.
"""

import argparse
import hashlib
import json
import os
import struct
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kquant  # noqa: E402  (llama.cpp's K-quants and Q4_K_M recipe, in numpy)
from kquant import hf_to_gguf_name  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.path.join(ROOT, "crates/wgemma/tests/data/golden")


def read_safetensors(raw, np):
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        if info["dtype"] == "BF16":  # exact in f32: the bf16 bits are its top half
            bits = np.frombuffer(raw[base + a : base + b], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(info["shape"])
            continue
        dt = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}[info["dtype"]]
        out[name] = np.frombuffer(raw[base + a : base + b], dtype=dt).reshape(info["shape"])
    return out


def dequant_reference(gguf, np, out):
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(out, "wgemma-dequant-reference")
    T = gguf.GGMLQuantizationType

    def f16_bytes(n, lo, hi):
        return np.asarray(rng.uniform(lo, hi, n) * rng.choice([-1, 1], n), dtype=np.float16).view(np.uint8).reshape(n, 2)

    cases = [
        (T.F32, 256, 4, None),
        (T.F16, 256, 2, None),
        (T.BF16, 256, 2, None),
        (T.Q8_0, 64 * 32, 34, [(0, 2)]),
        (T.Q4_0, 64 * 32, 18, [(0, 2)]),
        (T.Q4_K, 16 * 256, 144, [(0, 2), (2, 4)]),
        (T.Q6_K, 16 * 256, 210, [(208, 210)]),
        (T.Q5_K, 16 * 256, 176, [(0, 2), (2, 4)]),
        (T.Q4_1, 64 * 32, 20, [(0, 2), (2, 4)]),
        (T.Q5_0, 64 * 32, 22, [(0, 2)]),
        (T.Q5_1, 64 * 32, 24, [(0, 2), (2, 4)]),
    ]
    for qt, elements, block_bytes, scale_fields in cases:
        name = qt.name
        if qt == T.F32:
            values = rng.standard_normal(elements).astype(np.float32)
            blocks = values.view(np.uint8)
        elif qt in (T.F16, T.BF16):
            blocks = rng.integers(0, 256, elements * 2, dtype=np.uint8)
            halves = blocks.view(np.uint16)
            if qt == T.F16:  # keep them finite: exponent bits not all ones
                halves &= np.uint16(0xBBFF)
            else:
                halves &= np.uint16(0xBF7F)
        else:
            block_elems = gguf.GGML_QUANT_SIZES[qt][0]
            nb = elements // block_elems
            blocks = rng.integers(0, 256, (nb, block_bytes), dtype=np.uint8)
            for a, b in scale_fields:
                blocks[:, a:b] = f16_bytes(nb, 1e-3, 2.0)
            blocks = blocks.reshape(-1)
        # one row of `elements` values, stored as the raw blocks of `qt`
        raw = blocks.reshape(1, -1)
        expected = gguf.quants.dequantize(raw, qt).astype(np.float32).reshape(-1)
        assert expected.size == elements and np.all(np.isfinite(expected)), name
        w.add_tensor(f"{name}.blocks", raw, raw_shape=raw.shape, raw_dtype=qt)
        w.add_tensor(f"{name}.expected", expected)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def golden(np, fixture):
    d = os.path.join(GOLDEN, fixture)
    cfg = json.load(open(os.path.join(d, "config.json")))
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        tensors = read_safetensors(f.read(), np)
    return cfg.get("text_config", cfg), tensors


def gemma4_gguf(gguf, np, fixture, tc, tensors, out, recipe, assistant=None, expected=None, tokenizer=None):
    """`recipe`: None (every tensor F32), "Q4_0" (Q4_0 matrices, Q8_0 tables), "Q4_K_M" or
    "Q5_K_M" (llama-quantize's mixes, tools/gguf/kquant.py), "Q6_K" or "Q8_0" (every matrix
    in that type, as llama-quantize's Q6_K / Q8_0 write them). `assistant`: the assistant's config.json
    (a gemma4-assistant file), else None. `expected`: the golden fixture's expected.json,
    whose recipe section lists the blocks the file must hold (checked by SHA-256).
    `tokenizer`: writes the tokenizer metadata (else the file has none)."""
    arch = gguf.MODEL_ARCH.GEMMA4_ASSISTANT if assistant else gguf.MODEL_ARCH.GEMMA4
    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch])
    if assistant:
        # What llama.cpp's gemma4-assistant loader reads beside the gemma4 keys; the
        # centroid head's top-k has no llama.cpp key (it drafts with the dense lm_head):
        # wgemma reads this one when present.
        w.add_embedding_length_out(assistant["backbone_hidden_size"])
        if assistant.get("use_ordered_embeddings"):
            w.add_uint32(f"{gguf.MODEL_ARCH_NAMES[arch]}.centroid_intermediate_top_k",
                         assistant["centroid_intermediate_top_k"])
    n_layer = tc["num_hidden_layers"]
    tmap = gguf.get_tensor_name_map(arch, n_layer)
    layer_types = tc["layer_types"]
    swa = [t == "sliding_attention" for t in layer_types]
    head_dim_swa = tc["head_dim"]
    per_layer = tc.get("per_layer_config") or {}
    head_dim_full = tc.get("global_head_dim") or next(
        (v["head_dim"] for v in per_layer.values() if "head_dim" in v), head_dim_swa
    )
    shared = tc.get("num_kv_shared_layers", 0)
    # what Gemma3Model / Gemma4Model.set_gguf_parameters write
    w.add_name(f"wgemma-golden-{fixture}")
    w.add_block_count(n_layer)
    w.add_context_length(tc.get("max_position_embeddings", 131072))
    w.add_embedding_length(tc["hidden_size"])
    ff = tc["intermediate_size"]
    first_shared = n_layer - shared
    if tc.get("use_double_wide_mlp"):
        w.add_feed_forward_length([ff if i < first_shared else 2 * ff for i in range(n_layer)])
    else:
        w.add_feed_forward_length(ff)
    w.add_head_count(tc["num_attention_heads"])
    kv_swa = tc["num_key_value_heads"]
    kv_full = tc.get("num_global_key_value_heads")
    if kv_full is not None:
        w.add_head_count_kv([kv_swa if s else kv_full for s in swa])
    else:
        w.add_head_count_kv(kv_swa)
    w.add_layer_norm_rms_eps(tc.get("rms_norm_eps", 1e-6))
    w.add_key_length(head_dim_full)
    w.add_value_length(head_dim_full)
    w.add_key_length_swa(head_dim_swa)
    w.add_value_length_swa(head_dim_swa)
    rope = tc["rope_parameters"]
    w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_rope_dimension_count(head_dim_full)
    w.add_rope_dimension_count_swa(head_dim_swa)
    if tc.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(tc["final_logit_softcapping"])
    w.add_sliding_window(tc["sliding_window"])
    w.add_sliding_window_pattern(swa)
    w.add_shared_kv_layers(shared)
    w.add_embedding_length_per_layer_input(tc.get("hidden_size_per_layer_input") or 0)
    if tc.get("enable_moe_block"):
        w.add_expert_count(tc["num_experts"])
        w.add_expert_used_count(tc["top_k_experts"])
        w.add_expert_feed_forward_length(tc["moe_intermediate_size"])
    w.add_bos_token_id(tc.get("bos_token_id", 2))
    w.add_eos_token_id(tc.get("eos_token_id", 1))
    w.add_pad_token_id(tc.get("pad_token_id", 0))
    if tokenizer is not None:
        tokenizer(w)
    w.add_file_type(
        {
            None: gguf.LlamaFileType.ALL_F32,
            "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
            "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M,
            "Q5_K_M": gguf.LlamaFileType.MOSTLY_Q5_K_M,
            "Q6_K": gguf.LlamaFileType.MOSTLY_Q6_K,
            "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        }[recipe]
    )
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    factor = rope["full_attention"].get("partial_rotary_factor", 1.0)
    n_rot = int(head_dim_full * factor / 2)
    freqs = np.array([1.0] * n_rot + [1e30] * (head_dim_full // 2 - n_rot), dtype=np.float32)
    w.add_tensor("rope_freqs.weight", freqs)
    gguf_names = {name: hf_to_gguf_name(gguf, tmap, name) for name in tensors}
    k_types = {}
    if recipe in ("Q4_K_M", "Q5_K_M"):
        order = kquant.gguf_tensor_order(gguf_names.values())
        by_gguf = {g: tensors[h] for h, g in gguf_names.items()}
        k_types = kquant.q4_k_m_types([(g, list(reversed(by_gguf[g].shape))) for g in order], n_layer)
        if recipe == "Q5_K_M":  # llama-quantize's Q5_K_M: the same mix one step up
            k_types = {g: ("Q5_K" if t == "Q4_K" else t) for g, t in k_types.items()}
    want = (expected or {}).get((recipe or "").lower(), {}).get("quantised_tensors", {})
    for name in sorted(tensors):
        new = gguf_names[name]
        if tensors[name].dtype.kind in "iu":  # the assistant's token_ordering
            w.add_tensor(new, np.ascontiguousarray(tensors[name]))
            continue
        a = np.ascontiguousarray(tensors[name].astype(np.float32))
        qt = None
        if recipe == "Q4_0" and a.ndim >= 2 and a.shape[-1] % 32 == 0:
            qt = "Q8_0" if "token_embd" in new else "Q4_0"
        elif recipe in ("Q4_K_M", "Q5_K_M"):
            qt = k_types[new]
        elif recipe == "Q8_0" and a.ndim >= 2 and a.shape[-1] % 32 == 0:
            qt = "Q8_0"
        elif recipe == "Q6_K" and a.ndim >= 2:
            qt = "Q6_K" if a.shape[-1] % 256 == 0 else "Q8_0" if a.shape[-1] % 32 == 0 else None
        if qt is None:
            w.add_tensor(new, a)
            continue
        q = kquant.quantize_any(gguf, a.reshape(-1, a.shape[-1]), qt)
        if recipe == "Q4_K_M":
            # The blocks the HF reference was run on (tools/golden/generate.py).
            got = hashlib.sha256(q.tobytes()).hexdigest()
            assert want[name]["type"] == qt and want[name]["blocks_sha256"] == got, name
        q = q.reshape(*a.shape[:-1], -1)
        w.add_tensor(new, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType[qt])
    if recipe == "Q4_K_M":
        assert set(want) == {h for h, g in gguf_names.items() if k_types.get(g)}, "tensor sets differ"
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def small_gemma4_tokenizer(gguf, w, vocab, template):
    """A `vocab`-token Gemma-4-style tokenizer (llama.cpp's `gemma4` model: BPE over
    SentencePiece pieces, `▁` for spaces) and a chat template, as a real file carries them:
    the special tokens at Gemma's ids (0 pad, 1 eos, 2 bos, 3 unk) and its turn markers, the
    characters of plain English text, then pieces of two and three characters from merges."""
    T = gguf.TokenType
    specials = [("<pad>", T.CONTROL), ("<eos>", T.CONTROL), ("<bos>", T.CONTROL), ("<unk>", T.UNKNOWN),
                ("<|turn>", T.CONTROL), ("<turn|>", T.CONTROL)]
    chars = ["\n", "\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    chars += [chr(c) for c in range(ord("A"), ord("Z") + 1)] + list("0123456789.,!?:;'\"-()/")
    tokens = [t for t, _ in specials] + chars
    types = [ty for _, ty in specials] + [T.NORMAL] * len(chars)
    merges = []
    frequent = "etaoinshrdlucmwfgypb"
    pairs = [("\u2581", c) for c in frequent] + [(a, b) for a in frequent for b in frequent]
    pairs += [("\u2581" + a, b) for a in frequent for b in frequent]
    for a, b in pairs:
        if len(tokens) == vocab:
            break
        if a in tokens and b in tokens and a + b not in tokens:
            merges.append(f"{a} {b}")
            tokens.append(a + b)
            types.append(T.NORMAL)
    assert len(tokens) == vocab, len(tokens)
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eot_token_id(tokens.index("<turn|>"))
    w.add_chat_template(template)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf-py", default=os.environ.get("GGUF_PY"))
    ap.add_argument("--out", default=os.path.join(ROOT, "crates/wgemma/tests/data/gguf"))
    ap.add_argument("--only", nargs="*", help="file names to write (default: all)")
    args = ap.parse_args()
    if args.gguf_py:
        sys.path.insert(0, args.gguf_py)
    import numpy as np

    try:
        import yaml  # noqa: F401  (gguf-py's metadata module imports it; unused here)
    except ImportError:
        sys.modules["yaml"] = types.ModuleType("yaml")
    import gguf

    os.makedirs(args.out, exist_ok=True)
    out = lambda name: os.path.join(args.out, name)  # noqa: E731

    def target(fixture, name, recipe, tokenizer=None):
        tc, tensors = golden(np, fixture)
        expected = json.load(open(os.path.join(GOLDEN, fixture, "expected.json")))
        gemma4_gguf(gguf, np, fixture, tc, tensors, out(name), recipe, expected=expected, tokenizer=tokenizer)

    def k_quant_tokenizer(w):
        # A template HF renders in tests/data/chat_templates (merges a system turn into the
        # first user turn, so it differs from wgemma's built-in format).
        with open(os.path.join(ROOT, "crates/wgemma/tests/data/chat_templates/merged_system.jinja")) as f:
            small_gemma4_tokenizer(gguf, w, 256, f.read())

    def assistant():
        acfg = json.load(open(os.path.join(GOLDEN, "e2b_like_assistant", "config.json")))
        atc, atensors = golden(np, "e2b_like_assistant")
        gemma4_gguf(gguf, np, "e2b_like_assistant", atc, atensors, out("e2b_like_assistant.f32.gguf"), None,
                    assistant=acfg)

    def fuzz_seed():
        # The fuzz corpus's 2-layer checkpoint as a GGUF (its rows of 8 are too short for
        # any block format; quant-blocks.gguf in that corpus is a copy of
        # dequant_reference.gguf, truncated the first 300 bytes of mini-f32.gguf).
        seeds = os.path.join(ROOT, "fuzz/corpus/gguf_reader")
        os.makedirs(seeds, exist_ok=True)
        with open(os.path.join(ROOT, "fuzz/corpus/checkpoint_config/mini"), "rb") as f:
            raw = f.read()
        split = raw.index(b"\0")
        tc, tensors = json.loads(raw[:split]), read_safetensors(raw[split + 1 :], np)
        gemma4_gguf(gguf, np, "mini", tc, tensors, os.path.join(seeds, "mini-f32.gguf"), None)

    writers = {
        "dequant_reference.gguf": lambda: dequant_reference(gguf, np, out("dequant_reference.gguf")),
        "e2b_like.f32.gguf": lambda: target("e2b_like", "e2b_like.f32.gguf", None),
        "e2b_like.q4_0.gguf": lambda: target("e2b_like", "e2b_like.q4_0.gguf", "Q4_0"),
        "k_quant.q4_k_m.gguf": lambda: target("k_quant", "k_quant.q4_k_m.gguf", "Q4_K_M", k_quant_tokenizer),
        "k_quant.q5_k_m.gguf": lambda: target("k_quant", "k_quant.q5_k_m.gguf", "Q5_K_M", k_quant_tokenizer),
        "k_quant.q6_k.gguf": lambda: target("k_quant", "k_quant.q6_k.gguf", "Q6_K", k_quant_tokenizer),
        "k_quant.q8_0.gguf": lambda: target("k_quant", "k_quant.q8_0.gguf", "Q8_0", k_quant_tokenizer),
        "e2b_like_assistant.f32.gguf": assistant,
        "mini-f32.gguf": fuzz_seed,
    }
    for name in args.only or writers:
        if name not in writers:
            raise SystemExit(f"--only {name}: one of {', '.join(writers)}")
        if name == "e2b_like_assistant.f32.gguf" and not hasattr(gguf.MODEL_ARCH, "GEMMA4_ASSISTANT"):
            raise SystemExit(
                "this gguf package has no gemma4-assistant architecture (PyPI's gguf 0.19.0 does not):"
                " pass --gguf-py DIR of a newer llama.cpp checkout, or --only the other files"
            )
        writers[name]()
    for f in sorted(os.listdir(args.out)):
        print(f, os.path.getsize(os.path.join(args.out, f)))


if __name__ == "__main__":
    main()
