"""ggml's K-quant quantisers (Q4_K, Q5_K, Q6_K) in numpy, and llama-quantize's Q4_K_M recipe.

The `gguf` Python package dequantises K-quants but cannot quantise them
(`gguf.quants.quantize` raises NotImplementedError for Q4_K / Q6_K), so this module ports
ggml's reference quantisers (`ggml-quants.c`: `quantize_row_q4_K_ref` and
`quantize_row_q5_K_ref` with `make_qkx2_quants`, `quantize_row_q6_K_ref` with `make_qx_quants`; no importance matrix,
which is what `llama-quantize` without `--imatrix` runs), vectorised over blocks in float32.
The block formats are exactly ggml's; sums run in numpy's order, so a block can differ in
the last bit of a scale from llama-quantize's. What a file holds is checked by dequantising
it with the `gguf` package (`gguf.quants.dequantize`), never with this module.

`q4_k_m_type` is `llama_tensor_get_type` (src/llama-quant.cpp) for LLAMA_FTYPE_MOSTLY_Q4_K_M,
restricted to what a Gemma 4 file holds. Used by tools/gguf/make_fixtures.py (writes the GGUF)
and tools/golden/generate.py (the HF reference on the GGUF's dequantised weights).
"""

import numpy as np

QK_K = 256
GROUP_MAX_EPS = np.float32(1e-15)
F32 = np.float32


def nearest_int(v):
    """ggml's nearest_int: round half to even (the 1.5 * 2^23 trick)."""
    return np.rint(v).astype(np.int32)


def f16_round(v):
    """The float32 value of GGML_FP32_TO_FP16(v)."""
    return np.asarray(v, dtype=np.float32).astype(np.float16).astype(np.float32)


