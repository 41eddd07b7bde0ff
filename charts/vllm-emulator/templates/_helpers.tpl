{{- define "vllm-emulator.fullname" -}}
{{- if contains "vllm" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-vllm" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vllm-emulator.selectorLabels" -}}
app.kubernetes.io/name: vllm-emulator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The drain budget must fit in the grace period: endpointSync + drain + shutdown timeout. */}}
{{- define "vllm-emulator.checkBudget" -}}
{{- $sync := 0 -}}
{{- $drain := 0 -}}
{{- if .Values.drain.enabled -}}
{{- $sync = .Values.drain.endpointSyncSeconds -}}
{{- $drain = .Values.drain.drainSeconds -}}
{{- end -}}
{{- $shutdown := .Values.shutdownTimeoutSeconds -}}
{{- $sum := addf $sync $drain $shutdown -}}
{{- $grace := .Values.terminationGracePeriodSeconds -}}
{{- if gt (float64 $sum) (float64 $grace) -}}
{{- fail (printf "drain budget does not fit: drain.endpointSyncSeconds (%v) + drain.drainSeconds (%v) + shutdownTimeoutSeconds (%v) = %v exceeds terminationGracePeriodSeconds (%v); raise terminationGracePeriodSeconds to at least %v or shorten the drain" $sync $drain $shutdown $sum $grace $sum) -}}
{{- end -}}
{{- end -}}
