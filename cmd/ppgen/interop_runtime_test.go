package main

// Imported schedules run in runtime/pipe. gen/ and runtime/ never import
// each other; this test, in the command that uses both, converts a lowered
// ir.Program into the runtime's []pipe.Op table (what gen/emit writes with
// -table) and runs it through pipe.Interpret on an in-process world with
// tiny deterministic stages, against a sequential run of the same model.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// interopAffine is a Stage: y = a*x + b elementwise with learnable scalars
// a and b (the idea of runtime/pipe's test stage). It keeps each
// micro-batch's weight-gradient contribution and sums them sorted at the
// optimizer step, so the result does not depend on the order of the W
// steps: a pipelined run and a sequential run agree bit for bit.
type interopAffine struct {
	a, b   float64
	ga, gb []float64
}

func interopDense(shape tensor.Shape, v []float64) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(v))
}

func (s *interopAffine) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	xs := x.Float64s()
	y := make([]float64, len(xs))
	for i, v := range xs {
		y[i] = s.a*v + s.b
	}
	return interopDense(x.Shape(), y), x, nil
}

func (s *interopAffine) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) {
	ds := dy.Float64s()
	dx := make([]float64, len(ds))
	for i, v := range ds {
		dx[i] = s.a * v
	}
	return interopDense(dy.Shape(), dx), nil
}

func (s *interopAffine) BackwardWeight(saved any, dy *tensor.Dense) error {
	xs := saved.(*tensor.Dense).Float64s()
	var ga, gb float64
	for i, v := range dy.Float64s() {
		ga += v * xs[i]
		gb += v
	}
	s.ga, s.gb = append(s.ga, ga), append(s.gb, gb)
	return nil
}

func interopSortedSum(v []float64) float64 {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

func (s *interopAffine) step() {
	const lr = 1.0 / 64
	s.a -= lr * interopSortedSum(s.ga)
	s.b -= lr * interopSortedSum(s.gb)
	s.ga, s.gb = s.ga[:0], s.gb[:0]
}

// interopSharded is an interopAffine whose parameters are sharded (FSDP),
// a pipe.Sharded: a stage the program UNSHARDs or RESHARDs starts sharded
// and fails a compute step that finds it so, and an UNSHARD or RESHARD out
// of turn. When the program reduces gradients, REDUCE_GRAD hands on the sum
// of the gradients the backwards left (as a reduce-scatter would) and the
// optimizer steps on that alone: a second REDUCE_GRAD, a backward after it,
// or none before OPT_STEP fails, and gradients left behind would show in the
// trained parameters.
type interopSharded struct {
	*interopAffine
	stage    int
	managed  bool // the program UNSHARDs or RESHARDs the stage
	reduce   bool // the program holds REDUCE_GRAD steps
	sharded  bool
	reduced  bool // this iteration's REDUCE_GRAD ran
	ra, rb   float64
	fsdpRuns int // Unshard, Reshard and ReduceGrad calls
}

func (s *interopSharded) check(what string) error {
	switch {
	case s.sharded:
		return fmt.Errorf("stage %d: %s while its parameters are sharded", s.stage, what)
	case s.reduced:
		return fmt.Errorf("stage %d: %s after its REDUCE_GRAD", s.stage, what)
	}
	return nil
}

func (s *interopSharded) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	if err := s.check("forward"); err != nil {
		return nil, nil, err
	}
	return s.interopAffine.Forward(x)
}

func (s *interopSharded) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	if err := s.check("backward"); err != nil {
		return nil, err
	}
	return s.interopAffine.BackwardInput(saved, dy)
}

func (s *interopSharded) BackwardWeight(saved any, dy *tensor.Dense) error {
	if err := s.check("weight backward"); err != nil {
		return err
	}
	return s.interopAffine.BackwardWeight(saved, dy)
}

func (s *interopSharded) Unshard() error {
	s.fsdpRuns++
	if !s.sharded {
		return fmt.Errorf("stage %d: UNSHARD of unsharded parameters", s.stage)
	}
	s.sharded = false
	return nil
}

func (s *interopSharded) Reshard() error {
	s.fsdpRuns++
	if s.sharded {
		return fmt.Errorf("stage %d: RESHARD of sharded parameters", s.stage)
	}
	s.sharded = true
	return nil
}

func (s *interopSharded) ReduceGrad() error {
	s.fsdpRuns++
	if s.reduced {
		return fmt.Errorf("stage %d: a second REDUCE_GRAD", s.stage)
	}
	s.ra, s.rb = interopSortedSum(s.ga), interopSortedSum(s.gb)
	s.ga, s.gb = s.ga[:0], s.gb[:0]
	s.reduced = true
	return nil
}