def _make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep):
    """make_qkx2_quants (use_mad = false) over the last axis. Returns (scale, the_min, L)."""
    mn = np.minimum(x.min(-1), F32(0))
    mx = x.max(-1)
    sum_w = w.sum(-1, dtype=F32)
    sum_x = (w * x).sum(-1, dtype=F32)
    flat = mx == mn
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = F32(nmax) / (mx - mn)
        scale = F32(1) / iscale
        L = np.clip(nearest_int(iscale[..., None] * (x - mn[..., None])), 0, nmax)
        diff = scale[..., None] * L + mn[..., None] - x
        best = (w * diff * diff).sum(-1, dtype=F32)
        for step in range(nstep + 1):
            iscale = (F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / (mx - mn)
            laux = np.clip(nearest_int(iscale[..., None] * (x - mn[..., None])), 0, nmax)
            lf = laux.astype(F32)
            sum_l = (w * lf).sum(-1, dtype=F32)
            sum_l2 = (w * lf * lf).sum(-1, dtype=F32)
            sum_xl = (w * lf * x).sum(-1, dtype=F32)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            pos = this_min > 0
            this_min = np.where(pos, F32(0), this_min)
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
            diff = this_scale[..., None] * lf + this_min[..., None] - x
            err = (w * diff * diff).sum(-1, dtype=F32)
            better = (det > 0) & (err < best) & ~flat
            L = np.where(better[..., None], laux, L)
            best = np.where(better, err, best)
            scale = np.where(better, this_scale, scale)
            mn = np.where(better, this_min, mn)
    L = np.where(flat[..., None], 0, L)
    scale = np.where(flat, F32(0), scale)
    return scale.astype(F32), (-mn).astype(F32), L


def _k_blocks(rows, nmax, rmin, rdelta, nstep):
    """The common part of quantize_row_q4_K_ref / q5_K_ref: rows [n, k] (k % 256 == 0) as
    super-blocks of 8 sub-blocks of 32. Returns (d, dmin, the 12 packed scale bytes,
    levels L [blocks, 8, 32] in 0..=nmax)."""
    rows = np.ascontiguousarray(rows, dtype=F32)
    x = rows.reshape(-1, 8, 32)
    av_x = np.sqrt((x * x).sum(-1, dtype=F32) / F32(32))
    w = av_x[..., None] + np.abs(x)
    scales, mins, L = _make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep)
    max_scale = np.maximum(scales.max(-1), F32(0))
    max_min = np.maximum(mins.max(-1), F32(0))
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0))
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0))
    ls = np.minimum(63, nearest_int(inv_scale[:, None] * scales).astype(np.uint8))
    lm = np.minimum(63, nearest_int(inv_min[:, None] * mins).astype(np.uint8))
    packed = np.zeros((x.shape[0], 12), np.uint8)
    packed[:, 0:4] = ls[:, 0:4]
    packed[:, 4:8] = lm[:, 0:4]
    packed[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    packed[:, 0:4] |= (ls[:, 4:8] >> 4) << 6
    packed[:, 4:8] |= (lm[:, 4:8] >> 4) << 6
    d = f16_round(max_scale / F32(63))
    dmin = f16_round(max_min / F32(63))
    sub_d = d[:, None] * ls.astype(F32)
    sub_m = dmin[:, None] * lm.astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        requant = np.clip(nearest_int((x + sub_m[..., None]) / sub_d[..., None]), 0, nmax)
    L = np.where((sub_d != 0)[..., None], requant, L).astype(np.uint8)
    return d, dmin, packed, L


def _halves(v):
    return v.astype(np.float16).view(np.uint8).reshape(-1, 2)


def quantize_q4_k(rows):
    """Rows [n, k] (k % 256 == 0) -> Q4_K blocks, uint8 [n, k / 256 * 144]."""
    n = rows.shape[0]
    d, dmin, packed, L = _k_blocks(rows, 15, -1.0, 0.1, 20)
    L = L.reshape(-1, 4, 2, 32)
    qs = (L[:, :, 0, :] | (L[:, :, 1, :] << 4)).reshape(-1, 128)
    out = np.concatenate([_halves(d), _halves(dmin), packed, qs], axis=1)
    return out.reshape(n, -1)


def quantize_q5_k(rows):
    """Rows [n, k] (k % 256 == 0) -> Q5_K blocks, uint8 [n, k / 256 * 176]
    (`quantize_row_q5_K_ref`: make_qkx2_quants(31, -0.5, 0.1, 15); the fifth bit of
    sub-block s's element l is bit s of qh[l])."""
    n = rows.shape[0]
    d, dmin, packed, L = _k_blocks(rows, 31, -0.5, 0.1, 15)
    qh = np.zeros((L.shape[0], 32), np.uint8)
    for s in range(8):
        qh |= ((L[:, s, :] >> 4) & 1) << s
    lo = (L & 0xF).reshape(-1, 4, 2, 32)
    qs = (lo[:, :, 0, :] | (lo[:, :, 1, :] << 4)).reshape(-1, 128)
    out = np.concatenate([_halves(d), _halves(dmin), packed, qh, qs], axis=1)
    return out.reshape(n, -1)


def _make_qx_quants_rmse1(x, nmax):
    """make_qx_quants(rmse_type = 1, no weights) over the last axis. Returns (scale, L)."""
    ax = np.abs(x)
    amax = ax.max(-1)
    mx = np.take_along_axis(x, ax.argmax(-1)[..., None], -1)[..., 0]
    zero = amax < GROUP_MAX_EPS
    w = x * x

    def sums(iscale):
        l = np.clip(nearest_int(iscale[..., None] * x), -nmax, nmax - 1)
        lf = l.astype(F32)
        return l, (w * x * lf).sum(-1, dtype=F32), (w * lf * lf).sum(-1, dtype=F32)

    with np.errstate(divide="ignore", invalid="ignore"):
        l, sumlx, suml2 = sums(F32(-nmax) / mx)
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0))
        best = scale * sumlx
        for step in range(-9, 10):
            if step == 0:
                continue
            l2, slx, sl2 = sums(-(F32(nmax) + F32(0.1) * F32(step)) / mx)
            better = (sl2 > 0) & (slx * slx > best * sl2)
            l = np.where(better[..., None], l2, l)
            scale = np.where(better, slx / sl2, scale)
            best = np.where(better, scale * slx, best)
    L = np.where(zero[..., None], 0, l + nmax)
    return np.where(zero, F32(0), scale).astype(F32), L


def quantize_q6_k(rows):
    """Rows [n, k] (k % 256 == 0) -> Q6_K blocks, uint8 [n, k / 256 * 210]."""
    rows = np.ascontiguousarray(rows, dtype=F32)
    n, k = rows.shape
    x = rows.reshape(-1, 16, 16)
    scales, L = _make_qx_quants_rmse1(x, 32)
    pick = np.abs(scales).argmax(-1)
    max_scale = np.take_along_axis(scales, pick[:, None], -1)[:, 0]
    zero = np.abs(max_scale) < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = F32(-128) / max_scale
        d = f16_round(F32(1) / iscale)
        sc = np.minimum(127, nearest_int(iscale[:, None] * scales))
        sc = np.where(zero[:, None], 0, sc).astype(np.int8)
        sub_d = d[:, None] * sc.astype(F32)
        requant = np.clip(nearest_int(x / sub_d[..., None]), -32, 31) + 32
    L = np.where((sub_d != 0)[..., None], requant, L)
    L = np.where(zero[:, None, None], 0, L).astype(np.uint8).reshape(-1, 2, 4, 32)
    ql = np.concatenate(
        [L[:, :, 0] & 0xF | (L[:, :, 2] & 0xF) << 4, L[:, :, 1] & 0xF | (L[:, :, 3] & 0xF) << 4],
        axis=2,
    ).reshape(-1, 128)
    qh = (
        (L[:, :, 0] >> 4) | (L[:, :, 1] >> 4) << 2 | (L[:, :, 2] >> 4) << 4 | (L[:, :, 3] >> 4) << 6
    ).reshape(-1, 64)
    d = np.where(zero, F32(0), d).astype(np.float16).view(np.uint8).reshape(-1, 2)
    ql = np.where(zero[:, None], 0, ql)
    qh = np.where(zero[:, None], 0, qh)
    out = np.concatenate([ql, qh, sc.view(np.uint8), d], axis=1).astype(np.uint8)
    return out.reshape(n, -1)


