package judge

import (
	"errors"
	"net/http"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Refusal is why the apiserver refused a marker write: the probe's own
// namespace, permissions or policies, not a failure of the control plane.
type Refusal struct {
	// Cause is a metrics.Refused* value; empty when the failure is the
	// control plane's own (a 5xx, a 429, a timeout, no answer), or an
	// answer that names neither (a 409 conflict, a 400).
	Cause string
	// By names what denied an admission_denied write, as the apiserver
	// names it: `ValidatingAdmissionPolicy 'p' with binding 'b'`,
	// `admission webhook "w"`, `policy 'p' with binding 'b'` (a
	// MutatingAdmissionPolicy); empty otherwise.
	By string
}

// The denials of admission control, as k8s.io/apiserver v0.37.2 words
// them: pkg/admission/plugin/policy/validating/dispatcher.go (a
// ValidatingAdmissionPolicy: 422 Invalid by default, or the reason its
// validation sets: 403, 401, 413), pkg/admission/plugin/webhook/errors
// ToStatusErr (a webhook: any code of 400 and up it chooses), and
// pkg/admission/plugin/policy/generic PolicyError (the other policies).
// Each is a decision, unless its code is 429 or 5xx: a webhook that
// answers so is overloaded or failing, and one that could not be called
// is a 500 "failed calling webhook", the control plane's either way.
// The first group is what denied it.
var deniedBy = []*regexp.Regexp{
	regexp.MustCompile(`(ValidatingAdmissionPolicy '[^']*'(?: with binding '[^']*')?) denied request`),
	regexp.MustCompile(`(admission webhook "[^"]*") denied the request`),
	regexp.MustCompile(`(policy (?:'[^']*' with binding '[^']*'|"[^"]*")) denied request`),
}

// The refusals of the ResourceQuota admission plugin
// (pkg/admission/plugin/resourcequota/controller.go), all 403: exceeded,
// a constraint, or no quota covering a resource that needs one.
var quotaRefusals = []string{"exceeded quota: ", "failed quota: ", "insufficient quota to consume: "}

// quotaUnknown is the quota plugin's 403 while the quota controller (in
// kube-controller-manager) has not computed the quota's usage: a control
// plane component down or behind, not a quota too small.
const quotaUnknown = "status unknown for quota: "

// notReady is the 403 of an apiserver whose admission plugins have not
// synced their caches yet (it is starting): the control plane's.
const notReady = "not yet ready to handle request"

// namespaceTerminating is the cause type (k8s.io/api core/v1
// NamespaceTerminatingCause) the NamespaceLifecycle plugin adds to its 403
// for a create in a namespace being deleted.
const namespaceTerminating metav1.CauseType = "NamespaceTerminating"

// WriteRefusal classifies a failed marker write from the apiserver's
// Status: its code, message, details' kind and causes. An error without a
// Status (no answer) is the control plane's, and so is a 401: the
// exporter's credentials are a bound ServiceAccount token the kubelet
// renews, so their rejection is more often the control plane's (a signing
// key rotated on one apiserver, the token's ServiceAccount lost in an etcd
// restore, an authentication webhook down) than the exporter's; it counts
// as a write error, and pages.
func WriteRefusal(err error) Refusal {
	var as apierrors.APIStatus
	if !errors.As(err, &as) {
		return Refusal{}
	}
	s := as.Status()
	if s.Code == http.StatusTooManyRequests || s.Code >= http.StatusInternalServerError {
		return Refusal{}
	}
	if by := admissionDenier(s); by != "" {
		return Refusal{Cause: metrics.RefusedAdmission, By: by}
	}
	switch s.Code {
	case http.StatusForbidden:
		switch {
		case hasCause(s, namespaceTerminating):
			return Refusal{Cause: metrics.RefusedNamespaceMissing}
		case containsAny(s.Message, quotaRefusals):
			return Refusal{Cause: metrics.RefusedQuota}
		case strings.Contains(s.Message, notReady), strings.Contains(s.Message, quotaUnknown):
			return Refusal{}
		}
		return Refusal{Cause: metrics.RefusedForbidden}
	case http.StatusNotFound:
		if d := s.Details; d != nil && d.Group == "" && d.Kind == "namespaces" {
			return Refusal{Cause: metrics.RefusedNamespaceMissing}
		}
		return Refusal{Cause: metrics.RefusedNotFound}
	case http.StatusUnprocessableEntity:
		return Refusal{Cause: metrics.RefusedInvalid}
	}
	return Refusal{}
}

// PathRefusal classifies a failed list or watch request of a path: its
// reason (metrics.PathForbidden, PathNotFound) when the apiserver refused
// it (403, 404), empty when the failure is the control plane's (a 401, as
// for writes (WriteRefusal), or no answer).
func PathRefusal(err error) string {
	switch StatusCode(err) {
	case http.StatusForbidden:
		return metrics.PathForbidden
	case http.StatusNotFound:
		return metrics.PathNotFound
	}
	return ""
}

// admissionDenier names the policy or webhook whose denial s is, from its
// message or, failing that, its causes' (a denial keeps its message there
// too); empty when s is no admission denial.
func admissionDenier(s metav1.Status) string {
	msgs := []string{s.Message}
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			msgs = append(msgs, c.Message)
		}
	}
	for _, msg := range msgs {
		for _, re := range deniedBy {
			if m := re.FindStringSubmatch(msg); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

func hasCause(s metav1.Status, t metav1.CauseType) bool {
	if s.Details == nil {
		return false
	}
	for _, c := range s.Details.Causes {
		if c.Type == t {
			return true
		}
	}
	return false
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// refusalFixes say, per cause of a refused write and reason of a refused
// path, what an operator does about it; docs/alerts.md says more.
var refusalFixes = map[string]string{
	metrics.RefusedAdmission:        "exempt the probe's markers (label app.kubernetes.io/managed-by=watchprobe) or their namespace from the policy or webhook named",
	metrics.RefusedQuota:            "raise the marker namespace's ResourceQuota on the marker kind (a probe holds one marker at a time, more while deletes fail), or exempt that namespace",
	metrics.RefusedForbidden:        "grant the exporter's ServiceAccount create, patch and delete on the marker kind in the marker namespace (the chart's Role does)",
	metrics.RefusedNamespaceMissing: "create the marker namespace again, or point the probe at one that exists (the chart's namespaces.create)",
	metrics.RefusedNotFound:         "find the client that deletes the probe's markers (a cleanup job, kubectl delete --all), or check that the apiserver serves the marker kind",
	metrics.RefusedInvalid:          "read the apiserver's message in the log: a mutating webhook or policy that makes the markers invalid",
}

var pathRefusalFixes = map[string]string{
	metrics.PathForbidden: "grant the exporter's ServiceAccount list and watch on the marker kind in the marker namespace (the chart's Role does)",
	metrics.PathNotFound:  "the apiserver does not serve the marker kind there: check the probe's kind and the apiserver's enabled APIs",
}

// RefusalFix says what to do about a refused write's cause.
func RefusalFix(cause string) string { return refusalFixes[cause] }

// PathRefusalFix says what to do about a path refused for reason.
func PathRefusalFix(reason string) string { return pathRefusalFixes[reason] }
