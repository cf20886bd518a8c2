package judge

import (
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

var (
	configmaps = schema.GroupResource{Resource: "configmaps"}
	leases     = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
)

// The answers below are built as k8s.io/apiserver v0.37.2 and
// k8s.io/kubernetes v1.37.2 build them (admission.NewForbidden is
// apierrors.NewForbidden of the request's resource and name); the tests in
// pkg/probe get the real ones from a real kube-apiserver.

// validatingPolicyDenial is a ValidatingAdmissionPolicy's denial with
// reason (pkg/admission/plugin/policy/validating/dispatcher.go).
func validatingPolicyDenial(reason metav1.StatusReason, code int32) error {
	msg := "ValidatingAdmissionPolicy 'deny-markers' with binding 'deny-markers-here' denied request: markers are not welcome"
	err := apierrors.NewForbidden(configmaps, "m-1", errors.New(msg))
	err.ErrStatus.Reason, err.ErrStatus.Code = reason, code
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Message: msg})
	return err
}

// webhookDenial is a webhook's denial with the code it chose
// (pkg/admission/plugin/webhook/errors/statuserror.go).
func webhookDenial(code int32) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code,
		Message: `admission webhook "policy.example.com" denied the request: configmaps must carry a team label`}}
}

func forbidden(msg string) error {
	return apierrors.NewForbidden(configmaps, "m-1", errors.New(msg))
}

// terminating is NamespaceLifecycle's 403 for a create in a namespace being
// deleted.
func terminating() error {
	err := forbidden("unable to create new content in namespace probe because it is being terminated")
	err.(*apierrors.StatusError).ErrStatus.Details.Causes = append(err.(*apierrors.StatusError).ErrStatus.Details.Causes,
		metav1.StatusCause{Type: "NamespaceTerminating", Message: "namespace probe is being terminated", Field: "metadata.namespace"})
	return err
}

