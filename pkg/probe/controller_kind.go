package probe

import (
	"context"
	"hash/fnv"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// markerPodSelector is the selector, and the pod template's labels, of the
// marker object name: its own, so that it never selects anyone's pods nor
// another marker's. A hash of the name, as a label value holds at most 63
// characters and the name (probe, replica, run) can be longer.
func markerPodSelector(name string) map[string]string {
	h := fnv.New64a()
	h.Write([]byte(name))
	return map[string]string{labelControllerMarker: strconv.FormatUint(h.Sum64(), 36)}
}

// controllerKind is a controller's marker object: its API and the spec field
// a change sets.
type controllerKind struct {
	api kube.MarkerAPI
	get func(ctx context.Context, name string) (metav1.Object, error)
	// make builds the object with the field at value.
	make func(om metav1.ObjectMeta, value int32) metav1.Object
	// set sets the field to value in a copy of obj.
	set func(obj metav1.Object, value int32) metav1.Object
	// observed reads status.observedGeneration.
	observed func(obj metav1.Object) int64
	// values the field alternates between.
	values [2]int32
}

// neverRun is a pod template that runs nothing even if something scaled it
// up: an image from a domain that cannot resolve (.invalid) and a node
// selector no node has, so no pod is scheduled, let alone pulled. The
// security settings pass the restricted Pod Security level, so a namespace
// that warns on workloads does not warn on every change.
func neverRun(selector map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: selector},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "never-runs",
				Image: "watchprobe.invalid/never-runs:never",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					RunAsNonRoot:             ptr.To(true),
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
			NodeSelector:                 map[string]string{"watchprobe.io/never-scheduled": "true"},
			AutomountServiceAccountToken: ptr.To(false),
		},
	}
}

func newControllerKind(client *kube.Client, controller, namespace string) controllerKind {
	_, resource := ControllerResource(controller)
	if controller == metrics.ControllerReplicaSet {
		// A change sets minReadySeconds: it bumps the generation, and with
		// no replicas it has nothing else to do.
		return appsKind(client.ReplicaSets(namespace), resource,
			func(om metav1.ObjectMeta) *appsv1.ReplicaSet { return &appsv1.ReplicaSet{ObjectMeta: om} },
			func(rs *appsv1.ReplicaSet, sel map[string]string) {
				rs.Spec = appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: neverRun(sel)}
			},
			func(rs *appsv1.ReplicaSet, value int32) { rs.Spec.MinReadySeconds = value },
			func(rs *appsv1.ReplicaSet) int64 { return rs.Status.ObservedGeneration },
			[2]int32{0, 1})
	}
	// A change sets revisionHistoryLimit, which no rollout follows.
	return appsKind(client.Deployments(namespace), resource,
		func(om metav1.ObjectMeta) *appsv1.Deployment { return &appsv1.Deployment{ObjectMeta: om} },
		func(d *appsv1.Deployment, sel map[string]string) {
			d.Spec = appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: neverRun(sel)}
		},
		func(d *appsv1.Deployment, value int32) { d.Spec.RevisionHistoryLimit = ptr.To(value) },
		func(d *appsv1.Deployment) int64 { return d.Status.ObservedGeneration },
		[2]int32{1, 2})
}

// appsClient is a generated typed client of an apps kind.
type appsClient[T kube.Object, L runtime.Object] interface {
	kube.TypedClient[T, L]
	Get(context.Context, string, metav1.GetOptions) (T, error)
}

// appsKind is a controller marker kind from what tells the apps kinds
// apart: the client and resource, the empty object, its spec with no replicas and a pod template
// that never runs, the field a change sets, and its observedGeneration.
func appsKind[T kube.Object, L runtime.Object](c appsClient[T, L], resource string, empty func(metav1.ObjectMeta) T, spec func(T, map[string]string),
	field func(T, int32), observed func(T) int64, values [2]int32) controllerKind {
	return controllerKind{
		api: kube.TypedMarkers[T, L]{Client: c, Make: empty, Resource: resource},
		get: func(ctx context.Context, name string) (metav1.Object, error) {
			return c.Get(ctx, name, metav1.GetOptions{})
		},
		make: func(om metav1.ObjectMeta, value int32) metav1.Object {
			obj := empty(om)
			spec(obj, markerPodSelector(om.Name))
			field(obj, value)
			return obj
		},
		set: func(obj metav1.Object, value int32) metav1.Object {
			c := obj.(T).DeepCopyObject().(T)
			field(c, value)
			return c
		},
		observed: func(obj metav1.Object) int64 { return observed(obj.(T)) },
		values:   values,
	}
}
