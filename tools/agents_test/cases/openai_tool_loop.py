"""openai: a hand-written tool loop as agent code writes it: a call forced with
`tool_choice: "required"`, the tool run and its result sent back as a `tool` message beside
the assistant message that made the call, then the model's own answer in text."""
import json

from common import MODEL, client, no_markup

c = client(max_retries=0)
weather = {"type": "function", "function": {
    "name": "weather", "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Jerusalem", "Babylon"]},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
        "required": ["city"], "additionalProperties": False}}}


def run_weather(city, unit="celsius"):
    return {"city": city, "degrees": 21 if unit == "celsius" else 70}


messages = [{"role": "user", "content": "What is the weather in Jerusalem?"}]
calls_run = 0
for turn in range(3):
    r = c.chat.completions.create(model=MODEL, messages=messages, tools=[weather], max_tokens=80, temperature=0,
                                  tool_choice="required" if turn == 0 else "auto")
    msg = r.choices[0].message
    no_markup(msg.content)
    if not msg.tool_calls:
        assert r.choices[0].finish_reason in ("stop", "length") and msg.content, r.choices[0]
        break
    assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
    messages.append(msg.model_dump(exclude_none=True))
    for call in msg.tool_calls:
        result = run_weather(**json.loads(call.function.arguments))
        calls_run += 1
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
else:
    raise AssertionError(f"no answer after 3 turns: {messages}")
assert calls_run >= 1, messages
print("ok:", calls_run, "calls, then", repr(msg.content))