// optStep is the optimizer update of the stage at OPT_STEP.
func (s *interopSharded) optStep() error {
	switch {
	case s.managed && !s.sharded:
		return fmt.Errorf("stage %d: still unsharded at OPT_STEP", s.stage)
	case !s.reduce:
		s.step()
		return nil
	case !s.reduced:
		return fmt.Errorf("stage %d: OPT_STEP before its REDUCE_GRAD", s.stage)
	}
	const lr = 1.0 / 64
	s.a -= lr * s.ra
	s.b -= lr * s.rb
	s.reduced = false
	return nil
}

// interopMSE is the Loss: 0.5*sum((y-t)^2), dy = y - t.
type interopMSE struct{}

func (interopMSE) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	ts := target.Float64s()
	ys := y.Float64s()
	dy := make([]float64, len(ys))
	var loss float64
	for i, v := range ys {
		dy[i] = v - ts[i]
		loss += 0.5 * dy[i] * dy[i]
	}
	return loss, interopDense(y.Shape(), dy), nil
}

// interopData gives deterministic, iteration-dependent micro-batches of
// shape (2, 3).
type interopData struct{ iter int }

func (d *interopData) gen(micro, salt int) *tensor.Dense {
	v := make([]float64, 6)
	for i := range v {
		v[i] = float64((d.iter*7+micro*5+i*3+salt)%9-4) / 4
	}
	return interopDense(tensor.Shape{2, 3}, v)
}

func (d *interopData) Input(m int) (*tensor.Dense, error)  { return d.gen(m, 0), nil }
func (d *interopData) Target(m int) (*tensor.Dense, error) { return d.gen(m, 1), nil }

func interopStages(n int) []*interopAffine {
	st := make([]*interopAffine, n)
	for i := range st {
		st[i] = &interopAffine{a: 1 + float64(i)/16, b: float64(i%3-1) / 8}
	}
	return st
}

// interopSequential trains the model without a pipeline: the reference.
func interopSequential(stages []*interopAffine, micro, iters int) [][]float64 {
	var out [][]float64
	for it := range iters {
		d := &interopData{iter: it}
		losses := make([]float64, micro)
		for m := range micro {
			x, _ := d.Input(m)
			saved := make([]any, len(stages))
			for s, st := range stages {
				x, saved[s], _ = st.Forward(x)
			}
			t, _ := d.Target(m)
			loss, dy, _ := interopMSE{}.Loss(x, t)
			losses[m] = loss
			for s := len(stages) - 1; s >= 0; s-- {
				dx, _ := stages[s].BackwardInput(saved[s], dy)
				_ = stages[s].BackwardWeight(saved[s], dy)
				dy = dx
			}
		}
		for _, st := range stages {
			st.step()
		}
		out = append(out, losses)
	}
	return out
}

// interopOps converts a lowered, slotted program into the runtime's op
// table, as gen/emit's -table output holds it.
func interopOps(p ir.Program) ([][]pipe.Op, error) {
	index := passes.IndexSlots(p)
	ops := make([][]pipe.Op, len(p.Ranks))
	for r, steps := range p.Ranks {
		for _, st := range steps {
			k := st.Kind // ir.Kind and pipe.OpKind are one type, abi.Kind
			if k.IsOverlap() {
				return nil, fmt.Errorf("rank %d: %s has no runtime op here", r, st)
			}
			src := -1
			switch st.Kind {
			case ir.Forward, ir.Backward, ir.BackwardInput:
				src = index.Src(st)
			}
			ops[r] = append(ops[r], pipe.Op{Kind: k, Stage: int32(st.Stage), Micro: int32(st.Micro),
				Peer: int32(st.Peer), Slot: int32(st.Slot), Src: int32(src)})
		}
	}
	return ops, nil
}

