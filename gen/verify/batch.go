package verify

import (
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// Batches (docs/design.md §5, pass 9; docs/internals.md "Batches"): the
// transfers between a BATCH_BEGIN and the next BATCH_END of a rank are one
// batch, which the strict model runs as a unit (gen/internal/strict: its
// ops complete in any order once the ops before it have, a step consuming
// one of its receives waits for all of them, and the stream's next op waits
// for the whole batch). What must hold of the brackets:
//
//   - a BATCH_BEGIN opens a batch only where none is open (batches do not
//     nest), a BATCH_END closes the open one, and every batch is closed by
//     the end of its rank's steps;
//   - a batch holds at least one transfer and nothing else (the runtime
//     posts the batch at its BATCH_END, so a step inside that waited for
//     one of its receives would wait for ever);
//   - a batch does not ship labels it receives itself (a DATA_SEND whose
//     DATA_RECV is in the same batch would wait for it, likewise).

// batchWalk is a rank's open batch during the walk.
type batchWalk struct {
	open  int   // index of the open batch's BATCH_BEGIN, or -1
	first int32 // id of its first op
	// recvData: chunks whose DATA_RECV the open batch holds.
	recvData []int32
	// done: the rank's batches of more than one op, as op id ranges.
	done [][2]int32
}

// batchStep checks a BATCH_BEGIN or BATCH_END st at index i of rank rw.r.
func (c *checker) batchStep(rw *rankWalk, i int, st *ir.Step) error {
	b := &rw.batch
	r := rw.r
	switch {
	case st.Stage != ir.None || st.Micro != ir.None || st.Peer != ir.None || st.Slot != ir.None || len(st.Sub) != 0:
		return c.fail(r, i, *st, Structure, "%s takes no stage, micro-batch, peer or slot", st.Kind)
	case st.Kind == ir.BatchBegin && b.open >= 0:
		return c.fail(r, i, *st, Structure, "a BATCH_BEGIN inside the batch that step %d opened; batches do not nest: close it with BATCH_END first", b.open)
	case st.Kind == ir.BatchBegin:
		b.open, b.first, b.recvData = i, rw.op, b.recvData[:0]
		return nil
	case b.open < 0:
		return c.fail(r, i, *st, Structure, "a BATCH_END without a BATCH_BEGIN before it")
	case rw.op == b.first:
		return c.fail(r, i, *st, Structure, "an empty batch (BATCH_BEGIN at step %d): a batch holds at least one transfer", b.open)
	}
	if rw.op-b.first > 1 {
		b.done = append(b.done, [2]int32{b.first, rw.op})
	}
	b.open = -1
	return nil
}

// batchMember checks step st at index i of rank rw.r against the open
// batch, if there is one: only transfers, and no labels shipped that the
// batch itself receives.
func (c *checker) batchMember(rw *rankWalk, i int, st *ir.Step) error {
	b := &rw.batch
	if b.open < 0 || st.Kind.IsBatch() {
		return nil
	}
	if !st.Kind.IsComm() {
		return c.fail(rw.r, i, *st, Structure, "%s inside the batch that step %d opened; a batch holds only transfers (close it with BATCH_END before this step)", st.Kind, b.open)
	}
	if st.Stage < 0 || st.Stage >= c.S || st.Micro < 0 || st.Micro >= c.M {
		return nil // leaf reports it
	}
	ch := int32(st.Stage*c.M + st.Micro)
	switch st.Kind {
	case ir.DataRecv:
		b.recvData = append(b.recvData, ch)
	case ir.DataSend:
		for _, x := range b.recvData {
			if x == ch {
				return c.fail(rw.r, i, *st, Structure, "ships the labels that %s receives in the same batch (opened at step %d); the send would wait for the batch it is in: close the batch before it", ir.Compute(ir.DataRecv, st.Stage, st.Micro), b.open)
			}
		}
	}
	return nil
}

// batchEnd checks that rank rw.r closed its last batch.
func (c *checker) batchEnd(rw *rankWalk) error {
	if b := &rw.batch; b.open >= 0 {
		return c.fail(rw.r, b.open, c.p.Ranks[rw.r][b.open], Structure, "this batch is never closed: a BATCH_END must follow its transfers")
	}
	return nil
}

// batches records the ranks' batches in the strict model m.
func (c *checker) batches(m *strict.Model, ws []rankWalk) {
	n := 0
	for r := range ws {
		n += len(ws[r].batch.done)
	}
	if n == 0 {
		return
	}
	nOps := len(c.opRank)
	first, end := make([]int32, nOps), make([]int32, nOps)
	for op := range nOps {
		first[op], end[op] = int32(op), int32(op)+1
	}
	for r := range ws {
		for _, bt := range ws[r].batch.done {
			for op := bt[0]; op < bt[1]; op++ {
				first[op], end[op] = bt[0], bt[1]
			}
		}
	}
	m.BatchFirst, m.BatchEnd = first, end
	c.rep.Batches = n
}
