package charts

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// flowControl renders nothing by default; enabled, a priority level of the
// exporter's own, none of its seats lent or borrowed, and a FlowSchema that
// sends the chart's ServiceAccount there (and the extra subjects).
// TestInstallIntoRealAPIServer has the apiserver classify the
// ServiceAccount's requests with them.
func TestRenderFlowControl(t *testing.T) {
	kinds := func(objs []*unstructured.Unstructured) (plcs, schemas []*unstructured.Unstructured) {
		for _, o := range objs {
			switch o.GetKind() {
			case "PriorityLevelConfiguration":
				plcs = append(plcs, o)
			case "FlowSchema":
				schemas = append(schemas, o)
			}
		}
		return plcs, schemas
	}
	if plcs, schemas := kinds(render(t, "monitoring")); len(plcs)+len(schemas) != 0 {
		t.Errorf("defaults render %d PriorityLevelConfigurations and %d FlowSchemas, want none", len(plcs), len(schemas))
	}

	plcs, schemas := kinds(renderValues(t, `
serviceAccount: {name: prober}
flowControl:
  enabled: true
  nominalConcurrencyShares: 3
  extraSubjects: [{kind: User, user: {name: system:monitoring}}]
`))
	if len(plcs) != 1 || len(schemas) != 1 {
		t.Fatalf("%d PriorityLevelConfigurations and %d FlowSchemas, want one each", len(plcs), len(schemas))
	}
	plc, fs := plcs[0], schemas[0]
	if plc.GetName() != "wp-watchprobe" || plc.GetNamespace() != "" {
		t.Errorf("PriorityLevelConfiguration %s/%s, want wp-watchprobe, cluster-scoped", plc.GetNamespace(), plc.GetName())
	}
	for path, want := range map[string]any{
		"spec.type":                                           "Limited",
		"spec.limited.nominalConcurrencyShares":               float64(3),
		"spec.limited.lendablePercent":                        float64(0),
		"spec.limited.borrowingLimitPercent":                  float64(0),
		"spec.limited.limitResponse.type":                     "Queue",
		"spec.limited.limitResponse.queuing.queues":           float64(16),
		"spec.limited.limitResponse.queuing.handSize":         float64(4),
		"spec.limited.limitResponse.queuing.queueLengthLimit": float64(50),
	} {
		if got := at(t, plc, path); !equalJSON(got, want) {
			t.Errorf("PriorityLevelConfiguration %s = %v, want %v", path, got, want)
		}
	}
	for path, want := range map[string]any{
		"spec.priorityLevelConfiguration.name": plc.GetName(),
		"spec.matchingPrecedence":              float64(1000),
		"spec.distinguisherMethod.type":        "ByUser",
		"spec.rules.0.subjects": []any{
			map[string]any{"kind": "ServiceAccount", "serviceAccount": map[string]any{"name": "prober", "namespace": "monitoring"}},
			map[string]any{"kind": "User", "user": map[string]any{"name": "system:monitoring"}},
		},
		"spec.rules.0.resourceRules": []any{map[string]any{"verbs": []any{"*"}, "apiGroups": []any{"*"}, "resources": []any{"*"},
			"namespaces": []any{"*"}, "clusterScope": true}},
		"spec.rules.0.nonResourceRules": []any{map[string]any{"verbs": []any{"*"}, "nonResourceURLs": []any{"*"}}},
	} {
		if got := at(t, fs, path); !equalJSON(got, want) {
			t.Errorf("FlowSchema %s = %v, want %v", path, got, want)
		}
	}
}