// interopTrain runs iters iterations of res on an in-process world and
// returns the last stage's losses per iteration, the trained stages and the
// number of FSDP hook calls (pipe.Sharded) the run made.
func interopTrain(t *testing.T, res gen.Result, iters int) ([][]float64, []*interopAffine, int) {
	t.Helper()
	p := res.Program
	ops, err := interopOps(p)
	if err != nil {
		t.Fatal(err)
	}
	P, S := p.Placement.Ranks(), p.Stages()
	spec := pipe.Spec{Schedule: "imported", Ranks: P, Stages: S, Micro: p.Micro, Slots: res.Info.Slots, RankOf: p.Placement.RankOf}
	stages := interopStages(S)
	sharded := make([]*interopSharded, S)
	for s := range S {
		sharded[s] = &interopSharded{interopAffine: stages[s], stage: s}
	}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			switch st.Kind {
			case ir.Unshard, ir.Reshard:
				sharded[st.Stage].managed, sharded[st.Stage].sharded = true, true
			case ir.ReduceGrad:
				for _, sh := range sharded {
					sh.reduce = true
				}
			}
		}
	}
	data := &interopData{}
	trs := transport.NewInProc(P, transport.InProcTimeout(20*time.Second))
	xs := make([]*pipe.Exec, P)
	fns := make([]func(*pipe.Exec) error, P)
	for r := range P {
		mine := map[int]pipe.Stage{}
		var own []*interopSharded
		for _, s := range spec.StagesOf(r) {
			mine[s] = sharded[s]
			own = append(own, sharded[s])
		}
		x, err := pipe.New(pipe.Config{Rank: r, Spec: spec, Stages: mine, Loss: interopMSE{}, Data: data, Transport: trs[r],
			OptStep: func() error {
				for _, s := range own {
					if err := s.optStep(); err != nil {
						return err
					}
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		xs[r] = x
		prog := ops[r]
		fns[r] = func(x *pipe.Exec) error { return pipe.Interpret(x, prog) }
	}
	t.Cleanup(func() {
		for r := range P {
			xs[r].Close()
			trs[r].Close()
		}
	})
	last := p.Placement.Rank(S - 1)
	var losses [][]float64
	for it := range iters {
		data.iter = it
		if err := pipe.RunAll(xs, fns); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		losses = append(losses, xs[last].Losses())
	}
	calls := 0
	for _, sh := range sharded {
		calls += sh.fsdpRuns
	}
	return losses, stages, calls
}

// TestImportedSchedulesRunInRuntime imports PyTorch CSVs (the hand-derived
// Interleaved1F1B at P=4, V=2, M=8 in both forms, a legacy-named one, a
// custom hand-written one, and FSDP ones: UNSHARD, RESHARD and REDUCE_GRAD
// with transfers, in a compute order, REDUCE_GRAD alone, and ppgen's own
// -fsdp 1 interleaved export that reshards stages between uses), then trains
// three iterations through the runtime interpreter, whose stages are
// pipe.Sharded and fail a compute on sharded parameters, and requires the
// losses and the trained parameters to equal a sequential run exactly and
// every FSDP action to have run.
func TestImportedSchedulesRunInRuntime(t *testing.T) {
	for _, tc := range []struct {
		file, format string
		export       []string // the CSV is this `ppgen export` instead of a file
	}{
		{"torch_interleaved1f1b_p4_v2_m8.csv", formatTorchCSV, nil},
		{"torch_interleaved1f1b_p4_v2_m8_comms.csv", formatTorchCSV, nil},
		{"torch_legacy_1f1b_p2_m2.csv", formatTorchCSVLegacy, nil},
		{"custom_3stage_table.csv", formatTorchCSV, nil},
		{"torch_fsdp_1f1b_p2_m4_comms.csv", formatTorchCSV, nil},
		{"torch_reduce_grad_1f1b_p2_m4_comms.csv", formatTorchCSV, nil},
		{"fsdp_compute_interleaved_p2_v2_m2.csv", formatTorchCSV, nil},
		{"interleaved_p2_v2_m4_fsdp1", formatTorchCSV, []string{"export", "-to", "torch-csv", "-schedule", "interleaved", "-ranks", "2", "-virtual", "2", "-micro", "4", "-fsdp", "1"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			var data []byte
			if tc.export != nil {
				data = []byte(cliMust(t, tc.export...))
			} else {
				var err error
				if data, err = os.ReadFile(path); err != nil {
					t.Fatal(err)
				}
			}
			im, err := importTorch(path, data, tc.format, gen.Options{}, false)
			if err != nil {
				t.Fatal(err)
			}
			const iters = 3
			got, stages, calls := interopTrain(t, im.Result, iters)
			file, err := parseTorchCSV(data, tc.format == formatTorchCSVLegacy)
			if err != nil {
				t.Fatal(err)
			}
			u, r, g := countFSDP(im.Result.Program)
			if u0, r0, g0 := countFSDP(file); u != u0 || r != r0 || g != g0 {
				t.Errorf("imported program holds %d UNSHARD, %d RESHARD, %d REDUCE_GRAD; the CSV %d, %d, %d", u, r, g, u0, r0, g0)
			}
			if want := iters * (u + r + g); calls != want {
				t.Errorf("%d FSDP hook calls in %d iterations, want %d", calls, iters, want)
			}
			ref := interopStages(len(stages))
			want := interopSequential(ref, im.Result.Program.Micro, iters)
			for it := range want {
				if len(got[it]) != len(want[it]) {
					t.Fatalf("iteration %d: %d losses, want %d", it, len(got[it]), len(want[it]))
				}
				for m := range want[it] {
					if got[it][m] != want[it][m] || math.IsNaN(got[it][m]) {
						t.Errorf("iteration %d micro %d: loss %v, sequential %v", it, m, got[it][m], want[it][m])
					}
				}
			}
			if init := interopStages(1)[0]; ref[0].a == init.a && ref[0].b == init.b {
				t.Fatal("the sequential run did not train: the comparison proves nothing")
			}
			for s := range ref {
				if stages[s].a != ref[s].a || stages[s].b != ref[s].b {
					t.Errorf("stage %d: params (%v, %v), sequential (%v, %v)", s, stages[s].a, stages[s].b, ref[s].a, ref[s].b)
				}
			}
		})
	}
}
