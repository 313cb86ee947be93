package gencmd

import (
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// TieFlag is the value of -tie: the ties given, in order, each normalized
// (A < B). Set accepts one tie "A:B" or a comma list, and may be called
// again (the flag repeats); String is the comma list, which Set reads back
// (a recorded invocation regenerates the file). Bad values name the tie and
// the fix (ir.ParseTies); the stages' range is checked against the
// schedule (passes.Tie).
type TieFlag []ir.Tie

// Set adds the ties of s.
func (t *TieFlag) Set(s string) error {
	ties, err := ir.ParseTies(s)
	if err != nil {
		return err
	}
	*t = append(*t, ties...)
	return nil
}

// String is the ties as a comma list, "0:3,1:2".
func (t *TieFlag) String() string {
	if t == nil {
		return ""
	}
	parts := make([]string, len(*t))
	for i, x := range *t {
		parts[i] = x.String()
	}
	return strings.Join(parts, ",")
}
