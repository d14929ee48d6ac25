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

{{/* Labels that no chart upgrade changes: for the pod template of a run's Job, which is immutable. */}}
{{- define "rlstack.stableLabels" -}}
{{ include "rlstack.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: rlstack
{{- end -}}

{{/* The training run: the release, or <release>-<trainer.runId>. It names the trainer Job, the run,
     weights and batcher directories and the env servers' run id, so a new runId is a fresh run
     beside the old one, and anything else an upgrade changes leaves the running one alone. */}}
{{- define "rlstack.runName" -}}
{{- if .Values.trainer.runId -}}
{{- printf "%s-%s" .Release.Name .Values.trainer.runId -}}
{{- else -}}
{{- .Release.Name -}}
{{- end -}}
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

{{/* auth.create: one Secret per release, <fullname>-auth (made once by the hook in secret.yaml); else an existing one. */}}
{{- define "rlstack.authSecretName" -}}
{{- if .Values.auth.create -}}
{{- printf "%s-auth" (include "rlstack.fullname" .) | trunc 63 | trimSuffix "-" -}}
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
     (rlstack.episodes.sandboxes.pods.SandboxManager's run_label); the NetworkPolicy and NOTES read it here. */}}
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

{{/* Where sandbox pods run: sandboxes.namespace.name, else the release's namespace. */}}
{{- define "rlstack.sandboxNamespace" -}}
{{- default .Release.Namespace .Values.sandboxes.namespace.name -}}
{{- end -}}

{{/* The claim sandbox pods mount: the shared one in the release's namespace, or in a sandbox
     namespace an existing claim there or the chart's own, bound to a volume on the same storage. */}}
{{- define "rlstack.sandboxClaimName" -}}
{{- $ns := .Values.sandboxes.namespace -}}
{{- if not $ns.name -}}
{{- include "rlstack.claimName" . -}}
{{- else -}}
{{- default (printf "%s-trials" (include "rlstack.fullname" .)) $ns.claim.existingClaim -}}
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

{{/* The source the model Job fetches, as fetch_model.py records it in its marker; "" for type none. */}}
{{- define "rlstack.modelSource" -}}
{{- $s := .Values.model.source -}}
{{- if eq $s.type "hub" -}}
{{- toJson (dict "source" "hub" "id" $s.hub.id "revision" (default "main" $s.hub.revision)) -}}
{{- else if eq $s.type "demo" -}}
{{- toJson (dict "source" "demo") -}}
{{- else if eq $s.type "hostPath" -}}
{{- toJson (dict "source" "copy" "hostPath" $s.hostPath) -}}
{{- else if eq $s.type "claim" -}}
{{- toJson (dict "source" "copy" "claim" $s.claim.name "subPath" $s.claim.subPath) -}}
{{- end -}}
{{- end -}}

{{/* The directory replicas and trainer load: one per source, <model.path>-<hash of the source>, so a
     new source is fetched beside the old one and never replaces a directory running pods have open.
     With type none, model.path itself (you put the model there). */}}
{{- define "rlstack.modelDir" -}}
{{- $path := trimSuffix "/" .Values.model.path -}}
{{- with include "rlstack.modelSource" . -}}
{{- printf "%s-%s" $path (sha256sum . | trunc 10) -}}
{{- else -}}
{{- $path -}}
{{- end -}}
{{- end -}}

{{/* The file whose presence says the model is complete on the shared volume (written last by the model Job). */}}
{{- define "rlstack.modelMarker" -}}
{{- printf "%s/.rlstack-model.json" (include "rlstack.modelDir" .) -}}
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
{{- if and (not $v.sharedStorage.existingClaim) (eq $v.sharedStorage.accessMode "ReadWriteMany") (not $v.sharedStorage.storageClass) -}}
{{- fail "sharedStorage.storageClass: name a ReadWriteMany storage class (AWS EFS efs.csi.aws.com, GCP Filestore filestore.csi.storage.gke.io, Azure Files, NFS, CephFS). The cluster's default class is usually a block class (EBS, Persistent Disk, local-path) that cannot give ReadWriteMany: the claim would stay Pending and every pod with it. All pods on one node (kind): sharedStorage.accessMode=ReadWriteOnce. A claim you made: sharedStorage.existingClaim" -}}
{{- end -}}
{{- if gt (len (include "rlstack.runName" .)) 63 -}}
{{- fail (printf "trainer.runId: the run's name %s is longer than 63 characters (a label value): shorten the release name or the runId" (include "rlstack.runName" .)) -}}
{{- end -}}
{{- with $v.sandboxes.namespace }}
{{- if and .name (eq .name $.Release.Namespace) -}}
{{- fail "sandboxes.namespace.name: the release's own namespace; leave it empty for that" -}}
{{- end -}}
{{- if and .name (not .claim.existingClaim) (not .claim.volumeSource) -}}
{{- fail "sandboxes.namespace.claim: sandbox pods in another namespace need their own claim on the shared storage: name an existing one there (existingClaim), or give the volume's source (volumeSource, e.g. {nfs: {server, path}} or {csi: {driver, volumeHandle}}) for the chart to make a PersistentVolume and claim" -}}
{{- end -}}
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

{{/*
The trainer Job's pod template (params: root, name, template). A Job's template is immutable, and
the Job is the run: when one of this name is already there (a real install or upgrade; lookup sees
nothing under `helm template`), its live template is rendered again, minus what the Job controller
added, so the upgrade leaves it as it is instead of failing or restarting the run.
*/}}
{{- define "rlstack.trainerTemplate" -}}
{{- $live := lookup "batch/v1" "Job" .root.Release.Namespace .name -}}
{{- if and $live $live.spec -}}
{{- $tpl := deepCopy $live.spec.template -}}
{{- $meta := default dict $tpl.metadata -}}
{{- $_ := unset $meta "creationTimestamp" -}}
{{- $_ := set $meta "labels" (omit (default dict $meta.labels) "controller-uid" "job-name" "batch.kubernetes.io/controller-uid" "batch.kubernetes.io/job-name") -}}
{{- $_ := set $tpl "metadata" $meta -}}
{{- toYaml $tpl -}}
{{- else -}}
{{- .template -}}
{{- end -}}
{{- end -}}

{{/* The trainer Job's annotations: the sha256 of the template it runs, and, when an upgrade asked for
     another one under the same runId, a note that those settings wait for a new run. */}}
{{- define "rlstack.trainerTemplateNote" -}}
{{- $sha := .template | sha256sum -}}
{{- $live := lookup "batch/v1" "Job" .root.Release.Namespace .name -}}
{{- if and $live $live.spec -}}
{{- $was := get (default dict $live.metadata.annotations) "rlstack.dev/pod-template-sha256" -}}
rlstack.dev/pod-template-sha256: {{ $was | quote }}
{{- if ne $was $sha }}
rlstack.dev/not-applied: {{ printf "trainer settings changed after this run started (pod template sha256 %s); they apply to a new trainer.runId" ($sha | trunc 12) | quote }}
{{- end }}
{{- else -}}
rlstack.dev/pod-template-sha256: {{ $sha | quote }}
{{- end -}}
{{- end -}}
