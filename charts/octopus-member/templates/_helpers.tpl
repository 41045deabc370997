{{/* The components find each other and their credential in octopus-system (api/v1alpha1/names.go), so the chart installs there only. */}}
{{- define "octopus.namespace" -}}
{{- if ne .Release.Namespace "octopus-system" -}}
{{- fail (printf "octopus-member must be installed in namespace octopus-system, not %s (helm install --namespace octopus-system)" .Release.Namespace) -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end -}}

{{- define "octopus.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "octopus.labels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: octopus
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/* Every component reads the chart's ConfigMap as its environment, and restarts when it changes. */}}
{{- define "octopus.configChecksum" -}}
checksum/config: {{ toJson .Values.config | sha256sum }}
{{- end -}}

{{- define "octopus.envFrom" -}}
envFrom:
  - configMapRef:
      name: octopus-config
{{- end -}}
