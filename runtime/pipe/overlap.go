package pipe

import (
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
)

// Overlap steps: OVERLAP_F_B and OVERLAP_B_F run a forward and a backward of
// two different micro-batches together (docs/design.md §3). Generated code calls
//
//	x.OverlapFB(fStage, fMicro, fSlot, fSrc, bKind, bStage, bMicro, bSlot, bSrc)
//	x.OverlapBF(bKind, bStage, bMicro, bSlot, bSrc, fStage, fMicro, fSlot, fSrc)
//
// with the arguments in sub-step order. The forward's four arguments are
// the fields of F's At (stage, micro, slot, src); bKind is OpBackward,
// OpBackwardInput or OpBackwardWeight and the backward's four are those of
// B, I or (with bSrc = -1) W. Each sub-step runs through the plain method
// (B, I, W) and does exactly what it does, waits included: a sub-step that consumes a receive waits for it, so
// the composite starts its compute when the receive of each half is in.
//
// When the two stages are different objects (see stageGroups), the halves
// run concurrently, the forward on a second goroutine and the backward on the
// calling one, and the call returns when both are done. They run one after
// the other, in sub-step order, when both halves are on one stage object (a
// Stage is not safe for concurrent use), when Config.SerialOverlap is set, or
// when the two halves' slots collide (a malformed program; the sequential
// run reports it). The two halves touch disjoint chunks, so the results are
// bit-identical either way. When a half fails, the other still finishes (or
// stops at its next wait); the first error wins.

// overlapName is the schedule text of an overlap step, e.g. "(0F7;7B3)OVERLAP_F_B".
func overlapName(k OpKind, a, b Op) string {
	return "(" + a.String() + ";" + b.String() + ")" + k.String()
}

// OverlapFB runs OVERLAP_F_B: F(fStage, fMicro) in fSlot with source fSrc
// together with the backward bKind (OpBackward,
// OpBackwardInput or OpBackwardWeight) of (bStage, bMicro) in bSlot with
// source bSrc (-1 for OpBackwardWeight). The halves run on two goroutines
// when their stages are different objects, else (or with
// Config.SerialOverlap) one after the other, F first; results are the same.
//
//go:noinline
func (x *Exec) OverlapFB(fStage, fMicro, fSlot, fSrc int, bKind OpKind, bStage, bMicro, bSlot, bSrc int) {
	if x.failedNow() {
		return
	}
	f, b := computeOp(OpForward, fStage, fMicro, fSlot, fSrc), computeOp(bKind, bStage, bMicro, bSlot, bSrc)
	x.overlap(OpOverlapFB, f, b, f, b, (*Exec).sub)
}

// OverlapBF runs OVERLAP_B_F: the backward bKind (OpBackward,
// OpBackwardInput or OpBackwardWeight) of (bStage, bMicro) in bSlot with
// source bSrc (-1 for OpBackwardWeight) together with F(fStage, fMicro) in
// fSlot with source fSrc. The halves run on two goroutines
// when their stages are different objects, else (or with
// Config.SerialOverlap) one after the other, the backward first.
//
//go:noinline
func (x *Exec) OverlapBF(bKind OpKind, bStage, bMicro, bSlot, bSrc int, fStage, fMicro, fSlot, fSrc int) {
	if x.failedNow() {
		return
	}
	f, b := computeOp(OpForward, fStage, fMicro, fSlot, fSrc), computeOp(bKind, bStage, bMicro, bSlot, bSrc)
	x.overlap(OpOverlapBF, b, f, f, b, (*Exec).sub)
}

// computeOp is the compute step k of (stage, micro) in slot with source src, as data.
func computeOp(k OpKind, stage, micro, slot, src int) Op {
	return Op{Kind: k, Stage: int32(stage), Micro: int32(micro), Peer: -1, Slot: int32(slot), Src: int32(src)}
}

