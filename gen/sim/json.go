package sim

import (
	"bytes"
	"encoding/json"
)

// marshalIndent encodes v as indented JSON with a trailing newline, without
// HTML escaping (step names hold no HTML, but '&' or '<' in titles stay readable).
func marshalIndent(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
