package probe

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// path is one way of receiving marker events from the apiserver.
type path interface {
	// run receives events until ctx ends, calling its observe function for
	// each marker event with the instant it arrived.
	run(ctx context.Context)
	// synced reports whether the path has received its initial state and is
	// now waiting for new events.
	synced() bool
}

// observeFunc receives one marker event (added, modified or deleted).
type observeFunc func(event string, obj metav1.Object, arrival time.Time)
