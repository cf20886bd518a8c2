{{/*
watchprobe's recording and alerting rules, the one source of them: the
PrometheusRule renders them with the release's values, and `make rules`
renders them with the chart's defaults into rules/watchprobe.rules.yml, on
which the promtool tests run. A test keeps that file current.

Prometheus's own templates in the annotations are written as {{`{{ ... }}`}},
a raw string Helm prints unchanged.
*/}}

{{/* The le label value(s) of the objective's bucket, as a regex: Prometheus 3
stores le="1" as "1.0", older versions and promtool's input series keep "1". */}}
{{- define "watchprobe.rules.le" -}}
{{- $le := toString . -}}
{{- if contains "." $le -}}
{{- replace "." "\\\\." $le -}}
{{- else -}}
{{- $le }}(\\.0)?
{{- end -}}
{{- end -}}

{{/* "true" when the objective is a bound of the latency histogram's native
buckets, where histogram_fraction is exact: see fractionWithinObjective. */}}
{{- define "watchprobe.rules.nativeExact" -}}
{{- if has (toString .) (list "0.25" "0.5" "1") -}}true{{- end -}}
{{- end -}}

{{/* A fraction as a percentage for annotations: 0.01 is 1, 0.001 is 0.1. */}}
{{- define "watchprobe.rules.percent" -}}
{{- round (mulf . 100) 4 | toString -}}
{{- end -}}

{{/* A rule's `for`, left out when zero: such alerts fire at once. */}}
{{- define "watchprobe.rules.for" -}}
{{- if and . (ne (toString .) "0s") (ne (toString .) "0") -}}
for: {{ . }}
{{- end -}}
{{- end -}}

{{/* The fraction of a probe's and path's events in the latency histogram
that arrived within the objective, by fn (rate or increase) over the
window: from the classic buckets (the objective's over +Inf) where
Prometheus has them, else from the native histogram, which is all there is
with --no-metrics.classic-histograms. A fraction, not a count: Prometheus
may hold a form for part of the window only (it switched from classic to
native, or began keeping both), and the exporter's native histogram resets,
classic buckets with it, when it outgrows its bucket limit; a fraction of
the part it holds is a sample of the window, a count would be a shortfall
counted as late. `or` takes one form per series, so a Prometheus that keeps
both counts each event once. The native form only where the objective is a
native bucket bound: 0.25, 0.5 and 1 are powers of two, bounds at every
schema from 0 up (the exporter's start at 3 and would need more than 160
buckets to drop below 0); any other objective falls inside a bucket about
9% wide, where histogram_fraction interpolates and would call late events
good, so such an SLI needs the classic buckets (WatchprobeSLIMissing says
when it has none). NaN without events. */}}
{{- define "watchprobe.rules.fractionWithinObjective" -}}
(
  sum without (event, le) ({{ .fn }}(watchprobe_event_latency_seconds_bucket{le=~"{{ include "watchprobe.rules.le" .objective }}"}[{{ .window }}]))
  / sum without (event, le) ({{ .fn }}(watchprobe_event_latency_seconds_bucket{le="+Inf"}[{{ .window }}]))
  {{- if include "watchprobe.rules.nativeExact" .objective }}
  or
  histogram_fraction(0, {{ .objective }}, sum without (event) ({{ .fn }}(watchprobe_event_latency_seconds[{{ .window }}])))
  {{- end }}
)
{{- end -}}

{{/* Events per probe and path that arrived within the objective, by fn
over the window: that fraction of the observed events (every observed event
is in the histogram once). Without events the fraction is NaN and the count
0, which the `>= 0 or` keeps; without any histogram form, nothing, so that
no SLI is made up. */}}
{{- define "watchprobe.rules.withinObjective" -}}
{{- $f := include "watchprobe.rules.fractionWithinObjective" . | indent 2 | trim -}}
{{- $o := printf "sum without (event) (%s(watchprobe_events_observed_total[%s]))" .fn .window -}}
(
  {{ $f }} * {{ $o }} >= 0
  or
  {{ $o }} == 0 and {{ $f }}
)
{{- end -}}

{{/* The events owed to each probe and path over a window, by fn (rate or
increase): each write counts once per path, observed (on time or late) or
missed; a late write is in observed, missed and late alike, hence - late.
A write that failed for the control plane's failure is owed to every path
of its probe too (it counts on each, as bad): without it, writes that all
fail would leave 0/0, an SLI with no value, and no page while nothing can
be written. A write the probe's own environment refused
(watchprobe_writes_refused_total) or whose delivery a path could not judge
(watchprobe_events_unmeasurable_total) is owed nothing: it is not
List-Watch's. Where Prometheus has no watchprobe_write_errors_total for the
probe (a relabelling dropped it), the events alone. */}}
{{- define "watchprobe.rules.owed" -}}
{{- $e := printf "sum without (event) (%s(watchprobe_events_observed_total[%s]))\n+ sum without (reason) (%s(watchprobe_events_missed_total[%s]))\n- sum without () (%s(watchprobe_events_late_total[%s]))" .fn .window .fn .window .fn .window -}}
(
  {{- $e | nindent 2 }}
  + ignoring (path, apiserver) group_left sum without (verb, code) ({{ .fn }}(watchprobe_write_errors_total[{{ .window }}]))
  or
  {{- $e | nindent 2 }}
)
{{- end -}}

{{/* How many times a counter rose over the window, exactly: the counter now
minus the counter a window ago, summed without the labels in by. increase()
extrapolates to the window's edges, so that three relists in 15 minutes
read as 3.1 and cross a threshold of 3; this does not. Where the counter has
no sample a window ago (a new exporter, a gap in the scrapes) or went down
(the process restarted), the rise over the samples within the window
instead: never the counter's whole life, which a scrape gap would otherwise
count as new. A series created by its first increment (a new code) counts
from its creation where another series of the sum is older. */}}
{{- define "watchprobe.rules.count" -}}
{{- $now := printf "sum without (%s) (%s)" .by .metric -}}
(
  {{ $now }} - sum without ({{ .by }}) ({{ .metric }} offset {{ .window }}) >= 0
  or
  {{ $now }} - sum without ({{ .by }}) (min_over_time({{ .metric }}[{{ .window }}]))
)
{{- end -}}

{{/* The share of each replica's writes judged over the window that were
unmeasurable because the exporter was starved of CPU, one series per
replica (no probe, path or apiserver label): WatchprobeExporterStarved's
condition, and what leaves a starved replica out of the replicas an
agreed alert counts. */}}
{{- define "watchprobe.rules.starvedRatio" -}}
{{- $starved := printf "sum without (probe, path, apiserver, reason) (increase(watchprobe_events_unmeasurable_total{reason=\"exporter_starved\"}[%s]))" .window -}}
{{ $starved }}
/
(
  sum without (probe, path, apiserver, event) (increase(watchprobe_events_observed_total[{{ .window }}]))
  + {{ $starved }}
)
{{- end -}}

{{/* reporting (or a condition), less the replicas starved of CPU now
(their share of unmeasurable writes above WatchprobeExporterStarved's
threshold), where that alert is enabled: their series say nothing of the
cluster. Counted as reporting they would keep the others from agreeing;
counted in a condition they would agree with themselves (a frozen
probe_success of 0), past the healthy replica that sees nothing. Both sides
of an agreement leave them out. */}}
{{- define "watchprobe.rules.notStarved" -}}
{{- $s := .starved -}}
{{- if $s.enabled -}}
{{ .reporting }}
unless ignoring (probe, path, apiserver)
(
{{ include "watchprobe.rules.starvedRatio" $s | indent 2 }}
  > {{ $s.threshold }}
)
{{- else -}}
{{ .reporting }}
{{- end -}}
{{- end -}}

{{/* reporting (or a condition), less the replicas starved of CPU now
where another replica of their deployment that is not starved reports
(has `.healthy`, a per-replica series): a starved replica's own view is
left to that healthy one, and where none reports, kept, as nothing else
watches. With one vantage point required, every replica's view is its
own alert, and nothing is left out. For what starvation cannot make up:
a loss, which the exporter counts only once it has run again since the
write's lost_after. */}}
{{- define "watchprobe.rules.notStarvedBesideHealthy" -}}
{{- $s := .starved -}}
{{- if and $s.enabled (gt (int .required) 1) -}}
{{- $ratio := printf "(\n%s\n  > %v\n)" (include "watchprobe.rules.starvedRatio" $s | indent 2) $s.threshold -}}
{{ .reporting }}
unless ignoring (probe, path, apiserver)
(
{{ $ratio | indent 2 }}
  and ignoring ({{ .vp }})
  count without ({{ .vp }}) (
    {{ .healthy }}
    unless
{{ $ratio | indent 4 }}
  )
)
{{- else -}}
{{ .reporting }}
{{- end -}}
{{- end -}}

{{/* The distinct nodes from which cond is seen, one series without the
vantage-point labels: the replicas of one node counted once (count without
the replica labels), then the nodes counted. A series without a node
label (node="" after the inner count) is no node: `unless on (node)
vector(1)` drops it, as vector(1) matches exactly the empty node. */}}
{{- define "watchprobe.rules.nodesSeeing" -}}
count without ({{ .node }}) (
  count without ({{ .replica }}) (
{{ .cond | indent 4 }}
  )
  unless on ({{ .node }}) vector(1)
)
{{- end -}}

{{/* The vantage-point forms of a condition. cond: the condition per
exporter replica (its series keep the vantage-point labels). Agreed: the
condition seen from at least `required` distinct nodes (replicas on one
node count once, series without a node label not at all), one series
without the vantage-point labels, valued by agg over the replicas that see
it (count: the number of nodes; min or sum: over the replicas). With fewer
nodes seeing it there is no agreed form at all, never one from fewer
nodes: a fault of one node (its network, its conntrack table) seen by
every replica that happens to run there is no fault of the cluster.
Single: the condition on one replica whose group does not agree
(singleCond where the replica's own view differs from what it agrees on,
e.g. its own long window rather than every replica's). */}}
{{- define "watchprobe.rules.agreed" -}}
{{- $c := .cond | indent 2 -}}
{{- $nodes := include "watchprobe.rules.nodesSeeing" . -}}
{{- if ne .agg "count" -}}
{{ .agg }} without ({{ .vp }}) (
{{ $c }}
)
and
{{ $nodes }}
>= {{ .required }}
{{- else -}}
{{ $nodes }}
>= {{ .required }}
{{- end }}
{{- end -}}

