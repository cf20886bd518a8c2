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

{{/* Bad events per probe and path over a window, as a fraction of writes:
each write counts once per path, good if it arrived within the objective,
bad if later or never. A late write is in observed, missed and late alike,
so the denominator is observed + missed - late. */}}
{{- define "watchprobe.rules.sliErrorRatio" -}}
1 - (
  {{- include "watchprobe.rules.withinObjective" (dict "fn" "rate" "objective" .objective "window" .window) | nindent 2 }}
  /
  (
    sum without (event) (rate(watchprobe_events_observed_total[{{ .window }}]))
    + sum without (reason) (rate(watchprobe_events_missed_total[{{ .window }}]))
    - sum without () (rate(watchprobe_events_late_total[{{ .window }}]))
  )
)
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

{{/* " in cluster=b" for clusterLabels [cluster], as a Prometheus template. */}}
{{- define "watchprobe.rules.where" -}}
{{- range . -}}
{{ printf "{{ with $labels.%s }} in %s={{ . }}{{ end }}" . . }}
{{- end -}}
{{- end -}}

{{- define "watchprobe.rules" -}}
{{- $r := .Values.prometheusRule -}}
{{- $slo := $r.slo -}}
{{- $a := $r.alerts -}}
{{- $runbook := $r.runbookUrlBase | default (printf "https://github.com/watchprobe/watchprobe/blob/v%s/docs/alerts.md" .Chart.AppVersion) -}}
{{- $job := .Values.scrapeJob -}}
{{- $budget := printf "(1 - %v)" $slo.target -}}
{{- $budgetPct := include "watchprobe.rules.percent" (subf 1 $slo.target) -}}
{{- $burns := list -}}
{{- range $severity := list "critical" "warning" -}}
{{- $b := get $a.eventLatencyBudgetBurn $severity -}}
{{- if $b.enabled -}}
{{- $burns = append $burns $b -}}
{{- end -}}
{{- end -}}
{{- /* The dashboard reads 5m, 30m, 1h and 6h; the alerts may add others. */ -}}
{{- $windows := list "5m" "30m" "1h" "6h" -}}
{{- range $burns -}}
{{- $windows = append $windows .longWindow -}}
{{- $windows = append $windows .shortWindow -}}
{{- end -}}
{{- $windows = uniq $windows -}}
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
{{- end }}; an event later or missed is bad, so the error budget is
# {{ $budgetPct }}%. Keep every probe's deadline at or above the
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
# one exception, WatchprobeAbsent's opt-in search for clusters without an
# exporter, groups by the configured cluster labels. The per-apiserver paths
# (path="apiserver") keep their own series, one per apiserver, apart from
# the other paths'. The exporter's targets carry job="{{ $job }}" (the
# chart's ServiceMonitor sets it; a hand-written scrape config names its
# job so).
groups:
  - name: watchprobe.sli
    rules:
      # Bad-event ratio per probe and path over each window the burn-rate
      # alerts and the SLO panels use. Each write counts once per path: good
      # if it arrived within {{ $slo.objectiveSeconds }} s, bad if it arrived later or never. A late
      # write is in observed, missed and late alike, so the denominator is
      # observed + missed - late (the exporter creates all three at zero).
      {{- range $windows }}
      - record: probe_path:watchprobe_sli_error_ratio:rate{{ . }}
        expr: |-
          {{- include "watchprobe.rules.sliErrorRatio" (dict "objective" $slo.objectiveSeconds "window" .) | nindent 10 }}
      {{- end }}
      # Error ratio over the error budget: at 1 the budget lasts exactly the
      # SLO period. The dashboard's burn-rate panel reads these, so that its
      # scale follows the target set here.
      {{- range list "1h" "6h" }}
      - record: probe_path:watchprobe_sli_burn_rate:rate{{ . }}
        expr: probe_path:watchprobe_sli_error_ratio:rate{{ . }} / {{ $budget }}
      {{- end }}
      # 1 for each minute in which the path met the objective on that
      # minute's events, each write counted once as above; the dashboard's
      # "good minutes" averages it.
      - record: probe_path:watchprobe_sli_good_minute:1m
        expr: |-
          (
            {{- include "watchprobe.rules.withinObjective" (dict "fn" "increase" "objective" $slo.objectiveSeconds "window" "1m") | nindent 12 }}
            >= bool {{ $slo.target }} * (
              sum without (event) (increase(watchprobe_events_observed_total[1m]))
              + sum without (reason) (increase(watchprobe_events_missed_total[1m]))
              - sum without () (increase(watchprobe_events_late_total[1m]))
            )
          )
  - name: watchprobe.alerts
    rules:
      {{- with $a.probeFailing }}
      {{- if .enabled }}
      - alert: WatchprobeProbeFailing
        expr: watchprobe_probe_success == 0
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "watchprobe probe {{`{{ $labels.probe }}`}} has been failing for {{ .for }}."
          description: "The latest marker cycles of probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} were not written or not observed on every watch path within the deadline."
          runbook_url: {{ $runbook }}#watchprobeprobefailing
      {{- end }}
      {{- end }}
      {{- range $burns }}
      - alert: WatchprobeEventLatencyBudgetBurn
        expr: |-
          probe_path:watchprobe_sli_error_ratio:rate{{ .longWindow }} > ({{ .burnRate }} * {{ $budget }})
          and
          probe_path:watchprobe_sli_error_ratio:rate{{ .shortWindow }} > ({{ .burnRate }} * {{ $budget }})
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
          long_window: {{ .longWindow }}
        annotations:
          summary: "Watch events on {{`{{ $labels.path }}{{ with $labels.apiserver }} through {{ . }}{{ end }}`}} are burning the latency error budget {{ .burnRate }}x too fast."
          description: "Over the last {{ .longWindow }}, {{`{{ $value | humanizePercentage }}`}} of the marker events of probe {{`{{ $labels.probe }}`}} on the {{`{{ $labels.path }}`}} path arrived later than {{ $slo.objectiveSeconds }} s or never; the objective allows {{ $budgetPct }}%."
          runbook_url: {{ $runbook }}#watchprobeeventlatencybudgetburn
      {{- end }}
      {{- with $a.eventsLost }}
      {{- if .enabled }}
      # Lost, not late: an event still undelivered lost_after after the
      # write's answer, on a path that was live and did not relist.
      # An event that arrives after its deadline is late, and burns the
      # latency budget instead.
      - alert: WatchprobeEventsLost
        expr: sum without (reason) (increase(watchprobe_events_lost_total{reason="silent"}[{{ .window }}])) > {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "Watch events were lost on {{`{{ $labels.path }}{{ with $labels.apiserver }} through {{ . }}{{ end }}`}} with nothing to explain it."
          description: "{{`{{ $value | humanize }}`}} marker events of probe {{`{{ $labels.probe }}`}} were never delivered on the {{`{{ $labels.path }}`}} path (not within the probe's lost_after) in the last {{ .window }}, although the path was live and did not relist."
          runbook_url: {{ $runbook }}#watchprobeeventslost
      {{- end }}
      {{- end }}
      {{- with $a.eventsDuplicatedOrReordered }}
      {{- if .enabled }}
      - alert: WatchprobeEventsDuplicatedOrReordered
        expr: |-
          (
            sum without () (increase(watchprobe_events_duplicate_total[{{ .window }}]))
            + sum without () (increase(watchprobe_events_out_of_order_total[{{ .window }}]))
          ) > {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "Watch events were delivered twice or out of order on {{`{{ $labels.path }}{{ with $labels.apiserver }} through {{ . }}{{ end }}`}}."
          description: "{{`{{ $value | humanize }}`}} marker events of probe {{`{{ $labels.probe }}`}} arrived twice without a relist, or after a later event, on the {{`{{ $labels.path }}`}} path in the last {{ .window }}."
          runbook_url: {{ $runbook }}#watchprobeeventsduplicatedorreordered
      {{- end }}
      {{- end }}
      {{- with $a.watchStalled }}
      {{- if .enabled }}
      - alert: WatchprobeWatchStalled
        expr: watchprobe_watch_stalled == 1
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "The {{`{{ $labels.path }}`}} watch of probe {{`{{ $labels.probe }}{{ with $labels.apiserver }} through {{ . }}{{ end }}`}} is stalled."
          description: "The {{`{{ $labels.path }}`}} path of {{`{{ $labels.instance }}`}} has a watch stream open, and marker writes succeed, but nothing, not even a bookmark, has arrived on it for longer than the probe's stall bound."
          runbook_url: {{ $runbook }}#watchprobewatchstalled
      {{- end }}
      {{- end }}
      {{- with $a.pathDown }}
      {{- if .enabled }}
      # No stream open and caught up for most of the window: its list or
      # watch requests fail (the apiserver's answer is in
      # watchprobe_requests_failed_total's code), or it keeps reconnecting.
      # Not a stall, which is a stream that is open and silent. Most, not
      # all: a path up one scrape in four is as good as down.
      - alert: WatchprobePathDown
        expr: avg_over_time(watchprobe_path_up[{{ .window }}]) < 0.5
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "The {{`{{ $labels.path }}`}} path of probe {{`{{ $labels.probe }}{{ with $labels.apiserver }} through {{ . }}{{ end }}`}} has had no watch stream most of the time."
          description: "The {{`{{ $labels.path }}`}} path of probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} had a watch stream open and caught up less than half of the last {{ .window }}: it cannot list or watch its markers. watchprobe_requests_failed_total by code has the apiserver's answer (403: the exporter's RBAC; 0: no response), the exporter's log and status page the error (for the etcd path, etcd's)."
          runbook_url: {{ $runbook }}#watchprobepathdown
      {{- end }}
      {{- end }}
      {{- with $a.relistStorm }}
      {{- if .enabled }}
      - alert: WatchprobeRelistStorm
        expr: sum without (reason, mode) (increase(watchprobe_relists_total{reason="expired"}[{{ .window }}])) > {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "The {{`{{ $labels.path }}`}} path{{`{{ with $labels.apiserver }} through {{ . }}{{ end }}`}} keeps relisting because its resourceVersion expired."
          description: "Probe {{`{{ $labels.probe }}`}} relisted {{`{{ $value | humanize }}`}} times in {{ .window }} after 410 Gone (too old resource version) on the {{`{{ $labels.path }}`}} path."
          runbook_url: {{ $runbook }}#watchprobereliststorm
      {{- end }}
      {{- end }}
      {{- with $a.writeErrors }}
      {{- if .enabled }}
      - alert: WatchprobeWriteErrors
        expr: |-
          sum without (verb, code) (rate(watchprobe_write_errors_total[{{ .window }}]))
          /
          sum without (verb) (rate(watchprobe_writes_total[{{ .window }}]))
          > {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "More than {{ include "watchprobe.rules.percent" .threshold }}% of marker writes of probe {{`{{ $labels.probe }}`}} fail."
          description: "{{`{{ $value | humanizePercentage }}`}} of the marker writes of probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} failed over {{ .window }}."
          runbook_url: {{ $runbook }}#watchprobewriteerrors
      {{- end }}
      {{- end }}
      {{- with $a.requestsThrottled }}
      {{- if .enabled }}
      - alert: WatchprobeRequestsThrottled
        expr: sum without (request) (increase(watchprobe_requests_throttled_total[{{ .window }}])) > {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "The apiserver keeps throttling probe {{`{{ $labels.probe }}`}}'s {{`{{ if eq $labels.path \"write\" }}writes{{ else }}{{ $labels.path }} path{{ end }}`}} with 429 Too Many Requests."
          description: "{{`{{ $value | humanize }}`}} requests of probe {{`{{ $labels.probe }}`}} ({{`{{ $labels.path }}{{ with $labels.apiserver }} through {{ . }}{{ end }}`}}) on {{`{{ $labels.instance }}`}} were answered 429 in the last {{ .window }}, and throttling has gone on for {{ .for }}: API Priority and Fairness is rejecting the exporter's flow, and its latencies include the waits."
          runbook_url: {{ $runbook }}#watchproberequeststhrottled
      {{- end }}
      {{- end }}
      {{- with $a.requestsFailing }}
      {{- if .enabled }}
      # Failing list or watch requests of a path that is up between them;
      # one down the whole window is WatchprobePathDown's.
      - alert: WatchprobeRequestsFailing
        expr: |-
          sum without (request, code) (increase(watchprobe_requests_failed_total[{{ .window }}])) > {{ .threshold }}
          unless
          max_over_time(watchprobe_path_up[{{ .window }}]) == 0
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "List and watch requests of the {{`{{ $labels.path }}`}} path of probe {{`{{ $labels.probe }}{{ with $labels.apiserver }} through {{ . }}{{ end }}`}} keep failing."
          description: "{{`{{ $value | humanize }}`}} list or watch requests of the {{`{{ $labels.path }}`}} path of probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} failed in the last {{ .window }}, and failures have gone on for {{ .for }} while the path recovers between them: see watchprobe_requests_failed_total by code."
          runbook_url: {{ $runbook }}#watchproberequestsfailing
      {{- end }}
      {{- end }}
      {{- with $a.markersPiling }}
      {{- if .enabled }}
      - alert: WatchprobeMarkersPiling
        expr: watchprobe_markers_pending_deletion > {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "Markers of probe {{`{{ $labels.probe }}`}} are not being deleted."
          description: "{{`{{ $value | humanize }}`}} marker objects of probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} wait for a delete that has not succeeded for {{ .for }}: they pile up in the marker namespace."
          runbook_url: {{ $runbook }}#watchprobemarkerspiling
      {{- end }}
      {{- end }}
      {{- with $a.configReloadFailed }}
      {{- if .enabled }}
      - alert: WatchprobeConfigReloadFailed
        expr: watchprobe_config_last_reload_successful == 0
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "watchprobe on {{`{{ $labels.instance }}`}} could not load its changed configuration."
          description: "The latest reload of the configuration file on {{`{{ $labels.instance }}`}} failed: the exporter runs its previous probes, not the ones configured. Its log names the probe, the line and the field."
          runbook_url: {{ $runbook }}#watchprobeconfigreloadfailed
      {{- end }}
      {{- end }}
      {{- with $a.sliMissing }}
      {{- if .enabled }}
      # A path with events but no SLI, so no burn-rate alert can fire however
      # late its events: Prometheus has neither the classic buckets nor a
      # native histogram it may read at the objective.
      - alert: WatchprobeSLIMissing
        expr: |-
          (
            sum without (event) (increase(watchprobe_events_observed_total[1h]))
            + sum without (reason) (increase(watchprobe_events_missed_total[1h]))
          ) > 0
          unless
          probe_path:watchprobe_sli_error_ratio:rate1h
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "No latency SLI for the {{`{{ $labels.path }}`}} path of probe {{`{{ $labels.probe }}`}}: its burn-rate alerts cannot fire."
          description: "Prometheus has events of probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} but {{ if include "watchprobe.rules.nativeExact" $slo.objectiveSeconds }}neither the le=\"{{ $slo.objectiveSeconds }}\" and le=\"+Inf\" buckets of watchprobe_event_latency_seconds nor its native histogram: with --no-metrics.classic-histograms, Prometheus must ingest native histograms (scrape_native_histograms: true).{{ else }}not the le=\"{{ $slo.objectiveSeconds }}\" and le=\"+Inf\" buckets of watchprobe_event_latency_seconds, which a {{ $slo.objectiveSeconds }} s objective needs (it is no native bucket bound): run the exporter with classic histograms, and where Prometheus ingests native histograms set always_scrape_classic_histograms: true.{{ end }}"
          runbook_url: {{ $runbook }}#watchprobeslimissing
      {{- end }}
      {{- end }}
      {{- with $a.absent }}
      {{- if .enabled }}
      # Per deployment, keyed on the scrape job: a target whose scrapes bring
      # no probe results (the exporter is down, up 0 and its series stale,
      # or runs no probe), and no target of the job at all in this
      # Prometheus. A cluster that never ran watchprobe is no alert.
      {{- $clusters := list }}
      {{- range $r.clusterLabels }}{{ $clusters = append $clusters (printf "%s!=\"\"" .) }}{{ end }}
      {{- with .perCluster.clusterSelector }}{{ $clusters = append $clusters . }}{{ end }}
      - alert: WatchprobeAbsent
        expr: |-
          (up{job="{{ $job }}"} unless group without (probe) (watchprobe_probe_success))
          or
          absent(up{job="{{ $job }}"})
          {{- if and .perCluster.enabled $r.clusterLabels }}
          or
          (group by ({{ join ", " $r.clusterLabels }}) (up{ {{- join ", " $clusters -}} }) unless group by ({{ join ", " $r.clusterLabels }}) (up{job="{{ $job }}"}))
          {{- end }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "{{`{{ if $labels.instance }}No watchprobe results from {{ $labels.instance }}{{ else if $labels.job }}No watchprobe target is scraped{{ else }}No watchprobe target is scraped`}}{{ include "watchprobe.rules.where" $r.clusterLabels }}{{`{{ end }}`}} for {{ .for }}."
          description: '{{ printf "{{ if $labels.instance }}Prometheus scrapes the watchprobe target {{ $labels.instance }} of job {{ $labels.job }} (up {{ $value }}) but gets no watchprobe_probe_success series from it: the exporter is down or has no probe.{{ else if $labels.job }}Prometheus scrapes no target of job %s: the exporter is not deployed, its ServiceMonitor is not selected, or its scrape job has another name.{{ else }}Prometheus scrapes targets%s, but none of job %s: the exporter is not deployed there, or its ServiceMonitor is not selected.{{ end }}" $job (include "watchprobe.rules.where" $r.clusterLabels) $job | replace "'" "''" }}'
          runbook_url: {{ $runbook }}#watchprobeabsent
      {{- end }}
      {{- end }}
      {{- with $a.resumeWindowShort }}
      {{- if .enabled }}
      # The largest age from which a resumed watch replayed exactly, in the
      # path's latest round that judged every age (probes with resume set):
      # a controller away longer than that relists instead of resuming.
      - alert: WatchprobeResumeWindowShort
        expr: watchprobe_resume_window_seconds < {{ .thresholdSeconds }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "The resume window of the {{`{{ $labels.path }}`}} path{{`{{ with $labels.apiserver }} through {{ . }}{{ end }}`}} is {{`{{ $value | humanizeDuration }}`}}, below {{ .thresholdSeconds }}s."
          description: "For {{ .for }}, resume checks of probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} found no configured age beyond {{`{{ $value | humanizeDuration }}`}} from which a watch on the {{`{{ $labels.path }}`}} path replayed exactly: a client whose watch broke for longer gets 410 Gone on reconnecting, and relists."
          runbook_url: {{ $runbook }}#watchproberesumewindowshort
      {{- end }}
      {{- end }}
      {{- with $a.resumeReplayInexact }}
      {{- if .enabled }}
      - alert: WatchprobeResumeReplayInexact
        expr: sum without (age, outcome) (increase(watchprobe_resume_checks_total{outcome="incomplete"}[{{ .window }}])) > {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "A resumed watch on {{`{{ $labels.path }}{{ with $labels.apiserver }} through {{ . }}{{ end }}`}} did not replay exactly what was written."
          description: "{{`{{ $value | humanize }}`}} resume checks of probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} in the last {{ .window }} got a replay with an event missing, twice or out of order, or a 410 after part of it, on the {{`{{ $labels.path }}`}} path: a controller resuming there would miss or repeat changes. The exporter's log names the resourceVersions."
          runbook_url: {{ $runbook }}#watchproberesumereplayinexact
      {{- end }}
      {{- end }}
      {{- with $a.apiServerWatchDegraded }}
      {{- if .enabled }}
      # The watch through one apiserver fails while another apiserver delivers
      # the same probe's events, with the same target labels: the fault is in
      # that apiserver (its watch cache or its etcd connection), not in etcd
      # or the network. When every apiserver fails, this stays silent and the
      # other alerts speak.
      - alert: WatchprobeAPIServerWatchDegraded
        expr: |-
          (
            {{- include "watchprobe.rules.apiserverDegraded" . | nindent 12 }}
          )
          and ignoring (apiserver)
          (
            sum without (event) (increase(watchprobe_events_observed_total{path="apiserver"}[{{ .window }}])) > 0
            unless
            (
              {{- include "watchprobe.rules.apiserverDegraded" . | nindent 14 }}
            )
          )
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "The watch of probe {{`{{ $labels.probe }}`}} through apiserver {{`{{ $labels.apiserver }}`}} fails while other apiservers deliver."
          description: "Through apiserver {{`{{ $labels.apiserver }}`}}, probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} missed more than {{ include "watchprobe.rules.percent" .threshold }}% of its events over {{ .window }}, or its watch stalled, while another apiserver delivered them: suspect that apiserver's watch cache or etcd connection."
          runbook_url: {{ $runbook }}#watchprobeapiserverwatchdegraded
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
      - alert: WatchprobeControllerNotReacting
        expr: |-
          sum without (reason) (increase(watchprobe_controller_reactions_missed_total{reason="controller"}[{{ .window }}]))
            / increase(watchprobe_controller_changes_total[{{ .window }}])
            >= {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "The {{`{{ $labels.controller }}`}} controller of kube-controller-manager does not act on changes in time."
          description: "{{`{{ $value | humanizePercentage }}`}} of the changes probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} made to its {{`{{ $labels.controller }}`}} marker in the last {{ .window }} reached the probe's own watch but got no status answer (observedGeneration) within the deadline: the {{`{{ $labels.controller }}`}} controller has not seen them or not acted on them. Suspect kube-controller-manager (no leader, a stuck work queue, or its own watch broken), not the apiserver."
          runbook_url: {{ $runbook }}#watchprobecontrollernotreacting
      {{- end }}
      {{- end }}
      {{- with $a.controllerProbeFailing }}
      {{- if .enabled }}
      # A controller probe that cannot measure its controller: its changes
      # fail (admission policy, webhook, quota on the apps kinds), or its
      # reactions are missed for changes its own watch of the object never
      # showed (the watch down or the apiserver not delivering them). The
      # controller is not blamed for either.
      - alert: WatchprobeControllerProbeFailing
        expr: |-
          (
            sum without (reason) (increase(watchprobe_controller_reactions_missed_total{reason="undelivered"}[{{ .window }}]))
              + increase(watchprobe_controller_change_errors_total[{{ .window }}])
          )
            / (increase(watchprobe_controller_changes_total[{{ .window }}]) + increase(watchprobe_controller_change_errors_total[{{ .window }}]))
            >= {{ .threshold }}
        {{- with include "watchprobe.rules.for" .for }}
        {{ . }}
        {{- end }}
        labels:
          severity: {{ .severity }}
        annotations:
          summary: "Probe {{`{{ $labels.probe }}`}} cannot tell whether the {{`{{ $labels.controller }}`}} controller reacts: its changes fail or do not reach its watch."
          description: "{{`{{ $value | humanizePercentage }}`}} of the changes probe {{`{{ $labels.probe }}`}} on {{`{{ $labels.instance }}`}} tried on its {{`{{ $labels.controller }}`}} marker in the last {{ .window }} failed, or were never shown by the probe's own watch of the object: the controller cannot be judged. watchprobe_controller_change_errors_total and the exporter's log have the apiserver's answer."
          runbook_url: {{ $runbook }}#watchprobecontrollerprobefailing
      {{- end }}
      {{- end }}
{{- end -}}
