"""langchain-openai: `bind_tools` with a forced tool, the AIMessage's parsed `tool_calls`, the
tool run and a `ToolMessage` back, then the model's answer in text."""
from typing import Literal

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from common import API_KEY, BASE_URL, MODEL, TIMEOUT, no_markup


@tool
def weather(city: Literal["Jerusalem", "Babylon"]) -> str:
    """The weather in a city now."""
    return f"{city}: sun, 21 degrees"


llm = ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key=API_KEY, temperature=0, max_tokens=80,
                 timeout=TIMEOUT, max_retries=0)
messages = [SystemMessage("Answer briefly."), HumanMessage("What is the weather in Jerusalem?")]
ai = llm.bind_tools([weather], tool_choice="weather").invoke(messages)
assert not ai.invalid_tool_calls and len(ai.tool_calls) >= 1, ai
no_markup(ai.content)
messages.append(ai)
for call in ai.tool_calls:
    assert call["name"] == "weather" and call["args"]["city"] in ("Jerusalem", "Babylon"), call
    messages.append(ToolMessage(weather.invoke(call["args"]), tool_call_id=call["id"]))
final = llm.bind_tools([weather]).invoke(messages)
assert isinstance(final.content, str) and final.content and not final.tool_calls, final
no_markup(final.content)
assert final.response_metadata["finish_reason"] in ("stop", "length"), final.response_metadata
print("ok:", ai.tool_calls, repr(final.content))
