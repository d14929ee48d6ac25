{{/* Names, labels, images, addresses and the few values every template derives the same way. */}}

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

{{/* Selector labels: immutable once a Deployment exists, so nothing user-supplied goes in. */}}
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

{{/* <imageRegistry>/<repository>:<tag or appVersion> for a key of .Values.images. */}}
{{- define "rlstack.image" -}}
{{- $img := index .root.Values.images .image -}}
{{- $repo := $img.repository -}}
{{- with .root.Values.imageRegistry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "rlstack.url" -}}
{{- printf "http://%s-%s:%v" (include "rlstack.fullname" .root) .component .port -}}
{{- end -}}

{{- define "rlstack.claimName" -}}
{{- default (printf "%s-shared" (include "rlstack.fullname" .)) .Values.sharedStorage.existingClaim -}}
{{- end -}}

{{- define "rlstack.authSecretName" -}}
{{- if .Values.auth.create -}}
{{- default (printf "%s-auth" (include "rlstack.fullname" .)) .Values.auth.existingSecret -}}
{{- else -}}
{{- required "auth.existingSecret: name the Secret holding the service token and trial-key secret, or set auth.create=true" .Values.auth.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "rlstack.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "rlstack.authSecretName" .root }}
      key: {{ .key }}
{{- end -}}

{{/* The label the sandbox manager puts on every trial pod. It is fixed in the code
     (rlstack.kube.sandboxes.SandboxManager's run_label); the NetworkPolicy and NOTES read it here. */}}
{{- define "rlstack.sandboxRunLabel" -}}harbor-run{{- end -}}

{{/* The env servers' service account: the chart's own, or an existing one (serviceAccount.create=false). */}}
{{- define "rlstack.sandboxServiceAccountName" -}}
{{- $sa := .Values.sandboxes.serviceAccount -}}
{{- if $sa.create -}}
{{- default (printf "%s-sandbox-manager" (include "rlstack.fullname" .)) $sa.name -}}
{{- else -}}
{{- required "sandboxes.serviceAccount.name: name the existing service account (serviceAccount.create=false)" $sa.name -}}
{{- end -}}
{{- end -}}

{{/* GPUs one inference pod requests: tensor x pipeline parallel (data parallel is `replicas`). */}}
{{- define "rlstack.inferenceGpus" -}}
{{- $v := .Values.inference -}}
{{- if eq $v.device "cuda" }}{{ mul $v.tensorParallelSize $v.pipelineParallelSize }}{{ else }}0{{ end -}}
{{- end -}}

{{/* The port of the trainer's static rendezvous on index 0's pod (torchrun's own default). */}}
{{- define "rlstack.trainerRendezvousPort" -}}29500{{- end -}}

{{/* Seconds the startupProbe allows before liveness applies: also the replica's own load timeout. */}}
{{- define "rlstack.inferenceStartupSeconds" -}}
{{- mul .Values.inference.startupProbe.periodSeconds .Values.inference.startupProbe.failureThreshold -}}
{{- end -}}

{{/* The file whose presence says the model is complete on the shared volume (written last by the model Job). */}}
{{- define "rlstack.modelMarker" -}}
{{- printf "%s/.rlstack-model.json" (trimSuffix "/" .Values.model.path) -}}
{{- end -}}

{{/* Impossible combinations, refused with a message (the schema covers types and ranges). */}}
{{- define "rlstack.validateValues" -}}
{{- $v := .Values -}}
{{- if and (eq $v.inference.device "cpu") (gt (int $v.inference.tensorParallelSize) 1) -}}
{{- fail "inference.tensorParallelSize > 1 needs inference.device=cuda" -}}
{{- end -}}
{{- if not (hasPrefix (printf "%s/" (trimSuffix "/" $v.sharedStorage.mountPath)) $v.model.path) -}}
{{- fail (printf "model.path (%s) must lie under sharedStorage.mountPath (%s): every replica and the trainer read it there" $v.model.path $v.sharedStorage.mountPath) -}}
{{- end -}}
{{- if and (eq $v.model.source.type "hub") (not $v.model.source.hub.id) -}}
{{- fail "model.source.type=hub needs model.source.hub.id (e.g. Qwen/Qwen2.5-0.5B-Instruct)" -}}
{{- end -}}
{{- if and (eq $v.model.source.type "hostPath") (not $v.model.source.hostPath) -}}
{{- fail "model.source.type=hostPath needs model.source.hostPath (a model directory on every node)" -}}
{{- end -}}
{{- if and (eq $v.model.source.type "claim") (not $v.model.source.claim.name) -}}
{{- fail "model.source.type=claim needs model.source.claim.name (an existing PVC holding the model)" -}}
{{- end -}}
{{- $sync := get (default dict $v.trainer.env) "RLSTACK_TRAINER_SYNC_MODE" | default "filesystem" -}}
{{- if and (eq $sync "ipc") (gt (int $v.inference.replicas) 0) -}}
{{- fail "RLSTACK_TRAINER_SYNC_MODE=ipc needs the trainer and the replica in one pod (one shared GPU); the chart runs them as separate pods: use filesystem, lora or broadcast" -}}
{{- end -}}
{{- $nodes := int (default 1 $v.trainer.nodes) -}}
{{- if and (gt $nodes 1) (ne $v.trainer.workload "Job") -}}
{{- fail "trainer.nodes > 1 runs the trainer as an Indexed Job: set trainer.workload=Job" -}}
{{- end -}}
{{- if and (gt $nodes 1) (not $v.sharedStorage.existingClaim) (ne $v.sharedStorage.accessMode "ReadWriteMany") -}}
{{- fail "trainer.nodes > 1 puts trainer pods on several nodes that all write checkpoints and weights: sharedStorage.accessMode must be ReadWriteMany" -}}
{{- end -}}
{{- if and $v.inference.autoscaling.enabled (lt (int $v.inference.autoscaling.maxReplicas) (int $v.inference.autoscaling.minReplicas)) -}}
{{- fail "inference.autoscaling.maxReplicas must be >= minReplicas" -}}
{{- end -}}
{{- end -}}
