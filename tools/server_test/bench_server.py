#!/usr/bin/env python3
"""Aggregate throughput of a running `wgemma serve` at several numbers of concurrent
streams, and time to first token under load (from the server's /metrics, which counts it
from each request's arrival, queueing included). Standard library only.

    wgemma synth-checkpoint --shape e2b --out /tmp/e2b && wgemma serve --model /tmp/e2b --port 8080 &
    bench_server.py --url http://127.0.0.1:8080 --model e2b --concurrency 1,4,8 --requests 16 --max-tokens 128

Prompts are token ids (a synthetic checkpoint has no tokenizer), greedy. Prints one JSON
line per concurrency: requests, completion tokens, wall seconds, aggregate tokens/s,
mean time to first token.
"""
import argparse
import concurrent.futures
import http.client
import json
import time
import urllib.parse


def request(url, key, method, path, body=None):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data}")
    return data


def metrics(url, key):
    out = {}
    for line in request(url, key, "GET", "/metrics").splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=262144, help="prompt ids are drawn below this")
    args = ap.parse_args()

    def one(i):
        prompt = [2] + [10 + (i * 7919 + j * 104729) % (args.vocab - 10) for j in range(args.prompt_len - 1)]
        body = {"model": args.model, "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0}
        return json.loads(request(args.url, args.api_key, "POST", "/v1/completions", body))["usage"]["completion_tokens"]

    one(0)  # warm-up: plans built, caches touched
    for c in [int(x) for x in args.concurrency.split(",")]:
        before = metrics(args.url, args.api_key)
        t = time.time()
        with concurrent.futures.ThreadPoolExecutor(c) as pool:
            tokens = sum(pool.map(one, range(args.requests)))
        wall = time.time() - t
        after = metrics(args.url, args.api_key)
        n = after["wgemma_time_to_first_token_seconds_count"] - before["wgemma_time_to_first_token_seconds_count"]
        ttft = (after["wgemma_time_to_first_token_seconds_sum"] - before["wgemma_time_to_first_token_seconds_sum"]) / max(n, 1)
        print(json.dumps({"concurrency": c, "requests": args.requests, "completion_tokens": tokens,
                          "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 1),
                          "mean_ttft_ms": round(ttft * 1e3, 1)}), flush=True)


if __name__ == "__main__":
    main()
