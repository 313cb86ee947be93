package passes

import (
	"math"
	"math/bits"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

// AssignSlots gives every chunk (stage s on its rank, micro m) a static buffer
// slot, as docs/internals.md ("Buffer slots") specifies. A chunk is live from
// its first step (RECV_F, DATA_LOAD or F, whichever comes first) to its last
// use: its last step (its W or B, a SEND after it, ...) or a step that reads
// it as `src`: F(s+1, m) reads the output of F(s, m), and B/I(s-1, m) reads the
// input gradient of B/I(s, m), when both stages are on one rank. Walking each
// rank's program in order, a chunk takes the lowest free slot at its first
// step, and its slot is freed after its last use (so two chunks of one
// overlap step never share a slot). Every step of a chunk, sub-steps included,
// gets Step.Slot; composite and stage-less steps keep None.
//
// It returns the program, the number of slots per rank (the rank's memory
// bound in chunk buffers) and an error for steps out of range or on the wrong
// rank. The input is not modified.
func AssignSlots(p ir.Program) (ir.Program, []int, error) {
	return assignSlots(p, false)
}

// assignSlots is AssignSlots; with inPlace it writes the slots into p's own
// step lists (for Lower's intermediate programs, which nobody else holds and
// which the comm pass already checked; overlap sub-step slices are still
// copied, since they may be shared).
func assignSlots(p ir.Program, inPlace bool) (ir.Program, []int, error) {
	if !inPlace {
		if err := checkSteps(p, "slots", false); err != nil {
			return ir.Program{}, nil, err
		}
	}
	rankOf := p.Placement.RankOf
	S, M := len(rankOf), p.Micro
	rt := &ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies}
	nt := newNeighbourTable(rt)
	shared := slotter{rankOf: rankOf, rt: rt, nt: &nt, M: M, first: filled(S*M, -1), last: make([]int32, S*M), slotOf: filled(S*M, -1), next: filled(S*M, -1)}
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ties: p.Ties, RecomputeShare: p.RecomputeShare, RecomputeCost: p.RecomputeCost, RecomputeLayers: p.RecomputeLayers, Ranks: make([][]ir.Step, len(p.Ranks))}
	counts := make([]int, len(p.Ranks))
	// Every chunk lives on one rank, so ranks touch disjoint parts of the
	// per-chunk arrays and run in parallel, each worker with its own scratch.
	w := par.Workers(len(p.Ranks), p.NumSteps())
	xs := make([]slotter, w)
	for i := range xs {
		xs[i] = shared
	}
	par.ForRanksW(w, len(p.Ranks), func(wid, r int) {
		x := &xs[wid]
		steps := p.Ranks[r]
		x.r = r
		x.lifetimes(steps)
		out := steps
		if !inPlace {
			out = make([]ir.Step, len(steps))
			copy(out, steps)
		}
		x.sweep(out)
		q.Ranks[r] = out
		counts[r] = x.count
	})
	return q, counts, nil
}

// lifetimes walks rank x.r's steps: the lifetimes of their chunks (span),
// and each step's chunk in x.chs for the sweep, which then reads four bytes
// a step instead of the step. (Its own function, and sweep's: the loops
// then keep their few values in registers across the calls.)
func (x *slotter) lifetimes(steps []ir.Step) {
	x.chs = par.Resize(x.chs, len(steps))
	chs := x.chs[:len(steps)]
	local := x.nt.local
	if local == nil {
		for i := range steps {
			chs[i] = x.lifetime(&steps[i], int32(i))
		}
		return
	}
	// span inlined by hand for the common step (a chunk's own, not an
	// overlap), with the neighbour table's answer; lifetime takes the rest.
	first, last, rankOf, M, r, S := x.first, x.last, x.rankOf, x.M, x.r, x.nt.S
	for i := range steps {
		st := &steps[i]
		k := st.Kind
		if slotFlags[k] != namesChunk {
			chs[i] = x.lifetime(st, int32(i))
			continue
		}
		s, m := st.Stage, st.Micro
		if s < 0 || m < 0 || rankOf[s] != r {
			chs[i] = noChunk
			continue
		}
		ch := int32(s*M + m)
		v := ch
		if first[ch] < 0 {
			first[ch] = int32(i)
			v = ^ch
		}
		last[ch] = int32(i) // the walk only goes forward
		if c := int(neighbourClass[k]); c != 0 {
			if nb := int(local[(c-1)*S+s]); nb >= 0 {
				ch := nb*M + m
				if first[ch] < 0 {
					first[ch] = int32(i)
				}
				last[ch] = int32(i)
			}
		}
		chs[i] = v
	}
}

