{{/* Names, labels and the one Deployment + Service shape every rlstack service shares. */}}

{{- define "rlstack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rlstack.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "rlstack.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "rlstack.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rlstack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rlstack.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "rlstack.labels" -}}
{{ include "rlstack.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: rlstack
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "rlstack.image" -}}
{{- $img := index .root.Values.images .image -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "rlstack.url" -}}
{{- printf "http://%s-%s:%v" (include "rlstack.fullname" .root) .component .port -}}
{{- end -}}

{{- define "rlstack.claimName" -}}
{{- default (printf "%s-shared" (include "rlstack.fullname" .)) .Values.sharedStorage.existingClaim -}}
{{- end -}}

{{- define "rlstack.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.auth.existingSecret }}
      key: {{ .key }}
{{- end -}}

{{/*
A Deployment and its Service. Parameters (a dict):
  root, component, module (python -m <module>), image (key under .Values.images), spec (the
  component's values: replicas, port, env, resources, nodeSelector, tolerations, gpus,
  startupProbe), env (list of extra env entries, rendered YAML), extraPorts (list of
  {name, port}), serviceAccountName, strategy.
*/}}
{{- define "rlstack.service" -}}
{{- $root := .root -}}
{{- $spec := .spec -}}
{{- $ctx := dict "root" $root "component" .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "rlstack.fullname" $root }}-{{ .component }}
  labels:
    {{- include "rlstack.labels" $ctx | nindent 4 }}
spec:
  replicas: {{ default 1 $spec.replicas }}
  {{- with .strategy }}
  strategy:
    type: {{ . }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "rlstack.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "rlstack.labels" $ctx | nindent 8 }}
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $spec.port | quote }}
    spec:
      {{- with .serviceAccountName }}
      serviceAccountName: {{ . }}
      {{- end }}
      automountServiceAccountToken: {{ if .serviceAccountName }}true{{ else }}false{{ end }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: 60
      {{- with $spec.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $spec.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "rlstack.image" (dict "root" $root "image" .image) }}
          imagePullPolicy: {{ (index $root.Values.images .image).pullPolicy }}
          command: ["python", "-m", {{ .module | quote }}]
          ports:
            - name: http
              containerPort: {{ $spec.port }}
            {{- range .extraPorts }}
            - name: {{ .name }}
              containerPort: {{ .port }}
            {{- end }}
          env:
            - name: HOME
              value: /tmp
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- range $k, $v := $spec.env }}
            - name: {{ $k }}
              value: {{ $v | quote }}
            {{- end }}
          {{- with $spec.startupProbe }}
          startupProbe:
            httpGet: {path: /readyz, port: http}
            periodSeconds: {{ .periodSeconds }}
            failureThreshold: {{ .failureThreshold }}
          {{- end }}
          livenessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 10
            failureThreshold: 6
          readinessProbe:
            httpGet: {path: /readyz, port: http}
            periodSeconds: 5
          resources:
            {{- $res := deepCopy $spec.resources }}
            {{- if $spec.gpus }}
            {{- $_ := set $res "limits" (merge (dict "nvidia.com/gpu" $spec.gpus) (default dict $res.limits)) }}
            {{- end }}
            {{- toYaml $res | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: shared
              mountPath: {{ $root.Values.sharedStorage.mountPath }}
      volumes:
        - name: shared
          persistentVolumeClaim:
            claimName: {{ include "rlstack.claimName" $root }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ include "rlstack.fullname" $root }}-{{ .component }}
  labels:
    {{- include "rlstack.labels" $ctx | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "rlstack.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: http
      port: {{ $spec.port }}
      targetPort: http
    {{- range .extraPorts }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .name }}
    {{- end }}
{{- end -}}
