package probe

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// MarkerVerbs are what a probe does with its markers, in their namespace:
// the verbs its Role must grant, and no other (the chart's Role and `check`'s
// preflight read them).
var MarkerVerbs = []string{"list", "watch", "create", "patch", "delete"}

// DiscoveryVerbs are what `apiservers: discover` does with the EndpointSlices
// of the kubernetes Service, in namespace default.
var DiscoveryVerbs = []string{"list", "watch"}

// MarkerResource is the API group and resource of a marker kind, a
// controller's marker kind (ControllerKind) too.
func MarkerResource(kind string) (group, resource string) {
	switch kind {
	case config.KindLease:
		return coordinationv1.GroupName, "leases"
	case ControllerKind(metrics.ControllerDeployment):
		return ControllerResource(metrics.ControllerDeployment)
	case ControllerKind(metrics.ControllerReplicaSet):
		return ControllerResource(metrics.ControllerReplicaSet)
	}
	return "", "configmaps"
}

// Labels and annotations on marker objects. Probe and replica labels keep
// probes and exporter replicas from ever matching each other's markers, and
// let each watch select only its own.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "watchprobe"
	LabelProbe     = "watchprobe.io/probe"
	LabelReplica   = "watchprobe.io/replica"
	// AnnotationSeq carries the write's sequence number, which the
	// judgement matches events by.
	AnnotationSeq     = judge.AnnotationSeq
	markerNamePattern = "watchprobe-%s-%s-%s-%d"
)

// markerNamePrefix starts the name of every marker of one run of a
// probe's replica: watchprobe-<probe>-<replica>-<run>-.
func markerNamePrefix(probe, replica, run string) string {
	return strings.TrimSuffix(fmt.Sprintf(markerNamePattern, probe, replica, run, 0), "0")
}

// markerSelector selects one probe's markers, of one replica if given.
func markerSelector(probe, replica string) string {
	set := labels.Set{LabelManagedBy: ManagedByValue, LabelProbe: probe}
	if replica != "" {
		set[LabelReplica] = replica
	}
	return labels.SelectorFromSet(set).String()
}

// LeftMarker is a marker a replica's probes wrote and have not deleted:
// its name and, when other clients' finalizers hold its deletion, those
// finalizers and the clients that set them.
type LeftMarker struct {
	Name                 string
	Finalizers, Managers []string
}

// MarkersLeft lists the markers of kind in namespace that replica's probes
// wrote and have not deleted, or whose deletion other clients'
// finalizers hold.
func MarkersLeft(ctx context.Context, client *kube.Client, kind, namespace, replica string) ([]LeftMarker, error) {
	api, err := kube.NewMarkerAPI(client, kind, namespace)
	if err != nil {
		return nil, err
	}
	objs, _, err := kube.ListObjects(ctx, api.List, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelReplica: replica}).String()})
	left := make([]LeftMarker, 0, len(objs))
	for _, o := range objs {
		m := LeftMarker{Name: o.GetName()}
		if deleting(o) {
			m.Finalizers, m.Managers = o.GetFinalizers(), judge.FinalizerManagers(o)
		}
		left = append(left, m)
	}
	return left, err
}

// listNames lists the names of the objects list returns with every label
// of set.
func listNames(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), set labels.Set) ([]string, error) {
	objs, _, err := kube.ListObjects(ctx, list, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(set).String()})
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	return names, err
}

// lastRun is the latest run ID handed out, in nanoseconds.
var lastRun atomic.Int64

// newRunID tells this run's markers from an earlier run's, of this process
// or of another with the same replica name (a restarted container keeps
// its pod's name): the start's instant in nanoseconds, made unique within
// the process, so that a probe a reload restarts within the same second
// never takes an earlier run's markers for its own.
func newRunID() string {
	now := time.Now().UnixNano()
	for {
		last := lastRun.Load()
		next := max(now, last+1)
		if lastRun.CompareAndSwap(last, next) {
			return strconv.FormatInt(next, 36)
		}
	}
}

// MarkerSelector selects this probe's markers (those of its replica).
func (p *Probe) MarkerSelector() string { return markerSelector(p.cfg.Name, p.opts.Replica) }
