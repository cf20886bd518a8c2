package charts

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// markerNamespaceValues set every knob of the namespaces the chart owns:
// Pod Security labels, Argo CD's keep, an annotation of the user's.
const markerNamespaceValues = `
probes:
  - {name: a, namespace: markers}
  - {name: b, namespace: monitoring}
markerNamespaces:
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
    team: platform
  argocd: {keep: true}
  annotations: {owner: platform}
`

// The labels and annotations asked for land on the namespace the chart
// owns, beside the chart's own; Argo CD's sync options only when asked,
// and independent of Helm's keep.
func TestRenderMarkerNamespaceLabelsAndArgoCD(t *testing.T) {
	ns := one(t, renderValues(t, markerNamespaceValues), "Namespace")
	if ns.GetName() != "markers" {
		t.Fatalf("namespace %s rendered, want markers", ns.GetName())
	}
	labels := ns.GetLabels()
	for k, v := range map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
		"team":                   "platform",
		"watchprobe.io/markers":  "true",
		"app.kubernetes.io/name": "watchprobe",
	} {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, labels[k], v, labels)
		}
	}
	wantAnnotations := map[string]string{
		"helm.sh/resource-policy":         "keep",
		"argocd.argoproj.io/sync-options": "Delete=false,Prune=false",
		"owner":                           "platform",
	}
	if !maps.Equal(ns.GetAnnotations(), wantAnnotations) {
		t.Errorf("annotations %v, want %v", ns.GetAnnotations(), wantAnnotations)
	}

	for _, tc := range []struct {
		values string
		want   map[string]string
	}{
		{"probes: [{name: a, namespace: markers}]", map[string]string{"helm.sh/resource-policy": "keep"}},
		{"probes: [{name: a, namespace: markers}]\nmarkerNamespaces: {keep: false, argocd: {keep: true}}",
			map[string]string{"argocd.argoproj.io/sync-options": "Delete=false,Prune=false"}},
		{"probes: [{name: a, namespace: markers}]\nmarkerNamespaces: {keep: false}", nil},
	} {
		ns := one(t, renderValues(t, tc.values), "Namespace")
		if got := ns.GetAnnotations(); !maps.Equal(got, tc.want) {
			t.Errorf("%s: annotations %v, want %v", tc.values, got, tc.want)
		}
		if _, ok := ns.GetLabels()["pod-security.kubernetes.io/enforce"]; ok {
			t.Errorf("%s: a Pod Security label nobody asked for: %v", tc.values, ns.GetLabels())
		}
	}
}

// Labels the apiserver or Pod Security admission would refuse, and keys
// the chart sets itself, fail the render naming the value.
func TestSchemaRejectsMarkerNamespaceLabels(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{`markerNamespaces.labels.pod-security\.kubernetes\.io/enforce=strict`},
			"at '/markerNamespaces/labels/pod-security.kubernetes.io~1enforce': value must be one of 'privileged', 'baseline', 'restricted'"},
		{[]string{`markerNamespaces.labels.pod-security\.kubernetes\.io/warn-version=1.37`},
			"at '/markerNamespaces/labels/pod-security.kubernetes.io~1warn-version'"},
		{[]string{`markerNamespaces.labels.team=platform team`}, "at '/markerNamespaces/labels/team'"},
		{[]string{`markerNamespaces.labels.Bad_Prefix/x=y`}, "invalid propertyName 'Bad_Prefix/x'"},
		{[]string{"markerNamespaces.argocd.keep=yes"}, "at '/markerNamespaces/argocd/keep'"},
		{[]string{"markerNamespaces.argocd.prune=false"}, "at '/markerNamespaces/argocd': additional properties 'prune' not allowed"},
		{[]string{`markerNamespaces.labels.watchprobe\.io/markers=no`},
			"markerNamespaces.labels: the chart sets the label watchprobe.io/markers on its namespaces itself"},
		{[]string{"commonLabels.team=a", "markerNamespaces.labels.team=b"},
			"markerNamespaces.labels: the chart sets the label team on its namespaces itself"},
		{[]string{`markerNamespaces.annotations.helm\.sh/resource-policy=keep`},
			"markerNamespaces.annotations: the chart sets the annotation helm.sh/resource-policy itself"},
		{[]string{"markerNamespaces.argocd.keep=true", `markerNamespaces.annotations.argocd\.argoproj\.io/sync-options=Delete=false`},
			"markerNamespaces.annotations: the chart sets the annotation argocd.argoproj.io/sync-options itself"},
	} {
		wantRenderError(t, tc.set, tc.want, "--namespace", "monitoring")
	}
}

// What a GitOps tool applies is what helm install leaves in the cluster:
// the chart installed into the real apiserver, its marker namespace as the
// apiserver stores it carries exactly the labels and annotations that helm
// template renders without a cluster, plus only what the apiserver and
// Helm add themselves. The Pod Security label is in force: the namespace
// refuses a pod that sets none of what restricted requires.
func TestHelmTemplateNamespacesMatchInstall(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(markerNamespaceValues), 0o600); err != nil {
		t.Fatal(err)
	}
	// No kubeconfig: nothing to look up, as Argo CD renders.
	rendered, err := helm(t, "template", "wp", chartDir, "--namespace", "monitoring", "-f", values)
	if err != nil {
		t.Fatal(err)
	}
	want := one(t, decodeObjects(t, rendered), "Namespace")
	if _, err := helm(t, "install", "wp", chartDir, "--create-namespace", "--kubeconfig", kubeconfig, "--namespace", "monitoring", "-f", values); err != nil {
		t.Fatalf("installing: %v", err)
	}
	got, err := admin.CoreV1().Namespaces().Get(ctx, want.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart did not create its marker namespace %s: %v", want.GetName(), err)
	}
	// kubernetes.io/metadata.name is the apiserver's; the meta.helm.sh
	// annotations are Helm's record of the owning release, which Argo CD
	// and Flux's helm-controller replace with their own tracking.
	compareMeta(t, "label", want.GetLabels(), got.Labels, "kubernetes.io/metadata.name")
	compareMeta(t, "annotation", want.GetAnnotations(), got.Annotations, "meta.helm.sh/release-name", "meta.helm.sh/release-namespace")

	unrestricted := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unrestricted"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
	_, err = admin.CoreV1().Pods(want.GetName()).Create(ctx, unrestricted, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted:latest"`) {
		t.Errorf("a pod without a restricted security context in the marker namespace: %v, want refused by PodSecurity restricted:latest", err)
	}
}

// compareMeta reports keys whose values differ between rendered and live,
// and live keys that were not rendered except the ones named as added by
// the apiserver or Helm.
func compareMeta(t *testing.T, what string, rendered, live map[string]string, added ...string) {
	t.Helper()
	for k, v := range rendered {
		if lv, ok := live[k]; !ok || lv != v {
			t.Errorf("%s %s: rendered %q, installed %q (present %v)", what, k, v, lv, ok)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(live)) {
		if _, ok := rendered[k]; !ok && !slices.Contains(added, k) {
			t.Errorf("%s %s=%q installed but not rendered by helm template", what, k, live[k])
		}
	}
	for _, k := range added {
		if _, ok := live[k]; !ok {
			t.Errorf("%s %s: expected from the apiserver or Helm, absent (%v): the test's list is stale", what, k, live)
		}
	}
}
