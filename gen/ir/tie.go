package ir

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Tie declares that two stages hold one copy each of a shared parameter
// (`-tie A:B`: an embedding on the first stage tied to the LM head on the
// last). Both copies start equal; before OPT_STEP the ranks of A and B sum
// the two copies' gradients (TIE_GRAD, passes.Tie), so both take the same
// optimizer step and stay one parameter. A < B in a normalized tie (ParseTie,
// CheckTies): the sum is stage A's gradient plus stage B's on both ranks.
type Tie struct{ A, B int }

// String is the tie's flag form, "A:B".
func (t Tie) String() string { return strconv.Itoa(t.A) + ":" + strconv.Itoa(t.B) }

// Has reports whether stage s takes part in the tie.
func (t Tie) Has(s int) bool { return s == t.A || s == t.B }

// Other returns the stage tied to s (s must be A or B).
func (t Tie) Other(s int) int { return t.A + t.B - s }

// ParseTies reads the value of -tie: one tie "A:B", or several separated by
// commas ("0:7,1:6"). Each tie is normalized (A < B); a tie of a stage with
// itself, a negative or malformed stage is an error that says the fix, and
// names the tie when the value holds several (the flag package names the
// value itself). The stages' range is checked against a program by
// CheckTies.
func ParseTies(s string) ([]Tie, error) {
	var out []Tie
	parts := strings.Split(s, ",")
	for _, part := range parts {
		part = strings.TrimSpace(part)
		errorf := func(format string, args ...any) error {
			if len(parts) > 1 {
				return fmt.Errorf("tie %q: "+format, append([]any{part}, args...)...)
			}
			return fmt.Errorf(format, args...)
		}
		as, bs, ok := strings.Cut(part, ":")
		if !ok {
			return nil, errorf("want two stages A:B (e.g. 0:3, the first stage tied to the last of 4)")
		}
		as, bs = strings.TrimSpace(as), strings.TrimSpace(bs)
		a, errA := strconv.Atoi(as)
		b, errB := strconv.Atoi(bs)
		for _, x := range []struct {
			text string
			n    int
			err  error
		}{{as, a, errA}, {bs, b, errB}} {
			switch {
			case x.err != nil && !errors.Is(x.err, strconv.ErrRange):
				return nil, errorf("stage %q is not an integer; name two stages A:B, as in 0:3", x.text)
			case x.err != nil || x.n < 0 || x.n > MaxIndex:
				return nil, errorf("stage %s is out of range; stages are numbered 0..S-1 (S at most %d), so name two in 0..%d", x.text, MaxIndex+1, MaxIndex)
			}
		}
		switch {
		case a == b:
			return nil, errorf("a stage is tied to itself; a tie names two different stages, e.g. 0:3 (the first of 4 stages and the last)")
		}
		out = append(out, Tie{min(a, b), max(a, b)})
	}
	return out, nil
}

// CheckTies checks ties against a program of the given number of stages:
// each normalized (A < B), both stages in 0..stages-1, and no stage in two
// ties (a stage's tied gradients are one list, pipe.Tied). The errors name
// the tie and the fix.
func CheckTies(ties []Tie, stages int) error {
	seen := make(map[int]Tie, 2*len(ties))
	for _, t := range ties {
		switch {
		case t.A == t.B:
			return fmt.Errorf("-tie %s: a stage is tied to itself; a tie names two different stages", t)
		case t.A > t.B:
			return fmt.Errorf("tie %d:%d is not normalized; write it %d:%d (ParseTies does)", t.A, t.B, t.B, t.A)
		case t.A < 0 || t.B >= stages:
			return fmt.Errorf("-tie %s: the program has %d stages (0..%d); name two of them, e.g. -tie 0:%d for the first and the last", t, stages, stages-1, stages-1)
		}
		for _, s := range []int{t.A, t.B} {
			if o, dup := seen[s]; dup {
				return fmt.Errorf("-tie %s and %s both name stage %d; a stage takes part in one tie (tie the other stages to each other, or give the stage one list of tied parameters)", o, t, s)
			}
			seen[s] = t
		}
	}
	return nil
}

// TieOf returns the tie stage s takes part in, if any.
func TieOf(ties []Tie, s int) (Tie, bool) {
	for _, t := range ties {
		if t.Has(s) {
			return t, true
		}
	}
	return Tie{}, false
}
