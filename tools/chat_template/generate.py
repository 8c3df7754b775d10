#!/usr/bin/env python3
"""Expected renderings of the chat-template fixtures, from HF transformers' own
`apply_chat_template` (not run in CI; see README.md beside this script).

Writes crates/wgemma/tests/data/chat_templates/expected.json: for every template in that
folder and every conversation below, the text HF renders (tokenize=False) with and without
the generation prompt, or the message of the error the template raises.
"""
import json
import pathlib
import sys

import tokenizers
import transformers
from transformers import PreTrainedTokenizerFast

ROOT = pathlib.Path(__file__).resolve().parents[2]
DIR = ROOT / "crates/wgemma/tests/data/chat_templates"

CONVERSATIONS = {
    "one_user": [{"role": "user", "content": "Why is the sky blue?"}],
    "system_user": [
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": "Why is the sky blue?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Name a colour."},
    ],
    "whitespace_unicode": [
        {"role": "user", "content": "  leading and trailing  \n"},
        {"role": "assistant", "content": "\tTabs\tand\nnewlines, é, 中文, \"quotes\" <tags> & {{ braces }}"},
        {"role": "user", "content": "STOP here? no: STOP is only at the start"},
    ],
    "break_early": [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "STOP now"},
        {"role": "assistant", "content": "never shown"},
    ],
    "not_alternating": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
    "unknown_role": [
        {"role": "user", "content": "call it"},
        {"role": "tool", "content": "42"},
    ],
}


def tokenizer(template):
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>"])}
    model = tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>")
    tok = tokenizers.Tokenizer(model)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
        pad_token="<pad>", chat_template=template)


def main():
    cases = []
    for path in sorted(DIR.glob("*.jinja")):
        tok = tokenizer(path.read_text())
        for name, messages in CONVERSATIONS.items():
            for gen in (True, False):
                case = {"template": path.name, "conversation": name, "add_generation_prompt": gen}
                try:
                    case["text"] = tok.apply_chat_template(
                        messages, tokenize=False, add_generation_prompt=gen)
                except Exception as e:  # the template's raise_exception
                    case["error"] = str(e)
                cases.append(case)
    out = {
        "generator": "tools/chat_template/generate.py",
        "versions": {"transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__,
                     "python": sys.version.split()[0]},
        "conversations": CONVERSATIONS,
        "cases": cases,
    }
    (DIR / "expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases written")


if __name__ == "__main__":
    main()
