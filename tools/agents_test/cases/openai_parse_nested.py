"""openai: `chat.completions.parse` with a nested Pydantic model (an Enum, a list of a nested
model, Field bounds: `$defs` / `$ref` in the schema) as the response format, and the same model
as a forced `openai.pydantic_function_tool` (a strict tool): both parse and validate."""
import openai

from common import MODEL, Person, check_person, client, no_markup

c = client(max_retries=0)
ask = [{"role": "user", "content": "Tell of Aaron the priest."}]
r = c.chat.completions.parse(model=MODEL, messages=ask, response_format=Person, max_tokens=120, temperature=0)
msg = r.choices[0].message
assert r.choices[0].finish_reason == "stop", r.choices[0]
check_person(msg.parsed)

tool = openai.pydantic_function_tool(Person, name="record_person")
assert "$defs" in tool["function"]["parameters"] and tool["function"]["strict"], tool
r = c.chat.completions.parse(model=MODEL, messages=ask, tools=[tool], max_tokens=160, temperature=0,
                             tool_choice={"type": "function", "function": {"name": "record_person"}})
choice = r.choices[0]
assert choice.finish_reason == "tool_calls", choice
no_markup(choice.message.content)
(call,) = choice.message.tool_calls
assert call.function.name == "record_person" and call.id.startswith("call_"), call
print("ok:", check_person(msg.parsed), check_person(call.function.parsed_arguments))
