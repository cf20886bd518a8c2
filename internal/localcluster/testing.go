package localcluster

import (
	"context"
	"testing"
)

// StartForTest starts a cluster for t and stops it when t ends. It fails the
// test, with the log tails, if the cluster cannot start: a missing control
// plane is a broken test environment, never a reason to skip.
func StartForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the local control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the local control plane: %v", err)
		}
	})
	return c
}
