#!/usr/bin/env python3
"""Corpus -> chapters -> train / held-out split -> tokenizer.json -> token id arrays.

    python tools/train/prepare.py --corpus /tmp/wgemma-train/kjv.txt --out /tmp/wgemma-train/data

Chapters are the unit: the text of every 20th chapter (index % 20 == 10) is held out; the
tokenizer is trained on the training chapters only. Each chapter is written as
"<Book> <n>\\n<verse>\\n<verse>...\\n" (verse numbers dropped) and chapters are joined by a
blank line. Writes tokenizer.json, train.npy / val.npy (uint16 ids, one stream each, chapters
joined), held_out.txt (the held-out chapters as text) and prepare.json (hashes, sizes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 8192
# Gemma's four base ids (pad 0, eos 1, bos 2, unk 3), then mask and Gemma 4's chat markers.
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>"]
HELD_OUT_EVERY, HELD_OUT_AT = 20, 10


def chapters(text: str) -> list[str]:
    out, cur = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            if cur is None:
                raise ValueError(f"verse before any chapter heading: {line[:60]!r}")
            cur.append(m.group(1).strip())
        else:
            if cur:
                out.append("\n".join(cur) + "\n")
            cur = [line.strip()]
    if cur:
        out.append("\n".join(cur) + "\n")
    return out


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    raw = args.corpus.read_bytes()
    chs = chapters(raw.decode("utf-8"))
    if len(chs) != 1189:
        raise ValueError(f"expected the 1189 chapters of the KJV, found {len(chs)}")
    train = [c for i, c in enumerate(chs) if i % HELD_OUT_EVERY != HELD_OUT_AT]
    held = [c for i, c in enumerate(chs) if i % HELD_OUT_EVERY == HELD_OUT_AT]

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(train, trainer)
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    if tok.get_vocab_size() > VOCAB:
        raise ValueError(f"tokenizer has {tok.get_vocab_size()} tokens, expected <= {VOCAB}")
    args.out.mkdir(parents=True, exist_ok=True)
    tok.save(str(args.out / "tokenizer.json"))

    def ids(chs: list[str]) -> np.ndarray:
        # Chapters joined by a blank line, as in the text; encoded one chapter at a time.
        enc = [tok.encode(c + "\n") for c in chs]
        return np.concatenate([np.asarray(e.ids, dtype=np.uint16) for e in enc])

    tr, va = ids(train), ids(held)
    # Round trip: the byte-level tokenizer must reproduce the text exactly.
    assert tok.decode(tok.encode(held[0]).ids) == held[0]
    np.save(args.out / "train.npy", tr)
    np.save(args.out / "val.npy", va)
    (args.out / "held_out.txt").write_text("\n".join(held))
    info = {
        "corpus": "King James Version of the Bible, Debian bible-kjv-text 4.38 (public domain)",
        "corpus_sha256": sha256(raw),
        "chapters": len(chs),
        "train_chapters": len(train),
        "held_out_chapters": len(held),
        "held_out_rule": f"chapter index % {HELD_OUT_EVERY} == {HELD_OUT_AT}",
        "vocab_size": tok.get_vocab_size(),
        "specials": SPECIALS,
        "train_tokens": int(tr.size),
        "val_tokens": int(va.size),
        "tokenizer_sha256": sha256((args.out / "tokenizer.json").read_bytes()),
        "train_ids_sha256": sha256(tr.tobytes()),
        "val_ids_sha256": sha256(va.tobytes()),
    }
    (args.out / "prepare.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
