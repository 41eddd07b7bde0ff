"""Closed-loop load on an OpenAI-compatible completions endpoint, for e2e/real-vllm-test.

usage: load.py URL MODEL CONCURRENCY SECONDS [PROMPT_TOKENS] [MAX_TOKENS]

Each of CONCURRENCY workers sends one request after another for SECONDS: token-id prompts of
PROMPT_TOKENS (50) with `ignore_eos`, so each request must generate exactly MAX_TOKENS (16);
even-numbered requests stream (SSE), odd ones do not. A request counts as failed on an HTTP error,
an error event in the stream, a stream that ends before `[DONE]` or with fewer tokens, or no
answer within 120 s (a hung stream). Prints one JSON object: ok, failed, by kind, TTFT and latency
percentiles, the first errors.
"""
import asyncio
import json
import sys
import time

import aiohttp

url, model = sys.argv[1], sys.argv[2]
concurrency, seconds = int(sys.argv[3]), float(sys.argv[4])
prompt_tokens = int(sys.argv[5]) if len(sys.argv) > 5 else 50
max_tokens = int(sys.argv[6]) if len(sys.argv) > 6 else 16
ok = {"stream": 0, "plain": 0}
failed = {"stream": 0, "plain": 0}
ttfts, latencies, errors = [], [], []


async def one(session, i):
    stream = i % 2 == 0
    kind = "stream" if stream else "plain"
    body = {
        "model": model,
        "prompt": [((i * 7 + k) % 3000) + 3 for k in range(prompt_tokens)],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    start = time.monotonic()
    first, tokens, done = None, 0, False
    try:
        timeout = aiohttp.ClientTimeout(total=120)
        async with session.post(url, json=body, timeout=timeout) as r:
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:160]}")
            if not stream:
                answer = await r.json()
                first = time.monotonic()
                tokens = answer["usage"]["completion_tokens"]
                done = True
            else:
                async for line in r.content:
                    if line.startswith(b"data: [DONE]"):
                        done = True
                    elif line.startswith(b"data: "):
                        event = json.loads(line[6:])
                        if "error" in event:
                            raise RuntimeError(f"error event: {str(event)[:160]}")
                        first = first or time.monotonic()
                        usage = event.get("usage")
                        if usage:
                            tokens = usage.get("completion_tokens", tokens)
        if not done or tokens < max_tokens:
            raise RuntimeError(f"truncated: {tokens} tokens, done={done}")
        ok[kind] += 1
        ttfts.append(first - start)
        latencies.append(time.monotonic() - start)
    except Exception as e:  # every failure is counted, none is fatal
        failed[kind] += 1
        if len(errors) < 5:
            errors.append(f"{kind}: {e!r}"[:200])


async def main():
    deadline = time.monotonic() + seconds
    counter = iter(range(10**9))

    async def worker(session):
        while time.monotonic() < deadline:
            await one(session, next(counter))

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))


def pct(values, q):
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3) if values else None


asyncio.run(main())
print(json.dumps({
    "ok": sum(ok.values()), "failed": sum(failed.values()), "ok_by_kind": ok,
    "failed_by_kind": failed, "ttft_p50_s": pct(ttfts, 0.5), "ttft_p95_s": pct(ttfts, 0.95),
    "latency_p50_s": pct(latencies, 0.5), "latency_p95_s": pct(latencies, 0.95),
    "first_errors": errors,
}))
