{{/*
An ingress policy for one rlstack service: its HTTP port open to the components that call it
(and to `peers`, extra NetworkPolicyPeers), to metrics scrapers in metricsNamespaceSelector,
and to nothing else; egress is left alone. Parameters: root, component, port, from (components).
*/}}
{{- define "rlstack.servicePolicy" -}}
{{- $root := .root -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "rlstack.fullname" $root }}-{{ .component }}
  labels:
    {{- include "rlstack.labels" (dict "root" $root "component" .component) | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "rlstack.selectorLabels" (dict "root" $root "component" .component) | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    - from:
        {{- range $c := .from }}
        - podSelector:
            matchLabels:
              {{- include "rlstack.selectorLabels" (dict "root" $root "component" $c) | nindent 14 }}
        {{- end }}
        {{- with .peers }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with $root.Values.networkPolicies.metricsNamespaceSelector }}
        - namespaceSelector:
            {{- toYaml . | nindent 12 }}
        {{- end }}
      ports:
        - protocol: TCP
          port: {{ .port }}
{{- end -}}

{{/* The env servers' components (env-<name>): they call the batcher, the registry and the proxy. */}}
{{- define "rlstack.envComponents" -}}
{{- range .Values.envs }}{{ printf "env-%s " .name }}{{ end -}}
{{- end -}}
