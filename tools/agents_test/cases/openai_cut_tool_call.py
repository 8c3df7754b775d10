"""openai: a forced call cut by `max_tokens` ends with finish_reason "length", the part of the
call written so far parsed into `tool_calls` (the name, the arguments' text so far), and never
the raw call markup in `content`, whole or streamed: agent code must not take it for an answer."""
from common import MODEL, client, no_markup

c = client(max_retries=0)
tool = {"type": "function", "function": {"name": "record", "parameters": {
    "type": "object", "properties": {"story": {"type": "string", "minLength": 200}}, "required": ["story"]}}}
kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell of Moses."}], tools=[tool],
          tool_choice="required", max_tokens=40, temperature=0)
choice = c.chat.completions.create(**kw).choices[0]
assert choice.finish_reason == "length", choice
no_markup(choice.message.content)
assert choice.message.content in (None, ""), choice.message
(call,) = choice.message.tool_calls
assert call.function.name == "record" and call.function.arguments.startswith('{"story":"'), call
chunks = [ch for ch in c.chat.completions.create(stream=True, **kw) if ch.choices]
text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
no_markup(text)
assert not text and chunks[-1].choices[0].finish_reason == "length", chunks[-1]
names = [d.function.name for ch in chunks for d in ch.choices[0].delta.tool_calls or [] if d.function.name]
assert names == ["record"], names
print("ok:", call.function.arguments)
