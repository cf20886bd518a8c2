{{/*
Alertmanager inhibit rules for watchprobe's alerts, the one source of them:
templates/alertmanagerconfig.yaml renders them into an AlertmanagerConfig
for prometheus-operator, and rules/watchprobe.inhibit.yml is the same rules
with the chart's defaults in Alertmanager's own configuration format, for
other setups (a test keeps it current). Each rule lets the alert that names
a cause silence the alerts it explains, on the same cluster, deployment,
probe (and path) and vantage point: an alert seen from several replicas
(no replica labels) inhibits only alerts seen so too, and one replica's
alert only that replica's. Each rule comes twice: for the same severity,
and for a source at the page severity over targets at the ticket severity
(prometheusRule.severities, every alert's severity being one of the two);
so no ticket silences a page, whatever the values name them or give the
alerts.
*/}}
{{- define "watchprobe.inhibitRule" -}}
- sourceMatch:
    - {name: alertname, value: {{ .source }}, matchType: {{ .sourceType }}}
    {{- range .sourceHas }}
    - {name: {{ . }}, value: ".+", matchType: "=~"}
    {{- end }}
  targetMatch:
    - {name: alertname, value: {{ .target }}, matchType: {{ .targetType }}}
    {{- range .targetNot }}
    - {name: alertname, value: {{ . }}, matchType: "!="}
    {{- end }}
  equal: {{ append .equal "severity" | toJson }}
- sourceMatch:
    - {name: alertname, value: {{ .source }}, matchType: {{ .sourceType }}}
    {{- range .sourceHas }}
    - {name: {{ . }}, value: ".+", matchType: "=~"}
    {{- end }}
    - {name: severity, value: {{ .sev.page | toJson }}, matchType: "="}
  targetMatch:
    - {name: alertname, value: {{ .target }}, matchType: {{ .targetType }}}
    {{- range .targetNot }}
    - {name: alertname, value: {{ . }}, matchType: "!="}
    {{- end }}
    - {name: severity, value: {{ .sev.ticket | toJson }}, matchType: "="}
  equal: {{ .equal | toJson }}
{{- end -}}
{{- define "watchprobe.inhibitRules" -}}
{{- $r := .Values.prometheusRule -}}
{{- include "watchprobe.severities" . -}}
{{- $sev := $r.severities -}}
{{- $same := concat $r.clusterLabels (list "job" "namespace" "probe") -}}
{{- $vp := $r.vantagePoints.labels -}}
# A path that cannot list or watch its markers (no stream open and caught
# up) explains its stalls, its losses and its burning budget.
{{ include "watchprobe.inhibitRule" (dict "source" "WatchprobePathDown" "sourceType" "\"=\"" "target" "WatchprobeWatchStalled|WatchprobeEventsLost|WatchprobeEventLatencyBudgetBurn" "targetType" "\"=~\"" "targetNot" list "equal" (concat $same (list "path" "apiserver") $vp) "sev" $sev) }}
# Failing marker cycles are explained by any alert that names why: writes
# that fail, a path down or stalled, lost events, a burning budget.
{{ include "watchprobe.inhibitRule" (dict "source" "WatchprobeWriteErrors|WatchprobePathDown|WatchprobeWatchStalled|WatchprobeEventsLost|WatchprobeEventLatencyBudgetBurn" "sourceType" "\"=~\"" "target" "WatchprobeProbeFailing" "targetType" "\"=\"" "targetNot" list "equal" (concat $same $vp) "sev" $sev) }}
# A replica starved of CPU explains its own latency and stalls, and its
# failing cycles (probe_success keeps the latest judged cycle's verdict
# while its cycles go unjudged): only that replica's (the same
# vantage-point labels), never the agreed alerts, which carry none. Not
# its losses: a loss is counted only once the exporter has run again, so
# it is never starvation's, and WatchprobeEventsLost's rule already leaves
# a starved replica to a healthy one where one reports. Its default
# severity, a ticket, silences no page: with one replica, whose alerts
# are pages, they still go out.
{{ include "watchprobe.inhibitRule" (dict "source" "WatchprobeExporterStarved" "sourceType" "\"=\"" "target" "WatchprobeEventLatencyBudgetBurn|WatchprobeWatchStalled|WatchprobeProbeFailing" "targetType" "\"=~\"" "targetNot" list "equal" (concat $r.clusterLabels (list "job" "namespace") $vp) "sev" $sev) }}
# An exporter target without results explains whatever else its series
# say, or stop saying: only that target's alerts (its instance, the first
# vantage-point label), never
# another replica's nor an agreed alert, which carries no instance. Its
# forms without an instance (no target of the job at all, a cluster that
# stopped reporting) inhibit nothing: they explain no particular alert.
{{ include "watchprobe.inhibitRule" (dict "source" "WatchprobeAbsent" "sourceType" "\"=\"" "sourceHas" (list (first $vp)) "target" "Watchprobe.+" "targetType" "\"=~\"" "targetNot" (list "WatchprobeAbsent") "equal" (concat $r.clusterLabels (list "job" "namespace") $vp) "sev" $sev) }}
{{- if include "watchprobe.rules.agentsOn" . }}
# Many nodes' agents degraded (the control plane's problem) explain each
# of those nodes' tickets in the same cluster (and the agents' job and
# namespace): one page, not a ticket per node.
{{ include "watchprobe.inhibitRule" (dict "source" "WatchprobeNodesWatchDegraded" "sourceType" "\"=\"" "target" "WatchprobeNodeWatchDegraded" "targetType" "\"=\"" "targetNot" list "equal" (concat $r.clusterLabels (list "job" "namespace")) "sev" $sev) }}
{{- end }}
{{- end -}}
