"""pydantic-ai: an Agent whose output type is a nested Pydantic model (its output tool's
schema has `$defs`, bounds and an Enum), run with `run_sync`: the forced output call comes
back valid on the first request, with no retry prompt. (An Agent with a function tool beside
the output is left out: which tool this Bible model calls first is its own choice, and it may
call the function again and again until the run's request limit.)"""
from pydantic_ai import Agent, UsageLimits
from pydantic_ai.messages import RetryPromptPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from common import API_KEY, BASE_URL, MODEL, Person, check_person

model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=BASE_URL, api_key=API_KEY))
settings = {"temperature": 0, "max_tokens": 160}
agent = Agent(model, output_type=Person, model_settings=settings)
r = agent.run_sync("Tell of Aaron.", usage_limits=UsageLimits(request_limit=2))
parts = [p for m in r.all_messages() for p in getattr(m, "parts", [])]
assert not [p for p in parts if isinstance(p, RetryPromptPart)], parts
print("ok:", check_person(r.output))
