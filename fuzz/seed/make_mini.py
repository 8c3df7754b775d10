#!/usr/bin/env python3
"""Writes mini/ : a 2-layer Gemma 4 text checkpoint (vocab 16, hidden 8, head_dim 8, f32,
no PLE) small enough to seed the fuzz corpora; `wgemma convert` turns it into the seed
artifact. Deterministic (a fixed LCG), no dependencies."""
import json, os, struct, sys

out = sys.argv[1] if len(sys.argv) > 1 else "mini"
os.makedirs(out, exist_ok=True)
config = {
    "model_type": "gemma4_text", "vocab_size": 16, "hidden_size": 8,
    "intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 8, "global_head_dim": 8, "sliding_window": 4,
    "final_logit_softcapping": 30.0, "eos_token_id": 1,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                           "partial_rotary_factor": 0.25}},
}
H, I, D, NH, NKV, V = 8, 8, 8, 2, 1, 16
shapes = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
for l in range(2):
    p = f"model.layers.{l}."
    shapes.update({
        p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
        p + "pre_feedforward_layernorm.weight": [H], p + "post_feedforward_layernorm.weight": [H],
        p + "layer_scalar": [1],
        p + "self_attn.q_proj.weight": [NH * D, H], p + "self_attn.k_proj.weight": [NKV * D, H],
        p + "self_attn.v_proj.weight": [NKV * D, H], p + "self_attn.o_proj.weight": [H, NH * D],
        p + "self_attn.q_norm.weight": [D], p + "self_attn.k_norm.weight": [D],
        p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
        p + "mlp.down_proj.weight": [H, I],
    })
state = 12345
def rnd():
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    return ((state >> 33) / (1 << 31) - 0.5) * 0.5
header, data = {}, b""
for name in sorted(shapes):
    n = 1
    for d in shapes[name]:
        n *= d
    vals = [1.0] if name.endswith("layer_scalar") else [rnd() for _ in range(n)]
    blob = struct.pack(f"<{n}f", *vals)
    header[name] = {"dtype": "F32", "shape": shapes[name], "data_offsets": [len(data), len(data) + len(blob)]}
    data += blob
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f)