{{- define "watchprobe.rules.single" -}}
(
{{ .singleCond | default .cond | indent 2 }}
)
unless ignoring ({{ .vp }})
(
{{ include "watchprobe.rules.agreed" (dict "cond" .cond "vp" .vp "node" .node "replica" .replica "required" .required "agg" "count") | indent 2 }}
)
{{- end -}}

{{/* Severities. An alert's value names a role, page or ticket (the
schema allows nothing else), and prometheusRule.severities gives each role
its severity label value; the inhibit rules (_inhibit.tpl) match those
values, so whatever they are, a ticket never silences a page. This checks
them, for the rules and the inhibit rules alike: two equal values would
make every ticket a page to Alertmanager. */}}
{{- define "watchprobe.severities" -}}
{{- $s := .Values.prometheusRule.severities -}}
{{- if or (not $s.page) (not $s.ticket) -}}
{{- fail "prometheusRule.severities: set both page and ticket to the severity label values your Alertmanager routes (e.g. critical and warning)" -}}
{{- end -}}
{{- if eq (toString $s.page) (toString $s.ticket) -}}
{{- fail (printf "prometheusRule.severities: page and ticket are both %q; give them different values, or Alertmanager cannot tell a page from a ticket and the inhibit rules would let a ticket silence a page" (toString $s.page)) -}}
{{- end -}}
{{- end -}}

{{/* One alerting rule. labels: the alert's own labels besides severity,
its values' extra labels included. */}}
{{- define "watchprobe.rules.alert" -}}
- alert: {{ .name }}
  expr: |-
    {{- .expr | nindent 4 }}
  {{- with include "watchprobe.rules.for" .for }}
  {{ . }}
  {{- end }}
  {{- if and .keep (ne (toString .keep) "0s") }}
  keep_firing_for: {{ .keep }}
  {{- end }}
  labels:
    severity: {{ .severity | toYaml }}
    {{- range $k, $v := .labels }}
    {{ $k }}: {{ $v | quote }}
    {{- end }}
  annotations:
    summary: {{ .summary | quote }}
    description: {{ .description | quote }}
    runbook_url: {{ .runbook }}
{{- end -}}

{{/* An alert about what the cluster delivers, in its vantage-point forms:
with one vantage point required (one replica), the condition per replica
at the alert's severity; with more, the agreed form at the alert's severity
and the single form at .oneSeverity (see watchprobe.rules.severities),
naming the replica, labelled
vantage_points "agreed" and "one" (routes may tell them apart, and the two
are never the same alert). .description is
the per-replica text, .agreed the text of the agreed form; both may use
$value, which is the replica's value, or agg's over the agreeing ones. */}}
{{- define "watchprobe.rules.vantageAlerts" -}}
{{- $base := dict "name" .name "for" .for "keep" .keep "labels" .labels "runbook" .runbook -}}
{{- if le (int .required) 1 -}}
{{- include "watchprobe.rules.alert" (merge (dict "expr" .cond "severity" .severity "summary" .summary "description" (.oneDescription | default .description)) $base) }}
{{- else -}}
{{- include "watchprobe.rules.alert" (merge (dict "expr" (include "watchprobe.rules.agreed" .) "severity" .severity "summary" .summary "description" .agreed "labels" (merge (dict "vantage_points" "agreed") .labels)) $base) }}
{{ include "watchprobe.rules.alert" (merge (dict "expr" (include "watchprobe.rules.single" .) "severity" .oneSeverity "labels" (merge (dict "vantage_points" "one") .labels) "summary" .singleSummary "description" (printf "%s Seen from fewer than %d distinct nodes, it does not page: either a replica on another node does not see it (suspect this replica's node or its network path to the apiserver: conntrack, a load balancer's idle timeout, a node-local proxy), or no replica on another node reports to confirm it (WatchprobeVantagePointsMissing). Replicas reporting: %s." .description (int .required) .reporters)) $base) }}
{{- end -}}
{{- end -}}

{{/* apiserver paths that miss more than the threshold of their events over
the window, or are stalled, one series per apiserver. */}}
{{- define "watchprobe.rules.apiserverDegraded" -}}
(
  sum without (reason) (increase(watchprobe_events_missed_total{path="apiserver"}[{{ .window }}]))
  /
  (
    sum without (event) (increase(watchprobe_events_observed_total{path="apiserver"}[{{ .window }}]))
    + sum without (reason) (increase(watchprobe_events_missed_total{path="apiserver"}[{{ .window }}]))
    - sum without () (increase(watchprobe_events_late_total{path="apiserver"}[{{ .window }}]))
  )
  > {{ .threshold }}
)
or
watchprobe_watch_stalled{path="apiserver"} == 1
{{- end -}}

{{/* What to do about a refusal, as a Prometheus template on .label
(cause of a refused write, reason of a refused path): .fixes, pairs of a
label value and its fix, as docs/alerts.md gives them. */}}
{{- define "watchprobe.rules.refusalFix" -}}
{{- $label := .label -}}
{{- range $i, $f := .fixes -}}
{{ printf "{{ %sif eq $labels.%s %q }}" (ternary "else " "" (gt $i 0)) $label (index $f 0) }}{{ index $f 1 }}
{{- end -}}
{{ "{{ end }}" }}
{{- end -}}

{{- define "watchprobe.rules.writeFixes" -}}
{{- list
  (list "admission_denied" "Exempt the markers (label app.kubernetes.io/managed-by=watchprobe) or their namespace from the policy or webhook that denies them.")
  (list "quota_exceeded" "Raise the marker namespace's ResourceQuota on the marker kind (a probe holds one marker at a time), or exempt that namespace.")
  (list "forbidden" "Grant the exporter's ServiceAccount create, patch and delete on the marker kind in the marker namespace, as the chart's Role does.")
  (list "namespace_missing" "Create the marker namespace again, or point the probe at one that exists.")
  (list "not_found" "A 404 of the marker itself: another client deleted it (a cleanup job), or the apiserver does not serve the marker kind.")
  (list "invalid" "A 422: a mutating webhook or policy makes the markers invalid.") | toJson -}}
{{- end -}}

{{- define "watchprobe.rules.pathFixes" -}}
{{- list
  (list "forbidden" "Grant the exporter's ServiceAccount list and watch on the marker kind in the marker namespace, as the chart's Role does.")
  (list "not_found" "A 404: the apiserver does not serve the marker kind there; check the probe's kind and the apiserver's enabled APIs.") | toJson -}}
{{- end -}}

{{/* " in cluster b" for clusterLabels [cluster], as a Prometheus template. */}}
{{- define "watchprobe.rules.where" -}}
{{- range . -}}
{{ printf "{{ with $labels.%s }} in %s {{ . }}{{ end }}" . . }}
{{- end -}}
{{- end -}}

