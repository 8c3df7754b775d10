"""instructor: a nested Pydantic response model (Enum, nested list, Field bounds) in its
default TOOLS mode (a forced call whose schema has `$defs`), and its retry loop: a validator
that refuses the first answer makes instructor send the call back with the error as a tool
message, and the second answer is taken. (Its JSON_SCHEMA mode is `response_format`, which
openai_parse_nested and langchain_structured cover.)"""
import instructor
import openai
from pydantic import field_validator

from common import API_KEY, BASE_URL, MODEL, TIMEOUT, Person, check_person

raw = openai.OpenAI(base_url=BASE_URL, api_key=API_KEY, timeout=TIMEOUT, max_retries=0)
ask = [{"role": "user", "content": "Tell of Levi."}]
c = instructor.from_openai(raw, mode=instructor.Mode.TOOLS)
p = c.chat.completions.create(model=MODEL, response_model=Person, messages=ask, max_tokens=200,
                              temperature=0, max_retries=0)
print("ok: tools mode", check_person(p))

seen = []


class Checked(Person):
    @field_validator("name")
    @classmethod
    def refuse_the_first(cls, v):
        seen.append(v)
        if len(seen) == 1:
            raise ValueError("write the name again")
        return v


p = c.chat.completions.create(model=MODEL, response_model=Checked, messages=ask, max_tokens=200,
                              temperature=0, max_retries=2)
assert len(seen) == 2, seen
print("ok: retried once:", check_person(p))
