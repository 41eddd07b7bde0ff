#!/usr/bin/env bash
# Renders the chart in its two modes, with the monitoring add-ons, the activator and the
# production values example (llmscaler/values-production.yaml), into charts/rendered/ (checked in; e2e/tests/chart.rs fails
# when they drift). Usage: charts/render.sh [HELM]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
helm="${1:-${LLMSCALER_HELM:-helm}}"
"$helm" template llmscaler ./llmscaler --namespace llmscaler-system > rendered/default.yaml
"$helm" template llmscaler ./llmscaler --namespace llmscaler-system \
  --set outOfCluster.enabled=true --set outOfCluster.url=https://127.0.0.1:9443 \
  --set webhook.failurePolicy=Ignore > rendered/out-of-cluster.yaml
"$helm" template llmscaler ./llmscaler --namespace llmscaler-system \
  --set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true \
  --set dashboard.enabled=true > rendered/monitoring.yaml
"$helm" template llmscaler ./llmscaler --namespace llmscaler-system \
  --set activator.enabled=true > rendered/activator.yaml
"$helm" template llmscaler ./llmscaler --namespace llmscaler-system \
  -f llmscaler/values-production.yaml > rendered/production.yaml
