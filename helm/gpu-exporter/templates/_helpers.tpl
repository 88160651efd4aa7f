{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "gpu-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object name: <release>-<chart>, or the release name when it already contains the chart name. */}}
{{- define "gpu-exporter.fullname" -}}
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

{{- define "gpu-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpu-exporter.labels" -}}
helm.sh/chart: {{ include "gpu-exporter.chart" . }}
{{ include "gpu-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: exporter
{{- end }}

{{- define "gpu-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpu-exporter.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
True (non-empty) when Prometheus Operator objects should be rendered: the cluster serves
monitoring.coreos.com/v1, or the caller forces it. Call with (dict "force" <bool> "root" $).
*/}}
{{- define "gpu-exporter.operatorAvailable" -}}
{{- if or .force (.root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") }}true{{ end }}
{{- end }}

{{/*
The relabeling every monitor gets: the Kubernetes node name as the `node` label, and the
exporter pod's own namespace/pod/container moved to exporter_* so that those three labels on
per-process series only ever name the GPU workload (an empty value from the exporter, for a
host process, must not be filled in with the exporter's pod).
*/}}
{{- define "gpu-exporter.relabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
  action: replace
- sourceLabels: [namespace]
  targetLabel: exporter_namespace
  action: replace
- sourceLabels: [pod]
  targetLabel: exporter_pod
  action: replace
- action: labeldrop
  regex: (namespace|pod|container)
{{- with .Values.monitor.relabelings }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* http or https: monitor.scheme, else https when the web config turns TLS on. */}}
{{- define "gpu-exporter.scheme" -}}
{{- if .Values.monitor.scheme -}}
{{- .Values.monitor.scheme -}}
{{- else if .Values.webConfig.tls -}}
https
{{- else -}}
http
{{- end -}}
{{- end }}

{{/* scheme, tlsConfig and basicAuth of a ServiceMonitor/PodMonitor endpoint. */}}
{{- define "gpu-exporter.monitorAuth" -}}
scheme: {{ include "gpu-exporter.scheme" . }}
{{- with .Values.monitor.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.monitor.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The exporter's uid or gid (key runAsUser or runAsGroup of the securityContext in "context"),
0 included (sprig's default would take 0 for unset); unset: the image's USER, 65534.
*/}}
{{- define "gpu-exporter.runAs" -}}
{{- if and .context (hasKey .context .key) (not (kindIs "invalid" (get .context .key))) -}}
{{- get .context .key | int64 -}}
{{- else -}}
65534
{{- end -}}
{{- end }}

{{/* Whether the exporter runs as root: runAsUser 0 in the securityContext. */}}
{{- define "gpu-exporter.runsAsRoot" -}}
{{- if eq (include "gpu-exporter.runAs" (dict "context" .Values.securityContext "key" "runAsUser")) "0" }}true{{ end }}
{{- end }}

{{/*
The mail relay fields of an AlertmanagerConfig emailConfigs entry, from alertmanagerConfig.smtp
(only those set: the others fall back to the Alertmanager's global smtp_*).
*/}}
{{- define "gpu-exporter.alertmanagerSmtp" -}}
{{- with .smarthost }}
smarthost: {{ . | quote }}
{{- end }}
{{- with .from }}
from: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" .requireTLS) }}
requireTLS: {{ .requireTLS }}
{{- end }}
{{- with .authUsername }}
authUsername: {{ . | quote }}
{{- end }}
{{- with .authPassword }}
authPassword: {{ toJson . }}
{{- end }}
{{- end }}