def use_more_bits(i_layer, n_layers):
    """llama-quant.cpp's use_more_bits: the first and last eighth, and every third between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def q4_k_m_types(names_and_shapes, n_layer):
    """The ggml type name llama-quantize gives each GGUF tensor in a Q4_K_M file
    (llama_tensor_get_type, LLAMA_FTYPE_MOSTLY_Q4_K_M, no imatrix, no overrides), for a
    Gemma 4 file with tied embeddings. `names_and_shapes`: (GGUF name, ggml dims [ne0, ...])
    in llama.cpp's tensor order (by layer, then by name). None: kept as converted."""
    out = {}
    n_attention_wv = sum(1 for name, _ in names_and_shapes if "attn_v.weight" in name)
    i_attention_wv = 0
    i_ffn_down = 0
    for name, dims in names_and_shapes:
        quantised = (
            len(dims) >= 2
            and name.endswith("weight")
            and "_norm.weight" not in name
            and "ffn_gate_inp.weight" not in name
            and "per_layer_model_proj" not in name
        )
        if not quantised:
            out[name] = None
            continue
        ty = "Q4_K"
        if name in ("token_embd.weight", "per_layer_token_embd.weight"):
            # Tied embeddings: the token table is quantised as the output tensor would be.
            ty = "Q6_K" if dims[0] % QK_K == 0 else "Q8_0"
        elif "attn_v.weight" in name:
            if use_more_bits(i_attention_wv, n_attention_wv):
                ty = "Q6_K"
            i_attention_wv += 1
        elif "ffn_down" in name:
            if use_more_bits(i_ffn_down, n_layer):
                ty = "Q6_K"
            i_ffn_down += 1
        if dims[0] % QK_K != 0:  # tensor_type_fallback
            ty = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}.get(ty, ty)
        if ty == "Q5_0":
            raise SystemExit(f"{name}: row of {dims[0]} -> Q5_0, which wgemma does not read")
        out[name] = ty
    return out


def gguf_tensor_order(names):
    """llama.cpp's weights_map order: by block index (non-block tensors first), then name."""

    def key(name):
        parts = name.split(".")
        layer = int(parts[1]) if parts[0] == "blk" else -1
        return (layer, name)

    return sorted(names, key=key)


def quantize(rows, ty):
    """Rows [n, k] as ggml type `ty` ("Q4_K" / "Q5_K" / "Q6_K"): raw blocks, uint8 [n, row bytes]."""
    return {"Q4_K": quantize_q4_k, "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k}[ty](rows)


def quantize_any(gguf, rows, ty):
    """Rows [n, k] as ggml type name `ty`: K-quants by this module, the others by the `gguf`
    package (Q8_0, Q4_0, ...)."""
    if ty in ("Q4_K", "Q5_K", "Q6_K"):
        return quantize(rows, ty)
    return gguf.quants.quantize(np.ascontiguousarray(rows, dtype=F32), gguf.GGMLQuantizationType[ty])


def hf_to_gguf_name(gguf, tmap, name):
    """What convert_hf_to_gguf.py's Gemma4Model names an HF tensor (`tmap`: gguf-py's
    tensor name map for the architecture)."""
    name = name.replace("model.language_model.", "model.")
    if name.endswith("layer_scalar"):
        name += ".weight"
    bid = None
    parts = name.split(".")
    if len(parts) > 2 and parts[1] == "layers":
        bid = int(parts[2])
    if name.endswith("router.scale"):
        return gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.FFN_GATE_INP].format(bid=bid) + ".scale"
    if name.endswith("router.per_expert_scale"):
        return gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.FFN_DOWN_EXP].format(bid=bid) + ".scale"
    if ".experts." in name and not name.endswith(".weight"):
        name += ".weight"
    new = tmap.get_name(name, try_suffixes=(".weight", ".bias", ".scale"))
    if new is None:
        raise SystemExit(f"no gguf name for {name}")
    return new
