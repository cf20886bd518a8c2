{{/* Name of the chart, for labels. */}}
{{- define "watchprobe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects. */}}
{{- define "watchprobe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Namespace of the release's own objects; an umbrella chart may place them elsewhere. */}}
{{- define "watchprobe.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Selector labels: stable for the life of the release, so never the chart version. */}}
{{- define "watchprobe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "watchprobe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "watchprobe.labels" -}}
{{ include "watchprobe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: watchprobe
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "watchprobe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "watchprobe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
An image reference from {registry, repository, tag, digest}: the digest wins
over the tag, and global.imageRegistry (set once by an umbrella chart for a
mirror) over the image's own registry.
Call with (dict "image" .Values.image "defaultTag" "..." "global" .Values.global).
*/}}
{{- define "watchprobe.imageRef" -}}
{{- $registry := (.global | default dict).imageRegistry | default .image.registry -}}
{{- $repository := .image.repository -}}
{{- if $registry -}}
{{- $repository = printf "%s/%s" $registry $repository -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .defaultTag .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "watchprobe.image" -}}
{{- include "watchprobe.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion "global" .Values.global) -}}
{{- end -}}

{{/*
The marker kinds each namespace's probes write, as YAML: {namespace: [kind, ...]},
with Deployment and ReplicaSet where a probe there times those controllers.
RBAC is derived from it, so the exporter gets nothing its probes do not use.
*/}}
{{- define "watchprobe.kindsByNamespace" -}}
{{- $byNs := dict -}}
{{- range .Values.probes -}}
{{- $kinds := append (get $byNs .namespace | default list) (.kind | default "ConfigMap") -}}
{{- if has "deployment" (.controllers | default list) }}{{ $kinds = append $kinds "Deployment" }}{{ end -}}
{{- if has "replicaset" (.controllers | default list) }}{{ $kinds = append $kinds "ReplicaSet" }}{{ end -}}
{{- $_ := set $byNs .namespace ($kinds | uniq | sortAlpha) -}}
{{- end -}}
{{- toYaml $byNs -}}
{{- end -}}

{{/* A kubelet probe, its httpGet scheme following webConfig.scheme unless set. */}}
{{- define "watchprobe.kubeletProbe" -}}
{{- $p := deepCopy .probe -}}
{{- if and $p.httpGet (not $p.httpGet.scheme) -}}
{{- $_ := set $p.httpGet "scheme" .scheme -}}
{{- end -}}
{{- toYaml $p -}}
{{- end -}}

{{/* Where etcd.clientCertsSecret is mounted; probes' etcd files point here. */}}
{{- define "watchprobe.etcdCertsDir" -}}
/etc/watchprobe/etcd
{{- end -}}

{{/*
Fails the render when a probe reads its etcd certificates from the chart's
mount but no Secret is mounted there: the exporter would only find out at
start, and crash-loop on the missing file.
*/}}
{{- define "watchprobe.checkEtcdCerts" -}}
{{- $dir := printf "%s/" (include "watchprobe.etcdCertsDir" .) -}}
{{- if not .Values.etcd.clientCertsSecret -}}
{{- range $p := .Values.probes -}}
{{- $etcd := $p.etcd | default dict -}}
{{- range $key := list "cert_file" "key_file" "ca_file" -}}
{{- $file := get $etcd $key | default "" -}}
{{- if hasPrefix $dir $file -}}
{{- fail (printf "probe %q reads etcd.%s from %s, but etcd.clientCertsSecret is empty, so nothing is mounted there" $p.name $key $file) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Names of the probes whose paths list etcd, as YAML: [name, ...]. */}}
{{- define "watchprobe.etcdProbes" -}}
{{- $names := list -}}
{{- range .Values.probes -}}
{{- if has "etcd" (.paths | default list) -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- end -}}
{{- toYaml $names -}}
{{- end -}}

{{/*
Non-empty when a probe discovers its apiservers (`apiservers: discover` or
`apiservers: {discover: true}`), which reads the EndpointSlices of the
`kubernetes` Service in namespace default.
*/}}
{{- define "watchprobe.discoversAPIServers" -}}
{{- range .Values.probes -}}
{{- $a := .apiservers -}}
{{- if or (eq (toString $a) "discover") (and (kindIs "map" $a) (get (default dict $a) "discover")) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The spec fields of a ServiceMonitor or PodMonitor (monitor: its values)
that precede its selector; targetLabels names the field that copies the
Service's (targetLabels) or the pod's (podTargetLabels) labels. Empty
unless set. A jobLabel must name a label (of labels: the chart's and those
at labelsField) whose value is scrapeJob: the rules select job="<scrapeJob>",
and any other job would keep WatchprobeAbsent firing and hide an exporter
that is really down.
*/}}
{{- define "watchprobe.monitorSpec" -}}
{{- with .monitor.jobLabel }}
{{- if ne (get (default dict $.labels) .) $.scrapeJob }}
{{- fail (printf "%s.jobLabel: %q must name a label whose value is scrapeJob (%q), the job the rules select: set %s.%s: %s, or leave jobLabel empty" $.kind . $.scrapeJob $.labelsField . $.scrapeJob) }}
{{- end }}
jobLabel: {{ . }}
{{- end }}
{{- with .monitor.targetLabels }}
{{ $.targetLabels }}:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .monitor.sampleLimit }}
sampleLimit: {{ . }}
{{- end }}
{{- end -}}

{{/*
One endpoint of a ServiceMonitor or PodMonitor (monitor: its values; root:
the chart's context), after its port. With agent set, the node agents'
endpoint: no node relabeling (each agent labels its series with its node
and zone itself, and a target label of the same name would rename those to
exported_node) and the job agent.scrapeJob.
*/}}
{{- define "watchprobe.monitorEndpoint" -}}
{{- $m := .monitor -}}
path: /metrics
scheme: {{ lower .root.Values.webConfig.scheme }}
{{- with $m.interval }}
interval: {{ . }}
{{- end }}
{{- with $m.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- if $m.honorLabels }}
honorLabels: true
{{- end }}
{{- with $m.proxyUrl }}
proxyUrl: {{ . | quote }}
{{- end }}
{{- with $m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.authorization }}
authorization:
  {{- toYaml . | nindent 2 }}
{{- end }}
relabelings:
  {{- if not .agent }}
  # The node each replica runs on: alerts name the vantage point by
  # its pod (which the operator sets) and node.
  - action: replace
    sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
  {{- end }}
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- /* With jobLabel set, the job is that label's value instead. */}}
  {{- if .agent }}
  # Last, so that it holds whatever the relabelings above: the rules
  # select the agents by it. To name the job otherwise, set
  # agent.scrapeJob.
  - action: replace
    targetLabel: job
    replacement: {{ .root.Values.agent.scrapeJob | quote }}
  {{- else if not $m.jobLabel }}
  # Last, so that it holds whatever the release's and Service's names
  # and the relabelings above: the rules' WatchprobeAbsent selects on
  # it. To name the job otherwise, set scrapeJob.
  - action: replace
    targetLabel: job
    replacement: {{ .root.Values.scrapeJob | quote }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The resources each marker namespace's freshness checks list there, as
"resource.group" ("resource." for the core group): a probe's
freshness.resources, or the exporter's default list for `freshness: {}`
(pkg/config DefaultFreshnessConfig), and "*.group" for each API group
freshness.crds names: every resource of that group, none of any other.
*/}}
{{- define "watchprobe.freshnessByNamespace" -}}
{{- $byNs := dict -}}
{{- range .Values.probes -}}
{{- if hasKey . "freshness" -}}
{{- $f := .freshness | default dict -}}
{{- $res := list -}}
{{- if hasKey $f "resources" }}{{ $res = $f.resources | default list }}{{ else }}{{ $res = list "pods" "endpointslices.discovery.k8s.io" "leases.coordination.k8s.io" "configmaps" }}{{ end -}}
{{- $list := get $byNs .namespace | default list -}}
{{- range $res }}{{ $list = append $list (ternary . (printf "%s." .) (contains "." .)) }}{{ end -}}
{{- range ($f.crds | default list) }}{{ $list = append $list (printf "*.%s" .) }}{{ end -}}
{{- $_ := set $byNs .namespace ($list | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- toYaml $byNs -}}
{{- end -}}

{{/*
The cluster-scoped resources the probes' freshness checks list
(freshness.cluster_resources, and customresourcedefinitions for
freshness.crds), as "resource.group"; empty: no ClusterRole.
*/}}
{{- define "watchprobe.freshnessCluster" -}}
{{- $list := list -}}
{{- range .Values.probes -}}
{{- $f := .freshness | default dict -}}
{{- range ($f.cluster_resources | default list) }}{{ $list = append $list (ternary . (printf "%s." .) (contains "." .)) }}{{ end -}}
{{- if $f.crds }}{{ $list = append $list "customresourcedefinitions.apiextensions.k8s.io" }}{{ end -}}
{{- end -}}
{{- if $list }}{{ toYaml ($list | uniq | sortAlpha) }}{{ end -}}
{{- end -}}

{{/* "true" if any probe has freshness checks; else empty. */}}
{{- define "watchprobe.freshnessOn" -}}
{{- range .Values.probes }}{{ if hasKey . "freshness" }}true{{ break }}{{ end }}{{ end -}}
{{- end -}}

{{/*
The resources each marker namespace's WatchList sync checks watch there,
as "resource.group" ("resource." for the core group): a probe's
watch_list.resources, or the exporter's default list for `watch_list: {}`
(pkg/config DefaultWatchListConfig).
*/}}
{{- define "watchprobe.watchListByNamespace" -}}
{{- $byNs := dict -}}
{{- range .Values.probes -}}
{{- if hasKey . "watch_list" -}}
{{- $w := .watch_list | default dict -}}
{{- $res := list -}}
{{- if hasKey $w "resources" }}{{ $res = $w.resources | default list }}{{ else }}{{ $res = list "pods" "endpointslices.discovery.k8s.io" "leases.coordination.k8s.io" "configmaps" }}{{ end -}}
{{- $list := get $byNs .namespace | default list -}}
{{- range $res }}{{ $list = append $list (ternary . (printf "%s." .) (contains "." .)) }}{{ end -}}
{{- $_ := set $byNs .namespace ($list | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- toYaml $byNs -}}
{{- end -}}

{{/*
The cluster-scoped resources the probes' WatchList sync checks watch
(watch_list.cluster_resources), as "resource.group"; empty: no ClusterRole.
*/}}
{{- define "watchprobe.watchListCluster" -}}
{{- $list := list -}}
{{- range .Values.probes -}}
{{- $w := .watch_list | default dict -}}
{{- range ($w.cluster_resources | default list) }}{{ $list = append $list (ternary . (printf "%s." .) (contains "." .)) }}{{ end -}}
{{- end -}}
{{- if $list }}{{ toYaml ($list | uniq | sortAlpha) }}{{ end -}}
{{- end -}}

{{/* RBAC rules granting .verb (list by default) on each "resource.group" of .list. */}}
{{- define "watchprobe.listRules" -}}
{{- $verb := .verb | default "list" }}
{{- range .list }}
{{- $parts := splitn "." 2 . }}
- apiGroups: [{{ $parts._1 | quote }}]
  resources: [{{ $parts._0 | quote }}]
  verbs: [{{ $verb }}]
{{- end }}
{{- end -}}

{{/*
The pod's imagePullSecrets: global.imagePullSecrets, then imagePullSecrets,
each a Secret's name or a LocalObjectReference ({name: ...}); empty when
neither lists one.
*/}}
{{- define "watchprobe.imagePullSecrets" -}}
{{- $refs := list -}}
{{- range concat ((.Values.global | default dict).imagePullSecrets | default list) .Values.imagePullSecrets -}}
{{- if kindIs "string" . -}}
{{- $refs = append $refs (dict "name" .) -}}
{{- else -}}
{{- $refs = append $refs . -}}
{{- end -}}
{{- end -}}
{{- with $refs -}}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/*
Non-empty when the exporter authenticates with its ServiceAccount's token
(automountServiceAccountToken) but the ServiceAccount is not mounted
automatically (serviceAccount.automountServiceAccountToken false): the pod
then mounts the token itself, into the exporter's container only.
*/}}
{{- define "watchprobe.projectedToken" -}}
{{- if and .Values.automountServiceAccountToken (not .Values.serviceAccount.automountServiceAccountToken) -}}
true
{{- end -}}
{{- end -}}

{{/*
The volume the kubelet would mount for an automounted token: a bound token
the kubelet renews (client-go rereads the file), the cluster's CA and the
namespace, at the path in-cluster config reads.
*/}}
{{- define "watchprobe.tokenVolume" -}}
- name: serviceaccount-token
  projected:
    defaultMode: 420 # 0644, as the kubelet's own token volume
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
{{- end -}}

{{/*
An egress rule (list item) for one endpoint: a URL or host:port, its host
an IPv4 or IPv6 address (bracketed in a URL) or a name. An address gets an
ipBlock of itself; a name, or `to` when given, the peers `to`, or none:
its port to any address. Without a port: the scheme's (http 80, https
443), else defaultPort.
*/}}
{{- define "watchprobe.egressRule" -}}
{{- $rest := .endpoint -}}
{{- $scheme := "" -}}
{{- if contains "://" $rest -}}
{{- $scheme = lower (splitList "://" $rest | first) -}}
{{- $rest = splitList "://" $rest | rest | join "://" -}}
{{- end -}}
{{- $hostport := splitList "/" $rest | first -}}
{{- $hostport = splitList "@" $hostport | last -}}
{{- $host := $hostport -}}
{{- $port := "" -}}
{{- if hasPrefix "[" $hostport -}}
{{- $host = trimPrefix "[" (splitList "]" $hostport | first) -}}
{{- $port = trimPrefix ":" (splitList "]" $hostport | last) -}}
{{- else if contains ":" $hostport -}}
{{- $parts := splitList ":" $hostport -}}
{{- if eq (len $parts) 2 -}}
{{- $host = first $parts -}}
{{- $port = last $parts -}}
{{- end -}}
{{- end -}}
{{- if not $port -}}
{{- $port = get (dict "http" "80" "https" "443") $scheme | default (toString .defaultPort) -}}
{{- end -}}
{{- $cidr := "" -}}
{{- if regexMatch "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$" $host -}}
{{- $cidr = printf "%s/32" $host -}}
{{- else if contains ":" $host -}}
{{- $cidr = printf "%s/128" $host -}}
{{- end -}}
# {{ .endpoint }}
- ports:
    - port: {{ $port }}
      protocol: TCP
  {{- if $cidr }}
  to:
    - ipBlock:
        cidr: {{ $cidr }}
  {{- else if .to }}
  to:
    {{- toYaml .to | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
The node agents' names and labels. Their own app.kubernetes.io/name, so that
no selector of the exporter's (the Deployment's, the Service's, the
PodDisruptionBudget's, the NetworkPolicy's, the monitors') takes an agent
pod for an exporter replica, nor the other way round.
*/}}
{{- define "watchprobe.agentFullname" -}}
{{- printf "%s-agent" (include "watchprobe.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "watchprobe.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-agent" (include "watchprobe.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "watchprobe.agentLabels" -}}
{{ include "watchprobe.agentSelectorLabels" . }}
app.kubernetes.io/component: agent
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: watchprobe
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "watchprobe.agentServiceAccountName" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- default (include "watchprobe.agentFullname" .) .Values.agent.serviceAccount.name -}}
{{- else -}}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Fails the render when the agents' namespace is one whose Leases are not
only theirs: each agent counts the Leases in it to share agent.writeBudget,
and the exporter deletes markers left behind in its probes' namespaces.
*/}}
{{- define "watchprobe.checkAgentNamespace" -}}
{{- $ns := .Values.agent.namespace -}}
{{- if eq $ns (include "watchprobe.namespace" .) -}}
{{- fail (printf "agent.namespace: %q is the release's own namespace; the agents count the Leases in theirs to share agent.writeBudget, so give them a namespace of their own (default watchprobe-agents)" $ns) -}}
{{- end -}}
{{- range .Values.probes -}}
{{- if eq .namespace $ns -}}
{{- fail (printf "agent.namespace: %q is probe %q's marker namespace; the agents count the Leases in theirs to share agent.writeBudget, so give them a namespace of their own (default watchprobe-agents)" $ns .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
