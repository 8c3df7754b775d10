"""openai: `strict: true` tools under `tool_choice: "auto"` (what `pydantic_function_tool` and
openai-agents send by default): the model answers or calls, and a call follows the strict
tool's schema; a strict schema the server cannot enforce is a 400 naming `tools`, since a
grammar now holds such calls."""
import json

import openai

from common import MODEL, Person, client, no_markup

c = client(max_retries=0)
person = openai.pydantic_function_tool(Person, name="record_person", description="Record a person of the Bible.")
assert person["function"]["strict"] is True, person
ask = [{"role": "user", "content": "Record Moses, of the tribe of Levi, aged 80, with his son Gershom."}]
r = c.chat.completions.create(model=MODEL, messages=ask, tools=[person], tool_choice="auto", max_tokens=40,
                              temperature=1.0, seed=3)
choice = r.choices[0]
no_markup(choice.message.content)
for call in choice.message.tool_calls or []:
    assert call.function.name == "record_person", call
    Person.model_validate(json.loads(call.function.arguments))
assert choice.finish_reason in ("stop", "length", "tool_calls"), choice
calls = len(choice.message.tool_calls or [])

unique = {"type": "function", "function": {"name": "tag", "strict": True, "parameters": {
    "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
    "required": ["tags"], "additionalProperties": False}}}
try:
    c.chat.completions.create(model=MODEL, messages=ask, tools=[unique], max_tokens=8)
except openai.BadRequestError as e:
    assert e.body["param"] == "tools" and "uniqueItems" in e.body["message"], e.body
else:
    raise AssertionError("a strict schema with uniqueItems was taken under auto")
print("ok:", calls, "calls, each valid")
