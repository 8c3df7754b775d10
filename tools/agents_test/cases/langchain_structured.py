"""langchain-openai: `with_structured_output` on a Pydantic model with `Field(ge=, le=,
max_length=)` bounds and a nested model, by function calling (a forced tool whose schema has
`$defs`, minimum/maximum, maxLength, maxItems) and by JSON schema (`response_format`)."""
from langchain_openai import ChatOpenAI

from common import API_KEY, BASE_URL, MODEL, TIMEOUT, Person, check_person

llm = ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key=API_KEY, temperature=0, max_tokens=160,
                 timeout=TIMEOUT, max_retries=0)
by_call = llm.with_structured_output(Person, method="function_calling").invoke("Tell of Joseph.")
by_schema = llm.with_structured_output(Person, method="json_schema").invoke("Tell of Joseph.")
print("ok:", check_person(by_call), check_person(by_schema))