// lifetime is lifetimes' answer for step st at index i: an overlap's
// sub-steps spanned (overlapStep), or span's.
func (x *slotter) lifetime(st *ir.Step, i int32) int32 {
	if st.Kind.IsOverlap() {
		for k := range st.Sub {
			x.span(&st.Sub[k], i)
		}
		return overlapStep
	}
	return x.span(st, i)
}

// sweep gives the steps out (the rank's, lifetimes known) their slots:
// each chunk the lowest free one at its first step, freed after its last
// use.
func (x *slotter) sweep(out []ir.Step) {
	chs := x.chs[:len(out)]
	x.endHead = filledInto(x.endHead, len(out), -1)
	x.free, x.count = x.free[:0], 0
	slotOf, endHead := x.slotOf, x.endHead[:len(out)]
	out = out[:len(chs)]
	for i, ch := range chs {
		switch {
		case ch < 0: // the chunk's first step (span): a step's own chunk is never its neighbour
			out[i].Slot = x.alloc(^ch)
		case ch < overlapStep:
			out[i].Slot = int(slotOf[ch])
		case ch == overlapStep:
			x.giveSubs(&out[i], int32(i))
		}
		if c := endHead[i]; c >= 0 {
			x.release(c)
		}
	}
}

// giveSubs gives the sub-steps of overlap st (at index i, copied: the
// input's overlaps are shared) their slots.
func (x *slotter) giveSubs(st *ir.Step, i int32) {
	st.Sub = append([]ir.Step(nil), st.Sub...)
	for k := range st.Sub {
		x.give(&st.Sub[k], i)
	}
}

// release frees the slots of chunk c and of the chunks linked after it
// (next): those whose last use is the step sweep is at.
func (x *slotter) release(c int32) {
	for ; c >= 0; c = x.next[c] {
		if s := x.slotOf[c]; s >= 0 {
			x.free[s/64] &^= 1 << (uint(s) % 64)
		}
	}
}

// The marks of slotter.chs besides a chunk: a step that names none of the
// rank's chunks, and an overlap (its sub-steps name the chunks). A chunk
// is below 2^31 - 2: its arrays would not fit in memory otherwise.
const (
	noChunk     = math.MaxInt32
	overlapStep = math.MaxInt32 - 1
)

// slotter holds the per-chunk state of AssignSlots (chunk = stage*M+micro;
// every chunk lives on one rank, so the arrays serve all ranks).
type slotter struct {
	rankOf  []int
	rt      *ir.Program // placement, micro count and copies (no steps), for routes
	nt      *neighbourTable
	M, r    int
	first   []int32 // first step of the chunk
	last    []int32 // last use of the chunk
	slotOf  []int32
	next    []int32 // chunks whose last use is the same step, linked from endHead
	endHead []int32 // per step of the current rank
	chs     []int32 // per step of the current rank: span's answer, overlapStep for an overlap
	free    []uint64
	count   int
	_       [64]byte // each worker's slotter (assignSlots) on its own cache lines
}

// span extends the lifetimes st (at index i) touches: its own chunk's and,
// as src, its colocated neighbour's. It returns st's chunk,
// ^chunk when i is the chunk's first step, noChunk when st names none of
// this rank's.
func (x *slotter) span(st *ir.Step, i int32) int32 {
	k := st.Kind
	if slotFlags[k]&namesChunk == 0 || st.Stage < 0 || st.Micro < 0 || x.rankOf[st.Stage] != x.r {
		return noChunk
	}
	ch := int32(st.Stage*x.M + st.Micro)
	v := ch
	if x.first[ch] < 0 {
		x.first[ch] = i
		v = ^ch
	}
	x.last[ch] = i // the walk only goes forward
	c := int(neighbourClass[k])
	if c == 0 {
		return v
	}
	// The colocated chunk st reads as src (srcStage), if any.
	nb := -1
	if x.nt.local != nil {
		nb = int(x.nt.local[(c-1)*x.nt.S+st.Stage])
	} else {
		nb = srcStage(x.rt, x.r, st)
	}
	if nb >= 0 {
		ch := nb*x.M + st.Micro
		if x.first[ch] < 0 {
			x.first[ch] = i
		}
		x.last[ch] = i
	}
	return v
}

// alloc gives chunk ch the lowest free slot, queues its release after the
// chunk's last use and returns the slot.
func (x *slotter) alloc(ch int32) int {
	s := lowestFree(&x.free)
	x.slotOf[ch] = int32(s)
	x.count = max(x.count, s+1)
	e := x.last[ch]
	x.next[ch] = x.endHead[e]
	x.endHead[e] = ch
	return s
}