{{- define "watchprobe.rules" -}}
{{- $r := .Values.prometheusRule -}}
{{- $slo := $r.slo -}}
{{- include "watchprobe.severities" . -}}
{{- /* The alerts' values with each severity, a role, replaced by its
label value, and oneSeverity added: the label of the alert's
one-vantage-point form, vantagePoints.oneSeverity's but never above the
alert's own (a page only where both are). */ -}}
{{- $a := deepCopy $r.alerts -}}
{{- range $name, $alert := $a -}}
{{- range $x := concat (list $alert) ($alert.windows | default list) -}}
{{- if $x.severity -}}
{{- if not (hasKey $r.severities $x.severity) -}}
{{- fail (printf "prometheusRule.alerts.%s: severity %q is no role: use page or ticket (prometheusRule.severities gives their label values)" $name $x.severity) -}}
{{- end -}}
{{- $_ := set $x "oneSeverity" (ternary $r.severities.page $r.severities.ticket (and (eq $x.severity "page") (eq $r.vantagePoints.oneSeverity "page"))) -}}
{{- $_ := set $x "severity" (index $r.severities $x.severity) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $runbook := $r.runbookUrlBase | default (printf "https://github.com/watchprobe/watchprobe/blob/v%s/docs/alerts.md" .Chart.AppVersion) -}}
{{- $job := .Values.scrapeJob -}}
{{- $budget := printf "(1 - %v)" $slo.target -}}
{{- $budgetPct := include "watchprobe.rules.percent" (subf 1 $slo.target) -}}
{{- $vp := join ", " $r.vantagePoints.labels -}}
{{- /* A vantage point's node, and the labels that tell replicas apart
besides it: agreement counts nodes, not replicas. */ -}}
{{- $node := $r.vantagePoints.nodeLabel -}}
{{- if not (has $node $r.vantagePoints.labels) -}}
{{- fail (printf "prometheusRule.vantagePoints.nodeLabel: %q is not one of vantagePoints.labels %v: add it there, as agreement counts the distinct values of that label" $node $r.vantagePoints.labels) -}}
{{- end -}}
{{- $replica := without $r.vantagePoints.labels $node | join ", " -}}
{{- /* The replicas that report results now, per node, as a Prometheus
template on the alert's job, cluster and namespace labels: "2 on node
n1, 1 on node n2", sorted by node (a query's result has no order). */ -}}
{{- $rm := list "job=%q" "namespace=%q" -}}
{{- $ra := list "$labels.job" "$labels.namespace" -}}
{{- range $r.clusterLabels -}}
{{- $rm = append $rm (printf "%s=%%q" .) -}}
{{- $ra = append $ra (printf "$labels.%s" .) -}}
{{- end -}}
{{- $reporters := printf `{{ range $i, $s := query (printf "count by (%s) (group without (probe) (watchprobe_probe_success{%s}))" %s) | sortByLabel "%s" }}{{ if $i }}, {{ end }}{{ $s.Value }} on {{ with index $s.Labels "%s" }}node {{ . }}{{ else }}no node{{ end }}{{ else }}none{{ end }}` $node (join "," $rm) (join " " $ra) $node $node -}}
{{- /* One replica is one vantage point, whatever is required. */ -}}
{{- $required := int $r.vantagePoints.required -}}
{{- if and (ge (int .Values.replicaCount) 1) (lt (int .Values.replicaCount) $required) -}}
{{- $required = int .Values.replicaCount -}}
{{- end -}}
{{- $where := include "watchprobe.rules.where" $r.clusterLabels -}}
{{- /* The replica an alert comes from: its pod and node (target labels the
chart's ServiceMonitor sets), else its scrape address. */ -}}
{{- $from := `{{ if $labels.pod }}pod {{ $labels.pod }}{{ with $labels.node }} on node {{ . }}{{ end }}{{ else }}{{ $labels.instance }}{{ end }}` -}}
{{- $onPath := `the {{ $labels.path }} path{{ with $labels.apiserver }} through apiserver {{ . }}{{ end }}` -}}
{{- $OnPath := `The {{ $labels.path }} path{{ with $labels.apiserver }} through apiserver {{ . }}{{ end }}` -}}
{{- $burns := list -}}
{{- if $a.eventLatencyBudgetBurn.enabled -}}
{{- $burns = $a.eventLatencyBudgetBurn.windows -}}
{{- end -}}
{{- /* The dashboard reads 5m, 30m, 1h and 6h; the alerts may add others. */ -}}
{{- $windows := list "5m" "30m" "1h" "6h" -}}
{{- range $burns -}}
{{- $windows = append $windows .long -}}
{{- $windows = append $windows .short -}}
{{- end -}}
{{- $windows = uniq $windows -}}
{{- $shorts := list -}}
{{- range $burns -}}
{{- $shorts = append $shorts .short -}}
{{- end -}}
{{- $shorts = uniq $shorts -}}
{{- /* The labels the SLO's series and the agreed alerts sum away: the
vantage points' and the version labels of the targets, so that a
rollout's old and new pods agree and count together. */ -}}
{{- $aggLabels := uniq (concat $r.vantagePoints.labels $slo.aggregateLabels) -}}
{{- $aggJoined := join ", " $aggLabels -}}
{{- $aggReplica := without $aggLabels $node | join ", " -}}
{{- /* The labels every alert carries besides its own. */ -}}
{{- $common := $r.alertLabels | default dict -}}
{{- /* The labels the chart sets itself: a second key of the same name
makes promtool, and Prometheus, refuse every rule of the file. The schema
refuses them too; this holds where it is skipped. */ -}}
{{- $own := list "severity" "vantage_points" "long" "short" -}}
{{- $maps := dict "prometheusRule.alertLabels" $common -}}
{{- range $name, $alert := $r.alerts -}}
{{- $_ := set $maps (printf "prometheusRule.alerts.%s.labels" $name) ($alert.labels | default dict) -}}
{{- end -}}
{{- range $field, $m := $maps -}}
{{- range $own -}}
{{- if hasKey $m . -}}
{{- fail (printf "%s: remove the label %q: the chart sets it on every alert (severity from the alert's role and prometheusRule.severities, vantage_points and the burn windows' long and short from the rules)" $field .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
# SLO: {{ include "watchprobe.rules.percent" $slo.target }}% of the marker events of each probe and path arrive
# within {{ $slo.objectiveSeconds }} s: the observed events times the fraction of them within
# {{ $slo.objectiveSeconds }} s in watchprobe_event_latency_seconds (its le="{{ $slo.objectiveSeconds }}" bucket over
# le="+Inf", which Prometheus 3 stores with a decimal point;
{{- if include "watchprobe.rules.nativeExact" $slo.objectiveSeconds }}
# where Prometheus has the native histogram only, its histogram_fraction
# up to {{ $slo.objectiveSeconds }} s, exact as {{ $slo.objectiveSeconds }} s is a native bucket bound)
{{- else }}
# the classic buckets only: {{ $slo.objectiveSeconds }} s is no native bucket bound, and an
# interpolated fraction would be false)
{{- end }}; an event later, missed, or whose write failed is bad, so the
# error budget is {{ $budgetPct }}%. Keep every probe's deadline at or above the
# objective: a late event counts once, as bad, because its latency exceeds
# the deadline.
#
# Labels: every aggregation names the labels it sums away, never the ones it
# keeps (`sum without (...)`). The exporter adds only probe, path, apiserver
# and the per-metric labels summed away here (event and le on the latency
# histogram, event on observed, reason on missed, reason and mode on
# relists, verb and code on writes); job, instance and whatever target labels
# the Prometheus setup adds (cluster, region, namespace, pod, ...) pass
# through, so the series and alerts of different clusters never merge. The
# exceptions, WatchprobeAbsent's per-cluster forms (a cluster that
# stopped reporting; the opt-in search for clusters without an exporter),
# group by the configured cluster labels. The per-apiserver paths
# (path="apiserver") keep their own series, one per apiserver, apart from
# the other paths'. The exporter's targets carry job="{{ $job }}" (the
# chart's ServiceMonitor sets it; a hand-written scrape config names its
# job so).
#
# Vantage points: each exporter replica ({{ $vp }}) writes and watches
# its own markers, so it is a vantage point of its own.
{{- if gt $required 1 }}
# An alert about what the cluster delivers (a burning budget, a stall, a
# path down, a loss) in its agreed form needs the problem seen from at
# least {{ $required }} distinct nodes ({{ $node }} label values; replicas on one node
# count once, series without the label not at all) and carries no replica
# label; seen from fewer, however few report, it is a warning that names
# the replica, its node and the nodes that report: a fault of one node is
# not the cluster's. WatchprobeVantagePointsMissing says when fewer
# replicas or nodes report than that needs.
{{- else }}
# With one replica every alert is that replica's view, named by its pod and
# node: a fault on its node or its network path pages like a fault of the
# cluster.
{{- end }}
groups:
  - name: watchprobe.sli
    rules:
      # Each write counts once per path: good if it arrived within {{ $slo.objectiveSeconds }} s,
      # bad if it arrived later, never, or could not be written for the
      # control plane's failure; a write the probe's own namespace,
      # permissions or policies refused counts nowhere (the exporter
      # creates observed, missed, late and write errors at zero).
      #
      # Per replica, good and owed events per second over each window the
      # burn-rate alerts and the SLO panels use. A replica's series of a
      # long window go on for the window's length after the replica is
      # gone (rate() reads the samples it left), so their sums below span
      # a restart or an upgrade. Owed events count only where the good
      # ones have a value (Prometheus has the histogram's form): a replica
      # without it would otherwise count all its events bad.
      {{- range $windows }}
      - record: probe_path_replica:watchprobe_sli_good_events:rate{{ . }}
        expr: |-
          {{- include "watchprobe.rules.withinObjective" (dict "fn" "rate" "objective" $slo.objectiveSeconds "window" .) | nindent 10 }}
      - record: probe_path_replica:watchprobe_sli_owed_events:rate{{ . }}
        expr: |-
          {{- include "watchprobe.rules.owed" (dict "fn" "rate" "window" .) | nindent 10 }}
          and
          probe_path_replica:watchprobe_sli_good_events:rate{{ . }}
      {{- end }}
      # The SLO's series, per cluster, probe and path: every replica's
      # events summed (without {{ $aggJoined }}) before the ratio, so that
      # a restart, a rolling upgrade or a rescheduled replica continues
      # the same series and the long windows stay whole.
      {{- range $windows }}
      - record: probe_path:watchprobe_sli_error_ratio:rate{{ . }}
        expr: |-
          1 - sum without ({{ $aggJoined }}) (probe_path_replica:watchprobe_sli_good_events:rate{{ . }})
            / sum without ({{ $aggJoined }}) (probe_path_replica:watchprobe_sli_owed_events:rate{{ . }})
      {{- end }}
      # Each replica's own ratio over the burn alerts' short windows: the
      # agreement between vantage points (distinct nodes) is on these.
      {{- range $shorts }}
      - record: probe_path_replica:watchprobe_sli_error_ratio:rate{{ . }}
        expr: |-
          1 - probe_path_replica:watchprobe_sli_good_events:rate{{ . }}
            / probe_path_replica:watchprobe_sli_owed_events:rate{{ . }}
      {{- end }}
      # The 30-day window, cheaply: every replica's good and owed events
      # per second over 1h, summed, and their sums over 30 days, not
      # rate() over 30 days of every raw bucket. Each evaluation's 1h rate
      # weighs alike in both sums, so their ratio is the events' ratio
      # (each event weighed by the evaluations whose hour holds it). The
      # hour is what lets the budget survive a gap: events of a scrape or
      # evaluation gap shorter than an hour are in the 1h rate of the
      # evaluations after it; a 5m rate would drop every event of a gap
      # longer than 5m. Whole once these have been recorded for 30 days.
      - record: probe_path:watchprobe_sli_good_events:rate1h
        expr: sum without ({{ $aggJoined }}) (probe_path_replica:watchprobe_sli_good_events:rate1h)
      - record: probe_path:watchprobe_sli_owed_events:rate1h
        expr: sum without ({{ $aggJoined }}) (probe_path_replica:watchprobe_sli_owed_events:rate1h)
      - record: probe_path:watchprobe_sli_error_ratio:rate30d
        expr: |-
          1 - sum_over_time(probe_path:watchprobe_sli_good_events:rate1h[30d])
            / sum_over_time(probe_path:watchprobe_sli_owed_events:rate1h[30d])
      # The error budget left over 30 days: 1 untouched, 0 spent, below 0
      # overspent.
      - record: probe_path:watchprobe_sli_error_budget_remaining:30d
        expr: 1 - probe_path:watchprobe_sli_error_ratio:rate30d / {{ $budget }}
      # Error ratio over the error budget: at 1 the budget lasts exactly the
      # SLO period. The dashboard's burn-rate panel reads these, so that its
      # scale follows the target set here.
      {{- range list "1h" "6h" }}
      - record: probe_path:watchprobe_sli_burn_rate:rate{{ . }}
        expr: probe_path:watchprobe_sli_error_ratio:rate{{ . }} / {{ $budget }}
      {{- end }}
      # 1 for each minute in which the path met the objective on that
      # minute's events of every replica, each write counted once as above;
      # the dashboard's "good minutes" averages it.
      {{- $good := include "watchprobe.rules.withinObjective" (dict "fn" "increase" "objective" $slo.objectiveSeconds "window" "1m") }}
      - record: probe_path:watchprobe_sli_good_minute:1m
        expr: |-
          sum without ({{ $aggJoined }}) (
            {{- $good | nindent 12 }}
          )
          >= bool {{ $slo.target }} *
          sum without ({{ $aggJoined }}) (
            {{- include "watchprobe.rules.owed" (dict "fn" "increase" "window" "1m") | nindent 12 }}
            and
            {{- $good | nindent 12 }}
          )
  - name: watchprobe.alerts
    rules:
      {{- with $a.probeFailing }}
      {{- if .enabled }}
      # Every cycle failed for the whole of `for`: writes fail or events miss
      # their deadline. The alerts that name the cause inhibit it. A probe
      # with refused writes in the last {{ $a.markersRefused.window }} as many as half its cycles
      # (creates), or with a path refused now, is left out: its cycles fail
      # for its own configuration, which WatchprobeMarkersRefused and
      # WatchprobePathRefused name. A refusal now and then does not leave
      # it out. A replica left out is left out of the replicas that report
      # too, so that the others still agree.
      {{- $excluded := printf "unless ignoring (verb, cause)\n(\n  sum without (verb, cause) (increase(watchprobe_writes_refused_total[%s]))\n  >= 0.5 * sum without (verb) (increase(watchprobe_writes_total{verb=\"create\"}[%s]))\n)\nunless ignoring (path, apiserver, reason)\nwatchprobe_path_refused == 1" $a.markersRefused.window $a.markersRefused.window }}
      {{- $cond := include "watchprobe.rules.notStarved" (dict "reporting" (printf "watchprobe_probe_success == 0\n%s" $excluded) "starved" $a.exporterStarved) }}
      {{- include "watchprobe.rules.vantageAlerts" (dict
          "name" "WatchprobeProbeFailing" "cond" $cond "reporting" (include "watchprobe.rules.notStarved" (dict "reporting" (printf "watchprobe_probe_success\n%s" $excluded) "starved" $a.exporterStarved)) "agg" "count"
          "vp" $aggJoined "node" $node "replica" $aggReplica "reporters" $reporters "required" $required "for" .for "severity" .severity "oneSeverity" .oneSeverity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeprobefailing" $runbook)
          "summary" "watchprobe's marker cycles fail."
          "singleSummary" "watchprobe's marker cycles fail for one exporter replica only."
          "description" (printf "Every marker cycle of probe {{ $labels.probe }}%s, seen from %s, for %s was not written, or not observed on every watch path within the deadline." $where $from .for)
          "agreed" (printf "Every marker cycle of probe {{ $labels.probe }}%s for %s was not written, or not observed on every watch path within the deadline, as seen from exporter replicas on {{ $value }} distinct nodes." $where .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- range $burns }}
      {{- $threshold := printf "(%v * %s)" .burnRate $budget }}
      # The error budget burning {{ .burnRate }}x faster than the SLO allows over {{ .long }} and
      # over {{ .short }}: the short window ends the alert soon after the burn stops.
      # A node agrees only where its replica's own long and short windows
      # both burn: one node's fault fills every replica's events together,
      # and a short blip elsewhere must not confirm it. Every replica's
      # events together (continuous across restarts and upgrades) must burn
      # the long window too: the page is about the cluster's SLO.
      {{- $ownLong := printf "1 - probe_path_replica:watchprobe_sli_good_events:rate%s / probe_path_replica:watchprobe_sli_owed_events:rate%s > %s" .long .long $threshold }}
      {{- include "watchprobe.rules.vantageAlerts" (dict
          "name" "WatchprobeEventLatencyBudgetBurn"
          "cond" (printf "probe_path_replica:watchprobe_sli_error_ratio:rate%s > %s\nand\n%s\nand ignoring (%s)\nprobe_path:watchprobe_sli_error_ratio:rate%s > %s" .short $threshold $ownLong $aggJoined .long $threshold) "agg" "min"
          "singleCond" (printf "1 - probe_path_replica:watchprobe_sli_good_events:rate%s / probe_path_replica:watchprobe_sli_owed_events:rate%s > %s\nand\nprobe_path_replica:watchprobe_sli_error_ratio:rate%s > %s" .long .long $threshold .short $threshold)
          "vp" $aggJoined "node" $node "replica" $aggReplica "reporters" $reporters "required" $required "for" .for "severity" .severity "oneSeverity" .oneSeverity "runbook" (printf "%s#watchprobeeventlatencybudgetburn" $runbook)
          "labels" (merge (dict "long" .long "short" .short) ($a.eventLatencyBudgetBurn.labels | default dict) $common)
          "summary" "Watch events burn the latency error budget too fast."
          "singleSummary" "Watch events burn the latency error budget too fast for one exporter replica only."
          "description" (printf "Over the last %s, {{ $value | humanizePercentage }} of the marker events of probe {{ $labels.probe }} on %s%s, seen from %s, arrived later than %v s, never, or could not be written: more than %vx the %s%% the objective allows." .long $onPath $where $from $slo.objectiveSeconds .burnRate $budgetPct)
          "oneDescription" (printf "Over the last %s (every replica's events, across restarts) and the last %s (seen from %s), {{ $value | humanizePercentage }} or more of the marker events of probe {{ $labels.probe }} on %s%s arrived later than %v s, never, or could not be written: more than %vx the %s%% the objective allows." .long .short $from $onPath $where $slo.objectiveSeconds .burnRate $budgetPct)
          "agreed" (printf "Over the last %s (every replica's events) and the last %s (each agreeing replica's), {{ $value | humanizePercentage }} or more of the marker events of probe {{ $labels.probe }} on %s%s arrived later than %v s, never, or could not be written: more than %vx the %s%% the objective allows." .long .short $onPath $where $slo.objectiveSeconds .burnRate $budgetPct)) | nindent 6 }}
      {{- end }}
      {{- with $a.eventsLost }}
      {{- if .enabled }}
      # Lost, not late: an event still undelivered lost_after after the
      # write's answer, on a path that was live and did not relist. Each
      # loss is final when counted, so the alert fires at once; it keeps
      # firing for {{ .keepFiringFor }} after the last one, so that losses
      # close together are one alert, not one per loss.
      # A replica starved of CPU counts its losses too (a loss is counted
      # only once the exporter has run again since the write's lost_after:
      # starvation delays a stamp, it never takes an event away), but
      # where a replica that is not starved reports, that one's view is
      # the one that counts; with none (one replica, or every one
      # starved), nothing else watches, and its losses fire.
      {{- $cond := include "watchprobe.rules.notStarvedBesideHealthy" (dict "reporting" (printf "%s > %v" (include "watchprobe.rules.count" (dict "metric" "watchprobe_events_lost_total{reason=\"silent\"}" "by" "reason" "window" .window)) .threshold) "healthy" "group without (probe, path, apiserver, reason) (watchprobe_events_lost_total{reason=\"silent\"})" "vp" $aggJoined "required" $required "starved" $a.exporterStarved) }}
      {{- include "watchprobe.rules.vantageAlerts" (dict
          "name" "WatchprobeEventsLost" "cond" $cond "agg" "sum"
          "vp" $aggJoined "node" $node "replica" $aggReplica "reporters" $reporters "required" $required "keep" .keepFiringFor "severity" .severity "oneSeverity" .oneSeverity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeeventslost" $runbook)
          "summary" "Watch events were lost with nothing to explain it."
          "singleSummary" "Watch events were lost for one exporter replica only."
          "description" (printf "{{ $value }} marker events of probe {{ $labels.probe }} written from %s%s were never delivered on %s (not within the probe's lost_after) in the last %s, although the path was live and did not relist." $from $where $onPath .window)
          "agreed" (printf "{{ $value }} marker events of probe {{ $labels.probe }}%s, written by every exporter replica that agrees, were never delivered on %s (not within the probe's lost_after) in the last %s, although the path was live and did not relist." $where $onPath .window)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.eventsDuplicatedOrReordered }}
      {{- if .enabled }}
      # Final when counted, as losses are: at once, and held for
      # {{ .keepFiringFor }} after the last one.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeEventsDuplicatedOrReordered"
          "expr" (printf "(\n  %s\n  + %s\n) > %v" (include "watchprobe.rules.count" (dict "metric" "watchprobe_events_duplicate_total" "by" "" "window" .window) | indent 2 | trim) (include "watchprobe.rules.count" (dict "metric" "watchprobe_events_out_of_order_total" "by" "" "window" .window) | indent 2 | trim) .threshold)
          "keep" .keepFiringFor "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeeventsduplicatedorreordered" $runbook)
          "summary" "Watch events were delivered twice or out of order."
          "description" (printf "{{ $value }} marker events of probe {{ $labels.probe }}%s arrived twice without a relist, or after a later event, on %s in the last %s, seen from %s." $where $onPath .window $from)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.watchStalled }}
      {{- if .enabled }}
      # A stream open and silent while writes succeed, for longer than the
      # probe's stall_after and then `for`.
      {{- include "watchprobe.rules.vantageAlerts" (dict
          "name" "WatchprobeWatchStalled" "cond" "watchprobe_watch_stalled == 1" "reporting" "watchprobe_watch_stalled" "agg" "count"
          "vp" $aggJoined "node" $node "replica" $aggReplica "reporters" $reporters "required" $required "for" .for "severity" .severity "oneSeverity" .oneSeverity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobewatchstalled" $runbook)
          "summary" "A watch stream is stalled while writes succeed."
          "singleSummary" "A watch stream is stalled for one exporter replica only."
          "description" (printf "On %s of probe {{ $labels.probe }}%s, seen from %s, a watch stream is open and marker writes succeed, but nothing, not even a bookmark, has arrived for longer than the probe's stall bound." $onPath $where $from)
          "agreed" (printf "On %s of probe {{ $labels.probe }}%s, seen from exporter replicas on {{ $value }} distinct nodes, a watch stream is open and marker writes succeed, but nothing, not even a bookmark, has arrived for longer than the probe's stall bound." $onPath $where)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.pathDown }}
      {{- if .enabled }}
      # No stream open and caught up for most of the window: its list or
      # watch requests fail (the apiserver's answer is in
      # watchprobe_requests_failed_total's code), or it keeps reconnecting.
      # Not a stall, which is a stream that is open and silent. Most, not
      # all: a path up one scrape in four is as good as down. It explains
      # the path's stalls, losses and burn, which it inhibits. A path whose
      # requests were refused for all of the window (403, 404: the
      # exporter's own RBAC or configuration) is WatchprobePathRefused's,
      # not the cluster's; refused for part of it, failing otherwise the
      # rest, it is down. A replica whose path is left out is left out of
      # the replicas that report too, so that the others still agree.
      {{- $excluded := printf "unless ignoring (reason)\nmin_over_time(watchprobe_path_refused[%s]) == 1" .window }}
      {{- include "watchprobe.rules.vantageAlerts" (dict
          "name" "WatchprobePathDown" "cond" (printf "avg_over_time(watchprobe_path_up[%s]) < 0.5\n%s" .window $excluded) "reporting" (printf "avg_over_time(watchprobe_path_up[%s])\n%s" .window $excluded) "agg" "count"
          "vp" $aggJoined "node" $node "replica" $aggReplica "reporters" $reporters "required" $required "for" .for "severity" .severity "oneSeverity" .oneSeverity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobepathdown" $runbook)
          "summary" "A watch path cannot list or watch its markers."
          "singleSummary" "A watch path cannot list or watch its markers for one exporter replica only."
          "description" (printf "%s of probe {{ $labels.probe }}%s, seen from %s, had a watch stream open and caught up less than half of the last %s: it cannot list or watch its markers. watchprobe_requests_failed_total by code has the apiserver's answer (0: no response), the exporter's log and status page the error (for the etcd path, etcd's)." $OnPath $where $from .window)
          "agreed" (printf "%s of probe {{ $labels.probe }}%s had a watch stream open and caught up less than half of the last %s as seen from exporter replicas on {{ $value }} distinct nodes: nothing can list or watch the markers there. watchprobe_requests_failed_total by code has the apiserver's answer (0: no response), the exporter's log and status page the error (for the etcd path, etcd's)." $OnPath $where .window)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.relistStorm }}
      {{- if .enabled }}
      # More expired relists than the threshold in the window, counted
      # exactly, in every window for `for`: an apiserver restart costs a
      # relist or two, a storm goes on.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeRelistStorm"
          "expr" (printf "%s > %v" (include "watchprobe.rules.count" (dict "metric" "watchprobe_relists_total{reason=\"expired\"}" "by" "reason, mode" "window" .window)) .threshold)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobereliststorm" $runbook)
          "summary" "A watch path keeps relisting because its resourceVersion expired."
          "description" (printf "Probe {{ $labels.probe }}%s, seen from %s, relisted {{ $value }} times in %s after 410 Gone (too old resource version) on %s, more than %v, for %s." $where $from .window $onPath .threshold .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.writeErrors }}
      {{- if .enabled }}
      # A share of writes failed for the control plane's failure (5xx, 429,
      # timeouts, no answer) above the threshold for `for`. Each is also a
      # bad event on every path of its probe, so that writes that all fail
      # burn the budget and page. Refused writes are
      # WatchprobeMarkersRefused's.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeWriteErrors"
          "expr" (printf "sum without (verb, code) (rate(watchprobe_write_errors_total[%s]))\n/\nsum without (verb) (rate(watchprobe_writes_total[%s]))\n> %v" .window .window .threshold)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobewriteerrors" $runbook)
          "summary" "Marker writes fail."
          "description" (printf "{{ $value | humanizePercentage }} of the marker writes of probe {{ $labels.probe }}%s from %s failed over %s, more than %s%%, for %s: the apiserver failed them (watchprobe_write_errors_total by code; 0: no answer)." $where $from .window (include "watchprobe.rules.percent" .threshold) .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.markersRefused }}
      {{- if .enabled }}
      # A share of writes refused by the probe's own environment (an
      # admission policy or webhook, a quota, RBAC, its namespace gone)
      # above the threshold for `for`: the probe measures nothing there, and
      # nothing of it burns the budget. A warning that names the cause and
      # the fix; never a page.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeMarkersRefused"
          "expr" (printf "sum without (verb) (rate(watchprobe_writes_refused_total[%s]))\n/ ignoring (cause) group_left\nsum without (verb) (rate(watchprobe_writes_total[%s]))\n> %v" .window .window .threshold)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobemarkersrefused" $runbook)
          "summary" "Markers cannot be written: the probe's own namespace refuses them."
          "description" (printf "{{ $value | humanizePercentage }} of the marker writes of probe {{ $labels.probe }}%s from %s over %s were refused as {{ $labels.cause }}, for %s: List-Watch is not measured there, and the refused writes count in no SLI. %s The exporter's log has the apiserver's message and names the policy or webhook." $where $from .window .for (include "watchprobe.rules.refusalFix" (dict "label" "cause" "fixes" (include "watchprobe.rules.writeFixes" . | fromJsonArray))))) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.pathRefused }}
      {{- if .enabled }}
      # A path whose list or watch requests the apiserver refuses (403:
      # forbidden; 404: not_found) again and again, while no other
      # apiserver path of the probe has the same request served: the
      # exporter's own permissions or configuration. Its writes are
      # unmeasurable there, not missed, and WatchprobePathDown leaves it
      # out once it has been refused for all of its window.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobePathRefused"
          "expr" "watchprobe_path_refused == 1"
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobepathrefused" $runbook)
          "summary" "A watch path may not list or watch the markers."
          "description" (printf "The apiserver refuses the list and watch requests of %s of probe {{ $labels.probe }}%s from %s as {{ $labels.reason }}, for %s: the path measures nothing, and its writes count as unmeasurable, not missed. %s" $onPath $where $from .for (include "watchprobe.rules.refusalFix" (dict "label" "reason" "fixes" (include "watchprobe.rules.pathFixes" . | fromJsonArray))))) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.requestsThrottled }}
      {{- if .enabled }}
      # Throttling in every window for `for`: a burst of 429s in a busy
      # minute is API Priority and Fairness doing its job.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeRequestsThrottled"
          "expr" (printf "%s > %v" (include "watchprobe.rules.count" (dict "metric" "watchprobe_requests_throttled_total" "by" "request" "window" .window)) .threshold)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchproberequeststhrottled" $runbook)
          "summary" "The apiserver keeps throttling watchprobe with 429 Too Many Requests."
          "description" (printf "{{ $value }} requests of probe {{ $labels.probe }}%s ({{ if eq $labels.path \"write\" }}its writes{{ else }}%s{{ end }}) from %s were answered 429 in the last %s, and throttling has gone on for %s: API Priority and Fairness is rejecting the exporter's flow, and its latencies include the waits." $where $onPath $from .window .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.requestsFailing }}
      {{- if .enabled }}
      # Failing list or watch requests of a path that is up between them,
      # in every window for `for`; one down the whole window is
      # WatchprobePathDown's.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeRequestsFailing"
          "expr" (printf "%s > %v\nunless\nmax_over_time(watchprobe_path_up[%s]) == 0" (include "watchprobe.rules.count" (dict "metric" "watchprobe_requests_failed_total" "by" "request, code" "window" .window)) .threshold .window)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchproberequestsfailing" $runbook)
          "summary" "List and watch requests of a watch path keep failing."
          "description" (printf "{{ $value }} list or watch requests of %s of probe {{ $labels.probe }}%s from %s failed in the last %s, and failures have gone on for %s while the path recovers between them: see watchprobe_requests_failed_total by code." $onPath $where $from .window .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.markersPiling }}
      {{- if .enabled }}
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeMarkersPiling"
          "expr" (printf "watchprobe_markers_pending_deletion > %v" .threshold)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobemarkerspiling" $runbook)
          "summary" "Marker objects are not being deleted."
          "description" (printf "{{ $value }} marker objects of probe {{ $labels.probe }}%s written from %s have waited %s for their deletion to complete (a delete that failed, or another client's finalizer holding it): they pile up in the marker namespace." $where $from .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.configReloadFailed }}
      {{- if .enabled }}
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeConfigReloadFailed"
          "expr" "watchprobe_config_last_reload_successful == 0"
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeconfigreloadfailed" $runbook)
          "summary" "watchprobe could not load its changed configuration."
          "description" (printf "The latest reload of the configuration file on %s%s failed: the exporter runs its previous probes, not the ones configured. Its log names the probe, the line and the field." $from $where)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.exporterStarved }}
      {{- if .enabled }}
      # The share of a replica's judged writes that were unmeasurable
      # because the exporter itself was starved of CPU (its wake-ups late by
      # more than its threshold): they are out of the SLI already; this
      # names the replica, and inhibits its latency and stall alerts, which
      # its starvation may have moved where the monitor cannot see; not its
      # losses, which starvation cannot make.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeExporterStarved"
          "expr" (printf "%s\n> %v" (include "watchprobe.rules.starvedRatio" .) .threshold)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeexporterstarved" $runbook)
          "summary" "A watchprobe replica is starved of CPU: its own delays are not the cluster's."
          "description" (printf "{{ $value | humanizePercentage }} of the marker writes judged by %s%s over the last %s were unmeasurable (exporter_starved): the exporter was starved of CPU where that could have moved their verdict, for %s. They are left out of its latency and SLI; its latency and stall alerts are inhibited while this fires (not its losses: a loss is never starvation's). watchprobe_exporter_cpu_throttled_seconds_total above zero means a CPU limit throttles it; without throttling, its node is busy and its CPU request too small." $from $where .window .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.vantagePointsMissing }}
      {{- if and .enabled (gt (int $.Values.replicaCount) 1) }}
      # Fewer replicas report results than the chart runs, or they report
      # from fewer distinct nodes than an agreed alert needs: until that
      # is mended every alert about the cluster is a warning, none pages.
      # Per deployment (job, cluster, namespace); a series without a node
      # label counts as a replica but as no node. No replica at all is
      # WatchprobeAbsent's.
      {{- $reporting := "group without (probe) (watchprobe_probe_success)" }}
      {{- $expr := printf "count without (%s) (%s) < %d" $aggJoined $reporting (int $.Values.replicaCount) }}
      {{- if gt $required 1 }}
      {{- $expr = printf "%s\nor\n(\n%s\n  or\n  0 * count without (%s) (%s)\n) < %d" $expr (include "watchprobe.rules.nodesSeeing" (dict "node" $node "replica" $aggReplica "cond" $reporting) | indent 2) $aggJoined $reporting $required }}
      {{- end }}
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeVantagePointsMissing" "expr" $expr
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobevantagepointsmissing" $runbook)
          "summary" "Too few watchprobe replicas, or nodes, report: alerts about the cluster cannot page."
          "description" (printf "Replicas reporting results%s (job {{ $labels.job }}): %s. The chart runs %d replicas, and an alert about the cluster pages only when replicas on %d distinct nodes see it: until then each is a warning. A replica missing is Pending, evicted or not scraped (kubectl get pods; its target in Prometheus); replicas sharing a node after a drain stay there until one is deleted and rescheduled; a replica on no node has no %s target label (relabel __meta_kubernetes_pod_node_name to %s, as the chart's ServiceMonitor does). This has lasted %s." $where $reporters (int $.Values.replicaCount) $required $node $node .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.sliMissing }}
      {{- if .enabled }}
      # A path with events but no SLI, so no burn-rate alert can fire however
      # late its events: Prometheus has neither the classic buckets nor a
      # native histogram it may read at the objective.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeSLIMissing"
          "expr" "(\n  sum without (event) (increase(watchprobe_events_observed_total[1h]))\n  + sum without (reason) (increase(watchprobe_events_missed_total[1h]))\n) > 0\nunless\nprobe_path_replica:watchprobe_sli_good_events:rate1h"
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeslimissing" $runbook)
          "summary" "A watch path has no latency SLI: its burn-rate alerts cannot fire."
          "description" (printf "Prometheus has events of probe {{ $labels.probe }}%s on %s from %s but %s" $where $onPath $from (ternary (printf "neither the le=\"%v\" and le=\"+Inf\" buckets of watchprobe_event_latency_seconds nor its native histogram: with --no-metrics.classic-histograms, Prometheus must ingest native histograms (scrape_native_histograms: true)." $slo.objectiveSeconds) (printf "not the le=\"%v\" and le=\"+Inf\" buckets of watchprobe_event_latency_seconds, which a %v s objective needs (it is no native bucket bound): run the exporter with classic histograms, and where Prometheus ingests native histograms set always_scrape_classic_histograms: true." $slo.objectiveSeconds $slo.objectiveSeconds) (eq (include "watchprobe.rules.nativeExact" $slo.objectiveSeconds) "true")))) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.absent }}
      {{- if .enabled }}
      # Per deployment, keyed on the scrape job: a target whose scrapes bring
      # no probe results (the exporter is down, up 0 and its series stale,
      # or runs no probe), and no target of the job at all in this
      # Prometheus. A cluster that never ran watchprobe is no alert, unless
      # perCluster.enabled. It inhibits the other alerts of the same target
      # (the same instance), and nothing else.
      {{- $clusters := list }}
      {{- range $r.clusterLabels }}{{ $clusters = append $clusters (printf "%s!=\"\"" .) }}{{ end }}
      {{- with .perCluster.clusterSelector }}{{ $clusters = append $clusters . }}{{ end }}
      {{- $expr := printf "(up{job=\"%s\"} unless group without (probe) (watchprobe_probe_success))\nor\nabsent(up{job=\"%s\"})" $job $job }}
      {{- if and .perCluster.enabled $r.clusterLabels }}
      {{- $expr = printf "%s\nor\n(group by (%s) (up{%s}) unless group by (%s) (up{job=\"%s\"}))" $expr (join ", " $r.clusterLabels) (join ", " $clusters) (join ", " $r.clusterLabels) $job }}
      {{- end }}
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeAbsent" "expr" $expr
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeabsent" $runbook)
          "summary" "Prometheus gets no watchprobe results."
          "description" (printf "{{ if $labels.instance }}Prometheus scrapes the watchprobe target %s of job {{ $labels.job }}%s (up {{ $value }}) but gets no watchprobe_probe_success series from it: the exporter is down or has no probe.{{ else if $labels.job }}Prometheus scrapes no target of job %s: the exporter is not deployed, its ServiceMonitor is not selected, or its scrape job has another name.{{ else }}Prometheus scrapes targets%s, but none of job %s: the exporter is not deployed there, or its ServiceMonitor is not selected.{{ end }} This has lasted %s." $from $where $job $where $job .for)) | nindent 6 }}
      {{- $p := .perCluster }}
      {{- if and $p.stopped $r.clusterLabels }}
      # Per cluster (clusterLabels), for a central store of many clusters,
      # and in-cluster alike: a cluster whose job had a target within the
      # last {{ $p.lookback }} and has no target up now. Its exporter, or
      # its Prometheus agent, or the remote write between, stopped: nothing
      # watches that cluster's List-Watch any more. A {{ $p.notify }}:
      # after removing watchprobe from a cluster on purpose, silence it
      # for {{ $p.lookback }}.
      {{- $sel := printf "job=\"%s\"" $job }}
      {{- with $p.clusterSelector }}{{ $sel = printf "%s, %s" $sel . }}{{ end }}
      {{- $by := join ", " $r.clusterLabels }}
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeAbsent"
          "expr" (printf "group by (%s) (max_over_time(up{%s}[%s]))\nunless\ngroup by (%s) (up{%s} == 1)" $by $sel $p.lookback $by $sel)
          "for" .for "severity" (index $r.severities $p.notify) "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeabsent" $runbook)
          "summary" "A cluster's watchprobe stopped reporting."
          "description" (printf "Prometheus had watchprobe's job %s%s within the last %s and has no target of it up now, for %s: nothing measures that cluster's List-Watch. The exporter is down or gone, or the cluster's Prometheus agent or its remote write stopped. If watchprobe was removed from the cluster on purpose, silence this for %s." $job $where $p.lookback .for $p.lookback)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- end }}
      {{- with $a.resumeWindowShort }}
      {{- if .enabled }}
      # The largest age from which a resumed watch replayed exactly, in the
      # path's latest round that judged every age (probes with resume set):
      # a controller away longer than that relists instead of resuming.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeResumeWindowShort"
          "expr" (printf "watchprobe_resume_window_seconds < %v" .thresholdSeconds)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchproberesumewindowshort" $runbook)
          "summary" "A watch can resume only from a short way back: longer breaks relist."
          "description" (printf "For %s, resume checks of probe {{ $labels.probe }}%s from %s found no configured age beyond {{ $value | humanizeDuration }} (below %vs) from which a watch on %s replayed exactly: a client whose watch broke for longer gets 410 Gone on reconnecting, and relists." .for $where $from .thresholdSeconds $onPath)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.resumeReplayInexact }}
      {{- if .enabled }}
      # Final when counted, as losses are: at once, and held for
      # {{ .keepFiringFor }} after the last one.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeResumeReplayInexact"
          "expr" (printf "%s > %v" (include "watchprobe.rules.count" (dict "metric" "watchprobe_resume_checks_total{outcome=\"incomplete\"}" "by" "age, outcome" "window" .window)) .threshold)
          "keep" .keepFiringFor "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchproberesumereplayinexact" $runbook)
          "summary" "A resumed watch did not replay exactly what was written."
          "description" (printf "{{ $value }} resume checks of probe {{ $labels.probe }}%s from %s in the last %s got a replay with an event missing, twice or out of order, or a 410 after part of it, on %s: a controller resuming there would miss or repeat changes. The exporter's log names the resourceVersions." $where $from .window $onPath)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.watchCacheStuck }}
      {{- if .enabled }}
      # A resource's watch cache that no longer catches up with etcd
      # (probes with freshness set): most consistent LISTs over the stuck
      # window fell back to etcd, were refused, timed out or found the
      # cache unable to initialize.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeWatchCacheStuck"
          "expr" "watchprobe_list_freshness_stuck == 1"
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobewatchcachestuck" $runbook)
          "summary" "A resource's watch cache does not catch up with etcd."
          "description" (printf "Most consistent LISTs of {{ $labels.resource }} by probe {{ $labels.probe }}%s from %s{{ with $labels.apiserver }} through apiserver {{ . }}{{ end }} fell back to etcd, were refused, timed out or found the cache unable to initialize over the stuck window, for %s: every watcher of {{ $labels.resource }} there waits, or relists, and controllers act on old state." $where $from .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.watchListSyncStuck }}
      {{- if .enabled }}
      # A resource whose WatchList syncs (probes with watch_list set) over
      # the stuck window mostly got no end bookmark within the bound, or
      # found its watch cache unable to initialize: a client-go informer
      # of it that starts or relists there syncs that much later, or never.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeWatchListSyncStuck"
          "expr" "watchprobe_watchlist_stuck == 1"
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobewatchlistsyncstuck" $runbook)
          "summary" "A resource's WatchList syncs do not reach their end bookmark within the bound."
          "description" (printf "Most WatchList syncs of {{ $labels.resource }} by probe {{ $labels.probe }}%s from %s{{ with $labels.apiserver }} through apiserver {{ . }}{{ else }} through the load balancer{{ end }} over the stuck window did not reach their end bookmark (k8s.io/initial-events-end) within watch_list.bound (syncs held in the exporter's own priority level left out), for %s: a client-go informer of {{ $labels.resource }} that starts or relists there syncs later than that, or never (reasons no_bookmark and ended: never), and its controller waits meanwhile. watchprobe_watchlist_end_bookmarks_missed_total says how each ended." $where $from .for)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.staleReads }}
      {{- if .enabled }}
      # An apiserver's cache listed the probe's markers as they were not:
      # a deleted one long after its delete (ghost), a created one not at
      # all (missing), or went back in time. Final when counted.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeStaleReads"
          "expr" (printf "%s > %v" (include "watchprobe.rules.count" (dict "metric" "watchprobe_list_stale_reads_total" "by" "kind" "window" .window)) .threshold)
          "keep" .keepFiringFor "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobestalereads" $runbook)
          "summary" "An apiserver's cache lists objects as they no longer are."
          "description" (printf "{{ $value }} reads of probe {{ $labels.probe }}'s markers%s from %s{{ with $labels.apiserver }} through apiserver {{ . }}{{ else }} through the load balancer{{ end }} in the last %s listed a marker deleted more than lost_after earlier, lacked one created that long ago, or went back in time: clients listing there act on objects that are gone or miss ones that exist. The exporter's log names the markers and resourceVersions." $where $from .window)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.apiServerWatchDegraded }}
      {{- if .enabled }}
      # The watch through one apiserver fails while another apiserver delivers
      # the same probe's events to the same replica: the fault is in that
      # apiserver (its watch cache or its etcd connection), not in etcd or the
      # network. When every apiserver fails, this stays silent and the other
      # alerts speak.
      {{- $degraded := include "watchprobe.rules.apiserverDegraded" . }}
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeAPIServerWatchDegraded"
          "expr" (printf "(\n%s\n)\nand ignoring (apiserver)\n(\n  sum without (event) (increase(watchprobe_events_observed_total{path=\"apiserver\"}[%s])) > 0\n  unless\n  (\n%s\n  )\n)" ($degraded | indent 2) .window ($degraded | indent 4))
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobeapiserverwatchdegraded" $runbook)
          "summary" "The watch through one apiserver fails while other apiservers deliver."
          "description" (printf "Through apiserver {{ $labels.apiserver }}%s, probe {{ $labels.probe }} seen from %s missed more than %s%% of its events over %s, or its watch stalled, while another apiserver delivered them: suspect that apiserver's watch cache or etcd connection." $where $from (include "watchprobe.rules.percent" .threshold) .window)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.controllerNotReacting }}
      {{- if .enabled }}
      # The share of a controller's changes (probes with `controllers` set)
      # whose status answer did not come within the deadline although the
      # change had reached the probe's own watch of the object (reason
      # controller), so the controller's informer could have seen it: the
      # controller-manager is not acting on what the apiserver delivers.
      # Misses of changes the probe's watch never showed (reason
      # undelivered) and failed changes are WatchprobeControllerProbeFailing's.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeControllerNotReacting"
          "expr" (printf "sum without (reason) (increase(watchprobe_controller_reactions_missed_total{reason=\"controller\"}[%s]))\n  / increase(watchprobe_controller_changes_total[%s])\n  >= %v" .window .window .threshold)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobecontrollernotreacting" $runbook)
          "summary" "A controller of kube-controller-manager does not act on changes in time."
          "description" (printf "{{ $value | humanizePercentage }} of the changes probe {{ $labels.probe }}%s made from %s to its {{ $labels.controller }} marker in the last %s reached the probe's own watch but got no status answer (observedGeneration) within the deadline: the {{ $labels.controller }} controller has not seen them or not acted on them. Suspect kube-controller-manager (no leader, a stuck work queue, or its own watch broken), not the apiserver." $where $from .window)) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with $a.controllerProbeFailing }}
      {{- if .enabled }}
      # A controller probe that cannot measure its controller: its changes
      # fail (admission policy, webhook, quota on the apps kinds), or its
      # reactions are missed for changes its own watch of the object never
      # showed (the watch down or the apiserver not delivering them). The
      # controller is not blamed for either.
      {{- include "watchprobe.rules.alert" (dict
          "name" "WatchprobeControllerProbeFailing"
          "expr" (printf "(\n  sum without (reason) (increase(watchprobe_controller_reactions_missed_total{reason=\"undelivered\"}[%s]))\n    + increase(watchprobe_controller_change_errors_total[%s])\n)\n  / (increase(watchprobe_controller_changes_total[%s]) + increase(watchprobe_controller_change_errors_total[%s]))\n  >= %v" .window .window .window .window .threshold)
          "for" .for "severity" .severity "labels" (merge (.labels | default dict) $common) "runbook" (printf "%s#watchprobecontrollerprobefailing" $runbook)
          "summary" "A controller probe cannot tell whether its controller reacts."
          "description" (printf "{{ $value | humanizePercentage }} of the changes probe {{ $labels.probe }}%s tried from %s on its {{ $labels.controller }} marker in the last %s failed, or were never shown by the probe's own watch of the object: the controller cannot be judged. watchprobe_controller_change_errors_total and the exporter's log have the apiserver's answer." $where $from .window)) | nindent 6 }}
      {{- end }}
      {{- end }}
  {{- if include "watchprobe.rules.agentsOn" . }}
  # The node agents' rules (agent.alerts), a group of their own:
  # rules/watchprobe.agent.rules.yml is it. Its recordings come first, and
  # its alerts read them in the same evaluation.
  - name: watchprobe.agents
    rules:
      {{- include "watchprobe.rules.agentRecordings" . | nindent 6 }}
      {{- include "watchprobe.rules.agentAlerts" (dict "root" . "runbook" $runbook "common" $common "where" $where "job" $job) | nindent 6 }}
  {{- end }}
  {{- with $r.extraRules }}
  # Your own rules (prometheusRule.extraRules), as given.
  - name: watchprobe.extra
    rules:
      {{- toYaml . | nindent 6 }}
  {{- end }}
{{- end -}}

