package main

// Imported schedules run in runtime/pipe. gen/ and runtime/ never import
// each other; this test, in the command that uses both, converts a lowered
// ir.Program into the runtime's []pipe.Op table (what gen/emit writes with
// -table) and runs it through pipe.Interpret on an in-process world with
// runtime/pipe/pipetest's tiny deterministic stages, against
// pipetest.Sequential, the same model trained without a pipeline.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
	"github.com/ppgen/ppgen/runtime/transport"
)

// interopSharded is a pipetest.Affine whose parameters are sharded (FSDP),
// a pipe.Sharded: a stage the program UNSHARDs or RESHARDs starts sharded
// and fails a compute step that finds it so, and an UNSHARD or RESHARD out
// of turn. When the program reduces gradients, REDUCE_GRAD hands on the sum
// of the gradients the backwards left (as a reduce-scatter would) and the
// optimizer steps on that alone: a second REDUCE_GRAD, a backward after it,
// or none before OPT_STEP fails, and gradients left behind would show in the
// trained parameters.
type interopSharded struct {
	*pipetest.Affine
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
	return s.Affine.Forward(x)
}

func (s *interopSharded) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	if err := s.check("backward"); err != nil {
		return nil, err
	}
	return s.Affine.BackwardInput(saved, dy)
}

func (s *interopSharded) BackwardWeight(saved any, dy *tensor.Dense) error {
	if err := s.check("weight backward"); err != nil {
		return err
	}
	return s.Affine.BackwardWeight(saved, dy)
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
	s.ra, s.rb = pipetest.SortedSum(s.GA), pipetest.SortedSum(s.GB)
	s.GA, s.GB = s.GA[:0], s.GB[:0]
	s.reduced = true
	return nil
}

// optStep is the optimizer update of the stage at OPT_STEP.
func (s *interopSharded) optStep() error {
	switch {
	case s.managed && !s.sharded:
		return fmt.Errorf("stage %d: still unsharded at OPT_STEP", s.stage)
	case !s.reduce:
		s.Step()
		return nil
	case !s.reduced:
		return fmt.Errorf("stage %d: OPT_STEP before its REDUCE_GRAD", s.stage)
	}
	s.A -= pipetest.LR * s.ra
	s.B -= pipetest.LR * s.rb
	s.reduced = false
	return nil
}

// deepStages is pipetest.NewStages with gentler slopes (a = 1 + s/16
// instead of 1 + s/8): the imported programs have up to 8 stages, whose
// product of slopes would otherwise make three iterations diverge to NaN,
// and NaN parameters compare unequal however the run went.
func deepStages(n int) []*pipetest.Affine {
	st := pipetest.NewStages(n)
	for i, s := range st {
		s.A = 1 + float64(i)/16
	}
	return st
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
func interopTrain(t *testing.T, res gen.Result, iters int) ([][]float64, []*pipetest.Affine, int) {
	t.Helper()
	p := res.Program
	ops, err := interopOps(p)
	if err != nil {
		t.Fatal(err)
	}
	P, S := p.Placement.Ranks(), p.Stages()
	spec := pipe.Spec{Schedule: "imported", Ranks: P, Stages: S, Micro: p.Micro, Slots: res.Info.Slots, RankOf: p.Placement.RankOf}
	stages := deepStages(S)
	sharded := make([]*interopSharded, S)
	for s := range S {
		sharded[s] = &interopSharded{Affine: stages[s], stage: s}
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
	data := &pipetest.Data{}
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
		x, err := pipe.New(pipe.Config{Rank: r, Spec: spec, Stages: mine, Loss: pipetest.MSE{}, Data: data, Transport: trs[r],
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
		data.Iter = it
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
			ref := deepStages(len(stages))
			want := pipetest.Sequential(ref, im.Result.Program.Micro, iters, false)
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
			if init := deepStages(1)[0]; ref[0].A == init.A && ref[0].B == init.B {
				t.Fatal("the sequential run did not train: the comparison proves nothing")
			}
			for s := range ref {
				if stages[s].A != ref[s].A || stages[s].B != ref[s].B {
					t.Errorf("stage %d: params (%v, %v), sequential (%v, %v)", s, stages[s].A, stages[s].B, ref[s].A, ref[s].B)
				}
			}
		})
	}
}
