{{/* The chart name, or nameOverride. */}}
{{- define "driftwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The resource name prefix: the release name, with the chart name unless it holds it. */}}
{{- define "driftwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "driftwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "driftwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "driftwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "driftwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: argocd
app.kubernetes.io/component: notifications
{{- end -}}

{{- define "driftwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "driftwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when a Lease elects the sending replica. */}}
{{- define "driftwatch.leaderElection" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) .Values.postgres.enabled -}}true{{- end -}}
{{- end -}}

{{/* The Secret mounted as the secrets directory, or nothing. */}}
{{- define "driftwatch.secretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else if .Values.secrets.items -}}
{{- include "driftwatch.fullname" . -}}
{{- end -}}
{{- end -}}

{{- define "driftwatch.configMapName" -}}
{{- default (include "driftwatch.fullname" .) .Values.existingConfigMap -}}
{{- end -}}

{{/* driftwatch.yaml: the values' config, with the settings the chart owns. */}}
{{- define "driftwatch.config" -}}
{{- $config := deepCopy (default dict .Values.config) -}}
{{- if include "driftwatch.secretsMounted" . -}}
{{- $_ := set $config "secretsFile" "/etc/driftwatch/secrets" -}}
{{- end -}}
{{- if include "driftwatch.generatedToken" . -}}
{{- $operations := deepCopy (default dict (get $config "operations")) -}}
{{- $_ := set $operations "token" "$operations-token" -}}
{{- $_ := set $config "operations" $operations -}}
{{- end -}}
{{- if .Values.postgres.enabled -}}
{{- $state := deepCopy (default dict (get $config "state")) -}}
{{- $_ := set $state "postgres" (dict "url" "$postgres-url" "schema" .Values.postgres.schema "maxConnections" .Values.postgres.maxConnections) -}}
{{- $_ := set $config "state" $state -}}
{{- if gt (int .Values.postgres.shards) 1 -}}
{{- $_ := set $config "sharding" (dict "shards" (int .Values.postgres.shards)) -}}
{{- end -}}
{{- end -}}
{{- $attribution := deepCopy (default dict (get $config "attribution")) -}}
{{- $_ := set $attribution "enabled" .Values.attribution.enabled -}}
{{- $_ := set $attribution "readSecrets" .Values.attribution.readSecrets -}}
{{- $_ := set $config "attribution" $attribution -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The Secret of the generated operations token, when the chart makes one. */}}
{{- define "driftwatch.generatedToken" -}}
{{- $ops := default dict (get (default dict .Values.config) "operations") -}}
{{- if and .Values.operations.generateToken (not (get $ops "token")) -}}
{{- printf "%s-operations" (include "driftwatch.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Whether anything is mounted at /etc/driftwatch/secrets. */}}
{{- define "driftwatch.secretsMounted" -}}
{{- if or (include "driftwatch.secretName" .) (include "driftwatch.generatedToken" .) .Values.postgres.enabled -}}
true
{{- end -}}
{{- end -}}
