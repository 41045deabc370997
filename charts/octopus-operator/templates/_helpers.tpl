{{/* The operator's broker-info Secrets and leader-election Lease live in octopus-operator (api/v1alpha1 OperatorNamespace), so the chart installs there only. */}}
{{- define "operator.namespace" -}}
{{- if ne .Release.Namespace "octopus-operator" -}}
{{- fail (printf "octopus-operator must be installed in namespace octopus-operator, not %s (helm install --namespace octopus-operator --create-namespace)" .Release.Namespace) -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end -}}
