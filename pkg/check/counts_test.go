package check

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// Each of PathCounts has a key of its own: no other count's, no field's of
// a path's report.
func TestPathCountsKeysAreTheirOwn(t *testing.T) {
	js, err := json.Marshal(pathReport{})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(js, &fields); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range PathCounts {
		if _, ok := fields[k]; ok {
			t.Errorf("count %s is a field of a path's report", k)
		}
		if seen[k] {
			t.Errorf("count %s is another family's too", k)
		}
		seen[k] = true
	}
}

// A path's report reads back as written, its counts among them, and one
// with a field this build does not know still reads.
func TestPathReportRoundTrip(t *testing.T) {
	want := PathReport{Path: "watch", Observed: 3, Counts: zeros(PathCounts)}
	for i, k := range PathCounts {
		want.Counts[k] = int64(i + 1)
	}
	js, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got PathReport
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if got.Path != want.Path || got.Observed != want.Observed || !maps.Equal(got.Counts, want.Counts) {
		t.Errorf("read back %+v from %s, want %+v", got, js, want)
	}
	newer := append(slices.Clone(js[:len(js)-1]), []byte(`,"added_later":1}`)...)
	if err := json.Unmarshal(newer, &got); err != nil {
		t.Errorf("a report with a field added later: %v", err)
	}
}
