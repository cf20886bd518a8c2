package judge

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the judgement reads off a marker and an apiserver's answer.
const (
	AnnotationSeq = "watchprobe.io/seq"
	// FieldManager is the field manager of every write of the probe's, so
	// that managedFields tell its changes from other clients'.
	FieldManager = "watchprobe"
)

// Seq reads the writer's sequence number from a marker; ok is false for an
// object that carries none (not one of ours, or damaged).
func Seq(obj metav1.Object) (seq uint64, ok bool) {
	s, found := obj.GetAnnotations()[AnnotationSeq]
	if !found {
		return 0, false
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	return seq, err == nil
}

// StatusCode is the HTTP status of an apiserver error, 0 when no response
// arrived.
func StatusCode(err error) int {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return int(status.Status().Code)
	}
	return 0
}

// FinalizerManagers names the clients that own obj's finalizers: the
// managers of its managedFields entries that set metadata.finalizers,
// sorted, none twice.
func FinalizerManagers(obj metav1.Object) []string {
	var names []string
	for _, e := range obj.GetManagedFields() {
		if e.FieldsV1 == nil || slices.Contains(names, e.Manager) {
			continue
		}
		var fields struct {
			Metadata map[string]json.RawMessage `json:"f:metadata"`
		}
		if json.Unmarshal(e.FieldsV1.GetRawBytes(), &fields) == nil && fields.Metadata["f:finalizers"] != nil {
			names = append(names, e.Manager)
		}
	}
	slices.Sort(names)
	return names
}
