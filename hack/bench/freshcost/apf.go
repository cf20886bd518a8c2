package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
)

// What API Priority and Fairness makes of the freshness checks' requests:
// the seats each form of LIST is estimated at, how long each waits in a
// priority level saturated by full LISTs, and what the checks at their
// defaults add to a level. Each measurement runs in a priority level of
// its own (no borrowing or lending), whose FlowSchema matches one group,
// so that the apiserver's per-level metrics count the bench's requests
// alone.

// level is a priority level and the FlowSchema that sends group to it.
type level struct {
	name, group string
	shares      int32
}

func (l level) create(ctx context.Context, client kubernetes.Interface) error {
	fc := client.FlowcontrolV1()
	if _, err := fc.PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: l.name},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
			NominalConcurrencyShares: ptr.To(l.shares), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
			LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{
				Queues: 64, HandSize: 6, QueueLengthLimit: 50}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := fc.FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: l.name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: l.name},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: l.group}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					Namespaces: []string{"*"}, ClusterScope: true}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{})
	return err
}

// readers lets group list, cluster-wide, every resource the checks list.
func readers(ctx context.Context, client kubernetes.Interface, group string) error {
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: group},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"", "discovery.k8s.io", "coordination.k8s.io"},
			Resources: []string{"pods", "configmaps", "endpointslices", "leases"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: group},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: group}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: group},
	}, metav1.CreateOptions{})
	return err
}

// levelStats are a priority level's counts in the apiserver's metrics.
type levelStats struct {
	requests, seats     float64 // work_estimated_seats: count and sum
	executing           float64 // request_execution_seconds: sum
	waiting             float64 // request_wait_duration_seconds: sum
	rejected            float64
	nominal, executingN float64
}

func (s levelStats) minus(o levelStats) levelStats {
	return levelStats{requests: s.requests - o.requests, seats: s.seats - o.seats, executing: s.executing - o.executing,
		waiting: s.waiting - o.waiting, rejected: s.rejected - o.rejected, nominal: s.nominal}
}

func statsOf(ctx context.Context, admin *rest.Config, name string) (levelStats, error) {
	body, err := kubernetes.NewForConfigOrDie(admin).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return levelStats{}, err
	}
	families, err := exportertest.Parse(string(body))
	if err != nil {
		return levelStats{}, err
	}
	l := map[string]string{"priority_level": name}
	var s levelStats
	s.requests, s.seats = exportertest.HistogramSum(families, "apiserver_flowcontrol_work_estimated_seats", l)
	_, s.executing = exportertest.HistogramSum(families, "apiserver_flowcontrol_request_execution_seconds", l)
	_, s.waiting = exportertest.HistogramSum(families, "apiserver_flowcontrol_request_wait_duration_seconds", l)
	s.rejected, _ = exportertest.Sum(families, "apiserver_flowcontrol_rejected_requests_total", l)
	s.nominal, _ = exportertest.Sum(families, "apiserver_flowcontrol_nominal_limit_seats", l)
	s.executingN, _ = exportertest.Sum(families, "apiserver_flowcontrol_current_executing_seats", l)
	return s, nil
}

// waitLevel waits until the apiserver has the level and reports its
// nominal seats.
func waitLevel(ctx context.Context, admin *rest.Config, name string) (float64, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s, err := statsOf(ctx, admin, name)
		if err != nil {
			return 0, err
		}
		if s.nominal > 0 {
			return s.nominal, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0, fmt.Errorf("priority level %s not configured within 30s", name)
}

// form is one way to LIST a resource for a freshness check.
type form struct {
	name  string
	query url.Values
}

func forms(name string) []form {
	return []form{
		{"no limit", url.Values{}},
		{"limit=1", url.Values{"limit": {"1"}}},
		{"fieldSelector=metadata.name", url.Values{"fieldSelector": {"metadata.name=" + name}}},
	}
}

// get is one request of path with query as client, timed, and its status.
func get(ctx context.Context, client *http.Client, host, path string, query url.Values) (time.Duration, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+path+"?"+query.Encode(), nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return time.Since(start), 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), resp.StatusCode, nil
}

