package pipe

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/runtime/transport"
)

// Tower is a trainable preprocess (the first layers of a model kept out of
// the stages, or a vision tower; docs/mpipe.md), of which every rank holds
// a replica (Config.Tower; the replicas start identical: that is the
// parameter broadcast). Its Forward runs in each input load, as a
// Preprocess does: under mpipe on the micro-batch's owner, which ships the
// output to the first stage's rank; elsewhere on the first stage's rank.
// The first stage's backward keeps the gradient of its input; at OPT_STEP,
// after every rank's transfers drained, the first stage's rank sends each
// owned micro-batch's gradient back to its owner (the owner backward), in
// micro-batch order, and runs Backward of the ones it loaded itself; then
// every rank's Grads are summed across the ranks (the final gradient
// reduce across owners), in rank order, before Config.OptStep steps the
// replica with them, so the replicas stay identical.
type Tower interface {
	// Forward returns the tower's output for micro-batch micro's input,
	// keeping what Backward of micro needs.
	Forward(micro int, in *tensor.Dense) (*tensor.Dense, error)
	// Backward adds micro-batch micro's contribution to the gradients,
	// given the gradient of the output Forward returned, and drops what
	// Forward kept.
	Backward(micro int, dy *tensor.Dense) error
	// Grads returns the accumulated gradients, which OPT_STEP sums across
	// the ranks in place; the same list (lengths, shapes) on every rank.
	Grads() []*tensor.Dense
}

// Tags on the grad channel of the tower's exchanges at OPT_STEP (copies'
// and ties' use stages ≥ 0).
const (
	towerDyStage   = -2 // the output gradient of micro m: Tag{towerDyStage, m}
	towerGradStage = -3 // gradient i of the sum: Tag{towerGradStage, -1-i}
)

// keepTowerGrad records dx, the input gradient of first-stage chunk (stage,
// micro), for the tower's backward at OPT_STEP.
func (x *Exec) keepTowerGrad(stage, micro int, dx *tensor.Dense) {
	if x.tower != nil && x.routeFirst(stage) && uint(micro) < uint(len(x.towerDy)) {
		x.towerDy[micro] = dx
	}
}

// towerBackward runs the tower's backward of every micro-batch on the rank
// that ran its forward, then sums the replicas' gradients (Tower).
func (x *Exec) towerBackward() error {
	x.inflight.Wait()
	if x.failedNow() {
		return nil
	}
	first := x.spec.RankOf[0]
	for m := range x.spec.Micro {
		owner := x.owner(m)
		if owner < 0 || x.towerAtFirst {
			owner = first
		}
		switch {
		case x.rank == first:
			dy := x.towerDy[m]
			x.towerDy[m] = nil
			if dy == nil {
				return fmt.Errorf("the tower's backward of micro %d: the first stage's backward kept no input gradient (did its B or I run?)", m)
			}
			if owner != first {
				if err := x.tr.Send(owner, abi.GradChannel, transport.Tag{Stage: towerDyStage, Micro: int32(m)}, dy); err != nil {
					return fmt.Errorf("sending micro %d's tower output gradient to its owner, rank %d: %w", m, owner, err)
				}
				continue
			}
			if err := x.tower.Backward(m, dy); err != nil {
				return fmt.Errorf("the tower's backward of micro %d: %w", m, err)
			}
		case x.rank == owner:
			tag, dy, err := x.tr.Recv(first, abi.GradChannel)
			if err != nil {
				return fmt.Errorf("receiving micro %d's tower output gradient from rank %d: %w", m, first, err)
			}
			if want := (transport.Tag{Stage: towerDyStage, Micro: int32(m)}); tag != want {
				return fmt.Errorf("from rank %d: got tensor %v, want micro %d's tower output gradient %v (ranks run different schedules, or not every rank has a Config.Tower?)", first, tag, m, want)
			}
			if err := x.tower.Backward(m, dy); err != nil {
				return fmt.Errorf("the tower's backward of micro %d: %w", m, err)
			}
		}
	}
	return x.sumTowerGrads(first)
}

// sumTowerGrads sums every rank's tower gradients in place: root receives
// them in rank order and adds them to its own, then sends the sum to every
// rank in rank order.
func (x *Exec) sumTowerGrads(root int) error {
	mine := x.tower.Grads()
	tag := func(i int) transport.Tag { return transport.Tag{Stage: towerGradStage, Micro: int32(-1 - i)} }
	recv := func(peer int) ([]*tensor.Dense, error) {
		out := make([]*tensor.Dense, len(mine))
		for i := range out {
			got, g, err := x.tr.Recv(peer, abi.GradChannel)
			if err != nil {
				return nil, fmt.Errorf("receiving tower gradient %d from rank %d: %w", i, peer, err)
			}
			if got != tag(i) {
				return nil, fmt.Errorf("from rank %d: got tensor %v, want tower gradient %d %v (not every rank has a Config.Tower?)", peer, got, i, tag(i))
			}
			out[i] = g
		}
		return out, nil
	}
	send := func(peer int, gs []*tensor.Dense) error {
		for i, g := range gs {
			if err := x.tr.Send(peer, abi.GradChannel, tag(i), g.Clone().(*tensor.Dense)); err != nil {
				return fmt.Errorf("sending tower gradient %d to rank %d: %w", i, peer, err)
			}
		}
		return nil
	}
	if x.rank != root {
		if err := send(root, mine); err != nil {
			return err
		}
		sum, err := recv(root)
		if err != nil {
			return err
		}
		for i, g := range mine {
			if err := copyInto(g, sum[i]); err != nil {
				return fmt.Errorf("tower gradient %d: %w", i, err)
			}
		}
		return nil
	}
	for r := range x.spec.Ranks {
		if r == root {
			continue
		}
		theirs, err := recv(r)
		if err != nil {
			return err
		}
		if err := addInto(mine, theirs); err != nil {
			return fmt.Errorf("rank %d's tower gradients: %w", r, err)
		}
	}
	for r := range x.spec.Ranks {
		if r != root {
			if err := send(r, mine); err != nil {
				return err
			}
		}
	}
	return nil
}
