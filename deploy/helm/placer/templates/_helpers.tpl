{{/* The labels of an object named by `name` (a dict: name, top = the root context). */}}
{{- define "placer.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .top.Release.Name }}
app.kubernetes.io/managed-by: {{ .top.Release.Service }}
app.kubernetes.io/version: {{ .top.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .top.Chart.Name .top.Chart.Version }}
{{- end -}}

{{/* An image reference: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "placer.image" -}}
{{ .image.repository }}:{{ .image.tag | default .top.Chart.AppVersion }}
{{- end -}}

{{/* The namespace of placer serve: the release's. */}}
{{- define "placer.namespace" -}}
{{ .Release.Namespace }}
{{- end -}}
