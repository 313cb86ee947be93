package pipe

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// Run runs one iteration of a rank: it resets x, calls fn (a generated RankN
// function, or an Interpret closure), waits for the posted transfers and
// returns the first error. A panic in fn (a Stage's, say) becomes the rank's
// error and aborts its peers. An error returned by fn that x did not record
// is recorded (and aborts the peers) too.
func Run(x *Exec, fn func(*Exec) error) (err error) {
	x.Reset()
	defer func() {
		if r := recover(); r != nil {
			x.Fail(fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
			err = x.Sync()
		}
	}()
	ferr := fn(x)
	if ferr != nil && x.Err() == nil {
		x.Fail(ferr)
	}
	return x.Sync()
}

// RunAll runs one iteration of every rank of an in-process world
// concurrently: fns[r] on xs[r] through Run. It returns the ranks' errors
// joined (nil if all succeeded).
func RunAll(xs []*Exec, fns []func(*Exec) error) error {
	if len(xs) != len(fns) {
		return fmt.Errorf("pipe: RunAll: %d execs but %d rank functions", len(xs), len(fns))
	}
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for r := range xs {
		wg.Go(func() { errs[r] = Run(xs[r], fns[r]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Interpret runs ops, a rank's program as data, through the same methods the
// generated code calls, and returns x.Err() (like a generated RankN).
func Interpret(x *Exec, ops []Op) error {
	for i := 0; i < len(ops); i++ {
		if x.failed.Load() {
			break
		}
		op := &ops[i]
		// The packed methods, as generated code calls them; an op whose
		// fields have no At is reported as the unpacked methods do.
		c, d := op.Kind.AtFields(int(op.Peer), int(op.Slot), int(op.Src))
		a, ok := PackAt(int(op.Stage), int(op.Micro), c, d)
		if !ok && op.Kind.Shape().Packed() {
			x.unpackable(op.Kind, int(op.Stage), int(op.Micro), c, d)
			continue
		}
		switch op.Kind {
		case OpDataLoad:
			x.Load(a)
		case OpRecvAct:
			x.RecvF(a)
		case OpSendAct:
			x.SendF(a)
		case OpRecvGrad:
			x.RecvB(a)
		case OpSendGrad:
			x.SendB(a)
		case OpForward:
			x.F(a)
		case OpBackward:
			x.B(a)
		case OpBackwardInput:
			x.I(a)
		case OpBackwardWeight:
			x.W(a)
		case OpOptStep:
			x.OptStep()
		case OpUnshard:
			x.Unshard(int(op.Stage))
		case OpReshard:
			x.Reshard(int(op.Stage))
		case OpReduceGrad:
			x.ReduceGrad(int(op.Stage))
		case OpSwapLaunchOffload:
			x.LaunchOffload(a)
		case OpSwapWaitOffload:
			x.WaitOffload(a)
		case OpSwapLaunchLoad:
			x.LaunchLoad(a)
		case OpSwapWaitLoad:
			x.WaitLoad(a)
		case OpRecvInput:
			x.RecvInput(a)
		case OpSendInput:
			x.SendInput(a)
		case OpRecvData:
			x.RecvLabels(a)
		case OpSendData:
			x.SendLabels(a)
		case OpOverlapFB, OpOverlapBF:
			a, b, ok := overlapSubOps(x, ops, i)
			if !ok {
				return x.Err()
			}
			x.runOverlapOps(op.Kind, *a, *b)
			i += 2
		default:
			x.fail(&StepError{Rank: x.rank, Step: fmt.Sprintf("op #%d", i), Peer: -1, Err: fmt.Errorf("unknown op kind %d", uint8(op.Kind))})
		}
	}
	return x.Err()
}

type chunkKey struct{ stage, micro int32 }

// InterpretKeyed runs ops like Interpret, but the way the Python runtimes
// (torch.distributed.pipelining, hyper-parallel) keep state: every chunk's
// buffer is looked up in a map keyed by (stage, micro), posted receives are
// kept in handle maps keyed the same way and popped by their consumer, and a
// local source is found by looking up the neighbour chunk. It ignores
// Op.Src beyond its sign. It exists as the benchmark baseline for static
// slots; results are identical to Interpret.
func InterpretKeyed(x *Exec, ops []Op) error {
	slotOf := make(map[chunkKey]int32)
	owner := make([]chunkKey, len(x.slots))
	for i := range owner {
		owner[i] = chunkKey{-1, -1}
	}
	fwdHandles := make(map[chunkKey]int32) // posted RecvAct, popped by F
	bwdHandles := make(map[chunkKey]int32) // posted RecvGrad, popped by B/I
	lookup := func(k chunkKey, fallback int32) int32 {
		if s, ok := slotOf[k]; ok {
			return s
		}
		if fallback >= 0 && int(fallback) < len(owner) {
			if old := owner[fallback]; old.stage >= 0 {
				delete(slotOf, old)
			}
			owner[fallback] = k
			slotOf[k] = fallback
		}
		return fallback
	}
	src := func(k chunkKey, sign int32, dir int32) int {
		if sign < 0 {
			return -1
		}
		if s, ok := slotOf[chunkKey{k.stage + dir, k.micro}]; ok {
			return int(s)
		}
		return int(sign) // let the Exec report the inconsistency
	}
	// resolved returns a compute op with its slot and src looked up the
	// keyed way (its receive handle popped), for an overlap's sub-steps.
	resolved := func(op Op) Op {
		k := chunkKey{op.Stage, op.Micro}
		from := -1
		switch op.Kind {
		case OpForward:
			from = src(k, op.Src, -1)
			delete(fwdHandles, k)
		case OpBackward, OpBackwardInput:
			from = src(k, op.Src, +1)
			delete(bwdHandles, k)
		}
		op.Slot, op.Src = lookup(k, op.Slot), int32(from)
		return op
	}
	for i := 0; i < len(ops); i++ {
		if x.failed.Load() {
			break
		}
		op := &ops[i]
		k := chunkKey{op.Stage, op.Micro}
		switch op.Kind {
		case OpOverlapFB, OpOverlapBF:
			a, b, ok := overlapSubOps(x, ops, i)
			if !ok {
				return x.Err()
			}
			x.runOverlapOps(op.Kind, resolved(*a), resolved(*b))
			i += 2
		case OpDataLoad:
			if op.Slot < 0 {
				x.DataLoad(int(op.Stage), int(op.Micro), -1) // an owner's load (mpipe): no slot
				break
			}
			x.DataLoad(int(op.Stage), int(op.Micro), int(lookup(k, op.Slot)))
		case OpRecvInput:
			s := lookup(k, op.Slot)
			fwdHandles[k] = s
			x.MpipeRecv(int(op.Stage), int(op.Micro), int(op.Peer), int(s))
		case OpSendInput:
			x.MpipeSend(int(op.Stage), int(op.Micro), int(op.Peer), int(op.Slot))
		case OpRecvData:
			x.RecvData(int(op.Stage), int(op.Micro), int(op.Peer), int(lookup(k, op.Slot)))
		case OpSendData:
			x.SendData(int(op.Stage), int(op.Micro), int(op.Peer), int(lookup(k, op.Slot)))
		case OpRecvAct:
			s := lookup(k, op.Slot)
			fwdHandles[k] = s
			x.RecvAct(int(op.Stage), int(op.Micro), int(op.Peer), int(s))
		case OpSendAct:
			x.SendAct(int(op.Stage), int(op.Micro), int(op.Peer), int(lookup(k, op.Slot)))
		case OpRecvGrad:
			s := lookup(k, op.Slot)
			bwdHandles[k] = s
			x.RecvGrad(int(op.Stage), int(op.Micro), int(op.Peer), int(s))
		case OpSendGrad:
			x.SendGrad(int(op.Stage), int(op.Micro), int(op.Peer), int(lookup(k, op.Slot)))
		case OpForward:
			from := src(k, op.Src, -1)
			s := lookup(k, op.Slot)
			delete(fwdHandles, k)
			x.Forward(int(op.Stage), int(op.Micro), int(s), from)
		case OpBackward, OpBackwardInput:
			from := src(k, op.Src, +1)
			s := lookup(k, op.Slot)
			delete(bwdHandles, k)
			if op.Kind == OpBackward {
				x.Backward(int(op.Stage), int(op.Micro), int(s), from)
			} else {
				x.BackwardInput(int(op.Stage), int(op.Micro), int(s), from)
			}
		case OpBackwardWeight:
			x.BackwardWeight(int(op.Stage), int(op.Micro), int(lookup(k, op.Slot)))
		case OpOptStep:
			x.OptStep()
		default:
			x.fail(&StepError{Rank: x.rank, Step: fmt.Sprintf("op #%d", i), Peer: -1, Err: fmt.Errorf("unknown op kind %d", uint8(op.Kind))})
		}
	}
	return x.Err()
}
