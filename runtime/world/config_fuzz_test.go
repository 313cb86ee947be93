package world

import (
	"maps"
	"testing"
)

// FuzzDecodeConfig: whatever a peer sends as its run configuration,
// decoding neither panics nor accepts text that does not encode back to
// the same configuration.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		"",
		"\"-seed\"=\"1\"\n",
		"\"-dp\"=\"2\"\n\"size\"=\"8\"\n",
		"\"a\\nb\"=\"c=d\"\n",
		"\"-seed\"=1\n",
		"\"k\"\n",
		"\"k\"=\"v\"trailing\n",
		"\"\\xff\"=\"\\u00e9\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeConfig(b)
		if err != nil {
			return
		}
		again, err := decodeConfig(encodeConfig(c))
		if err != nil || !maps.Equal(c, again) {
			t.Fatalf("decode(encode(%q)) = %q, %v", c, again, err)
		}
	})
}