// slotFlags holds, per kind, what the slots pass asks of it, in one load.
var slotFlags = func() (t [256]uint8) {
	for k := range t {
		kind := ir.Kind(k)
		if kind.HasStage() && kind.HasMicro() {
			t[k] |= namesChunk
		}
		if kind.IsOverlap() {
			t[k] |= slotOverlap
		}
	}
	return t
}()

// The bits of slotFlags.
const (
	namesChunk  = 1 << iota // HasStage and HasMicro: the step names a chunk
	slotOverlap             // an overlap (its sub-steps name the chunks)
)

// give gives st its chunk's slot, allocating it (and queueing its release
// after the chunk's last use) at the chunk's first step i.
func (x *slotter) give(st *ir.Step, i int32) {
	if slotFlags[st.Kind]&namesChunk == 0 || st.Stage < 0 || st.Micro < 0 || x.rankOf[st.Stage] != x.r {
		return
	}
	ch := int32(st.Stage*x.M + st.Micro)
	if x.first[ch] == i && x.slotOf[ch] < 0 {
		x.alloc(ch)
	}
	st.Slot = int(x.slotOf[ch])
}

func filledInto(s []int32, n int, v int32) []int32 {
	if cap(s) < n {
		s = make([]int32, n)
	}
	s = s[:n]
	for i := range s {
		s[i] = v
	}
	return s
}

// chunksOf returns the steps of st that name a chunk (st, or its sub-steps).
func chunksOf(st ir.Step) []ir.Step {
	if st.Kind.IsOverlap() {
		return st.Sub
	}
	return []ir.Step{st}
}

// srcStage returns the stage of the colocated chunk a compute step reads
// (its cross-stage input, deps.Neighbour: stage-1 for F, stage+1 for B and
// I, when that stage is on rank r and on the micro-batch's route), or -1.
func srcStage(rt *ir.Program, r int, st *ir.Step) int {
	if k := st.Kind; k != ir.Forward && k != ir.Backward && k != ir.BackwardInput {
		return -1 // the kinds deps.Neighbour answers for: skip the call for the others
	}
	if stage, rank, _, _, ok := deps.Across(rt, st); ok && rank == r {
		return stage
	}
	return -1
}

func lowestFree(set *[]uint64) int {
	for w, bitsw := range *set {
		if bitsw != ^uint64(0) {
			b := bits.TrailingZeros64(^bitsw)
			(*set)[w] |= 1 << uint(b)
			return w*64 + b
		}
	}
	*set = append(*set, 1)
	return (len(*set) - 1) * 64
}

// SlotIndex answers slot questions about a program whose slots are assigned,
// in O(1) per question after an O(steps) build: what gen/emit needs for the
// slot and src arguments of each call.
type SlotIndex struct {
	rankOf []int
	rt     ir.Program // placement, micro count and copies (no steps), for routes
	micro  int
	slot   []int32 // per chunk
}

// IndexSlots indexes the slots of p (as AssignSlots set them).
func IndexSlots(p ir.Program) *SlotIndex {
	S, M := p.Stages(), p.Micro
	x := &SlotIndex{rankOf: p.Placement.RankOf, rt: ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies}, micro: M, slot: filled(max(S*M, 0), -1)}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			for _, c := range chunksOf(st) {
				if c.Slot >= 0 && c.Stage >= 0 && c.Stage < S && c.Micro >= 0 && c.Micro < M && c.Kind.HasStage() && c.Kind.HasMicro() {
					x.slot[c.Stage*M+c.Micro] = int32(c.Slot)
				}
			}
		}
	}
	return x
}

// Slot returns the slot of chunk (stage, micro), or -1 when it has none.
func (x *SlotIndex) Slot(stage, micro int) int {
	if stage < 0 || stage >= len(x.rankOf) || micro < 0 || micro >= x.micro {
		return -1
	}
	return int(x.slot[stage*x.micro+micro])
}

// Src returns the `src` argument of a compute step (F, B or I; not an
// overlap, pass its sub-steps): the slot of the colocated neighbour chunk it
// reads, (stage-1, micro) for F and (stage+1, micro) for B and I, or -1 when
// its input (or output gradient) comes from its own slot: a receive, a data
// load, or the loss on the last stage (of the micro-batch's route).
func (x *SlotIndex) Src(st ir.Step) int {
	if st.Stage < 0 || st.Stage >= len(x.rankOf) {
		return -1
	}
	nb := srcStage(&x.rt, x.rankOf[st.Stage], &st)
	if nb < 0 {
		return -1
	}
	return x.Slot(nb, st.Micro)
}
