"""Prometheus file_sd targets for the vLLM pods of one namespace, refreshed every second.

Debian's Prometheus is built without kubernetes_sd_configs, so this stands in for a PodMonitor:
every Running pod with an IP and the `app` label becomes a target `<pod IP>:8000` with the labels
`namespace`, `pod` and `app`. Usage: targets.py KUBECTL KUBECONFIG NAMESPACE OUT_FILE
"""
import json
import os
import subprocess
import sys
import time

kubectl, kubeconfig, namespace, out = sys.argv[1:5]
last = None
while True:
    try:
        raw = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, "-n", namespace, "get", "pods", "-o", "json"],
            check=True, capture_output=True, timeout=10,
        ).stdout
        pods = json.loads(raw)["items"]
        groups = [
            {
                "targets": [f"{p['status']['podIP']}:8000"],
                "labels": {
                    "namespace": namespace,
                    "pod": p["metadata"]["name"],
                    "app": p["metadata"].get("labels", {}).get("app", ""),
                },
            }
            for p in pods
            if p.get("status", {}).get("phase") == "Running" and p["status"].get("podIP")
        ]
        text = json.dumps(groups, sort_keys=True)
        if text != last:
            with open(out + ".tmp", "w") as f:
                f.write(text)
            os.replace(out + ".tmp", out)
            last = text
    except (subprocess.SubprocessError, ValueError, KeyError) as e:
        print(f"targets.py: {e}", file=sys.stderr, flush=True)
    time.sleep(1)
