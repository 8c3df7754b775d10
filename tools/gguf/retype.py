#!/usr/bin/env python3
"""Rewrite a GGUF file's quantised matrices in other ggml types, with random blocks of the
same amplitude: E2B-shaped Q8_0 / Q4_K_M / Q6_K / Q5_K_M files for speed runs (wgemma bench
against llama-bench on the same file) from the Q4_0 one a random-weight writer makes.

Every metadata key and every non-quantised tensor is copied as it is; each quantised matrix
becomes random blocks of the recipe's type for that tensor (Q4_K_M / Q5_K_M: llama-quantize's
mix, tools/gguf/kquant.py's `q4_k_m_types`), scaled so its values span about the same range
as the input's (read from the first block's scale). For speed only: the values are noise.

Usage: python3 tools/gguf/retype.py IN.gguf OUT.gguf --recipe Q8_0|Q6_K|Q5_K_M|Q4_K_M
       [--gguf-py DIR] [--seed N]
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BLOCK = {"Q8_0": (32, 34), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}


def random_blocks(np, rng, ty, rows, cols, amplitude):
    """[rows, cols] as random blocks of `ty` whose values stay within about +-amplitude."""
    elems, size = BLOCK[ty]
    nb = cols // elems
    b = np.frombuffer(rng.bytes(rows * nb * size), dtype=np.uint8).reshape(rows, nb, size).copy()

    def f16(field, v):
        b[:, :, field : field + 2] = np.array([v], dtype=np.float16).view(np.uint8)

    if ty == "Q8_0":
        f16(0, amplitude / 127)
    elif ty in ("Q4_K", "Q5_K"):
        f16(0, amplitude / (63 * (15 if ty == "Q4_K" else 31)))
        f16(2, amplitude / 63 / 2)
    else:  # Q6_K: i8 scales, q - 32 in -32..31
        f16(208, amplitude / (127 * 32))
    return b.reshape(rows, nb * size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--recipe", required=True, choices=["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M"])
    ap.add_argument("--gguf-py", default=os.environ.get("GGUF_PY"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.gguf_py:
        sys.path.insert(0, args.gguf_py)
    import numpy as np

    try:
        import yaml  # noqa: F401
    except ImportError:
        import types

        sys.modules["yaml"] = types.ModuleType("yaml")
    import gguf
    import kquant

    rng = np.random.default_rng(args.seed)
    r = gguf.GGUFReader(args.inp)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(args.out, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        val = f.contents()
        if name == "general.file_type":
            val = {"Q8_0": 7, "Q6_K": 18, "Q5_K_M": 17, "Q4_K_M": 15}[args.recipe]
        w.add_key_value(name, val, vtype, sub_type=sub)
    quantised = [t for t in r.tensors if t.tensor_type not in (gguf.GGMLQuantizationType.F32,
                                                               gguf.GGMLQuantizationType.F16)]
    n_layer = int(r.fields[f"{arch}.block_count"].contents())
    dims = {t.name: [int(d) for d in t.shape] for t in quantised}
    shapes = [(n, dims[n]) for n in kquant.gguf_tensor_order(list(dims))]
    k_types = kquant.q4_k_m_types(shapes, n_layer) if args.recipe.endswith("_K_M") else {}
    for t in r.tensors:
        if t not in quantised:
            w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed([int(d) for d in t.shape])),
                         raw_dtype=t.tensor_type)
            continue
        cols, rows = int(t.shape[0]), int(np.prod(t.shape[1:]))
        ty = k_types.get(t.name, args.recipe) if k_types else args.recipe
        if args.recipe == "Q5_K_M" and ty == "Q4_K":
            ty = "Q5_K"
        if ty not in BLOCK or cols % BLOCK[ty][0]:
            ty = "Q8_0"
        # Q4_0's first f16 is d = amplitude / 8.
        d = float(np.frombuffer(np.asarray(t.data).reshape(-1)[:2].tobytes(), dtype=np.float16)[0])
        q = random_blocks(np, rng, ty, rows, cols, abs(d) * 8 or 0.05)
        shape = list(reversed([int(x) for x in t.shape]))[:-1] + [q.shape[1]]
        w.add_tensor(t.name, q.reshape(shape), raw_shape=shape, raw_dtype=gguf.GGMLQuantizationType[ty])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
