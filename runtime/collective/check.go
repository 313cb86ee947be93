package collective

// The members' agreement on each collective: before a collective moves
// any data, its members all-gather a header of what each runs (operation,
// mode, dtype, element count, root, sequence number) over Send and Recv
// and compare the headers, so that a disagreement fails the collective on
// every member with a [*MismatchError] instead of mixing data.

import (
	"errors"
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/transport"
)

// ErrMismatch is wrapped by every [*MismatchError]: the members of a
// collective disagree on what it is.
var ErrMismatch = errors.New("the members disagree on the collective")

// Header fields, in the order they are compared (and sent).
const (
	hOp = iota
	hMode
	hDtype
	hCount
	hRoot
	hSeq
	headerLen
)

var fieldNames = [headerLen]string{"op", "mode", "dtype", "count", "root", "sequence"}

// Modes in headers.
const (
	modeSendRecv = iota
	modeNative
	modeMemberOrder
)

var modeNames = map[int]string{modeSendRecv: "send/recv", modeNative: "native", modeMemberOrder: "member-order"}

// header is what one member runs: its fields as float64 (exact: counts
// are at most MaxElems < 2^53, sequence numbers 32 bits).
type header [headerLen]float64

// MismatchError is a collective whose members disagree: Member's Field
// (op, mode, dtype, count, root or sequence) is Theirs, this member's is
// Ours. Every member of the collective fails with one (a member compares
// its header with every other's and names the first that differs).
type MismatchError struct {
	Op     string // this member's collective ("all-reduce", …)
	Seq    uint32 // this member's sequence number of it, from 1
	Member int    // the first member (in member order) whose header differs
	Field  string // "op", "mode", "dtype", "count", "root" or "sequence"
	Theirs string // Member's value of Field
	Ours   string // this member's
}

func (e *MismatchError) Error() string {
	var what string
	switch e.Field {
	case "op":
		what = fmt.Sprintf("member %d runs %s, this member %s", e.Member, e.Theirs, e.Ours)
	case "mode":
		what = fmt.Sprintf("member %d runs %s collectives, this member %s", e.Member, e.Theirs, e.Ours)
	case "dtype":
		what = fmt.Sprintf("member %d sends %s, this member %s", e.Member, e.Theirs, e.Ours)
	case "count":
		what = fmt.Sprintf("member %d sends %s elements, this member %s", e.Member, e.Theirs, e.Ours)
	case "root":
		what = fmt.Sprintf("member %d broadcasts from root %s, this member from root %s", e.Member, e.Theirs, e.Ours)
	case "sequence":
		what = fmt.Sprintf("member %d is at collective #%s, this member #%s", e.Member, e.Theirs, e.Ours)
	default:
		what = fmt.Sprintf("member %d has %s %s, this member %s", e.Member, e.Field, e.Theirs, e.Ours)
	}
	return fmt.Sprintf("%s #%d: %s (%v)", e.Op, e.Seq, what, ErrMismatch)
}

// Unwrap returns ErrMismatch and transport.ErrProtocol.
func (e *MismatchError) Unwrap() []error { return []error{ErrMismatch, transport.ErrProtocol} }

// mode is the Comm's mode, as its header carries it.
func (c *Comm) mode() int {
	switch {
	case c.eng == nil:
		return modeSendRecv
	case c.ordered:
		return modeMemberOrder
	default:
		return modeNative
	}
}

// agree runs the header exchange of collective op (this member's dtype,
// element count and root; root -1 for collectives without one) and
// returns a *MismatchError, wrapped in an *Error naming the member, when
// any member's header differs from this one's. The headers are
// all-gathered over Send and Recv (a ring: n-1 steps of one small message
// each way) in every mode until the engine's group exists, so that members
// that disagree on the mode meet in a Comm's first collective; then
// through the engine's all-gather, which is cheaper.
func (c *Comm) agree(op string, dtype tensor.Dtype, count, root int) error {
	n, r := c.Size(), c.Rank()
	if n == 1 {
		return nil
	}
	dt := 64
	if dtype == tensor.Float32 {
		dt = 32
	}
	var own header
	own[hOp], own[hMode], own[hDtype] = float64(opCodes[op]), float64(c.mode()), float64(dt)
	own[hCount], own[hRoot], own[hSeq] = float64(count), float64(root), float64(c.seq)
	buf := make([]float64, n*headerLen)
	copy(buf[r*headerLen:], own[:])
	if c.group != nil {
		// The engine's all-gather, once its group exists: the members all
		// met in the first collective's exchange over Send and Recv, so
		// they agree on the mode.
		if err := c.group.AllGather(wrap(buf)); err != nil {
			return c.nativeErr(op, err)
		}
	} else if err := allGather(c, opHeader, 0, buf, headerLen); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Op = op
		}
		return err
	}
	for m := range n {
		if m == r {
			continue
		}
		theirs := buf[m*headerLen : (m+1)*headerLen]
		for f := range headerLen {
			if theirs[f] != own[f] {
				return c.fail(op, -1, m, &MismatchError{Op: op, Seq: c.seq, Member: m, Field: fieldNames[f],
					Theirs: fieldValue(f, theirs[f]), Ours: fieldValue(f, own[f])})
			}
		}
	}
	return nil
}

// opCodes maps the collectives' names to their codes.
var opCodes = func() map[string]int {
	m := make(map[string]int, len(opNames))
	for code, name := range opNames {
		m[name] = code
	}
	return m
}()

// fieldValue is a header field's value as a MismatchError shows it.
func fieldValue(f int, v float64) string {
	switch f {
	case hOp:
		if s, ok := opNames[int(v)]; ok {
			return s
		}
	case hMode:
		if s, ok := modeNames[int(v)]; ok {
			return s
		}
	case hDtype:
		return fmt.Sprintf("float%d", int(v))
	case hRoot:
		if v < 0 {
			return "none"
		}
	}
	return fmt.Sprintf("%.0f", v)
}
