package localcluster

import (
	"context"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The cluster must survive a restart of each of its parts with its data, and
// leave no process behind when stopped.
func TestStartRestartStop(t *testing.T) {
	ctx := context.Background()
	c := StartForTest(t, Options{})
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "survivor", metav1.GetOptions{}); err == nil {
		t.Fatal("the apiserver answered while stopped")
	}
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Fatalf("data lost across restarts: %v", err)
	}

	etcdPid, apiPid := c.etcd.cmd.Process.Pid, c.apiserver.cmd.Process.Pid
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{etcdPid, apiPid} {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still alive after Stop", pid)
		}
	}
}

// A minted ServiceAccount token authenticates as that ServiceAccount, which
// RBAC denies until it is granted something.
func TestServiceAccountConfig(t *testing.T) {
	ctx := context.Background()
	c := StartForTest(t, Options{})
	cfg, err := c.ServiceAccountConfig(ctx, "team-a", "reader")
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	_, err = client.CoreV1().ConfigMaps("team-a").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("want Forbidden for an ungranted ServiceAccount, got %v", err)
	}
	if !strings.Contains(err.Error(), "system:serviceaccount:team-a:reader") {
		t.Errorf("the error does not name the ServiceAccount: %v", err)
	}
}

// A start that cannot succeed fails with the apiserver's own words.
func TestStartFailureCarriesLogTail(t *testing.T) {
	_, err := Start(context.Background(), Options{APIServerFlags: []string{"--no-such-flag"}})
	if err == nil {
		t.Fatal("started with an unknown apiserver flag")
	}
	if !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("the error lacks the apiserver's log tail: %v", err)
	}
}

// A version picks binaries under the bin directory without touching the
// default: the apiserver and its etcd from <minor>/, etcd alone from
// etcd-<minor>/.
func TestBinariesFor(t *testing.T) {
	t.Setenv("WATCHPROBE_KUBE_VERSION", "")
	t.Setenv("WATCHPROBE_ETCD_VERSION", "")
	for _, tc := range []struct {
		env  map[string]string
		opts Options
		want binaries
	}{
		{nil, Options{}, binaries{"/b/kube-apiserver", "/b/etcd"}},
		{nil, Options{KubeVersion: "1.34"}, binaries{"/b/1.34/kube-apiserver", "/b/1.34/etcd"}},
		{nil, Options{EtcdVersion: "3.6"}, binaries{"/b/kube-apiserver", "/b/etcd-3.6/etcd"}},
		{map[string]string{"WATCHPROBE_KUBE_VERSION": "1.35", "WATCHPROBE_ETCD_VERSION": "3.6"}, Options{}, binaries{"/b/1.35/kube-apiserver", "/b/etcd-3.6/etcd"}},
		{map[string]string{"WATCHPROBE_KUBE_VERSION": "1.35"}, Options{KubeVersion: "1.36"}, binaries{"/b/1.36/kube-apiserver", "/b/1.36/etcd"}},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		if got := binariesFor("/b", tc.opts); got != tc.want {
			t.Errorf("env %v, options %+v: %+v, want %+v", tc.env, tc.opts, got, tc.want)
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
}
