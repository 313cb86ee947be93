package ir

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// None marks a Step field that does not apply (no micro-batch, no peer, no slot).
const None = -1

// Step is one entry of a rank's program.
//
// Stage and Micro name the virtual stage and micro-batch the step works on
// (None where the kind has no such field). Peer is the rank on the other end
// of a transfer (None for local steps). Slot is the static buffer slot the
// step reads or writes (None until slot assignment). Sub holds the two
// sub-steps of an OVERLAP_F_B / OVERLAP_B_F step, in order.
type Step struct {
	Kind  Kind
	Stage int
	Micro int
	Peer  int
	Slot  int
	Sub   []Step
}

// Compute returns a local step of kind k on (stage, micro) with no peer or slot.
func Compute(k Kind, stage, micro int) Step {
	return Step{Kind: k, Stage: stage, Micro: micro, Peer: None, Slot: None}
}

// Comm returns a transfer step of kind k on (stage, micro) with the given peer rank.
func Comm(k Kind, stage, micro, peer int) Step {
	return Step{Kind: k, Stage: stage, Micro: micro, Peer: peer, Slot: None}
}

// StageOnly returns a step that names a stage but no micro-batch (UNSHARD, RESHARD, REDUCE_GRAD).
func StageOnly(k Kind, stage int) Step {
	return Step{Kind: k, Stage: stage, Micro: None, Peer: None, Slot: None}
}

// Overlap returns a composite step of kind k (OVERLAP_F_B or OVERLAP_B_F) running a and b together.
func Overlap(k Kind, a, b Step) Step {
	return Step{Kind: k, Stage: None, Micro: None, Peer: None, Slot: None, Sub: []Step{a, b}}
}

// Equal reports whether two steps are identical, sub-steps included.
func (s Step) Equal(t Step) bool {
	if s.Kind != t.Kind || s.Stage != t.Stage || s.Micro != t.Micro || s.Peer != t.Peer || s.Slot != t.Slot || len(s.Sub) != len(t.Sub) {
		return false
	}
	for i := range s.Sub {
		if !s.Sub[i].Equal(t.Sub[i]) {
			return false
		}
	}
	return true
}

// SameAction reports whether two steps denote the same action, ignoring peer and slot
// (the fields the text form does not carry).
func (s Step) SameAction(t Step) bool {
	if s.Kind != t.Kind || s.Stage != t.Stage || s.Micro != t.Micro || len(s.Sub) != len(t.Sub) {
		return false
	}
	for i := range s.Sub {
		if !s.Sub[i].SameAction(t.Sub[i]) {
			return false
		}
	}
	return true
}

// Computes returns the compute steps the step runs: the step itself, or its
// sub-steps for an overlap, or nothing for a non-compute step.
func (s Step) Computes() []Step {
	if s.Kind.IsOverlap() {
		return s.Sub
	}
	if s.Kind.IsCompute() {
		return []Step{s}
	}
	return nil
}

// ComputesAt is steps[i].Computes() without copying the step: steps[i:i+1]
// itself, its Sub, or nothing, for loops that read each compute step by
// pointer (a Step is eight words). The result shares memory with steps.
func ComputesAt(steps []Step, i int) []Step {
	if k := steps[i].Kind; k.IsOverlap() {
		return steps[i].Sub
	} else if k.IsCompute() {
		return steps[i : i+1 : i+1]
	}
	return nil
}

// String returns the step in schedule text form: {stage}{KIND}{micro}, e.g.
// "0F1", "2SEND_F3", "1UNSHARD", "(0F7;7B3)OVERLAP_F_B", "OPT_STEP".
func (s Step) String() string { return string(s.AppendText(nil)) }

// AppendText appends the step's text form (String) to dst.
func (s Step) AppendText(dst []byte) []byte {
	if s.Kind.IsOverlap() {
		dst = append(dst, '(')
		for i, sub := range s.Sub {
			if i > 0 {
				dst = append(dst, ';')
			}
			dst = sub.AppendText(dst)
		}
		return append(append(dst, ')'), s.Kind.String()...)
	}
	if s.Stage >= 0 {
		dst = strconv.AppendInt(dst, int64(s.Stage), 10)
	}
	dst = append(dst, s.Kind.String()...)
	if s.Micro >= 0 {
		dst = strconv.AppendInt(dst, int64(s.Micro), 10)
	}
	return dst
}