// Every answer a marker write can get is classified by its cause, a refusal
// of the probe's own environment or the control plane's failure (""), and
// an admission denial names what denied it.
func TestWriteRefusal(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want Refusal
	}{
		{"ValidatingAdmissionPolicy, default reason (422)", validatingPolicyDenial(metav1.StatusReasonInvalid, 422),
			Refusal{metrics.RefusedAdmission, "ValidatingAdmissionPolicy 'deny-markers' with binding 'deny-markers-here'"}},
		{"ValidatingAdmissionPolicy, reason Forbidden (403)", validatingPolicyDenial(metav1.StatusReasonForbidden, 403),
			Refusal{metrics.RefusedAdmission, "ValidatingAdmissionPolicy 'deny-markers' with binding 'deny-markers-here'"}},
		{"ValidatingAdmissionPolicy, reason Unauthorized (401)", validatingPolicyDenial(metav1.StatusReasonUnauthorized, 401),
			Refusal{metrics.RefusedAdmission, "ValidatingAdmissionPolicy 'deny-markers' with binding 'deny-markers-here'"}},
		{"webhook, 422", webhookDenial(422), Refusal{metrics.RefusedAdmission, `admission webhook "policy.example.com"`}},
		{"ValidatingAdmissionPolicy without a binding", forbidden("ValidatingAdmissionPolicy 'p' denied request: no"),
			Refusal{metrics.RefusedAdmission, "ValidatingAdmissionPolicy 'p'"}},
		{"webhook, 403", webhookDenial(403), Refusal{metrics.RefusedAdmission, `admission webhook "policy.example.com"`}},
		{"webhook, 400 (it chose)", webhookDenial(400), Refusal{metrics.RefusedAdmission, `admission webhook "policy.example.com"`}},
		{"webhook without explanation", &apierrors.StatusError{ErrStatus: metav1.Status{Code: 400,
			Message: `admission webhook "w.example.com" denied the request without explanation`}}, Refusal{metrics.RefusedAdmission, `admission webhook "w.example.com"`}},
		{"MutatingAdmissionPolicy", forbidden("policy 'mutate' with binding 'mutate-here' denied request: failed to configure binding: no params found"),
			Refusal{metrics.RefusedAdmission, "policy 'mutate' with binding 'mutate-here'"}},
		{"quota exceeded", forbidden("exceeded quota: markers, requested: count/configmaps=1, used: count/configmaps=1, limited: count/configmaps=1"),
			Refusal{Cause: metrics.RefusedQuota}},
		{"RBAC", apierrors.NewForbidden(configmaps, "", errors.New(`User "probe" cannot create resource "configmaps" in API group "" in the namespace "probe"`)),
			Refusal{Cause: metrics.RefusedForbidden}},
		{"namespace terminating", terminating(), Refusal{Cause: metrics.RefusedNamespaceMissing}},
		{"namespace missing", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "probe"), Refusal{Cause: metrics.RefusedNamespaceMissing}},
		{"marker missing", apierrors.NewNotFound(configmaps, "m-1"), Refusal{Cause: metrics.RefusedNotFound}},
		{"lease marker missing", apierrors.NewNotFound(leases, "m-1"), Refusal{Cause: metrics.RefusedNotFound}},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "m-1", field.ErrorList{field.Invalid(field.NewPath("metadata", "labels"), "x", "bad")}),
			Refusal{Cause: metrics.RefusedInvalid}},
		{"wrapped", fmt.Errorf("creating the marker: %w", apierrors.NewNotFound(configmaps, "m-1")), Refusal{Cause: metrics.RefusedNotFound}},

		// The control plane's own failures.
		{"webhook, 500 (failing)", webhookDenial(500), Refusal{}},
		{"webhook, 503 (failing)", webhookDenial(503), Refusal{}},
		{"webhook, 429 (overloaded)", webhookDenial(429), Refusal{}},
		{"quota usage not yet computed (the quota controller)", forbidden("status unknown for quota: markers, resources: count/configmaps"), Refusal{}},
		{"credentials rejected (401)", apierrors.NewUnauthorized("Unauthorized"), Refusal{}},
		{"admission caches not synced (a starting apiserver)", forbidden("not yet ready to handle request"), Refusal{}},
		{"webhook not reachable", apierrors.NewInternalError(errors.New(`failed calling webhook "policy.example.com": Post "https://webhook:443": dial tcp: connection refused`)), Refusal{}},
		{"conflict", apierrors.NewConflict(configmaps, "m-1", errors.New("the object has been modified")), Refusal{}},
		{"already exists", apierrors.NewAlreadyExists(configmaps, "m-1"), Refusal{}},
		{"bad request", apierrors.NewBadRequest("the namespace of the provided object does not match"), Refusal{}},
		{"throttled", apierrors.NewTooManyRequests("too many requests", 1), Refusal{}},
		{"internal", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), Refusal{}},
		{"unavailable", apierrors.NewServiceUnavailable("apiserver is shutting down"), Refusal{}},
		{"timeout", apierrors.NewTimeoutError("request did not complete within 60s", 0), Refusal{}},
		{"no answer", &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: syscall.ECONNREFUSED}, Refusal{}},
		{"no answer with the words of a denial", errors.New(`admission webhook "x" denied the request`), Refusal{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := WriteRefusal(c.err); got != c.want {
				t.Errorf("WriteRefusal(%v) = %+v, want %+v", c.err, got, c.want)
			}
		})
	}
}

// A path's list or watch refused by the apiserver (403, 404) is the
// exporter's configuration; anything else is the control plane's, a 401
// included.
func TestPathRefusal(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{apierrors.NewForbidden(configmaps, "", errors.New(`User "probe" cannot list resource "configmaps"`)), metrics.PathForbidden},
		{apierrors.NewUnauthorized("Unauthorized"), ""},
		{apierrors.NewNotFound(leases, ""), metrics.PathNotFound},
		{apierrors.NewServiceUnavailable("no"), ""},
		{apierrors.NewTooManyRequests("slow down", 1), ""},
		{apierrors.NewResourceExpired("too old resource version"), ""},
		{&url.Error{Op: "Get", URL: "https://127.0.0.1:6443", Err: syscall.ECONNRESET}, ""},
	} {
		if got := PathRefusal(c.err); got != c.want {
			t.Errorf("PathRefusal(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// Every cause and reason has its fix.
func TestRefusalFixes(t *testing.T) {
	for _, c := range metrics.RefusalCauses {
		if RefusalFix(c) == "" {
			t.Errorf("cause %s has no fix", c)
		}
	}
	for _, r := range metrics.PathRefusals {
		if PathRefusalFix(r) == "" {
			t.Errorf("path refusal %s has no fix", r)
		}
	}
}
