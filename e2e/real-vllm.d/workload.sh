# shellcheck shell=bash
# The real-vLLM workload on the real node (issue 22, item 1), sourced by e2e/real-vllm after its
# settings (VLLM_HOME, VENV, MODEL_DIR, SERVED_NAME, export_runtime_env) and e2e/lib.sh.
#
# - An image `ghcr.io/modelsphere/vllm-runtime:<version>` that holds no runtime: an empty root
#   with /bin, /lib, /lib64, /sbin pointing into /usr, /tmp and a passwd file. The pod mounts the
#   host's /usr, the Python installation the venv was made from, the venv and the model read-only
#   at their own absolute paths (a venv's shebangs and pyvenv.cfg are absolute), and the shared
#   vLLM/torch compile caches read-write (warm caches shorten the start-up).
# - Namespace `real-vllm`: Deployment `vllm` (label app=vllm) on the real node, Service `vllm`
#   (port 8000), readiness on /health, a start-up probe of 20 min (the measured load time is 2-4
#   min on 2 busy cores), and the drain-safe shutdown of docs/benchmarks/real-vllm.md
#   (`--shutdown-timeout 30`, terminationGracePeriodSeconds 60).
# - A Prometheus on the pod bridge's address (pods and the host reach it) that scrapes every Running pod of the namespace on :8000/metrics
#   every 2 s with the `namespace`, `pod` and `app` labels, as a PodMonitor would (targets from
#   the API server's pod list: Debian's Prometheus has no kubernetes_sd_configs).

VLLM_NAMESPACE="real-vllm"
VLLM_IMAGE_NAME="vllm-runtime"
WORKLOAD_DIR="$STATE_DIR/real-vllm"

# The Python installation the venv was made from (`home` of pyvenv.cfg, minus bin/).
python_prefix() {
  local home
  home="$(sed -nE 's/^home = (.*)$/\1/p' "$VENV/pyvenv.cfg")"
  [[ -n "$home" ]] || die "no home line in $VENV/pyvenv.cfg" "run e2e/real-vllm install again"
  dirname "$home"
}

# The empty runtime image, as an OCI tar in target/images (imported by e2e/real-node import).
build_runtime_image() {
  local out="$E2E_DIR/../target/images" tag="$VLLM_VERSION"
  local root="$out/$VLLM_IMAGE_NAME.rootfs" layout="$out/$VLLM_IMAGE_NAME.oci"
  require_tool umoci "apt-get install -y umoci"
  mkdir -p "$out"
  rm -rf "$root" "$layout"
  mkdir -p "$root/etc" "$root/tmp" "$root/usr" "$root/dev/shm"
  chmod 1777 "$root/tmp"
  ln -s usr/bin "$root/bin"
  ln -s usr/lib "$root/lib"
  ln -s usr/lib64 "$root/lib64"
  ln -s usr/sbin "$root/sbin"
  printf 'root:x:0:0:root:/root:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  {
    umoci init --layout "$layout" &&
      umoci new --image "$layout:$tag" &&
      umoci insert --image "$layout:$tag" "$root" / &&
      umoci config --image "$layout:$tag" --config.user 0:0 --config.workingdir / \
        --author llmscaler --history.comment "e2e/real-vllm image"
  } >>"$LOG_DIR/real-vllm-image.log" 2>&1 || die "umoci could not write the $VLLM_IMAGE_NAME image (log: $LOG_DIR/real-vllm-image.log)" "check free disk space in $out"
  tar -C "$layout" -cf "$out/$VLLM_IMAGE_NAME.oci.tar" .
  rm -rf "$root" "$layout"
}

