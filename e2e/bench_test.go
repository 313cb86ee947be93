package e2e_test

import (
	"bytes"
	"flag"
	"go/format"
	"os"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/e2e/onerank"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// BenchmarkStepOverhead measures the runtime's own cost per step: one rank
// holding four stages (local neighbours, src slots), 64 micro-batches of
// the interleaved order (package onerank, generated), 641 steps per
// iteration, with stages, loss and data that do nothing. One op is one
// iteration (Reset + program); ns/step is the figure to read.
//
//	go test -run '^$' -bench StepOverhead -count 6 -cpu 1 ./e2e/
func BenchmarkStepOverhead(b *testing.B) {
	ops := onerank.Program[0]
	steps := float64(len(ops))
	for _, bc := range []struct {
		name string
		run  func(x *pipe.Exec) error
	}{
		{"straight", onerank.Rank0},
		{"interpret", func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }},
		{"keyed", func(x *pipe.Exec) error { return interpretKeyed(x, ops) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			x := newNoopExec(b)
			defer x.Close()
			b.ReportAllocs()
			for b.Loop() {
				x.Reset()
				if err := bc.run(x); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/steps, "ns/step")
		})
	}
	// The floor: the same straight-line calls on floorExec, which makes the
	// same calls into the stages, loss, data source and optimizer hook with
	// no checks and no slot state. straight minus floor is what the
	// runtime's checks and bookkeeping cost.
	b.Run("floor", func(b *testing.B) {
		x := &floorExec{last: onerank.Spec.Stages - 1, loss: noop{}, data: noop{}, opt: noop{}.OptStep}
		for s := range x.stages {
			x.stages[s] = noop{}
		}
		b.ReportAllocs()
		for b.Loop() {
			floorRank0(x)
		}
		if x.err != nil {
			b.Fatal(x.err)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/steps, "ns/step")
	})
}

// floorExec has the packed step methods of pipe.Exec reduced to the calls
// they cannot avoid: one out-of-line call per step, and the stage, loss,
// data and optimizer calls of the step, passing one tensor along.
type floorExec struct {
	stages [4]pipe.Stage
	last   int
	loss   pipe.Loss
	data   pipe.DataSource
	opt    func() error
	t      *tensor.Dense
	saved  any
	err    error
}

//go:noinline
func (x *floorExec) DataLoad(a pipe.At) {
	stage, micro, _, _ := a.Unpack()
	if stage == 0 {
		x.t, x.err = x.data.Input(micro)
	}
	if stage == x.last {
		x.t, x.err = x.data.Target(micro)
	}
}

//go:noinline
func (x *floorExec) F(a pipe.At) {
	stage, _, _, _ := a.Unpack()
	x.t, x.saved, x.err = x.stages[stage&3].Forward(x.t)
	if stage == x.last {
		_, x.t, x.err = x.loss.Loss(x.t, x.t)
	}
}

//go:noinline
func (x *floorExec) B(a pipe.At) {
	stage, _, _, _ := a.Unpack()
	st := x.stages[stage&3]
	dx, err := st.BackwardInput(x.saved, x.t)
	if err == nil {
		err = st.BackwardWeight(x.saved, x.t)
	}
	x.t, x.err = dx, err
}

//go:noinline
func (x *floorExec) OptStep() { x.err = x.opt() }

type chunkKey struct{ stage, micro int32 }