{{/* The node agents' rules (agent.alerts), the group watchprobe.agents.
Rendered while the chart runs the agents (agent.enabled), or with
agent.alerts.withoutAgents (a Prometheus that evaluates the rules of
agents another release deploys; rules/watchprobe.agent.rules.yml is
rendered so). "true" when they are. */}}
{{- define "watchprobe.rules.agentsOn" -}}
{{- $al := .Values.agent.alerts -}}
{{- if and $al.enabled (or .Values.agent.enabled $al.withoutAgents) -}}true{{- end -}}
{{- end -}}

{{/* One agent's verdict over the window, one series per agent target
(its node and zone labels, set by the agent, and its target labels): 1
degraded, 0 not, and no series where the agent is not judged. Judged: it
wrote in the window and some of those writes were judged (not all
unmeasurable; where Prometheus has no unmeasurable counter of it, a
relabelling dropped it, any write), or its writes failed (a node that
cannot reach the apiserver at all is no agent that just started), and
its own requests are not refused (watchprobe_agent_refused: its Role, its
namespace, a policy; then it measures nothing of the node). Degraded: it
counted a missed event (late or lost) or a stall in the window, or its
healthy gauge was 0 throughout unhealthyFor. A stream that ended and
resumed with nothing missed is the watch working (an apiserver's restart
ends every watch once), so stream ends are not counted. A stall and
unhealthy are not counted where the agent was starved of CPU in the
window (it counted unmeasurable writes): its own delays can make them. A
miss is: the agent judges a write only when it was not starved. Counts are exact (watchprobe.rules.count), and an agent's
restart (its counters from 0) counts only what it counted since. */}}
{{- define "watchprobe.rules.agentVerdict" -}}
{{- $w := .window -}}
{{- $c := dict -}}
{{- range list "writes" "write_errors" "unmeasurable" "events_missed" "stalls" -}}
{{- $_ := set $c . (include "watchprobe.rules.count" (dict "metric" (printf "watchprobe_agent_%s_total" .) "by" "" "window" $w)) -}}
{{- end -}}
{{- $judged := printf "(\n  %s\n  - %s > 0\n  or\n  %s > 0\n  or\n  %s > 0\n  unless\n  watchprobe_agent_unmeasurable_total\n)" ($c.writes | indent 2 | trim) ($c.unmeasurable | indent 2 | trim) ($c.write_errors | indent 2 | trim) ($c.writes | indent 2 | trim) -}}
(
  (
    0 * {{ $judged | indent 4 | trim }} + 1
    and
    (
      {{ $c.events_missed | indent 6 | trim }} > 0
      or
      (
        {{ $c.stalls | indent 8 | trim }} > 0
        or
        max_over_time(watchprobe_agent_healthy[{{ .unhealthyFor }}]) == 0
        and
        watchprobe_agent_healthy offset {{ .unhealthyFor }}
      )
      unless
      {{ $c.unmeasurable | indent 6 | trim }} > 0
    )
  )
  or
  0 * {{ $judged | indent 2 | trim }}
)
unless
max_over_time(watchprobe_agent_refused[{{ .window }}]) == 1
{{- end -}}