// ParseStep parses one step in text form. Peer and Slot are left as None;
// Program.ResolvePeers fills peers from a placement.
func ParseStep(text string) (Step, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return Step{}, &ParseError{Text: text, Reason: "empty step"}
	}
	if t[0] == '(' {
		end := strings.IndexByte(t, ')')
		if end < 0 {
			return Step{}, &ParseError{Text: text, Reason: "unclosed '(' in overlap step"}
		}
		k, ok := ParseKind(t[end+1:])
		if !ok || !k.IsOverlap() {
			return Step{}, &ParseError{Text: text, Reason: "a parenthesised pair must be followed by OVERLAP_F_B or OVERLAP_B_F"}
		}
		parts := strings.Split(t[1:end], ";")
		if len(parts) != 2 {
			return Step{}, &ParseError{Text: text, Reason: "an overlap step holds exactly two sub-steps separated by ';'"}
		}
		a, err := ParseStep(parts[0])
		if err != nil {
			return Step{}, err
		}
		c, err := ParseStep(parts[1])
		if err != nil {
			return Step{}, err
		}
		if !a.Kind.IsCompute() || a.Kind.IsOverlap() || !c.Kind.IsCompute() || c.Kind.IsOverlap() {
			return Step{}, &ParseError{Text: text, Reason: "overlap sub-steps must be F, B, I or W"}
		}
		return Overlap(k, a, c), nil
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	j := len(t)
	for j > i && t[j-1] >= '0' && t[j-1] <= '9' {
		j--
	}
	k, ok := ParseKind(t[i:j])
	if !ok {
		return Step{}, &ParseError{Text: text, Reason: "unknown step kind " + strconv.Quote(t[i:j]) + " (want {stage}{KIND}{micro}, KIND one of " + kindList() + ")"}
	}
	if k.IsOverlap() {
		// Only the parenthesised form above carries an overlap's two
		// sub-steps; a bare one would print as "()OVERLAP_B_F", which no
		// parser reads back.
		return Step{}, &ParseError{Text: text, Reason: k.String() + " needs its two sub-steps in parentheses before it, as (0F1;0B0)" + k.String()}
	}
	st := Compute(k, None, None)
	var err error
	if i > 0 {
		if st.Stage, err = parseIndex(text, "stage", t[:i]); err != nil {
			return Step{}, err
		}
	}
	if j < len(t) {
		if st.Micro, err = parseIndex(text, "micro-batch", t[j:]); err != nil {
			return Step{}, err
		}
	}
	switch {
	case k.HasStage() && st.Stage < 0:
		return Step{}, &ParseError{Text: text, Reason: k.String() + " needs a leading stage number"}
	case !k.HasStage() && st.Stage >= 0:
		return Step{}, &ParseError{Text: text, Reason: k.String() + " takes no stage number"}
	case k.HasMicro() && st.Micro < 0:
		return Step{}, &ParseError{Text: text, Reason: k.String() + " needs a trailing micro-batch number"}
	case !k.HasMicro() && st.Micro >= 0:
		return Step{}, &ParseError{Text: text, Reason: k.String() + " takes no micro-batch number"}
	}
	return st, nil
}

// parseIndex parses the decimal digits of a stage or micro-batch number,
// refusing a value over MaxIndex before it can overflow or size anything.
func parseIndex(text, what, digits string) (int, error) {
	v := 0
	for k := 0; k < len(digits); k++ {
		v = v*10 + int(digits[k]-'0')
		if v > MaxIndex {
			return 0, &ParseError{Text: text, Reason: fmt.Sprintf("%s %s is over the limit of %d (runtime/pipe numbers stages, micro-batches and ranks in 16 bits)", what, clip(digits, 24), MaxIndex)}
		}
	}
	return v, nil
}

// kindList names the kinds a step of the form {stage}{KIND}{micro} may
// have: those that name a stage (HasStage). The overlaps are written
// (sub;sub)OVERLAP_F_B and the kinds of no stage (OPT_STEP, ALL_REDUCE,
// ...) by their names alone, which the parser takes before this form, so
// the message stays a short line as kinds are added.
func kindList() string {
	kinds := Kinds()
	names := make([]string, 0, len(kinds))
	for _, k := range kinds {
		if k.HasStage() {
			names = append(names, k.String())
		}
	}
	return strings.Join(names, ", ")
}

// ParseError reports text that is not a valid step or program.
type ParseError struct {
	Line   int // 1-based line (CSV row), 0 when unknown
	Column int // 1-based column (CSV cell), 0 when unknown
	Text   string
	Reason string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(" cell ")
			b.WriteString(strconv.Itoa(e.Column))
		}
		b.WriteString(": ")
	}
	b.WriteString(quoteClip(e.Text))
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// maxQuote is the most of a step or line (quoted) that an error message holds.
const maxQuote = 100

// quoteClip quotes s as strconv.Quote does, shortened so that the quoted
// form has at most about maxQuote bytes (binary input quotes to escapes).
func quoteClip(s string) string {
	q := strconv.Quote(s)
	for n := min(len(s), maxQuote); len(q) > maxQuote+5 && n > 0; n = n * 3 / 4 {
		q = strconv.Quote(clip(s, n))
	}
	return q
}

// clip shortens s to at most n bytes (on a rune boundary), marking a cut
// with "...", so that a message quoting user input stays on one short line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