// interpretKeyed runs ops like pipe.Interpret, but the way the Python runtimes
// (torch.distributed.pipelining, hyper-parallel) keep state: every chunk's
// buffer is looked up in a map keyed by (stage, micro), posted receives are
// kept in handle maps keyed the same way and popped by their consumer, and a
// local source is found by looking up the neighbour chunk. It ignores
// Op.Src beyond its sign. It exists as the benchmark baseline for static
// slots; results are identical to Interpret.
func interpretKeyed(x *pipe.Exec, ops []pipe.Op) error {
	slotOf := make(map[chunkKey]int32)
	owner := make([]chunkKey, x.Spec().Slots[x.Rank()])
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
	resolved := func(op pipe.Op) pipe.Op {
		k := chunkKey{op.Stage, op.Micro}
		from := -1
		switch op.Kind {
		case pipe.OpForward:
			from = src(k, op.Src, -1)
			delete(fwdHandles, k)
		case pipe.OpBackward, pipe.OpBackwardInput:
			from = src(k, op.Src, +1)
			delete(bwdHandles, k)
		}
		op.Slot, op.Src = lookup(k, op.Slot), int32(from)
		return op
	}
	// call runs op with the resolved slot and src through its packed
	// method, as pipe.Interpret would.
	call := func(op pipe.Op, slot int32, src int) {
		op.Slot, op.Src = slot, int32(src)
		one := [1]pipe.Op{op} // on the stack: Interpret keeps no reference
		pipe.Interpret(x, one[:])
	}
	for i := 0; i < len(ops); i++ {
		if x.Err() != nil {
			break
		}
		op := ops[i]
		k := chunkKey{op.Stage, op.Micro}
		switch op.Kind {
		case pipe.OpOverlapFB, pipe.OpOverlapBF:
			if i+2 >= len(ops) {
				return pipe.Interpret(x, ops[i:]) // reports the missing sub-steps
			}
			a, b := resolved(ops[i+1]), resolved(ops[i+2])
			if op.Kind == pipe.OpOverlapFB {
				x.OverlapFB(int(a.Stage), int(a.Micro), int(a.Slot), int(a.Src), b.Kind, int(b.Stage), int(b.Micro), int(b.Slot), int(b.Src))
			} else {
				x.OverlapBF(a.Kind, int(a.Stage), int(a.Micro), int(a.Slot), int(a.Src), int(b.Stage), int(b.Micro), int(b.Slot), int(b.Src))
			}
			i += 2
		case pipe.OpDataLoad:
			if op.Slot < 0 {
				call(op, -1, -1) // an owner's load (mpipe): no slot
				break
			}
			call(op, lookup(k, op.Slot), -1)
		case pipe.OpRecvF, pipe.OpMpipeRecv:
			s := lookup(k, op.Slot)
			fwdHandles[k] = s
			call(op, s, -1)
		case pipe.OpRecvB:
			s := lookup(k, op.Slot)
			bwdHandles[k] = s
			call(op, s, -1)
		case pipe.OpMpipeSend:
			call(op, op.Slot, -1)
		case pipe.OpSendF, pipe.OpSendB, pipe.OpDataRecv, pipe.OpDataSend, pipe.OpBackwardWeight:
			call(op, lookup(k, op.Slot), -1)
		case pipe.OpForward:
			from := src(k, op.Src, -1)
			s := lookup(k, op.Slot)
			delete(fwdHandles, k)
			call(op, s, from)
		case pipe.OpBackward, pipe.OpBackwardInput:
			from := src(k, op.Src, +1)
			s := lookup(k, op.Slot)
			delete(bwdHandles, k)
			call(op, s, from)
		default:
			call(op, op.Slot, int(op.Src))
		}
	}
	return x.Err()
}

// TestFloorUpToDate checks that floor_gen_test.go holds onerank's rank
// function making the same calls on a floorExec: the generated source with
// the Exec type replaced (-update rewrites it).
func TestFloorUpToDate(t *testing.T) {
	src, err := os.ReadFile("onerank/schedule_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("// Code generated by TestFloorUpToDate from onerank/schedule_gen.go (go test ./e2e -run TestFloorUpToDate -update). DO NOT EDIT.\n\npackage e2e_test\n")
	funcs := 0
	for _, line := range bytes.SplitAfter(src, []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte("func Rank0(x *pipe.Exec) error {")):
			line = []byte("func floorRank0(x *floorExec) {\n")
			funcs++
		case bytes.HasPrefix(line, []byte("func rank0Part")):
			line = bytes.Replace(bytes.Replace(line, []byte("func rank0Part"), []byte("func floorRank0Part"), 1), []byte("*pipe.Exec"), []byte("*floorExec"), 1)
			funcs++
		case bytes.HasPrefix(line, []byte("\trank0Part")):
			line = bytes.Replace(line, []byte("rank0Part"), []byte("floorRank0Part"), 1)
		case bytes.Equal(line, []byte("\treturn x.Err()\n")):
			continue
		}
		if funcs > 0 && !bytes.HasPrefix(line, []byte("// ")) {
			b.Write(line)
		}
		if bytes.HasPrefix(line, []byte("// Program")) {
			break
		}
	}
	got, err := format.Source(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if funcs < 2 {
		t.Fatalf("onerank/schedule_gen.go: found %d rank functions, want Rank0 and its parts", funcs)
	}
	if *update {
		if err := os.WriteFile("floor_gen_test.go", got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile("floor_gen_test.go")
	if err != nil || !bytes.Equal(have, got) {
		t.Fatalf("floor_gen_test.go is stale (%v): go test ./e2e -run TestFloorUpToDate -update", err)
	}
}

var update = flag.Bool("update", false, "rewrite floor_gen_test.go")