{{/* The agents' recordings, per cluster (clusterLabels), job, namespace
and zone: by, not without, as the agents' target labels (pod, instance,
container, ...) are the PodMonitor's and each names one node. */}}
{{- define "watchprobe.rules.agentRecordings" -}}
{{- $al := .Values.agent.alerts -}}
{{- $w := $al.window -}}
{{- $by := join ", " (concat .Values.prometheusRule.clusterLabels (list "job" "namespace" "zone")) -}}
# The node agents (agent.alerts): each agent's verdict over {{ $w }}, 1
# degraded, 0 not, none while it is not judged (it wrote nothing, or
# nothing it could judge, in the window). docs/alerts.md, "Node agents".
- record: node:watchprobe_agent_degraded:{{ $w }}
  expr: |-
    {{- include "watchprobe.rules.agentVerdict" (dict "window" $w "unhealthyFor" $al.unhealthyFor) | nindent 4 }}
# Per zone: the agents judged (reporting) and the degraded among them.
- record: zone:watchprobe_agents_reporting:count{{ $w }}
  expr: count by ({{ $by }}) (node:watchprobe_agent_degraded:{{ $w }})
- record: zone:watchprobe_agents_degraded:count{{ $w }}
  expr: sum by ({{ $by }}) (node:watchprobe_agent_degraded:{{ $w }})