func withRV(q url.Values, rv string) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = v
	}
	if rv != "" {
		out.Set("resourceVersion", rv)
	}
	return out
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// seatsPerForm prints, for each form of the pods check in a namespace
// with none of the objects pods, consistent and resourceVersion=0: the
// seats priority and fairness estimates, its time idle and with delay on
// every etcd answer on pods' own etcd link (a consistent read that waits
// for a fresh cache takes about twice the delay, one that does not takes
// none), and its time in a priority level that full LISTs of the pods
// saturate.
func seatsPerForm(ctx context.Context, c *localcluster.Cluster, objects, samples int, delay time.Duration) error {
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	const probeGroup, floodGroup = "bench-prober", "bench-flooders"
	for _, g := range []string{probeGroup, floodGroup} {
		if err := readers(ctx, client, g); err != nil {
			return err
		}
	}
	quiet, busy := level{"bench-quiet", probeGroup, 30}, level{"bench-saturated", floodGroup, 5}
	for _, l := range []level{quiet, busy} {
		if err := l.create(ctx, client); err != nil {
			return err
		}
	}
	quietSeats, err := waitLevel(ctx, admin, quiet.name)
	if err != nil {
		return err
	}
	busySeats, err := waitLevel(ctx, admin, busy.name)
	if err != nil {
		return err
	}
	prober, err := userClient(c, "bench-prober", probeGroup)
	if err != nil {
		return err
	}
	inBusy, err := userClient(c, "bench-prober-busy", floodGroup)
	if err != nil {
		return err
	}
	const path = "/api/v1/namespaces/fresh/pods"
	type row struct {
		form, rv               string
		seats, idle, delayed   float64
		saturated, saturated99 time.Duration
		refused, timedOut      int
		satSamples             int
	}
	var rows []row
	for _, f := range forms("watchprobe-freshness-check-lists-nothing") {
		for _, rv := range []string{"", "0"} {
			q := withRV(f.query, rv)
			before, err := statsOf(ctx, admin, quiet.name)
			if err != nil {
				return err
			}
			var idle []time.Duration
			for range samples {
				d, code, err := get(ctx, prober, c.APIServerURL, path, q)
				if err != nil || code != http.StatusOK {
					return fmt.Errorf("%s rv=%q: %d %v", f.name, rv, code, err)
				}
				idle = append(idle, d)
			}
			after, err := statsOf(ctx, admin, quiet.name)
			if err != nil {
				return err
			}
			d := after.minus(before)
			r := row{form: f.name, rv: rv, seats: d.seats / d.requests, idle: quantile(idle, 0.5).Seconds()}
			c.EtcdOverride("/pods").Delay(delay)
			var delayed []time.Duration
			for range 5 {
				d, _, err := get(ctx, prober, c.APIServerURL, path, q)
				if err != nil {
					return err
				}
				delayed = append(delayed, d)
			}
			c.EtcdOverride("/pods").Delay(0)
			r.delayed = quantile(delayed, 0.5).Seconds()
			rows = append(rows, r)
		}
	}

	// Saturated: flooders, one flow each, list the pods from the cache
	// without pause; the prober's requests share their level.
	floodCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	const flooders = 8
	for i := range flooders {
		cl, err := userClient(c, fmt.Sprintf("bench-flooder-%d", i), floodGroup)
		if err != nil {
			stop()
			return err
		}
		wg.Go(func() {
			for floodCtx.Err() == nil {
				_, _, _ = get(floodCtx, cl, c.APIServerURL, "/api/v1/namespaces/load/pods", url.Values{"resourceVersion": {"0"}})
			}
		})
	}
	time.Sleep(2 * time.Second)
	for i := range rows {
		r := &rows[i]
		var q url.Values
		for _, f := range forms("watchprobe-freshness-check-lists-nothing") {
			if f.name == r.form {
				q = withRV(f.query, r.rv)
			}
		}
		q.Set("timeout", "5s") // the checks' default: a queue wait of at most 1.25 s
		var ds []time.Duration
		for range min(samples, 20) {
			d, code, err := get(ctx, inBusy, c.APIServerURL, path, q)
			r.satSamples++
			switch {
			case err != nil || code == http.StatusGatewayTimeout:
				// The apiserver ends a LIST still running at its timeout,
				// often by resetting the stream.
				r.timedOut++
				continue
			case code == http.StatusTooManyRequests:
				r.refused++
				continue
			}
			ds = append(ds, d)
		}
		if len(ds) > 0 {
			r.saturated, r.saturated99 = quantile(ds, 0.5), quantile(ds, 0.99)
		}
	}
	stop()
	wg.Wait()

	fmt.Printf("\nSeats and waits of each form of a check's LIST of pods (namespace fresh, no pods there; %d in another namespace), %d requests each: "+
		"seats as priority and fairness estimates them (apiserver_flowcontrol_work_estimated_seats); p50 idle and with %s on every etcd answer on pods' own etcd link; "+
		"and p50 / p99 of those answered of %d in a level of %v seats that %d flows listing the %d pods without pause saturate, and how many were refused (429) or timed out, with the checks' 5 s timeout. The prober's own level had %v seats.\n\n",
		objects, samples, delay, min(samples, 20), busySeats, flooders, objects, quietSeats)
	fmt.Printf("| form | resourceVersion | seats | p50 idle | p50, %s on pods' etcd link | p50 / p99 saturated | refused / timed out saturated |\n|---|---|---|---|---|---|---|\n", delay)
	for _, r := range rows {
		rv := "none (consistent)"
		if r.rv != "" {
			rv = r.rv
		}
		sat := "-"
		if r.saturated > 0 {
			sat = fmt.Sprintf("%s / %s", r.saturated.Round(time.Millisecond), r.saturated99.Round(time.Millisecond))
		}
		fmt.Printf("| %s | %s | %.1f | %s | %s | %s | %d / %d of %d |\n", r.form, rv, r.seats,
			secs(r.idle), secs(r.delayed), sat, r.refused, r.timedOut, r.satSamples)
	}
	return nil
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond).String()
}

