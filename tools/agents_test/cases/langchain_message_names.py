"""langchain-openai: messages with a `name` (`HumanMessage(name=...)`, which langchain sends as
the message's `name`, as OpenAI, llama-server and vLLM accept), and llama.cpp's and vLLM's
extra request fields through `extra_body`: `chat_template_kwargs` reaches the template and
`cache_prompt` is taken."""
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from common import API_KEY, BASE_URL, MODEL, TIMEOUT, no_markup

llm = ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key=API_KEY, temperature=0, max_tokens=8, timeout=TIMEOUT,
                 max_retries=0, extra_body={"chat_template_kwargs": {"enable_thinking": False}, "cache_prompt": True})
answer = llm.invoke([SystemMessage("Answer briefly.", name="rules"), HumanMessage("Who was Moses?", name="aaron"),
                     AIMessage("A prophet.", name="scribe"), HumanMessage("And Aaron?", name="aaron")])
assert isinstance(answer.content, str) and answer.content, answer
no_markup(answer.content)
print("ok:", repr(answer.content))
