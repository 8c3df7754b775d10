"""openai and raw HTTP: what llama-server clients rely on beyond the schemas: GET
/v1/models/{id} (and a 404 for another id), a request without `model` answered by the one
model, and an alias (`--alias`) accepted as the model's id."""
import http.client
import json
import urllib.parse

import openai

from common import API_KEY, BASE_URL, MODEL, TIMEOUT, client

c = client(max_retries=0)
assert c.models.retrieve(MODEL).id == MODEL
try:
    c.models.retrieve("no-such-model")
    raise AssertionError("another model id was found")
except openai.NotFoundError as e:
    assert "no-such-model" in str(e), e
ids = [m.id for m in c.models.list().data]
assert ids[0] == MODEL and "gemma-4-e2b-it" in ids, ids
r = c.chat.completions.create(model="gemma-4-e2b-it", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
assert r.choices[0].finish_reason in ("stop", "length"), r

url = urllib.parse.urlparse(BASE_URL)
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=TIMEOUT)
conn.request("POST", url.path + "/chat/completions", headers={"Authorization": f"Bearer {API_KEY}",
             "Content-Type": "application/json"},
             body=json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}))
resp = conn.getresponse()
got = json.loads(resp.read())
assert resp.status == 200 and got["model"] == MODEL, (resp.status, got)
print("ok:", ids)
