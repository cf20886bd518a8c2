package check

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// PathCounts are the keys under which a path's report counts families in
// total, each a family's Report key, in the order of the metrics table: the
// tally counts every outcome counted in one of them, and the JSON and text
// reports list them all, at 0 when nothing happened. A family declared with
// a Report key is in the report without a word here.
var PathCounts = func() []string {
	var keys []string
	for _, f := range metrics.Families {
		if f.Report != "" {
			keys = append(keys, f.Report)
		}
	}
	return keys
}()

// pathReport is a PathReport without its methods: its JSON form is the
// fields' alone.
type pathReport PathReport

// MarshalJSON writes the path's fields, then each of PathCounts by its
// key.
func (p PathReport) MarshalJSON() ([]byte, error) {
	js, err := json.Marshal(pathReport(p))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(js[:len(js)-1])
	for i, k := range PathCounts {
		if i > 0 || len(js) > 2 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%d", k, p.Counts[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON writes. A key it does not know is
// left, as encoding/json leaves one: a report of a newer version adds
// fields without a new schema_version.
func (p *PathReport) UnmarshalJSON(js []byte) error {
	if err := json.Unmarshal(js, (*pathReport)(p)); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(js, &keys); err != nil {
		return err
	}
	p.Counts = map[string]int64{}
	for _, k := range PathCounts {
		if v, ok := keys[k]; ok {
			var n int64
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("path report %s: %w", k, err)
			}
			p.Counts[k] = n
		}
	}
	return nil
}
