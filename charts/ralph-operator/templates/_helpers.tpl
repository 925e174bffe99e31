{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "ralph-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name of the controller's objects. */}}
{{- define "ralph-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "ralph-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ralph-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels selecting the controller Pods. */}}
{{- define "ralph-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ralph-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* The controller image reference. */}}
{{- define "ralph-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Namespaces that get the agent service account and its Role. */}}
{{- define "ralph-operator.agentNamespaces" -}}
{{- $namespaces := list (default .Release.Namespace .Values.watchNamespace) -}}
{{- range .Values.agentServiceAccount.extraNamespaces -}}
{{- $namespaces = append $namespaces . -}}
{{- end -}}
{{- uniq $namespaces | toJson -}}
{{- end -}}