// userClient is an HTTP client for user in group, with a transport of its
// own.
func userClient(c *localcluster.Cluster, user, group string) (*http.Client, error) {
	rc, err := c.ClientCertConfig(user, group)
	if err != nil {
		return nil, err
	}
	rc.Proxy = http.ProxyFromEnvironment
	return rest.HTTPClientFor(rc)
}

// defaultsCost runs rounds of a checker at the default settings as a user
// of a priority level of its own, through the load balancer alone and then
// pinned to the one apiserver too, and prints what one round sends:
// requests, seats, and seat-seconds; per second at the default every.
// Discovery (every 10 rounds) is left out: the first round, not counted,
// makes it.
func defaultsCost(ctx context.Context, c *localcluster.Cluster) error {
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	const group = "bench-defaults"
	if err := readers(ctx, client, group); err != nil {
		return err
	}
	l := level{"bench-defaults", group, 30}
	if err := l.create(ctx, client); err != nil {
		return err
	}
	if _, err := waitLevel(ctx, admin, l.name); err != nil {
		return err
	}
	rc, err := c.ClientCertConfig("bench-defaults", group)
	if err != nil {
		return err
	}
	defaults := config.DefaultFreshnessConfig()
	every := time.Duration(defaults.Every)
	var lines []string
	for _, pinned := range []bool{false, true} {
		opts := freshness.Options{Probe: "bench", Namespace: "fresh", Config: defaults, LoadBalanced: rc,
			MarkerKind: config.KindConfigMap, MarkerSelector: "watchprobe.io/probe=bench", LostAfter: time.Minute, Retain: time.Minute,
			Metrics: metrics.NewProbe(prometheus.NewRegistry()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now}
		what := "the load balancer alone (`apiservers` unset)"
		if pinned {
			what = "the load balancer and one pinned apiserver"
			opts.Pinned = func() []freshness.Target {
				return []freshness.Target{{Name: strings.TrimPrefix(c.APIServerURL, "https://"), Config: rc}}
			}
		}
		checker, err := freshness.New(opts)
		if err != nil {
			return err
		}
		checker.Round(ctx)
		before, err := statsOf(ctx, admin, l.name)
		if err != nil {
			return err
		}
		const rounds = 5
		for range rounds {
			checker.Round(ctx)
		}
		checker.Close()
		after, err := statsOf(ctx, admin, l.name)
		if err != nil {
			return err
		}
		d := after.minus(before)
		perRound := d.requests / rounds
		lines = append(lines, fmt.Sprintf("| %s | %.0f | %.2f | %.1f | %.3f | %.5f |", what, perRound, d.seats/d.requests, d.seats/rounds,
			perRound/every.Seconds(), d.executing/rounds/every.Seconds()))
	}
	fmt.Printf("\nThe checks at their defaults (`freshness: {}`: 4 resources, reads on, every %s), per round, counted by the apiserver in a priority level of their own "+
		"(apiserver_flowcontrol_work_estimated_seats, request_execution_seconds); seat-seconds per second is the mean number of the level's seats they hold:\n\n", every)
	fmt.Printf("| through | requests per round | seats per request | seats per round | requests/s | seat-seconds per second |\n|---|---|---|---|---|---|\n%s\n", strings.Join(lines, "\n"))
	return nil
}
