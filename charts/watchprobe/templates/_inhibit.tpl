{{/*
Alertmanager inhibit rules for watchprobe's alerts, the one source of them:
templates/alertmanagerconfig.yaml renders them into an AlertmanagerConfig
for prometheus-operator, and rules/watchprobe.inhibit.yml is the same rules
with the chart's defaults in Alertmanager's own configuration format, for
other setups (a test keeps it current). Each rule lets the alert that names
a cause silence the alerts it explains, on the same cluster, deployment,
probe (and path) and vantage point: an alert seen from several replicas
(no replica labels) inhibits only alerts seen so too, and one replica's
alert only that replica's. No rule lets a warning silence a page.
*/}}
{{- define "watchprobe.inhibitRules" -}}
{{- $r := .Values.prometheusRule -}}
{{- $same := concat $r.clusterLabels (list "job" "namespace" "probe") -}}
{{- $vp := $r.vantagePoints.labels -}}
# A path that cannot list or watch its markers (no stream open and caught
# up) explains its stalls, its losses and its burning budget.
- sourceMatch:
    - {name: alertname, value: WatchprobePathDown, matchType: "="}
  targetMatch:
    - {name: alertname, value: WatchprobeWatchStalled|WatchprobeEventsLost|WatchprobeEventLatencyBudgetBurn, matchType: "=~"}
  equal: {{ concat $same (list "path" "apiserver") $vp | toJson }}
# Failing marker cycles are explained by any alert that names why: writes
# that fail, a path down or stalled, lost events, a burning budget.
- sourceMatch:
    - {name: alertname, value: WatchprobeWriteErrors|WatchprobePathDown|WatchprobeWatchStalled|WatchprobeEventsLost|WatchprobeEventLatencyBudgetBurn, matchType: "=~"}
  targetMatch:
    - {name: alertname, value: WatchprobeProbeFailing, matchType: "="}
  equal: {{ concat $same $vp | toJson }}
# An exporter target without results explains whatever else its series
# say, or stop saying.
- sourceMatch:
    - {name: alertname, value: WatchprobeAbsent, matchType: "="}
  targetMatch:
    - {name: alertname, value: Watchprobe.+, matchType: "=~"}
    - {name: alertname, value: WatchprobeAbsent, matchType: "!="}
  equal: {{ concat $r.clusterLabels (list "job" "namespace") $vp | toJson }}
{{- end -}}
