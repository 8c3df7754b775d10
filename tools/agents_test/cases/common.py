"""What the agent cases share: the server under test (from run_agents.py's environment) and
the schemas day-one agent code writes, in the shapes Pydantic gives them: a nested model, an
Enum (both become `$defs` / `$ref`) and `Field` bounds (minimum, maximum, minLength,
maxLength, maxItems)."""
import enum
import os

from pydantic import BaseModel, Field

BASE_URL = os.environ["WGEMMA_BASE_URL"]
BUSY_BASE_URL = os.environ.get("WGEMMA_BUSY_BASE_URL", "")
API_KEY = os.environ["WGEMMA_API_KEY"]
MODEL = os.environ["WGEMMA_MODEL"]
TIMEOUT = 200  # seconds, any one request

# The tool markup Gemma 4 writes: never to be seen in an answer's text.
MARKUP = ("<|tool_call>", "<tool_call|>", "<|tool_response>", '<|"|>')


class Tribe(str, enum.Enum):
    JUDAH = "Judah"
    LEVI = "Levi"
    BENJAMIN = "Benjamin"


class Son(BaseModel):
    name: str = Field(min_length=1, max_length=4)


class Person(BaseModel):
    """A person of the Bible."""
    name: str = Field(min_length=1, max_length=6)
    age: int = Field(ge=1, le=99)
    tribe: Tribe
    sons: list[Son] = Field(max_length=1)


def client(**kw):
    import openai
    return openai.OpenAI(base_url=BASE_URL, api_key=API_KEY, timeout=TIMEOUT, **kw)


def check_person(p):
    """`p` (a Person, already validated by Pydantic) within the bounds, checked again here
    so that a client that skipped validation cannot pass."""
    p = Person.model_validate(p.model_dump() if isinstance(p, BaseModel) else p)
    assert 1 <= len(p.name) <= 6 and 1 <= p.age <= 99 and len(p.sons) <= 1, p
    return p


def no_markup(text):
    assert text is None or not any(m in text for m in MARKUP), f"tool markup in the text: {text!r}"
