package exportertest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema compiles the JSON Schema in file. strict also forbids properties
// the schema does not name, so that a test fails when a document gains a
// field the schema does not document; the published schema allows them,
// since adding a field does not break a consumer.
func Schema(file string, strict bool) (*jsonschema.Schema, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, err
	}
	if strict {
		var closeObjects func(any)
		closeObjects = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if _, ok := v["properties"]; ok && v["additionalProperties"] == nil {
					v["additionalProperties"] = false
				}
				for _, c := range v {
					closeObjects(c)
				}
			case []any:
				for _, c := range v {
					closeObjects(c)
				}
			}
		}
		closeObjects(doc)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	url := "file://" + filepath.ToSlash(abs)
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// ValidateJSON checks doc against the schema in schemaFile, strictly, and
// decodes it into v, refusing fields that v does not have.
func ValidateJSON(schemaFile, doc string, v any) error {
	s, err := Schema(schemaFile, true)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("does not match %s: %w", schemaFile, err)
	}
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
