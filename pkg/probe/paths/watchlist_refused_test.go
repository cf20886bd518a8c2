package paths

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A WatchList refused as a request form (1.31's and 1.33's default, as
// kube-apiserver 1.31.14 answers it) is told from every other failure of a
// watch request, which stays a failure.
func TestWatchListRefused(t *testing.T) {
	status := func(code int32, msg string) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg}}
	}
	gateOff := `ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled`
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the gate off", status(http.StatusUnprocessableEntity, gateOff), true},
		{"wrapped", fmt.Errorf("watching: %w", status(http.StatusUnprocessableEntity, gateOff)), true},
		{"resourceVersionMatch refused", status(http.StatusBadRequest, "resourceVersionMatch is forbidden for watch"), true},
		{"another invalid option", status(http.StatusUnprocessableEntity, "labelSelector: Invalid value"), false},
		{"forbidden", status(http.StatusForbidden, "configmaps is forbidden: User cannot watch resource"), false},
		{"server error naming the option", status(http.StatusInternalServerError, "sendInitialEvents: etcd down"), false},
		{"no status", errors.New("sendInitialEvents is forbidden"), false},
	} {
		if got := WatchListRefused(tc.err); got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
}
