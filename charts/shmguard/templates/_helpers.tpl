{{/* The names of the two parts: the value given, else the release's name and the part's (shmguard-webhook and
shmguard-exporter for a release called shmguard, the names `shmguard render webhook` and `exporter render k8s`
give). */}}
{{- define "shmguard.webhookName" -}}
{{- default (printf "%s-webhook" .Release.Name) .Values.webhook.name | trunc 63 | trimSuffix "-" -}}
{{- end }}
{{- define "shmguard.exporterName" -}}
{{- default (printf "%s-exporter" .Release.Name) .Values.exporter.name | trunc 63 | trimSuffix "-" -}}
{{- end }}
{{- define "shmguard.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end }}
