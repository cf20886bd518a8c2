package charts

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// renderSet renders the chart with --set-json values over the defaults.
func renderSet(t *testing.T, setJSON ...string) (string, error) {
	t.Helper()
	args := []string{"template", "wp", chartDir, "--namespace", "monitoring"}
	for _, v := range setJSON {
		args = append(args, "--set-json", v)
	}
	return helm(t, args...)
}

// podSpec is the Deployment's pod spec rendered with setJSON.
func podSpec(t *testing.T, setJSON ...string) map[string]any {
	t.Helper()
	out, err := renderSet(t, setJSON...)
	if err != nil {
		t.Fatal(err)
	}
	return field(t, one(t, decodeObjects(t, out), "Deployment"), "spec", "template", "spec").(map[string]any)
}

// No priority class unless set: the cluster's default, as before; set, the
// pods carry it.
func TestKnobPriorityClassName(t *testing.T) {
	if pc, ok := podSpec(t)["priorityClassName"]; ok {
		t.Errorf("priorityClassName %v by default, want none", pc)
	}
	if pc := podSpec(t, `priorityClassName="monitoring"`)["priorityClassName"]; pc != "monitoring" {
		t.Errorf("priorityClassName %v, want monitoring", pc)
	}
}

// imagePullSecrets take names or references, global ones first; none are
// rendered when none are given; a reference without a name is refused.
func TestKnobImagePullSecrets(t *testing.T) {
	if s, ok := podSpec(t)["imagePullSecrets"]; ok {
		t.Errorf("imagePullSecrets %v by default, want none", s)
	}
	got := podSpec(t, `imagePullSecrets=["by-name", {"name": "by-ref"}]`, `global.imagePullSecrets=["global", {"name": "global-ref"}]`)["imagePullSecrets"]
	want := []any{map[string]any{"name": "global"}, map[string]any{"name": "global-ref"}, map[string]any{"name": "by-name"}, map[string]any{"name": "by-ref"}}
	if !equalJSON(got, want) {
		t.Errorf("imagePullSecrets %v, want %v", got, want)
	}
	for _, bad := range []string{`imagePullSecrets=[{"nam": "x"}]`, `imagePullSecrets=[""]`, `imagePullSecrets=[3]`} {
		if _, err := renderSet(t, bad); err == nil || !strings.Contains(err.Error(), "/imagePullSecrets/0") {
			t.Errorf("%s: %v, want the schema to refuse /imagePullSecrets/0", bad, err)
		}
	}
}

// serviceAccount.automountServiceAccountToken false: the ServiceAccount
// says so, and the exporter still authenticates with its token, which the
// pod mounts explicitly into the exporter's container only, where
// in-cluster configuration reads it; with automountServiceAccountToken
// false too (a kubeconfig's credentials), no token at all.
func TestKnobServiceAccountToken(t *testing.T) {
	const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	for _, tc := range []struct {
		name      string
		set       []string
		saField   any // the ServiceAccount's automountServiceAccountToken, nil: unset
		automount bool
		projected bool
	}{
		{"default", nil, nil, true, false},
		{"service account off", []string{`serviceAccount.automountServiceAccountToken=false`, `configReloader.enabled=true`}, false, false, true},
		{"no token", []string{`serviceAccount.automountServiceAccountToken=false`, `automountServiceAccountToken=false`}, false, false, false},
		{"pod off only", []string{`automountServiceAccountToken=false`}, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderSet(t, tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeObjects(t, out)
			if got := one(t, objs, "ServiceAccount").Object["automountServiceAccountToken"]; got != tc.saField {
				t.Errorf("ServiceAccount automountServiceAccountToken %v, want %v", got, tc.saField)
			}
			pod := field(t, one(t, objs, "Deployment"), "spec", "template", "spec").(map[string]any)
			if pod["automountServiceAccountToken"] != tc.automount {
				t.Errorf("pod automountServiceAccountToken %v, want %v", pod["automountServiceAccountToken"], tc.automount)
			}
			var volume map[string]any
			for _, v := range pod["volumes"].([]any) {
				if v := v.(map[string]any); v["name"] == "serviceaccount-token" {
					volume = v
				}
			}
			containers := pod["containers"].([]any)
			if !tc.projected {
				if volume != nil || mountPath(containers[0].(map[string]any), "serviceaccount-token") != nil {
					t.Errorf("a projected token volume %v without need", volume)
				}
				return
			}
			var sources []string
			for _, s := range field(t, &unstructured.Unstructured{Object: volume}, "projected", "sources").([]any) {
				for k := range s.(map[string]any) {
					sources = append(sources, k)
				}
			}
			if strings.Join(sources, ",") != "serviceAccountToken,configMap,downwardAPI" {
				t.Errorf("projected sources %v, want the token, the CA and the namespace", sources)
			}
			if got := mountPath(containers[0].(map[string]any), "serviceaccount-token"); got != tokenDir {
				t.Errorf("exporter mounts the token at %v, want %s", got, tokenDir)
			}
			for _, c := range containers[1:] {
				if got := mountPath(c.(map[string]any), "serviceaccount-token"); got != nil {
					t.Errorf("container %v mounts the token too", c.(map[string]any)["name"])
				}
			}
		})
	}
}
