package passes

import "github.com/ppgen/ppgen/gen/ir"

// Coalesce batches transfers (docs/design.md §5, pass 9): on every rank,
// each maximal run of two or more adjacent transfers (steps with nothing
// but transfers between them) becomes one batch, BATCH_BEGIN before the run
// and BATCH_END after it, which the runtime issues as one group
// (transport.Batch: MPI Startall/Waitall, NCCL group calls). A compute
// step, a local step or a batch bracket already in the program ends a run,
// and so does a DATA_SEND whose DATA_RECV the run holds (the send would
// wait for the batch it is in); transfers inside a batch the program
// already has are left as they are. Nothing moves: the steps keep their
// order, only the brackets are added.
//
// The rule is local and needs no search, because a batch of adjacent
// transfers never turns a program that is safe under the strict model into
// one that deadlocks (docs/design.md §6 has the argument): its transfers
// are posted together in both forms, the batch only lets them complete in
// any order, and the one wait it adds (a consumer of one of its receives
// waits for the whole batch) is on transfers that complete in the unbatched
// program without that consumer. So the pass keeps every merge, and verify,
// which gen.Lower runs on its result, re-checks the program with the
// batches as units (TestCoalesceKeepsSafe and FuzzCoalesce check the
// argument on random programs). The merge the pass refuses is the one the
// runtime could not run: a DATA_SEND relaying labels that a DATA_RECV of
// the same run brings (TestCoalesceRefusesLabelRelay). A program that
// deadlocks unbatched can become safe (TestCoalesceMakesSafe: two ranks
// that send to each other before receiving). Runs stop at every other
// step, so that no step moves.
//
// The input's step lists are not modified.
func Coalesce(p ir.Program) (ir.Program, error) {
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		q.Ranks[r] = coalesceRank(steps)
	}
	return q, nil
}

// coalesceRank is Coalesce for one rank's steps.
func coalesceRank(steps []ir.Step) []ir.Step {
	out := make([]ir.Step, 0, len(steps)+len(steps)/2)
	bracket := func(k ir.Kind) ir.Step {
		return ir.Step{Kind: k, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	}
	inBatch := false // inside a batch the program already has
	for i := 0; i < len(steps); {
		st := &steps[i]
		if k := st.Kind; inBatch || !k.IsComm() {
			switch k {
			case ir.BatchBegin:
				inBatch = true
			case ir.BatchEnd:
				inBatch = false
			}
			out = append(out, *st)
			i++
			continue
		}
		j := runEnd(steps, i)
		if j-i < 2 {
			out = append(out, steps[i:j]...)
		} else {
			out = append(out, bracket(ir.BatchBegin))
			out = append(out, steps[i:j]...)
			out = append(out, bracket(ir.BatchEnd))
		}
		i = j
	}
	return out
}

// runEnd returns the end of the run of adjacent transfers that starts at
// transfer i: the first index after it that is not a transfer, or a
// DATA_SEND of a chunk whose DATA_RECV is in the run.
func runEnd(steps []ir.Step, i int) int {
	j := i
	for ; j < len(steps) && steps[j].Kind.IsComm(); j++ {
		if st := &steps[j]; st.Kind == ir.DataSend {
			for k := i; k < j; k++ {
				if o := &steps[k]; o.Kind == ir.DataRecv && o.Stage == st.Stage && o.Micro == st.Micro {
					return j
				}
			}
		}
	}
	return j
}

// BatchStats counts the batches of a program (BATCH_BEGIN .. BATCH_END).
type BatchStats struct {
	Transfers int // transfer steps
	Batched   int // transfers inside a batch
	Batches   int // batches
	MaxOps    int // the most transfers in one batch
}

// CountBatches returns the batch statistics of p.
func CountBatches(p ir.Program) BatchStats {
	var b BatchStats
	for _, steps := range p.Ranks {
		n, open := 0, false
		for i := range steps {
			switch k := steps[i].Kind; {
			case k == ir.BatchBegin:
				open, n = true, 0
			case k == ir.BatchEnd:
				if open {
					b.Batches++
					b.MaxOps = max(b.MaxOps, n)
				}
				open = false
			case k.IsComm():
				b.Transfers++
				if open {
					b.Batched++
					n++
				}
			}
		}
	}
	return b
}
