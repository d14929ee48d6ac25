{{/* The model Job's pod: fetch_model.py in the trainer image (it has huggingface_hub, and rlstack for the demo model). */}}
{{- define "rlstack.modelPod" -}}
{{- $s := .Values.model.source -}}
{{- $d := .Values.podDefaults -}}
{{- $j := .Values.model.job -}}
metadata:
  labels:
    {{- include "rlstack.labels" (dict "root" . "component" "model") | nindent 4 }}
spec:
  restartPolicy: OnFailure
  automountServiceAccountToken: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with default $d.priorityClassName $j.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with default $d.nodeSelector $j.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with default $d.tolerations $j.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: fetch
      image: {{ include "rlstack.image" (dict "root" . "image" "trainer") }}
      imagePullPolicy: {{ .Values.images.trainer.pullPolicy }}
      command: ["python3", "/opt/rlstack-model/fetch_model.py"]
      env:
        - name: HOME
          value: /tmp
        - name: RLSTACK_MODEL_DIR
          value: {{ include "rlstack.modelDir" . | quote }}
        {{- if eq $s.type "hub" }}
        - name: RLSTACK_MODEL_SOURCE
          value: hub
        - name: RLSTACK_MODEL_HUB_ID
          value: {{ $s.hub.id | quote }}
        - name: RLSTACK_MODEL_HUB_REVISION
          value: {{ $s.hub.revision | quote }}
        {{- with $s.hub.tokenSecret }}
        - name: HF_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ . }}
              key: {{ $s.hub.tokenSecretKey }}
        {{- end }}
        {{- else if eq $s.type "demo" }}
        - name: RLSTACK_MODEL_SOURCE
          value: demo
        {{- else }}
        - name: RLSTACK_MODEL_SOURCE
          value: copy
        - name: RLSTACK_MODEL_COPY_FROM
          value: {{ if and (eq $s.type "claim") $s.claim.subPath }}{{ printf "/source/%s" $s.claim.subPath | quote }}{{ else }}/source{{ end }}
        {{- end }}
      resources:
        {{- toYaml $j.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.containerSecurityContext | nindent 8 }}
      volumeMounts:
        - name: shared
          mountPath: {{ .Values.sharedStorage.mountPath }}
        - name: script
          mountPath: /opt/rlstack-model
          readOnly: true
        {{- if has $s.type (list "hostPath" "claim") }}
        - name: source
          mountPath: /source
          readOnly: true
        {{- end }}
  volumes:
    - name: shared
      persistentVolumeClaim:
        claimName: {{ include "rlstack.claimName" . }}
    - name: script
      configMap:
        name: {{ include "rlstack.fullname" . }}-model-fetch
    {{- if eq $s.type "hostPath" }}
    - name: source
      hostPath:
        path: {{ $s.hostPath }}
        type: Directory
    {{- else if eq $s.type "claim" }}
    - name: source
      persistentVolumeClaim:
        claimName: {{ $s.claim.name }}
        readOnly: true
    {{- end }}
{{- end -}}
