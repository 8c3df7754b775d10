"""openai: chat, streaming, seeds and logprobs through the official client: a sampled answer
with a seed comes back the same whole and streamed, with one logprob entry per token."""
from common import MODEL, client, no_markup

c = client(max_retries=0)
ask = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who was Moses?"}]
kw = dict(model=MODEL, messages=ask, max_tokens=8, temperature=0.8, seed=7)
r = c.chat.completions.create(logprobs=True, top_logprobs=2, **kw)
choice = r.choices[0]
assert choice.finish_reason in ("stop", "length") and choice.message.role == "assistant", choice
assert choice.message.content and choice.message.tool_calls is None, choice
no_markup(choice.message.content)
assert len(choice.logprobs.content) == r.usage.completion_tokens, (choice.logprobs, r.usage)
assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in choice.logprobs.content), choice.logprobs
streamed = [ch for ch in c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)]
text = "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices)
assert text == choice.message.content, (text, choice.message.content)
assert streamed[-1].usage.completion_tokens == r.usage.completion_tokens, streamed[-1]
print("ok:", repr(text))
