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

# Tools in OpenAI's shape (what `apply_chat_template(tools=...)` takes), with keys in sorted
# order so that any map order renders alike.
WEATHER = {"type": "function", "function": {
    "description": "The weather in a city now, in degrees",
    "name": "get_weather",
    "parameters": {"properties": {"city": {"enum": ["Paris", "Rome"], "type": "string"},
                                  "days": {"type": "integer"}},
                   "required": ["city"], "type": "object"}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"properties": {}, "type": "object"}}}

# Conversations with tools (the calls and the tools' responses on the assistant message, as
# Gemma 4 keeps them in the model's turn), rendered only by the templates that read tools.
TOOL_CONVERSATIONS = {
    "tools_declared": {"tools": [WEATHER, TIME], "messages": [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Weather in Paris?"},
    ]},
    "tool_call_answered": {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris for 2 days?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Paris", "days": 2}}},
                        {"type": "function", "function": {"name": "get_time", "arguments": {}}}],
         "tool_responses": [{"name": "get_weather", "response": {"degrees": 21, "sky": "clear, \"blue\" {x}"}},
                            {"name": "get_time", "response": "noon"}]},
    ]},
    "tool_history": {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Looking.",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Rome", "flag": True, "x": None}}}],
         "tool_responses": [{"name": "get_weather", "response": [1, 2.5]}]},
        {"role": "user", "content": "Thanks."},
    ]},
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
        if "tools" not in path.name:
            continue
        for name, conv in TOOL_CONVERSATIONS.items():
            for gen in (True, False):
                case = {"template": path.name, "conversation": name, "add_generation_prompt": gen}
                case["text"] = tok.apply_chat_template(
                    conv["messages"], tools=conv["tools"], tokenize=False, add_generation_prompt=gen)
                cases.append(case)
    out = {
        "generator": "tools/chat_template/generate.py",
        "versions": {"transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__,
                     "python": sys.version.split()[0]},
        "conversations": {**CONVERSATIONS, **{k: v["messages"] for k, v in TOOL_CONVERSATIONS.items()}},
        "tools": {k: v["tools"] for k, v in TOOL_CONVERSATIONS.items()},
        "cases": cases,
    }
    (DIR / "expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases written")


if __name__ == "__main__":
    main()
