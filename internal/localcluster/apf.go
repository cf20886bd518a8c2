package localcluster

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/watchprobe/watchprobe/internal/exportertest"
)

// TinyPriorityLevel makes a priority level name of 1 share of the
// apiserver's concurrency, nothing lent or borrowed, so that a few requests
// saturate it, and a FlowSchema of the same name that sends group's
// requests there, one flow per user. Both are deleted when t ends.
func TinyPriorityLevel(t testing.TB, client kubernetes.Interface, name, group string) {
	t.Helper()
	ctx := context.Background()
	fc := client.FlowcontrolV1()
	if _, err := fc.PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
			NominalConcurrencyShares: ptr.To[int32](1), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
			LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{
				Queues: 16, HandSize: 4, QueueLengthLimit: 50}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: name},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: group}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					Namespaces: []string{"*"}, ClusterScope: true}},
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fc.FlowSchemas().Delete(ctx, name, metav1.DeleteOptions{})
		_ = fc.PriorityLevelConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// Readers is a group of client-certificate users that may do Verbs on
// Resources (of the core API group) in Namespace.
type Readers struct {
	Group, Namespace string
	Resources, Verbs []string
}

// Config is a config for user, in r.Group and groups, after it has made
// r's Role and RoleBinding (named r.Group) in r.Namespace if they are not
// there yet.
func (r Readers) Config(t testing.TB, c *Cluster, user string, groups ...string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	rbac := kubernetes.NewForConfigOrDie(c.AdminConfig()).RbacV1()
	_, err := rbac.Roles(r.Namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: r.Group},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: r.Resources, Verbs: r.Verbs}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = rbac.RoleBindings(r.Namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: r.Group},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: r.Group}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Group},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rc, err := c.ClientCertConfig(user, append([]string{r.Group}, groups...)...)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// APIServerMetrics reads the apiserver's /metrics as admin, again after a
// failure (a connection lost on a stalled machine) for up to a minute.
func (c *Cluster) APIServerMetrics(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	var families map[string]*dto.MetricFamily
	var err error
	EventuallyShows(t, time.Minute, "the apiserver's metrics read", func() bool {
		var body []byte
		body, err = kubernetes.NewForConfigOrDie(c.AdminConfig()).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
		if err == nil {
			families, err = exportertest.Parse(string(body))
		}
		return err == nil
	}, func() string { return err.Error() })
	return families
}

// PriorityLevelMetric is the apiserver's metric name summed over priority
// level's series, and whether there was one.
func (c *Cluster) PriorityLevelMetric(t testing.TB, name, level string) (float64, bool) {
	t.Helper()
	return exportertest.Sum(c.APIServerMetrics(t), name, map[string]string{"priority_level": level})
}

// InPriorityLevel waits until client's GET of path is sent to priority
// level (a new FlowSchema takes effect a while after it is made), and
// returns the level's nominal seats.
func (c *Cluster) InPriorityLevel(t testing.TB, client *http.Client, path, level string) (seats float64) {
	t.Helper()
	fc := kubernetes.NewForConfigOrDie(c.AdminConfig()).FlowcontrolV1()
	Eventually(t, 30*time.Second, "the requests in priority level "+level, func() bool {
		plc, err := fc.PriorityLevelConfigurations().Get(context.Background(), level, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Get(c.APIServerURL + path)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		var found bool
		seats, found = c.PriorityLevelMetric(t, "apiserver_flowcontrol_nominal_limit_seats", level)
		return found && resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID) == string(plc.UID)
	})
	return seats
}

// Flood holds every seat of a priority level with GETs that hang (LISTs
// of a resource whose etcd link is stalled) until it ebbs.
type Flood struct {
	c       *Cluster
	client  *http.Client
	url     string
	level   string
	seats   float64
	flowing sync.WaitGroup
	ctx     context.Context
	release context.CancelFunc
}

// NewFlood is a flood of seats GETs of path by client (a user the level's
// FlowSchema sends there), none flowing yet. When t ends it ebbs.
func (c *Cluster) NewFlood(t testing.TB, client *http.Client, path, level string, seats float64) *Flood {
	f := &Flood{c: c, client: client, url: c.APIServerURL + path, level: level, seats: seats}
	f.ctx, f.release = context.WithCancel(context.Background())
	t.Cleanup(f.Ebb)
	return f
}

// Hold sends the GETs and returns once they hold every seat of the level.
func (f *Flood) Hold(t testing.TB) {
	t.Helper()
	for range int(f.seats) {
		req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, f.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.flowing.Go(func() {
			if resp, err := f.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	Eventually(t, 30*time.Second, "the flood holding every seat of "+f.level, func() bool {
		n, _ := f.c.PriorityLevelMetric(t, "apiserver_flowcontrol_current_executing_seats", f.level)
		return n == f.seats
	})
}

// Ebb lets the GETs go and waits until they have returned; the flood may
// be held again.
func (f *Flood) Ebb() {
	f.release()
	f.flowing.Wait()
	f.ctx, f.release = context.WithCancel(context.Background())
}

// Queue runs round with the flood held: once a request of round's waits
// in the level's queue, it is left there for wait (as a level saturated
// that long holds it), then the flood ebbs; Queue returns when round has.
func (f *Flood) Queue(t testing.TB, wait time.Duration, round func()) {
	t.Helper()
	f.Hold(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		round()
	}()
	Eventually(t, 30*time.Second, "a request in the queue of "+f.level, func() bool {
		n, _ := f.c.PriorityLevelMetric(t, "apiserver_flowcontrol_current_inqueue_requests", f.level)
		return n == 1
	})
	time.Sleep(wait)
	f.Ebb()
	<-done
}
