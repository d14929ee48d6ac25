{{/*
The pod every rlstack workload runs: one container `python3 -m <module>` (python3: the vLLM image
has no `python`), the shared volume, probes on the service's own port, and the scheduling knobs.
Each knob is the component's own value, else podDefaults'; labels, annotations, extra env,
volumes and mounts are the union of both. Parameters (a dict):
  root, component, module, image (a key of .Values.images), spec (the component's values),
  env (rendered YAML list), extraPorts (list of {name, port}), serviceAccountName, gpus,
  initContainers (rendered YAML list), volumes / volumeMounts (rendered YAML lists),
  stableLabels (true: no chart or app version label, for a Job's immutable template that must
  outlive chart upgrades), restartPolicy, probes (false: none, for run-to-completion pods), command (a list replacing
  `python3 -m <module>`), subdomain (a headless Service's name: stable pod DNS names), and
  indexedProbes (seconds of startup window: only the Indexed Job pod of index 0 serves the port;
  the others' probes pass).
*/}}
{{- define "rlstack.podTemplate" -}}
{{- $root := .root -}}
{{- $spec := .spec -}}
{{- $d := $root.Values.podDefaults -}}
{{- $ctx := dict "root" $root "component" .component -}}
metadata:
  labels:
    {{- if .stableLabels }}
    {{- include "rlstack.stableLabels" $ctx | nindent 4 }}
    {{- else }}
    {{- include "rlstack.labels" $ctx | nindent 4 }}
    {{- end }}
    {{- with merge (dict) (default dict $spec.podLabels) $d.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ $spec.port | quote }}
    {{- with merge (dict) (default dict $spec.podAnnotations) $d.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- with .restartPolicy }}
  restartPolicy: {{ . }}
  {{- end }}
  {{- with .serviceAccountName }}
  serviceAccountName: {{ . }}
  {{- end }}
  {{- with .subdomain }}
  subdomain: {{ . }}
  {{- end }}
  automountServiceAccountToken: {{ if .serviceAccountName }}true{{ else }}false{{ end }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with default $d.priorityClassName $spec.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with default $d.runtimeClassName $spec.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: 60
  {{- with default $d.nodeSelector $spec.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with default $d.tolerations $spec.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with default $d.affinity $spec.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with default $d.topologySpreadConstraints $spec.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .initContainers }}
  initContainers:
    {{- . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "rlstack.image" (dict "root" $root "image" .image) }}
      imagePullPolicy: {{ (index $root.Values.images .image).pullPolicy }}
      {{- if .command }}
      command: {{ toJson .command }}
      {{- else }}
      command: ["python3", "-m", {{ .module | quote }}]
      {{- end }}
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
        {{- . | nindent 8 }}
        {{- end }}
        {{- range $k, $v := $spec.env }}
        - name: {{ $k }}
          value: {{ $v | quote }}
        {{- end }}
        {{- with concat $d.extraEnv (default list $spec.extraEnv) }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if .indexedProbes }}
      {{- /* One pod template for every index, and only index 0 serves HTTP: an exec probe that
             passes on the other indexes and asks the port on index 0. Index 0 serves only once
             every pod has joined the rendezvous (a pod may wait for a node): the startup window
             matches the rendezvous timeout the trainer sets. */}}
      {{- $ask := printf "[ \"${JOB_COMPLETION_INDEX:-0}\" != 0 ] || exec python3 -c 'import sys, urllib.request; urllib.request.urlopen(\"http://127.0.0.1:%v\" + sys.argv[1], timeout=4)' \"$0\"" $spec.port }}
      startupProbe:
        exec: {command: {{ toJson (list "sh" "-c" $ask "/healthz") }}}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: {{ div .indexedProbes 10 }}
      livenessProbe:
        exec: {command: {{ toJson (list "sh" "-c" $ask "/healthz") }}}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 6
      readinessProbe:
        exec: {command: {{ toJson (list "sh" "-c" $ask "/readyz") }}}
        periodSeconds: 5
        timeoutSeconds: 5
      {{- else if ne .probes false }}
      {{- /* 5 s, not the kubelet's 1 s: on a busy node the proxy's /healthz took up to 1.8 s under a
             run's load, and a 1 s liveness timeout restarted it mid-run (docs/record/real-nodes.md#the-first-node-2026-11-27). */}}
      {{- with $spec.startupProbe }}
      startupProbe:
        httpGet: {path: /readyz, port: http}
        periodSeconds: {{ .periodSeconds }}
        timeoutSeconds: 5
        failureThreshold: {{ .failureThreshold }}
      {{- else }}
      {{- /* Liveness only once the process serves: on a busy node the proxy took over a minute to
             import LiteLLM and start, and liveness (6 x 10 s) restarted it just as it began to serve. */}}
      startupProbe:
        httpGet: {path: /healthz, port: http}
        periodSeconds: 5
        timeoutSeconds: 5
        failureThreshold: 60
      {{- end }}
      livenessProbe:
        httpGet: {path: /healthz, port: http}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 6
      readinessProbe:
        httpGet: {path: /readyz, port: http}
        periodSeconds: 5
        timeoutSeconds: 5
      {{- end }}
      resources:
        {{- $res := deepCopy (default dict $spec.resources) }}
        {{- if gt (int .gpus) 0 }}
        {{- $_ := set $res "limits" (merge (dict "nvidia.com/gpu" (int .gpus)) (default dict $res.limits)) }}
        {{- end }}
        {{- toYaml $res | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.containerSecurityContext | nindent 8 }}
      volumeMounts:
        - name: shared
          mountPath: {{ $root.Values.sharedStorage.mountPath }}
        {{- with .volumeMounts }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with concat $d.extraVolumeMounts (default list $spec.extraVolumeMounts) }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: shared
      persistentVolumeClaim:
        claimName: {{ include "rlstack.claimName" $root }}
    {{- with .volumes }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with concat $d.extraVolumes (default list $spec.extraVolumes) }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/*
An init container that waits until the model Job has finished writing the model (its marker
file), so a replica or trainer never starts on a half-copied directory. Same image as the pod.
With model.source.type=none it waits for config.json, i.e. for whoever copies the model by hand.
*/}}
{{- define "rlstack.waitForModel" -}}
{{- $root := .root -}}
{{- $file := ternary (printf "%s/config.json" (include "rlstack.modelDir" $root)) (include "rlstack.modelMarker" $root) (eq $root.Values.model.source.type "none") -}}
- name: wait-for-model
  image: {{ include "rlstack.image" (dict "root" $root "image" .image) }}
  imagePullPolicy: {{ (index $root.Values.images .image).pullPolicy }}
  command:
    - sh
    - -c
    - until [ -f "$0" ]; do echo "waiting for $0 (the model Job writes it)"; sleep 5; done
    - {{ $file | quote }}
  resources:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {cpu: 100m, memory: 64Mi}
  securityContext:
    {{- toYaml $root.Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: shared
      mountPath: {{ $root.Values.sharedStorage.mountPath }}
      readOnly: true
{{- end -}}

{{/* A Deployment's Service: the `http` port and any extra ones; selector adds labels to the component's.
     Named <fullname>-<component>, and -<policy> after it on a declared policy's root (rlstack.perPolicy). */}}
{{- define "rlstack.serviceObject" -}}
{{- $ctx := dict "root" .root "component" .component -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "rlstack.fullname" .root }}-{{ .component }}{{ with .root.Policy }}{{ .suffix }}{{ end }}
  labels:
    {{- include "rlstack.labels" $ctx | nindent 4 }}
spec:
  type: ClusterIP
  {{- with .sessionAffinity }}
  sessionAffinity: {{ . }}
  {{- end }}
  selector:
    {{- include "rlstack.selectorLabels" $ctx | nindent 4 }}
    {{- with .selector }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: http
      port: {{ .spec.port }}
      targetPort: http
    {{- range .extraPorts }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .name }}
    {{- end }}
{{- end -}}

{{/*
A Deployment and its Service. Parameters: those of rlstack.podTemplate, plus strategy (a
rendered YAML map), progressDeadlineSeconds, and autoscaled (true: leave replicas to the HPA).
*/}}
{{- define "rlstack.service" -}}
{{- $ctx := dict "root" .root "component" .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "rlstack.fullname" .root }}-{{ .component }}{{ with .root.Policy }}{{ .suffix }}{{ end }}
  labels:
    {{- include "rlstack.labels" $ctx | nindent 4 }}
spec:
  {{- if not .autoscaled }}
  replicas: {{ ternary .spec.replicas 1 (hasKey .spec "replicas") }}
  {{- end }}
  {{- with .progressDeadlineSeconds }}
  progressDeadlineSeconds: {{ . }}
  {{- end }}
  {{- with .strategy }}
  strategy:
    {{- . | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "rlstack.selectorLabels" $ctx | nindent 6 }}
  template:
    {{- include "rlstack.podTemplate" . | nindent 4 }}
---
{{ include "rlstack.serviceObject" . }}
{{- end -}}
