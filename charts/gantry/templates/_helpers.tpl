{{/* Chart name, truncated to a DNS label. */}}
{{- define "gantry.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name prefix: the release name, plus the chart name unless the release name has it. */}}
{{- define "gantry.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The operator's object names: <fullname>-operator. */}}
{{- define "gantry.operatorName" -}}
{{- printf "%s-operator" (include "gantry.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gantry.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: name + instance only (a Deployment's selector is immutable). */}}
{{- define "gantry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gantry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Standard labels on every object. */}}
{{- define "gantry.labels" -}}
helm.sh/chart: {{ include "gantry.chart" . }}
{{ include "gantry.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: gantry
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gantry.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gantry.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag or repository@digest; the tag defaults to appVersion and is never latest. */}}
{{- define "gantry.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag | toString }}
{{- if eq $tag "latest" }}
{{- fail "image.tag: 'latest' is not allowed; pin a version (the default is the chart's appVersion)" }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* "true" when the operator should elect a leader; fails on replicas > 1 without it, and on
    lease timings the operator would refuse (values.schema.json checks each alone). */}}
{{- define "gantry.leaderElect" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true (else every replica acts)" }}
{{- end }}
{{- $le := .Values.leaderElection }}
{{- if and $le.enabled (not (and (lt (int $le.retryPeriod) (int $le.renewDeadline)) (lt (int $le.renewDeadline) (int $le.leaseDuration)))) }}
{{- fail (printf "leaderElection: need retryPeriod (%v) < renewDeadline (%v) < leaseDuration (%v) (the operator refuses the rest)" $le.retryPeriod $le.renewDeadline $le.leaseDuration) }}
{{- end }}
{{- ternary "true" "false" (or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1)) }}
{{- end }}
