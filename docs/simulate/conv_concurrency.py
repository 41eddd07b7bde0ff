#!/usr/bin/env python3
"""Derives a `simulate` metric trace from the Azure LLM conversation trace (CC BY 4.0, Microsoft
Azure, "Azure LLM inference trace 2023", Patel et al., Splitwise, ISCA 2024).

Per 15 s bucket, the fleet's concurrency by Little's law: C = arrival rate x mean time in service,
with a request's service time = prompt / prefill rate + output tokens x decode step time (the
defaults of shared/spec/load-model.md). The scaler watches the per-replica average
(`avg(vllm:num_requests_running + vllm:num_requests_waiting)`), i.e. C / ready, so the trace is
closed-loop: the value at a row depends on how many replicas the engine had made ready by then.
The loop runs the real `llmscaler simulate` binary once per row (it is the only engine) and
reads back the `ready` it modelled.

usage: conv_concurrency.py LLMSCALER_BIN SCALER.yaml TRACE.csv OUT.csv [--scale 2] [--startup 90]
"""
import argparse
import csv
import datetime as dt
import subprocess
import sys
import tempfile

PREFILL_TOKENS_PER_S = 12000.0
STEP_S = 0.012 + 0.00035 * 32  # decode step time at a half-full batch
BUCKET_S = 15


def concurrency(trace_path, scale):
    buckets = {}
    start = None
    with open(trace_path, newline="") as f:
        for row in csv.DictReader(f):
            t = dt.datetime.fromisoformat(row["TIMESTAMP"][:26])
            start = start or t
            k = int((t - start).total_seconds() // BUCKET_S)
            service = int(row["ContextTokens"]) / PREFILL_TOKENS_PER_S + int(row["GeneratedTokens"]) * STEP_S
            buckets[k] = buckets.get(k, 0.0) + service
    n = max(buckets) + 1
    # Little's law over a bucket: work (request-seconds) arriving per second of wall time.
    return [scale * buckets.get(k, 0.0) / BUCKET_S for k in range(n)]


def run(binary, scaler, rows, startup):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("t,concurrency\n")
        for t, v in rows:
            f.write(f"{t},{v}\n")
    out = subprocess.run(
        [binary, "simulate", "--scaler", scaler, "--metrics", f.name, "--startup-seconds", str(startup)],
        check=True, capture_output=True, text=True,
    ).stdout
    return list(csv.DictReader(out.splitlines()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary"); p.add_argument("scaler"); p.add_argument("trace"); p.add_argument("out")
    p.add_argument("--scale", type=float, default=2.0)
    p.add_argument("--startup", type=float, default=90.0)
    a = p.parse_args()
    demand = concurrency(a.trace, a.scale)
    rows = []
    for k, c in enumerate(demand):
        probe = run(a.binary, a.scaler, rows + [(k * BUCKET_S, 0)], a.startup)
        ready = max(int(probe[-1]["ready"]), 1)
        rows.append((k * BUCKET_S, round(c / ready, 3)))
    with open(a.out, "w") as f:
        f.write("t,concurrency\n")
        f.writelines(f"{t},{v}\n" for t, v in rows)
    print(f"{len(rows)} rows, peak fleet concurrency {max(demand):.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
