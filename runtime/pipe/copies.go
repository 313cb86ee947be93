package pipe

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
)

// syncCopies sums the gradients of the two model copies (Spec.Copies = 2):
// for each stage s this rank holds, with t its twin in the other copy
// (s ± Stages/2), the rank holding t sends its CopyGrads and this rank adds
// them to its own, and the other way round, so both hold the same sum.
// Pairs are handled in the order of the copy-A stage, and within a pair the
// lower rank sends first, so the exchange cannot deadlock even when a send
// waits for its receive. It runs after every posted transfer completed.
func (x *Exec) syncCopies() error {
	x.inflight.Wait()
	if x.failedNow() {
		return nil
	}
	for j := range x.per { // the copy-A index of a pair: stages j and j+per
		a, b := j, j+x.per
		for _, s := range []int{a, b} {
			if x.stages[s] == nil {
				continue
			}
			t := a + b - s
			mine := x.raw[s].(CopyGrads).Grads()
			if peer := x.spec.RankOf[t]; peer == x.rank {
				if s == a { // both copies here: add once, into both
					if err := addPair(mine, x.raw[t].(CopyGrads).Grads()); err != nil {
						return fmt.Errorf("stages %d and %d: %w", a, b, err)
					}
				}
			} else if err := x.exchangeGrads(s, t, peer, mine); err != nil {
				return err
			}
		}
	}
	return nil
}

// exchangeGrads sends stage s's gradients to peer (which holds its twin t)
// and adds t's, received from peer, to them; lists that differ fail both
// ranks, naming both stages (swapListed).
func (x *Exec) exchangeGrads(s, t, peer int, mine []*tensor.Dense) error {
	theirs, err := x.swapListed(s, t, peer, mine, "model-copy gradients", "a stage and its twin in the other model copy return the same list from Grads")
	if err != nil {
		return err
	}
	if err := addInto(mine, theirs); err != nil {
		return fmt.Errorf("stage %d and its twin %d on rank %d: %w", s, t, peer, err)
	}
	return nil
}

// swapGrads sends stage s's gradients mine to peer, which holds stage t,
// and returns t's, received from peer, on the grad channel tagged (stage,
// -1-i): the lower rank sends first, so the exchange cannot deadlock even
// when a send waits for its receive. Model copies (OptStep) and ties
// (TieGrad) exchange through it.
func (x *Exec) swapGrads(s, t, peer int, mine []*tensor.Dense) ([]*tensor.Dense, error) {
	send := func() error {
		for i, g := range mine {
			// A copy: the transport may hand the tensor itself to an
			// in-process peer, and it is about to be added to.
			c := g.Clone().(*tensor.Dense)
			if err := x.tr.Send(peer, abi.GradChannel, transport.Tag{Stage: int32(s), Micro: int32(-1 - i)}, c); err != nil {
				return fmt.Errorf("sending stage %d's gradient %d to rank %d: %w", s, i, peer, err)
			}
		}
		return nil
	}
	theirs := make([]*tensor.Dense, len(mine))
	recv := func() error {
		for i := range theirs {
			tag, g, err := x.tr.Recv(peer, abi.GradChannel)
			if err != nil {
				return fmt.Errorf("receiving stage %d's gradient %d from rank %d: %w", t, i, peer, err)
			}
			if want := (transport.Tag{Stage: int32(t), Micro: int32(-1 - i)}); tag != want {
				return fmt.Errorf("from rank %d: got stage %d's tensor %d, want stage %d's gradient %d (ranks run different schedules?)", peer, tag.Stage, -1-tag.Micro, t, i)
			}
			theirs[i] = g
		}
		return nil
	}
	first, second := send, recv
	if x.rank > peer {
		first, second = recv, send
	}
	if err := first(); err != nil {
		return nil, err
	}
	if err := second(); err != nil {
		return nil, err
	}
	return theirs, nil
}

// addPair sets both a[i] and b[i] to a[i] + b[i].
func addPair(a, b []*tensor.Dense) error {
	theirs := make([]*tensor.Dense, len(b))
	for i, g := range b {
		theirs[i] = g.Clone().(*tensor.Dense)
	}
	if err := addInto(a, theirs); err != nil {
		return err
	}
	for i := range b {
		if err := copyInto(b[i], a[i]); err != nil {
			return err
		}
	}
	return nil
}

// addInto adds theirs[i] to mine[i] in place, element by element.
func addInto(mine, theirs []*tensor.Dense) error {
	if len(mine) != len(theirs) {
		return fmt.Errorf("%d gradients here, %d in the other copy", len(mine), len(theirs))
	}
	for i, g := range mine {
		o := theirs[i]
		if !g.Shape().Eq(o.Shape()) || g.Dtype() != o.Dtype() {
			return fmt.Errorf("gradient %d is %v %v here and %v %v in the other copy", i, g.Dtype(), g.Shape(), o.Dtype(), o.Shape())
		}
		switch d := g.Data().(type) {
		case []float64:
			for k, v := range o.Data().([]float64) {
				d[k] += v
			}
		case []float32:
			for k, v := range o.Data().([]float32) {
				d[k] += v
			}
		default:
			return fmt.Errorf("gradient %d has dtype %v; want float32 or float64", i, g.Dtype())
		}
	}
	return nil
}

// copyInto copies src's elements into dst (same shape and dtype).
func copyInto(dst, src *tensor.Dense) error {
	switch d := dst.Data().(type) {
	case []float64:
		copy(d, src.Data().([]float64))
	case []float32:
		copy(d, src.Data().([]float32))
	default:
		return fmt.Errorf("gradient has dtype %v; want float32 or float64", dst.Dtype())
	}
	return nil
}
