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
