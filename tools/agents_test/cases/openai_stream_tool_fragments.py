"""openai: a streamed forced call arrives as OpenAI sends one: a first delta with the call's
index, id, type and name, then its arguments in fragments as they are decoded, whose
concatenation is the JSON text of the whole answer's arguments."""
import json

from common import MODEL, client

c = client(max_retries=0)
tool = {"type": "function", "function": {"name": "record", "parameters": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                     "age": {"type": "integer", "minimum": 1, "maximum": 999}},
    "required": ["name", "age"]}}}
kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell of Moses."}], tools=[tool],
          tool_choice="required", parallel_tool_calls=False, max_tokens=80, temperature=0)
whole = c.chat.completions.create(**kw).choices[0].message.tool_calls[0]
deltas = [d for ch in c.chat.completions.create(stream=True, **kw) if ch.choices
          for d in ch.choices[0].delta.tool_calls or []]
assert deltas[0].id.startswith("call_") and deltas[0].function.name == "record" and deltas[0].type == "function", deltas[0]
assert all(d.index == 0 for d in deltas) and all(d.id is None and d.function.name is None for d in deltas[1:]), deltas
fragments = [d.function.arguments for d in deltas if d.function.arguments]
assert len(fragments) >= 3, f"the arguments came in {len(fragments)} pieces: {fragments}"
assert json.loads("".join(fragments)) == json.loads(whole.function.arguments), (fragments, whole)
print("ok:", len(fragments), "fragments of", whole.function.arguments)
