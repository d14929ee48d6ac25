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

{{/* Selector labels: immutable once a Deployment exists, so nothing user-supplied goes in. A declared
     policy's objects (their root is rlstack.perPolicy's) add the policy: its name is checked as a
     label value (the schema's pattern), and its objects are new ones, so no existing selector changes. */}}
{{- define "rlstack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rlstack.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .root.Policy }}{{ if .declared }}
rlstack.dev/policy: {{ .name }}
{{- end }}{{ end }}
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

{{/*
The run's policies, as JSON (read with fromJsonArray): [{name, suffix, dir, declared, evaluates,
servedNames, responsesNames, model, inference, trainer}], each block the top-level one with the
policy's own over it (rlstack.policyBlocks). None declared: the one policy of the top-level blocks,
named model.servedName, with no suffix or directory of its own, so a release without policies renders
what it always has. Declared (even one, as `rlstack up`'s policies: block): names gain -<name>, the
run and weights directories /policies/<name>, and the objects the rlstack.dev/policy label. Only the
first policy's trainer evaluates, unless a policy's own trainer block sets evalEvery.
*/}}
{{- define "rlstack.policies" -}}
{{- $root := . -}}
{{- $out := list -}}
{{- range $i, $p := .Values.policies | default list }}
{{- $entry := dict "name" $p.name "suffix" (printf "-%s" $p.name) "dir" (printf "/policies/%s" $p.name) "declared" true
      "evaluates" (or (eq $i 0) (not (kindIs "invalid" (dig "trainer" "evalEvery" nil $p))))
      "servedNames" ($p.servedNames | default list) "responsesNames" ($p.responsesNames | default list) }}
{{- include "rlstack.policyBlocks" (dict "root" $root "own" $p "into" $entry) }}
{{- $out = append $out $entry }}
{{- else }}
{{- $v := .Values }}
{{- $out = list (dict "name" $v.model.servedName "suffix" "" "dir" "" "declared" false "evaluates" true
      "servedNames" list "responsesNames" list "model" $v.model "inference" $v.inference "trainer" $v.trainer) }}
{{- end }}
{{- toJson $out -}}
{{- end -}}

{{/* Sets into .into a declared policy's model, inference and trainer: each the top-level block with the
     policy's own (.own) over it, a null or an empty list in its own replacing the top-level value;
     model.servedName is the policy's name. Renders nothing. */}}
{{- define "rlstack.policyBlocks" -}}
{{- range $b := list "model" "inference" "trainer" }}
{{- $_ := set $.into $b (mergeOverwrite (deepCopy (index $.root.Values $b)) (index $.own $b | default dict)) }}
{{- end }}
{{- $_ := set (index $.into "model") "servedName" $.own.name }}
{{- end -}}

{{/*
Renders the named .template once per policy, each output that is not empty after ---. Its root is
the release's with .Values holding that policy's blocks (merged from the values themselves, not read
back from JSON, which would print an integer given by --set as 1e+06), .Policy its entry of
rlstack.policies less the blocks, and .Rendered a dict the policies share (for what two of them may
share: one model Job per directory). With none declared, .Values are the release's own.
*/}}
{{- define "rlstack.perPolicy" -}}
{{- $root := .root -}}
{{- $tpl := .template -}}
{{- $declared := $root.Values.policies | default list -}}
{{- $rendered := dict -}}
{{- range $i, $p := include "rlstack.policies" $root | fromJsonArray }}
{{- $values := $root.Values }}
{{- if $declared }}
{{- $values = omit $root.Values "model" "inference" "trainer" }}
{{- include "rlstack.policyBlocks" (dict "root" $root "own" (index $declared $i) "into" $values) }}
{{- end }}
{{- $ctx := dict "Values" $values "Release" $root.Release "Chart" $root.Chart "Files" $root.Files "Capabilities" $root.Capabilities
      "Template" $root.Template "Policy" (omit $p "model" "inference" "trainer") "Rendered" $rendered }}
{{- with include $tpl $ctx | trim }}
---
{{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The served name the shared services address by default (the proxy's and env servers'
     RLSTACK_*_SERVED_MODEL_NAME, NOTES' ping): the first policy's. */}}
{{- define "rlstack.servedName" -}}
{{- (first (include "rlstack.policies" . | fromJsonArray)).name -}}
{{- end -}}

{{/* A shared service's RLSTACK_<SVC>_POLICIES, "" unless policies are declared: the proxy's and env
     servers' routes (names: false; common.policies.PolicyRoute as JSON), the batcher's names (names: true). */}}
{{- define "rlstack.policiesJson" -}}
{{- if .root.Values.policies -}}
{{- $routes := list -}}
{{- $names := list -}}
{{- range include "rlstack.policies" .root | fromJsonArray }}
{{- $route := dict "name" .name }}
{{- with .servedNames }}{{ $_ := set $route "served_names" . }}{{ end }}
{{- with .responsesNames }}{{ $_ := set $route "responses_names" . }}{{ end }}
{{- $routes = append $routes $route }}
{{- $names = append $names .name }}
{{- end }}
{{- ternary (toJson $names) (toJson $routes) .names -}}
{{- end -}}
{{- end -}}

{{/* The most trainer pods one policy runs (trainer.nodes): more than 1 opens the trainer pods to each other. */}}
{{- define "rlstack.trainerNodes" -}}
{{- $most := 1 -}}
{{- range include "rlstack.policies" . | fromJsonArray }}
{{- $most = max $most (int (default 1 .trainer.nodes)) }}
{{- end }}
{{- $most -}}
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
{{- $policies := include "rlstack.policies" . | fromJsonArray -}}
{{- range $p := $policies }}
{{- include "rlstack.validatePolicy" (dict "root" $ "p" $p "where" (ternary (printf "policies[%s]: " $p.name) "" $p.declared)) }}
{{- end }}
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
{{- if $v.policies }}
{{- include "rlstack.validatePolicies" (dict "root" . "policies" $policies) }}
{{- end }}
{{- end -}}

{{/* One policy's model, inference and trainer (.p, an entry of rlstack.policies); messages start with .where. */}}
{{- define "rlstack.validatePolicy" -}}
{{- $root := .root -}}
{{- $where := .where -}}
{{- $model := .p.model -}}
{{- $inference := .p.inference -}}
{{- $trainer := .p.trainer -}}
{{- $storage := $root.Values.sharedStorage -}}
{{- if and (eq $inference.device "cpu") (gt (int $inference.tensorParallelSize) 1) -}}
{{- fail (printf "%sinference.tensorParallelSize > 1 needs inference.device=cuda" $where) -}}
{{- end -}}
{{- if not (hasPrefix (printf "%s/" (trimSuffix "/" $storage.mountPath)) $model.path) -}}
{{- fail (printf "%smodel.path (%s) must lie under sharedStorage.mountPath (%s): every replica and the trainer read it there" $where $model.path $storage.mountPath) -}}
{{- end -}}
{{- if and (eq $model.source.type "hub") (not $model.source.hub.id) -}}
{{- fail (printf "%smodel.source.type=hub needs model.source.hub.id (e.g. Qwen/Qwen2.5-0.5B-Instruct)" $where) -}}
{{- end -}}
{{- if and (eq $model.source.type "hostPath") (not $model.source.hostPath) -}}
{{- fail (printf "%smodel.source.type=hostPath needs model.source.hostPath (a model directory on every node)" $where) -}}
{{- end -}}
{{- if and (eq $model.source.type "claim") (not $model.source.claim.name) -}}
{{- fail (printf "%smodel.source.type=claim needs model.source.claim.name (an existing PVC holding the model)" $where) -}}
{{- end -}}
{{- $sync := include "rlstack.trainerSyncMode" $trainer.env -}}
{{- if and (eq $sync "ipc") (gt (int $inference.replicas) 0) -}}
{{- fail (printf "%sRLSTACK_TRAINER_SYNC_MODE=ipc needs the trainer and the replica in one pod (one shared GPU); the chart runs them as separate pods: use filesystem, lora or broadcast" $where) -}}
{{- end -}}
{{- $nodes := int (default 1 $trainer.nodes) -}}
{{- if and (gt $nodes 1) (ne $trainer.workload "Job") -}}
{{- fail (printf "%strainer.nodes > 1 runs the trainer as an Indexed Job: set trainer.workload=Job" $where) -}}
{{- end -}}
{{- if and (gt $nodes 1) (not $storage.existingClaim) (ne $storage.accessMode "ReadWriteMany") -}}
{{- fail (printf "%strainer.nodes > 1 puts trainer pods on several nodes that all write checkpoints and weights: sharedStorage.accessMode must be ReadWriteMany" $where) -}}
{{- end -}}
{{- if and $inference.autoscaling.enabled (lt (int $inference.autoscaling.maxReplicas) (int $inference.autoscaling.minReplicas)) -}}
{{- fail (printf "%sinference.autoscaling.maxReplicas must be >= minReplicas" $where) -}}
{{- end -}}
{{- end -}}

{{/* Declared policies together (.policies, rlstack.policies). Claims that overlap only by a prefix
     (claude-* and claude-haiku-*) are the proxy's and env servers' to refuse: their settings build
     the table (common.policies.PolicyTable), and they do not start, naming both claims. */}}
{{- define "rlstack.validatePolicies" -}}
{{- $full := include "rlstack.fullname" .root -}}
{{- $runId := .root.Values.trainer.runId -}}
{{- $names := dict -}}
{{- $claims := dict -}}
{{- range $p := .policies }}
{{- if hasKey $names $p.name }}
{{- fail (printf "policies: %s is declared twice: each policy once" $p.name) }}
{{- end }}
{{- $_ := set $names $p.name true }}
{{- range $claim := concat (list $p.name) $p.servedNames $p.responsesNames | uniq }}
{{- with get $claims $claim }}
{{- fail (printf "policies: %q is claimed by both %s and %s: each model name is answered by one policy" $claim . $p.name) }}
{{- end }}
{{- $_ := set $claims $claim $p.name }}
{{- end }}
{{- if and (eq (int $p.inference.replicas) 0) (not $p.inference.autoscaling.enabled) }}
{{- fail (printf "policies[%s]: inference.replicas is 0 and inference.autoscaling is off: nothing would serve it (calls to its names fail, its trainer gets no rollouts)" $p.name) }}
{{- end }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $p.name) }}
{{- fail (printf "policies[%s]: the chart names the policy's objects after it (<fullname>-inference-%s, a Service): lowercase letters, digits and '-' only" $p.name $p.name) }}
{{- end }}
{{- $service := printf "%s-inference-%s" $full $p.name }}
{{- if gt (len $service) 63 }}
{{- fail (printf "policies[%s]: its replicas' name %s is longer than 63 characters (a Service name): shorten the policy's name or the release's" $p.name $service) }}
{{- end }}
{{- $nodes := int (default 1 $p.trainer.nodes) }}
{{- $job := printf "%s-trainer%s-%s" $full (ternary (printf "-%s" $runId) "" (not (empty $runId))) $p.name }}
{{- $most := ternary (sub 62 (len (toString (sub $nodes 1)))) 63 (gt $nodes 1) | int }}
{{- if or (gt (len $job) $most) (and (gt $nodes 1) (gt (len (printf "%s-trainer-%s" $full $p.name)) 57)) }}
{{- fail (printf "policies[%s]: its trainer's name %s is too long (a Job's name is at most %d characters, its peers Service's 63): shorten the policy's name, trainer.runId or the release's name" $p.name $job $most) }}
{{- end }}
{{- end }}
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

{{- /* The trainer's sync mode as its env block gives it: RLSTACK_TRAINER_SYNC__MODE, or RLSTACK_TRAINER_SYNC_MODE,
       its name before the settings were grouped (which the trainer, too, lets win for a release). */ -}}
{{- define "rlstack.trainerSyncMode" -}}
{{- $env := default dict . -}}
{{- get $env "RLSTACK_TRAINER_SYNC_MODE" | default (get $env "RLSTACK_TRAINER_SYNC__MODE") | default "filesystem" -}}
{{- end }}

{{- /* "true" when an env block gives any of the names (a setting's new name and its old one), else "". */ -}}
{{- define "rlstack.setsEnv" -}}
{{- $env := default dict .env -}}
{{- range .names }}{{ if hasKey $env . }}true{{ end }}{{ end -}}
{{- end }}
