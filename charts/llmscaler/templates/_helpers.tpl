{{/* The release's full name: the release name, with "-llmscaler" unless it already says it. */}}
{{- define "llmscaler.fullname" -}}
{{- if contains "llmscaler" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-llmscaler" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "llmscaler.serviceAccountName" -}}
{{- default (include "llmscaler.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "llmscaler.labels" -}}
app.kubernetes.io/name: llmscaler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "llmscaler.selectorLabels" -}}
app.kubernetes.io/name: llmscaler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The activator's pods: a name of their own, so neither the operator's Deployment nor its
Service selects them. */}}
{{- define "llmscaler.activatorSelectorLabels" -}}
app.kubernetes.io/name: llmscaler-activator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Names of the webhook configurations and the certificate Secret. */}}
{{- define "llmscaler.webhookName" -}}
{{- include "llmscaler.fullname" . -}}
{{- end -}}

{{- define "llmscaler.certSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "llmscaler.fullname" .)) .Values.webhook.certSecretName -}}
{{- end -}}

{{/* clientConfig of a webhook: the Service, or a URL when the operator runs outside. */}}
{{- define "llmscaler.clientConfig" -}}
{{- if .root.Values.outOfCluster.enabled }}
{{- if not .root.Values.outOfCluster.url }}
{{- fail "outOfCluster.url is required when outOfCluster.enabled is true" }}
{{- end }}
url: {{ printf "%s%s" (trimSuffix "/" .root.Values.outOfCluster.url) .path | quote }}
{{- else }}
service:
  name: {{ include "llmscaler.fullname" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path | quote }}
  port: 443
{{- end }}
{{- end -}}

{{/* The leader-election Lease: per release, so two installs never share one. */}}
{{- define "llmscaler.leaseName" -}}
{{- default (printf "%s-leader" (include "llmscaler.fullname" .)) .Values.leaseName | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The rules on what the operator watches and scales: cluster-wide, or per watched namespace. */}}
{{- define "llmscaler.watchedRules" -}}
# `patch` on LLMScalers: the finalizer (added at the first sync, removed once a deleted
# scaler's target is handed back, docs/uninstall.md#deleting-an-llmscaler).
- apiGroups: ["autoscaling.modelsphere.dev"]
  resources: ["llmscalers"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["autoscaling.modelsphere.dev"]
  resources: ["llmscalers/status"]
  verbs: ["get", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "patch"]
{{- range .Values.rbac.extraTargets }}
- apiGroups: {{ toJson .apiGroups }}
  resources: {{ toJson .resources }}
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
# Pods: victim marks (patch) and the Ready pods of runtime signals (one watch per namespace
# that has a per-pod metric, docs/signals.md).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
# Competing autoscalers: an HPA (or a KEDA ScaledObject's) on the same target makes the
# operator hold instead of fighting it (one watch, no request per sync).
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.activator.enabled }}
# EndpointSlices: the route of a Service to the activator while its fleet is at zero
# (spec.scaleToZero, docs/scaling.md#holding-requests-while-waking-from-zero), and the
# activator's own endpoints (list).
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "create", "patch", "delete"]
{{- end }}
{{- end -}}

{{/* The webhooks' namespaceSelector: the given one, else the watched namespaces, else all. */}}
{{- define "llmscaler.webhookNamespaceSelector" -}}
{{- if .Values.webhook.namespaceSelector }}
namespaceSelector:
  {{- toYaml .Values.webhook.namespaceSelector | nindent 2 }}
{{- else if .Values.watchNamespaces }}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: In
      values: {{ toJson .Values.watchNamespaces }}
{{- end }}
{{- end -}}

{{/* The termination budget: the shutdown delay after SIGTERM, then the webhook's drain, then ~10 s to stop. */}}
{{- define "llmscaler.checkTerminationBudget" -}}
{{- if and .Values.webhook.enabled (not .Values.outOfCluster.enabled) -}}
{{- $delay := int .Values.shutdownDelaySeconds -}}
{{- $drain := int .Values.webhook.drainSeconds -}}
{{- $need := add $delay $drain 10 -}}
{{- $grace := int .Values.terminationGracePeriodSeconds -}}
{{- if gt $need $grace -}}
{{- fail (printf "termination budget does not fit: shutdownDelaySeconds (%d) + webhook.drainSeconds (%d) + 10 = %d exceeds terminationGracePeriodSeconds (%d); raise terminationGracePeriodSeconds to at least %d or shorten the drain" $delay $drain $need $grace $need) -}}
{{- end -}}
{{- end -}}
{{- end -}}