# The Deployment and Service, as JSON on stdout (REPLICAS, MAX_NUM_SEQS, SHUTDOWN_TIMEOUT).
workload_manifest() {
  local replicas="$1" max_num_seqs="$2" shutdown="$3" prefix repository
  prefix="$(python_prefix)"
  repository="$(sed -nE 's/^  repository: *([^ ]+)$/\1/p' "$E2E_DIR/../charts/llmscaler/values.yaml" | head -n 1)"
  python3 - "$replicas" "$max_num_seqs" "$shutdown" "$prefix" "${repository%/*}/$VLLM_IMAGE_NAME:$VLLM_VERSION" \
    "$VENV" "$MODEL_DIR" "$VLLM_HOME/cache" "$SERVED_NAME" "$VLLM_NAMESPACE" <<'PY'
import json, sys
replicas, seqs, shutdown, prefix, image, venv, model, cache, served, ns = sys.argv[1:]
labels = {"app": "vllm"}
# The drain label (docs/scale-down.md#the-service-shape-it-needs): in the template and the
# Service's selector, never in the Deployment's selector.
rotation = {"autoscaling.modelsphere.dev/rotation": "in"}
mounts = [("usr", "/usr", True), ("python", prefix, True), ("venv", venv, True),
          ("model", model, True), ("cache", cache, False)]
env = {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1", "VLLM_CACHE_ROOT": f"{cache}/vllm",
    "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "TMPDIR": "/tmp",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # One OpenMP thread per replica, placed by the kernel: every replica of a Deployment has the
    # same environment, so a per-replica core list cannot be given.
    "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
    "HOME": "/tmp", "PATH": f"{venv}/bin:/usr/bin:/bin",
}
probe = {"httpGet": {"path": "/health", "port": 8000}}
deployment = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "vllm", "namespace": ns, "labels": labels},
    "spec": {
        "replicas": int(replicas),
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": {**labels, **rotation}},
            "spec": {
                "nodeSelector": {"llmscaler.dev/real-node": "true"},
                "tolerations": [{"key": "llmscaler.dev/real-node", "operator": "Exists",
                                 "effect": "NoSchedule"}],
                "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                # vLLM drains for --shutdown-timeout after SIGTERM; the grace covers it.
                "terminationGracePeriodSeconds": 60,
                "containers": [{
                    "name": "vllm",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": [f"{venv}/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                                "--model", model, "--served-model-name", served,
                                "--host", "0.0.0.0", "--port", "8000",
                                "--max-num-seqs", seqs, "--shutdown-timeout", shutdown],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "startupProbe": {**probe, "periodSeconds": 5, "failureThreshold": 240},
                    # A stopped process leaves the Service after 10-15 s; its metrics go stale
                    # after one failed scrape (2 s), which the coverage test relies on.
                    "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 3},
                    "volumeMounts": [{"name": n, "mountPath": p, "readOnly": ro}
                                     for n, p, ro in mounts]
                                    + [{"name": "shm", "mountPath": "/dev/shm"},
                                       {"name": "tmp", "mountPath": "/tmp"}],
                }],
                "volumes": [{"name": n, "hostPath": {"path": p, "type": "Directory"}}
                            for n, p, _ in mounts]
                           + [{"name": "shm", "emptyDir": {"medium": "Memory"}},
                              {"name": "tmp", "emptyDir": {}}],
            },
        },
    },
}
service = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "vllm", "namespace": ns, "labels": labels},
    "spec": {"selector": {**labels, **rotation}, "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]},
}
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, deployment, service]}))
PY
}

# Prometheus scraping the pods of the namespace. Debian's Prometheus has no kubernetes_sd_configs,
# so e2e/real-vllm.d/targets.py (a loop over the API server's pod list) writes file_sd targets.
write_prometheus_config() {
  local file="$1"
  cat >"$file" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 2s
scrape_configs:
  - job_name: vllm
    file_sd_configs:
      - files: [$WORKLOAD_DIR/targets.json]
        refresh_interval: 1s
EOF
}

# The pod bridge's address of the real node: Prometheus listens there (and the host reaches it),
# so the operator's pods can query it.
bridge_address() {
  ip -4 -o addr show "lsc${LLMSCALER_E2E_PORT_BASE:-31440}" 2>/dev/null | awk '{print $4}' | cut -d/ -f1
}

