{{/* The release's resource names: <release>-sluice, or the release name when it already says sluice. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Refuses the values that would break a promise: one global limit across the pods. */}}
{{- define "sluice.validate" -}}
{{- $type := .Values.store.type -}}
{{- if not (has $type (list "memory" "redis" "redisCluster")) -}}
{{- fail (printf "store.type must be memory, redis or redisCluster, not %q" $type) -}}
{{- end -}}
{{- if eq $type "memory" -}}
{{- if or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled -}}
{{- fail "store.type memory keeps each pod's counts apart: with more than one pod (replicaCount > 1 or autoscaling) the fleet would exceed every limit. Set store.type redis or redisCluster." -}}
{{- end -}}
{{- if ne (toString .Values.workers) "1" -}}
{{- fail "store.type memory keeps its counts in one process: workers must be 1. Set store.type redis or redisCluster to run more workers." -}}
{{- end -}}
{{- end -}}
{{- if eq $type "redis" -}}
{{- if and (not .Values.store.redis.url) (not .Values.store.redis.existingSecret) -}}
{{- fail "store.type redis needs store.redis.url or store.redis.existingSecret" -}}
{{- end -}}
{{- if and .Values.store.redis.url .Values.store.redis.existingSecret -}}
{{- fail "give store.redis.url or store.redis.existingSecret, not both" -}}
{{- end -}}
{{- end -}}
{{- range $name := list "SLUICE_HOST" "SLUICE_PORT" "SLUICE_GRPC_PORT" "SLUICE_RULES" "SLUICE_RULES_DIR" "SLUICE_RULES_MODE" "SLUICE_SHUTDOWN_GRACE_MS" "SLUICE_LOG_LEVEL" "SLUICE_WORKERS" "SLUICE_REDIS_URL" "SLUICE_REDIS_CLUSTER" "SLUICE_REDIS_PREFIX" "SLUICE_ADMIN_TOKEN" "SLUICE_API_TOKEN" "SLUICE_OUTCOMES_TOKEN" -}}
{{- if hasKey $.Values.env $name -}}
{{- fail (printf "env.%s is set by the chart from its own values (see values.yaml); set it there" $name) -}}
{{- end -}}
{{- end -}}
{{- if and (eq $type "redisCluster") (not .Values.store.redisCluster.nodes) -}}
{{- fail "store.type redisCluster needs store.redisCluster.nodes (host:port seeds)" -}}
{{- end -}}
{{- end -}}
