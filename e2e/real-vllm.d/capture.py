"""Captures a real vLLM's /metrics exposition in three states, as test fixtures (issue 22 item 4).

usage: capture.py PORT SERVER_PID OUT_DIR

The server must be `e2e/real-vllm serve PORT --max-num-seqs 2 --shutdown-timeout 30` (so a
burst of 16 concurrent requests forms a queue, and SIGTERM drains instead of aborting). Writes
OUT_DIR/idle.txt (after start-up, nothing sent yet), OUT_DIR/saturated.txt (mid-burst: running 2,
waiting > 0) and OUT_DIR/draining.txt (after SIGTERM, requests still in flight). Sends traffic
only to 127.0.0.1; every loop is bounded.
"""
import asyncio
import os
import signal
import sys
import time

import aiohttp

PORT, PID, OUT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
BASE = f"http://127.0.0.1:{PORT}"


async def get_metrics(s):
    async with s.get(f"{BASE}/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r:
        return await r.text()


def gauge(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def one(s, i, tokens):
    body = {
        "prompt": [((i * 7 + k) % 3000) + 3 for k in range(64)],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": i % 2 == 0,
    }
    try:
        async with s.post(f"{BASE}/v1/completions", json=body,
                          timeout=aiohttp.ClientTimeout(total=120)) as r:
            await r.read()
            return r.status
    except Exception as e:  # a refused or cut request is counted, not raised
        return repr(e)[:80]


async def wait_until(s, pred, what, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = await get_metrics(s)
        if pred(text):
            return text
        await asyncio.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


async def main():
    os.makedirs(OUT, exist_ok=True)
    async with aiohttp.ClientSession() as s:
        # One request first, so histograms and counters have samples in every fixture.
        await one(s, 0, 8)
        await asyncio.sleep(1)
        open(f"{OUT}/idle.txt", "w").write(await get_metrics(s))
        burst = [asyncio.create_task(one(s, i, 256)) for i in range(16)]
        text = await wait_until(
            s, lambda t: (gauge(t, "vllm:num_requests_waiting") or 0) > 0, "a queue")
        open(f"{OUT}/saturated.txt", "w").write(text)
        os.kill(PID, signal.SIGTERM)
        await asyncio.sleep(0.3)
        try:
            open(f"{OUT}/draining.txt", "w").write(await get_metrics(s))
        except Exception as e:
            print("no /metrics while draining:", repr(e))
        statuses = await asyncio.gather(*burst)
        print("burst statuses:", statuses)


asyncio.run(main())