start_prometheus() {
  local port="$1" config="$WORKLOAD_DIR/prometheus.yml" address
  address="$(bridge_address)"
  [[ -n "$address" ]] || die "no bridge lsc${LLMSCALER_E2E_PORT_BASE:-31440}" "run e2e/cluster up --real-node with the same LLMSCALER_E2E_PORT_BASE"
  write_prometheus_config "$config"
  stop_prometheus
  echo '[]' >"$WORKLOAD_DIR/targets.json"
  python3 "$E2E_DIR/real-vllm.d/targets.py" "$KUBECTL" "$KUBECONFIG_PATH" "$VLLM_NAMESPACE" \
    "$WORKLOAD_DIR/targets.json" >"$WORKLOAD_DIR/targets.log" 2>&1 &
  echo $! >"$WORKLOAD_DIR/targets.pid"
  prometheus --config.file "$config" --storage.tsdb.path "$WORKLOAD_DIR/tsdb" \
    --web.listen-address "$address:$port" --storage.tsdb.retention.time 1d \
    >"$WORKLOAD_DIR/prometheus.log" 2>&1 &
  echo $! >"$WORKLOAD_DIR/prometheus.pid"
  for _ in $(seq 1 100); do
    curl -fsS -m 1 "http://$address:$port/-/ready" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "Prometheus did not become ready (log: $WORKLOAD_DIR/prometheus.log)" "check that port $port is free"
}

stop_prometheus() {
  local pid what
  for what in prometheus targets; do
    pid="$(cat "$WORKLOAD_DIR/$what.pid" 2>/dev/null || true)"
    if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; fi
    rm -f "$WORKLOAD_DIR/$what.pid"
  done
}

workload_up() {
  local replicas="${1:-1}" max_num_seqs="${VLLM_MAX_NUM_SEQS:-2}" shutdown="${VLLM_SHUTDOWN_TIMEOUT:-30}" kc port
  [[ -f "$KUBECONFIG_PATH" ]] || die "no cluster state in $STATE_DIR" "run e2e/cluster up --real-node first"
  kc=("$KUBECTL" --kubeconfig "$KUBECONFIG_PATH")
  [[ "$("${kc[@]}" get node llmscaler-real-node -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == "True" ]] ||
    die "the real node is not Ready" "run e2e/cluster up --real-node first"
  require_tool prometheus "apt-get install -y prometheus"
  install_runtime
  build_model
  mkdir -p "$WORKLOAD_DIR" "$VLLM_HOME/cache/vllm" "$VLLM_HOME/cache/inductor"
  build_runtime_image
  "$E2E_DIR/real-node" import >/dev/null
  workload_manifest "$replicas" "$max_num_seqs" "$shutdown" | "${kc[@]}" apply -f - >/dev/null
  port="${LLMSCALER_VLLM_PROMETHEUS_PORT:-$(( ${LLMSCALER_E2E_PORT_BASE:-31440} + 20 ))}"
  start_prometheus "$port"
  log "waiting for $replicas vLLM pod(s) to be Ready (2-4 min each on 2 cores)"
  local start=$SECONDS
  "${kc[@]}" -n "$VLLM_NAMESPACE" rollout status deployment/vllm --timeout=15m >&2 ||
    die "the vLLM pods did not become Ready" "kubectl -n $VLLM_NAMESPACE describe pods; kubectl logs"
  log "vLLM Ready in $((SECONDS - start)) s; Service vllm.$VLLM_NAMESPACE:8000; Prometheus http://$(bridge_address):$port"
  echo "export VLLM_NAMESPACE=$VLLM_NAMESPACE VLLM_PROMETHEUS_URL=http://$(bridge_address):$port"
}

workload_down() {
  stop_prometheus
  if [[ -f "$KUBECONFIG_PATH" ]]; then
    "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" delete namespace "$VLLM_NAMESPACE" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  rm -rf "$WORKLOAD_DIR/tsdb"
}