// overlap runs the composite k whose sub-steps are first and second (in
// order); f and b are the same two as forward and backward. run runs one
// sub-step (sub; the differential test passes the slow paths).
func (x *Exec) overlap(k OpKind, first, second, f, b Op, run func(*Exec, Op)) {
	switch {
	case b.Kind != OpBackward && b.Kind != OpBackwardInput && b.Kind != OpBackwardWeight:
		x.fail(&StepError{Rank: x.rank, Step: overlapName(k, first, second), Peer: -1,
			Err: fmt.Errorf("the backward half is %s; want B, I or W (pipe.OpBackward, OpBackwardInput or OpBackwardWeight)", b.Kind)})
		return
	case b.Kind == OpBackwardWeight && b.Src != -1:
		x.fail(&StepError{Rank: x.rank, Step: overlapName(k, first, second), Peer: -1,
			Err: fmt.Errorf("W takes no source slot; want src -1, got %d", b.Src)})
		return
	}
	x.mem.begin()
	defer x.mem.end() // after wg.Wait below: deferred calls run last in, first out
	if !x.concurrent(f, b) {
		run(x, first)
		run(x, second)
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() {
			if r := recover(); r != nil {
				x.stepFail(f.Kind, int(f.Stage), int(f.Micro), -1, fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
			}
		}()
		run(x, f)
	})
	defer wg.Wait() // also when the backward panics: Run then sees a quiet rank
	run(x, b)
}

// sub runs one sub-step of an overlap as Interpret runs the op.
func (x *Exec) sub(o Op) {
	one := [1]Op{o}
	Interpret(x, one[:])
}

// concurrent reports whether the two halves of an overlap may run at once:
// their stages are valid, held by this rank and different objects, overlaps
// are not serialized by Config.SerialOverlap, and neither half's slot is the
// other's slot or source.
func (x *Exec) concurrent(f, b Op) bool {
	if x.serialOverlap {
		return false
	}
	fs, bs := int(f.Stage), int(b.Stage)
	if uint(fs) >= uint(len(x.group)) || uint(bs) >= uint(len(x.group)) || x.group[fs] < 0 || x.group[fs] == x.group[bs] {
		return false
	}
	return f.Slot != b.Slot && f.Src != b.Slot && b.Src != f.Slot
}

// stageGroups numbers the stage objects of a rank: stages[s] and stages[t]
// get the same number when they may share state, so overlap steps run their
// halves one after the other on them; nil stages get -1. Two pointers (maps,
// channels) are the same object when they are equal. A Stage of any other
// kind (a struct value, a func) may share state through its fields without
// it showing, so every such stage joins one group.
func stageGroups(stages []Stage) []int {
	group := make([]int, len(stages))
	values := -1 // the group of the non-pointer stages
	next := 0
	for s, st := range stages {
		group[s] = -1
		if st == nil {
			continue
		}
		v := reflect.ValueOf(st)
		switch v.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Chan, reflect.UnsafePointer:
			for t := range s {
				if u := stages[t]; u != nil && reflect.TypeOf(u) == v.Type() && reflect.ValueOf(u).Pointer() == v.Pointer() {
					group[s] = group[t]
					break
				}
			}
		default:
			if values < 0 {
				values, next = next, next+1
			}
			group[s] = values
		}
		if group[s] < 0 {
			group[s] = next
			next++
		}
	}
	return group
}

// overlapSubOps returns the two sub-step ops of the overlap header ops[i], or
// records an error naming the header when they are missing or of the wrong
// kinds.
func overlapSubOps(x *Exec, ops []Op, i int) (a, b *Op, ok bool) {
	k := ops[i].Kind
	if i+2 >= len(ops) {
		x.fail(&StepError{Rank: x.rank, Step: fmt.Sprintf("op #%d", i), Peer: -1, Err: fmt.Errorf("%s header without its two sub-step ops", k)})
		return nil, nil, false
	}
	a, b = &ops[i+1], &ops[i+2]
	f, bwd := a, b
	if k == OpOverlapBF {
		f, bwd = b, a
	}
	if f.Kind != OpForward || (bwd.Kind != OpBackward && bwd.Kind != OpBackwardInput && bwd.Kind != OpBackwardWeight) {
		want := "F then B, I or W"
		if k == OpOverlapBF {
			want = "B, I or W then F"
		}
		x.fail(&StepError{Rank: x.rank, Step: fmt.Sprintf("op #%d", i), Peer: -1, Err: fmt.Errorf("%s header followed by %s and %s; want %s", k, a.Kind, b.Kind, want)})
		return nil, nil, false
	}
	return a, b, true
}

// runOverlapOps runs the overlap k of sub-steps a and b (in order) through
// OverlapFB or OverlapBF.
func (x *Exec) runOverlapOps(k OpKind, a, b Op) {
	if k == OpOverlapFB {
		x.OverlapFB(int(a.Stage), int(a.Micro), int(a.Slot), int(a.Src), b.Kind, int(b.Stage), int(b.Micro), int(b.Slot), int(b.Src))
	} else {
		x.OverlapBF(a.Kind, int(a.Stage), int(a.Micro), int(a.Slot), int(a.Src), int(b.Stage), int(b.Micro), int(b.Slot), int(b.Src))
	}
}
