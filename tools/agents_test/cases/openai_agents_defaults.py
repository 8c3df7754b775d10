"""openai-agents with its defaults (the Responses API, POST /v1/responses): an agent with an
output type (a JSON schema as `text.format`) run whole and streamed (the same output from the
Responses events), and a tool forced with `tool_choice="required"` whose call the SDK runs
before the final answer. (A plain-text agent ends `incomplete` with this Bible model, which
never closes its answer before the budget: the SDK rightly raises on that.)"""
import asyncio
from typing import Literal

from agents import Agent, ModelSettings, Runner, function_tool, set_default_openai_client, set_tracing_disabled
from openai import AsyncOpenAI

from common import API_KEY, BASE_URL, MODEL, TIMEOUT, Person, check_person

set_tracing_disabled(True)
set_default_openai_client(AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, timeout=TIMEOUT, max_retries=0))
settings = ModelSettings(temperature=0, max_tokens=160)

typed = Agent(name="scribe", instructions="Answer briefly.", model=MODEL, output_type=Person, model_settings=settings)
ran = []


@function_tool
def tribe_of(name: Literal["Aaron", "Moses"]) -> str:
    """The tribe of a person."""
    ran.append(name)
    return "Levi"


tooled = Agent(name="scribe", model=MODEL, tools=[tribe_of], output_type=Person,
               model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=160))


async def main():
    whole = check_person((await Runner.run(typed, "Tell of Aaron.", max_turns=2)).final_output)
    run = Runner.run_streamed(typed, "Tell of Aaron.", max_turns=2)
    kinds = [e.type async for e in run.stream_events()]
    assert "raw_response_event" in kinds, kinds
    assert check_person(run.final_output) == whole, (run.final_output, whole)
    out = (await Runner.run(tooled, "Tell of Aaron.", max_turns=4)).final_output
    assert ran, "the forced first turn called no tool"
    print("ok:", whole, len(ran), "calls,", check_person(out))


asyncio.run(main())
