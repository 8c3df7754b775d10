"""openai: overload answered as clients expect. A server with one sequence and a queue of one
answers a burst with 429 or 503 and a `Retry-After` header (seconds, from the queue's expected
wait); the official client honours it and every request of the burst ends answered within its
default retries."""
import concurrent.futures
import http.client
import json
import urllib.parse

import openai

from common import API_KEY, BUSY_BASE_URL, MODEL, TIMEOUT

url = urllib.parse.urlparse(BUSY_BASE_URL)
body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Who was Moses?"}],
                   "max_tokens": 12, "temperature": 0})


def raw():
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=TIMEOUT)
    conn.request("POST", url.path + "/chat/completions", body=body,
                 headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    return r.status, r.getheader("Retry-After")


with concurrent.futures.ThreadPoolExecutor(6) as pool:
    answers = list(pool.map(lambda _: raw(), range(6)))
refused = [(s, h) for s, h in answers if s != 200]
assert refused and all(s in (429, 503) and h and h.isdigit() and int(h) >= 1 for s, h in refused), answers

c = openai.OpenAI(base_url=BUSY_BASE_URL, api_key=API_KEY, timeout=TIMEOUT)  # the default 2 retries
ask = dict(model=MODEL, messages=[{"role": "user", "content": "Who was Moses?"}], max_tokens=4, temperature=0)
with concurrent.futures.ThreadPoolExecutor(3) as pool:
    done = list(pool.map(lambda _: c.chat.completions.create(**ask).choices[0].finish_reason, range(3)))
assert all(f in ("stop", "length") for f in done), done
print("ok:", answers, done)
