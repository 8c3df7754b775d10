"""openai-agents on its Chat Completions model: an Agent with a function tool, an output type
and `tool_choice="required"`. The first turn must call the tool (a forced call); the SDK then
resets tool_choice to auto, and the reply is either another call or the answer under the
output type's schema (`tools` beside `response_format`), ending in a validated output."""
from typing import Literal

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from common import API_KEY, BASE_URL, MODEL, TIMEOUT, Person, check_person

set_tracing_disabled(True)
ran = []


@function_tool
def tribe_of(name: Literal["Aaron", "Moses", "Judah"]) -> str:
    """The tribe of a person."""
    ran.append(name)
    return "Levi"


model = OpenAIChatCompletionsModel(MODEL, AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, timeout=TIMEOUT,
                                                      max_retries=0))
agent = Agent(name="scribe", instructions="Answer briefly.", model=model, tools=[tribe_of], output_type=Person,
              model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=160))
result = Runner.run_sync(agent, "Tell of Aaron.", max_turns=4)
assert ran, "the forced first turn called no tool"
print("ok:", len(ran), "calls, then", check_person(result.final_output))