# The agents' event latency per zone, from their native histograms
# summed over the zone's nodes; NaN without events.
{{- range list "0.5" "0.9" "0.99" }}
- record: zone:watchprobe_agent_event_latency_seconds:quantile_rate{{ $w }}
  expr: histogram_quantile({{ . }}, sum by ({{ $by }}) (rate(watchprobe_agent_event_latency_seconds[{{ $w }}])))
  labels:
    quantile: {{ . | quote }}
{{- end }}
# The share of the zone's acknowledged agent writes whose event missed its
# deadline (late or lost).
- record: zone:watchprobe_agent_events_missed:ratio_rate{{ $w }}
  expr: |-
    sum by ({{ $by }}) (rate(watchprobe_agent_events_missed_total[{{ $w }}]))
    /
    sum by ({{ $by }}) (rate(watchprobe_agent_writes_total[{{ $w }}]))
{{- end -}}

{{/* The agents' alerts. .root: the chart's context; .runbook, .common,
.where, .job: the exporter's runbook base, common labels, cluster text and
scrape job, as the other alerts have them. */}}
{{- define "watchprobe.rules.agentAlerts" -}}
{{- $root := .root -}}
{{- $r := $root.Values.prometheusRule -}}
{{- $al := $root.Values.agent.alerts -}}
{{- $w := $al.window -}}
{{- $agentJob := $root.Values.agent.scrapeJob -}}
{{- $cl := $r.clusterLabels -}}
{{- $clusterBy := join ", " (concat $cl (list "job" "namespace")) -}}
{{- range $name := list "nodeWatchDegraded" "nodesWatchDegraded" "agentsMissing" -}}
{{- range $own := list "severity" "vantage_points" "long" "short" -}}
{{- if hasKey ((index $al $name).labels | default dict) $own -}}
{{- fail (printf "agent.alerts.%s.labels: remove the label %q: the chart sets it" $name $own) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Prometheus templates: a query's first value, or none. sel: the
alert's job, namespace and cluster labels (and node), as matchers. */ -}}
{{- $m := list "job=%q" "namespace=%q" -}}
{{- $args := list "$labels.job" "$labels.namespace" -}}
{{- range $cl -}}
{{- $m = append $m (printf "%s=%%q" .) -}}
{{- $args = append $args (printf "$labels.%s" .) -}}
{{- end -}}
{{- $sel := join "," $m -}}
{{- $selArgs := join " " $args -}}
{{- $nodeSel := printf "%s,node=%%q" $sel -}}
{{- $nodeArgs := printf "%s $labels.node" $selArgs -}}
{{- $count := printf `{{ with printf "round(sum(increase(METRIC{%s}[%s])))" %s | query }}{{ . | first | value }}{{ else }}0{{ end }}` $nodeSel $w $nodeArgs -}}
{{- $degraded := printf "sum without (zone) (zone:watchprobe_agents_degraded:count%s)" $w -}}
{{- $reporting := printf "sum without (zone) (zone:watchprobe_agents_reporting:count%s)" $w -}}
{{- $many := printf "%s >= %v\nand\n%s\n  >= %v * %s" $degraded (int $al.minNodes) $degraded $al.manyFraction $reporting -}}
{{- $pct := include "watchprobe.rules.percent" $al.manyFraction -}}
{{- with $al.nodeWatchDegraded }}
{{- if .enabled }}
# A node whose agent's watch is degraded (node:watchprobe_agent_degraded),
# while its cluster's degraded agents are fewer than {{ $pct }}% of those
# reporting, or fewer than {{ $al.minNodes }}: then it is the node's (its
# conntrack table, its route to the apiserver, a load balancer's idle
# timeout on its connections), named by node and zone. Where they are
# more, WatchprobeNodesWatchDegraded pages instead, and inhibits these.
{{ include "watchprobe.rules.alert" (dict
    "name" "WatchprobeNodeWatchDegraded"
    "expr" (printf "node:watchprobe_agent_degraded:%s == 1\nunless on (%s)\n(\n%s\n)" $w $clusterBy ($many | indent 2))
    "for" .for "severity" (index $r.severities .severity) "labels" (merge (.labels | default dict) $.common) "runbook" (printf "%s#watchprobenodewatchdegraded" $.runbook)
    "summary" "One node's watch of the apiserver is degraded: its agent's events are missed or its watch stalls."
    "description" (printf "The node agent on node {{ $labels.node }}{{ with $labels.zone }} in zone {{ . }}{{ end }}%s saw its watch of the apiserver degraded over the last %s: %s events missed (late or lost), %s stalls (%s streams ended and resumed), p90 latency %s%s; fewer than %s%% (or fewer than %d) of the cluster's reporting agents are degraded, so suspect this node's path to the apiserver: its conntrack table, its route, a load balancer's idle timeout, a node-local proxy. The runbook says how to confirm it on the node."
        $.where $w (replace "METRIC" "watchprobe_agent_events_missed_total" $count) (replace "METRIC" "watchprobe_agent_stalls_total" $count) (replace "METRIC" "watchprobe_agent_stream_ends_total" $count)
        (printf `{{ with printf "histogram_quantile(0.9, sum(rate(watchprobe_agent_event_latency_seconds{%s}[%s]))) >= 0" %s | query }}{{ . | first | value | humanizeDuration }}{{ else }}none (no event arrived){{ end }}` $nodeSel $w $nodeArgs)
        (printf `{{ with printf "max_over_time(watchprobe_agent_healthy{%s}[%s]) == 0" %s | query }}, unhealthy throughout the last %s{{ end }}` $nodeSel $al.unhealthyFor $nodeArgs $al.unhealthyFor)
        $pct (int $al.minNodes))) }}
{{- end }}
{{- end }}
{{- with $al.nodesWatchDegraded }}
{{- if .enabled }}
# At least {{ $pct }}% of a cluster's reporting agents, and at least
# {{ $al.minNodes }}, degraded: what so many nodes share, the control plane
# (the apiservers, their load balancer, etcd), not each node.
{{ include "watchprobe.rules.alert" (dict
    "name" "WatchprobeNodesWatchDegraded"
    "expr" $many
    "for" .for "severity" (index $r.severities .severity) "labels" (merge (.labels | default dict) $.common) "runbook" (printf "%s#watchprobenodeswatchdegraded" $.runbook)
    "summary" "Many nodes' watches of the apiserver are degraded: the control plane's problem, not a node's."
    "description" (printf "The node agents on {{ $value }} nodes%s (job {{ $labels.job }}) of the %s reporting saw their watch of the apiserver degraded over the last %s (events missed, stalls, or unhealthy throughout %s), for %s: at least %s%% and at least %d nodes, so suspect what they share, the apiservers, their load balancer or etcd, before any node. Degraded agents by zone: %s. Each node's own ticket (WatchprobeNodeWatchDegraded) is inhibited."
        $.where
        (printf `{{ with printf "sum without (zone) (zone:watchprobe_agents_reporting:count%s{%s})" %s | query }}{{ . | first | value }}{{ end }}` $w $sel $selArgs)
        $w $al.unhealthyFor .for $pct (int $al.minNodes)
        (printf `{{ range $i, $s := query (printf "zone:watchprobe_agents_degraded:count%s{%s} > 0" %s) | sortByLabel "zone" }}{{ if $i }}, {{ end }}{{ with $s.Labels.zone }}{{ . }}{{ else }}no zone{{ end }} {{ $s.Value }}{{ end }}` $w $sel $selArgs))) }}
{{- end }}
{{- end }}
{{- with $al.agentsMissing }}
{{- if .enabled }}
# An agent target Prometheus cannot scrape, or an agent it scrapes that
# made no write at all, acknowledged or failed, in the window (stuck: an
# agent writes every few minutes at most): that node's watch is not
# measured, and its agent has no verdict.
{{- $writes := include "watchprobe.rules.count" (dict "metric" "watchprobe_agent_writes_total" "by" "" "window" $w) }}
{{- $errors := include "watchprobe.rules.count" (dict "metric" "watchprobe_agent_write_errors_total" "by" "" "window" $w) }}
{{- $expr := printf "up{job=%q} == 0\nor\n%s == 0\nunless\n%s > 0\nor\nmax_over_time(watchprobe_agent_refused[%s]) == 1" $agentJob $writes $errors $w }}
{{- if $root.Values.agent.enabled }}
# With the agents enabled, a cluster where the exporter reports and no
# agent target is there at all (the DaemonSet gone, its PodMonitor not
# selected), or, without the exporter either, none anywhere.
{{- $by := join ", " $cl }}
{{- $expr = printf "%s\nor\nlabel_replace(\n  group by (%s) (up{job=%q})\n  unless\n  group by (%s) (up{job=%q}),\n  \"job\", %q, \"\", \"\"\n)\nor\nabsent(up{job=%q}) unless on () up{job=%q}" $expr $by $.job $by $agentJob $agentJob $agentJob $.job }}
{{- end }}
{{ include "watchprobe.rules.alert" (dict
    "name" "WatchprobeAgentsMissing"
    "expr" $expr
    "for" .for "severity" (index $r.severities .severity) "labels" (merge (.labels | default dict) $.common) "runbook" (printf "%s#watchprobeagentsmissing" $.runbook)
    "summary" "Node agents the chart runs do not report: their nodes' watches are not measured."
    "description" (printf "{{ if and $labels.node (eq $value 1.0) }}The node agent on node {{ $labels.node }} (pod {{ $labels.pod }})%s has its own requests refused, for %s: its Role, its namespace or a policy (an admission webhook, a NetworkPolicy's answer) refuses them, so it measures nothing of its node and has no verdict. Its log names the refusal; the chart's agent RBAC and namespace are what it needs.{{ else if $labels.node }}The node agent on node {{ $labels.node }} (pod {{ $labels.pod }})%s is scraped but made no marker write, acknowledged or failed, in the last %s, for %s: it is stuck and measures nothing, and its node has no verdict. Its log says where; restart the pod.{{ else if $labels.instance }}Prometheus cannot scrape the node agent %s%s (up 0), for %s: that node's watch of the apiserver is not measured, and its agent has no verdict. The pod is not running or not ready to serve (kubectl get pods -o wide), or its node is down or unreachable from Prometheus.{{ else }}Prometheus has no target of the node agents' job %s%s, for %s, although the chart runs them: the DaemonSet has no pods (kubectl get daemonset), or its PodMonitor is not selected by Prometheus, or its scrape job has another name. No node's watch is measured.{{ end }}"
        $.where .for $.where $w .for
        (printf `{{ $labels.pod }}{{ with printf "group by (node) (last_over_time(watchprobe_agent_healthy{%s,pod=%%q}[1d]))" %s $labels.pod | query }} on node {{ . | first | label "node" }}{{ end }}` $sel $selArgs)
        $.where .for $agentJob $.where .for)) }}
{{- end }}
{{- end }}
{{- end -}}
